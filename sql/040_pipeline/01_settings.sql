-- The settings a retrieval reads (kb_pipeline.read_retrieval_settings, one
-- statement) and the bounds its arguments are held to: filters, modes, the
-- lengths of a query, a namespace and the earlier turns of a conversation.

CREATE OR REPLACE FUNCTION kb_pipeline.read_retrieval_settings()
RETURNS kb_pipeline.retrieval_settings
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- every field of the type but the model is the setting of the same name
    fields text[] := ARRAY(
        SELECT a.attname::text FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = 'kb_pipeline.retrieval_settings'::regclass AND a.attnum > 0 AND NOT a.attisdropped
            AND a.attname <> 'answerability_model'
    );
    found jsonb;
    settings kb_pipeline.retrieval_settings;
BEGIN
    -- the catalogue is the shipped one and a stored value only a candidate: a
    -- missing row or a bad value reads as its default (kb.setting_in_force), so
    -- no row of kb.settings can make every retrieval fail
    SELECT coalesce(jsonb_object_agg(c.key, kb.setting_in_force(c, s.value)), '{}') INTO found
    FROM unnest(kb.settings_shipped_array()) AS c
    LEFT JOIN kb.settings AS s ON s.key = c.key
    WHERE c.key = ANY(fields);
    IF (SELECT count(*) FROM jsonb_object_keys(found)) < cardinality(fields) THEN
        RAISE EXCEPTION 'pgkb: unknown setting "%"', (SELECT f FROM unnest(fields) AS f WHERE NOT found ? f LIMIT 1)
            USING HINT = 'a field of kb_pipeline.retrieval_settings is a key of kb.settings_shipped (sql/005_settings/)';
    END IF;
    settings := jsonb_populate_record(NULL::kb_pipeline.retrieval_settings, found);
    settings.answerability_model := kb.answerability_model();
    RETURN settings;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.read_retrieval_settings() IS
'The retrieval settings in force for this session (the legs'' included), typed, in one composite read by one statement (kb.setting_in_force of each key of the shipped catalogue with its stored value), once per kb_retrieve call; a stored value that is missing or bad reads as its default (kb.health names it).';

CREATE OR REPLACE FUNCTION kb_pipeline.max_filters_bytes()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 8192 $$;
COMMENT ON FUNCTION kb_pipeline.max_filters_bytes() IS
'Largest kb_retrieve filters argument (bytes of its JSON text): a filter lists a few values, and a bigger one would cost every candidate''s visibility check.';

CREATE OR REPLACE FUNCTION kb_pipeline.max_filters_depth()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 8 $$;
COMMENT ON FUNCTION kb_pipeline.max_filters_depth() IS
'Deepest nesting of values inside kb_retrieve filters ({"metadata": {"a": 1}} is 2 deep): enough for metadata objects, and containment of deeper ones costs more than it selects.';

CREATE OR REPLACE FUNCTION kb_pipeline.filter_value_error(p_key text, p_value jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- NULL when the value has the key's type; otherwise what is wrong, for the error
    SELECT CASE
        WHEN p_key IN ('doc_type', 'status', 'tags') THEN
            CASE
                WHEN jsonb_typeof(p_value) = 'string' THEN NULL
                WHEN jsonb_typeof(p_value) <> 'array' THEN 'got ' || jsonb_typeof(p_value)
                WHEN jsonb_array_length(p_value) = 0 THEN 'got an empty array'
                WHEN jsonb_path_exists(p_value, 'strict $[*] ? (@.type() != "string")') THEN
                    'got an array with a non-string element ('
                    || (jsonb_path_query_first(p_value, 'strict $[*] ? (@.type() != "string").type()') #>> '{}') || ')'
            END
        WHEN p_key = 'source_prefix' AND jsonb_typeof(p_value) <> 'string' THEN 'got ' || jsonb_typeof(p_value)
        WHEN p_key = 'metadata' AND jsonb_typeof(p_value) <> 'object' THEN 'got ' || jsonb_typeof(p_value)
        WHEN p_key = 'include_history' AND jsonb_typeof(p_value) <> 'boolean' THEN 'got ' || jsonb_typeof(p_value)
    END
$$;
COMMENT ON FUNCTION kb_pipeline.filter_value_error(text, jsonb) IS
'What is wrong with the value of one kb_retrieve filter key (NULL when it has the key''s type): doc_type, status and tags take a string or a non-empty array of strings, source_prefix a string, metadata an object, include_history a boolean.';

CREATE OR REPLACE FUNCTION kb_pipeline.check_filters(p_filters jsonb)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    key text;
    problem text;
    bytes integer;
    expected constant jsonb := jsonb_build_object(
        'doc_type', 'a string or a non-empty array of strings',
        'status', 'a string or a non-empty array of strings',
        'tags', 'a string or a non-empty array of strings',
        'source_prefix', 'a string',
        'metadata', 'an object (matched by containment)',
        'include_history', 'true or false');
    example constant jsonb := jsonb_build_object(
        'doc_type', '{"doc_type": "policy"} or {"doc_type": ["policy", "faq"]}; leave the key out for any type',
        'status', '{"status": "active"} or {"status": ["active", "deprecated"]}',
        'tags', '{"tags": "finance"} or {"tags": ["finance", "hr"]} (any of them)',
        'source_prefix', '{"source_prefix": "policies/"}',
        'metadata', '{"metadata": {"owner": "finance"}}',
        'include_history', '{"include_history": true}');
BEGIN
    IF p_filters IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    -- sizes first, so a huge or deeply nested argument costs nothing more than this
    bytes := pg_column_size(p_filters);
    IF bytes <= 4 * kb_pipeline.max_filters_bytes() THEN
        bytes := octet_length(p_filters::text);
    END IF;
    IF bytes > kb_pipeline.max_filters_bytes() THEN
        RAISE EXCEPTION 'kb_retrieve: filters are too large (% bytes of JSON; at most %)', bytes, kb_pipeline.max_filters_bytes()
            USING HINT = 'filter on fewer values: doc_type, status and tags lists match any of their values';
    END IF;
    IF jsonb_path_exists(p_filters, format('strict $.**{%s}', kb_pipeline.max_filters_depth() + 1)::jsonpath) THEN
        RAISE EXCEPTION 'kb_retrieve: filters are nested too deeply (more than % levels)', kb_pipeline.max_filters_depth()
            USING HINT = 'a metadata filter matches by containment: a shallower object selects the same documents and more';
    END IF;
    IF jsonb_typeof(p_filters) <> 'object' THEN
        RAISE EXCEPTION 'kb_retrieve: filters must be a JSON object, got %', jsonb_typeof(p_filters)
            USING HINT = 'e.g. {"doc_type": "policy", "metadata": {"owner": "finance"}}; ''{}'' for none';
    END IF;
    FOR key IN SELECT jsonb_object_keys(p_filters) LOOP
        IF NOT expected ? key THEN
            RAISE EXCEPTION 'kb_retrieve: unknown filter key "%"', left(key, 64)
                USING HINT = 'known keys: doc_type, status, include_history, metadata, tags, source_prefix';
        END IF;
        problem := kb_pipeline.filter_value_error(key, p_filters -> key);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'kb_retrieve: filters.% must be %, %', key, expected ->> key, problem
                USING HINT = 'e.g. ' || (example ->> key);
        END IF;
    END LOOP;
    IF p_filters ? 'status' AND EXISTS (
        SELECT 1 FROM unnest(kb.json_text_list(p_filters -> 'status')) AS s (status)
        WHERE s.status NOT IN ('draft', 'active', 'deprecated')
    ) THEN
        RAISE EXCEPTION 'kb_retrieve: filters.status must be draft, active or deprecated, got %', p_filters -> 'status'
            USING HINT = 'a status filter also lifts the lifecycle rule: it returns every version with that status';
    END IF;
    RETURN p_filters;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.check_filters(jsonb) IS
'Validates kb_retrieve filters: bounded size and depth, known keys, each value of its key''s type (errors name the key and the expected type).';

CREATE OR REPLACE FUNCTION kb_pipeline.retrieval_modes()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT ARRAY['lexical', 'dense', 'hybrid', 'auto'] $$;
COMMENT ON FUNCTION kb_pipeline.retrieval_modes() IS
'The modes of kb_retrieve: lexical (BM25 + trigram), dense (HNSW), hybrid (both, fused), auto (hybrid when the active model has vectors).';

CREATE OR REPLACE FUNCTION kb_pipeline.max_query_chars()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 2000 $$;
COMMENT ON FUNCTION kb_pipeline.max_query_chars() IS
'Characters of a query kb_retrieve uses; a longer query is cut there, with a note in the explain output.';

CREATE OR REPLACE FUNCTION kb_pipeline.max_namespace_chars()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 63 $$;
COMMENT ON FUNCTION kb_pipeline.max_namespace_chars() IS
'Longest namespace: the limit of the CHECK documents_namespace_valid, so a longer kb_retrieve namespace can name no document.';

CREATE OR REPLACE FUNCTION kb_pipeline.namespace_pattern()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' $$;
COMMENT ON FUNCTION kb_pipeline.namespace_pattern() IS
'The pattern of the CHECK documents_namespace_valid: a kb_retrieve namespace outside it can name no document.';

CREATE OR REPLACE FUNCTION kb_pipeline.max_context_turns()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 20 $$;
COMMENT ON FUNCTION kb_pipeline.max_context_turns() IS
'Most earlier turns kb_retrieve takes in context: a follow-up refers to the last few, and each turn costs query analysis (pgkb_plpy.vocabulary.MAX_CONTEXT_TURNS).';
