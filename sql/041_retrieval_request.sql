-- A kb_retrieve call's arguments checked and normalised (kb_pipeline.validated_request),
-- and the plan for it (kb_pipeline.plan_retrieval): query analysis, mode, model,
-- weights and evidence thresholds.

CREATE OR REPLACE FUNCTION kb_pipeline.read_retrieval_settings()
RETURNS kb_pipeline.retrieval_settings
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT ROW(
        (kb.setting('candidates_per_leg') #>> '{}')::integer,
        kb.setting('fusion') #>> '{}',
        (kb.setting('weight_dense') #>> '{}')::float8,
        (kb.setting('weight_lexical') #>> '{}')::float8,
        (kb.setting('rrf_k') #>> '{}')::float8,
        (kb.setting('boost_identifier') #>> '{}')::float8,
        (kb.setting('boost_title') #>> '{}')::float8,
        (kb.setting('min_lexical_coverage') #>> '{}')::float8,
        (kb.setting('strong_lexical_coverage') #>> '{}')::float8,
        (kb.setting('no_evidence_cutoff') #>> '{}')::boolean,
        (kb.setting('snippets') #>> '{}')::boolean,
        (kb.setting('language_correction') #>> '{}')::boolean,
        (kb.setting('language_min_vectors') #>> '{}')::integer,
        (kb.setting('min_dense_z') #>> '{}')::float8,
        (kb.setting('same_language_z_margin') #>> '{}')::float8,
        (kb.setting('strong_dense_z') #>> '{}')::float8,
        (kb.setting('answer_probability') #>> '{}')::float8,
        (kb.setting('no_evidence_probability') #>> '{}')::float8,
        (kb.setting('freshness_margin') #>> '{}')::float8,
        (kb.setting('glossary_expansion') #>> '{}')::boolean,
        (kb.setting('glossary_max_terms') #>> '{}')::integer,
        (kb.setting('dictionary_expansion') #>> '{}')::boolean,
        (kb.setting('dictionary_max_terms') #>> '{}')::integer,
        (kb.setting('max_per_document') #>> '{}')::integer,
        (kb.setting('merge_adjacent') #>> '{}')::boolean,
        kb.answerability_model()
    )::kb_pipeline.retrieval_settings
$$;
COMMENT ON FUNCTION kb_pipeline.read_retrieval_settings() IS
'The retrieval settings in force for this session, typed, in one composite (read once per kb_retrieve call).';

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

CREATE OR REPLACE FUNCTION kb_pipeline.validated_request(
    p_query text,
    p_k integer,
    p_namespace text,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_max_per_document integer,
    p_merge_adjacent boolean
)
RETURNS kb_pipeline.retrieval_request
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    query text;
    mode text;
    filters jsonb;
    context text[];
    notes text[] := '{}';
BEGIN
    -- blank by the one definition (kb.is_blank), whatever mix of spaces and invisible characters
    IF p_query IS NULL OR kb.is_blank(p_query) THEN
        RAISE EXCEPTION 'kb_retrieve: query is empty'
            USING HINT = 'pass the question as text: spaces and invisible characters alone are no query';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: k must be between 1 and 1000 (got %)', coalesce(p_k::text, 'NULL')
            USING HINT = 'k is the number of passages returned';
    END IF;
    IF length(p_namespace) > kb_pipeline.max_namespace_chars() THEN
        RAISE EXCEPTION 'kb_retrieve: namespace must be at most % characters (got %)',
            kb_pipeline.max_namespace_chars(), length(p_namespace)
            USING HINT = 'pass the namespace of kb.documents, or NULL for every namespace you may read';
    END IF;
    IF p_namespace !~ kb_pipeline.namespace_pattern() THEN
        RAISE EXCEPTION 'kb_retrieve: namespace "%" is not a valid namespace name', p_namespace
            USING HINT = 'namespaces are letters, digits and _ . - (starting with a letter or digit); NULL for all';
    END IF;
    mode := lower(btrim(coalesce(left(p_mode, 64), 'auto')));
    IF NOT mode = ANY(kb_pipeline.retrieval_modes()) THEN
        RAISE EXCEPTION 'kb_retrieve: unknown mode "%"', left(p_mode, 64) || CASE WHEN length(p_mode) > 64 THEN '...' ELSE '' END
            USING HINT = 'modes: ' || array_to_string(kb_pipeline.retrieval_modes(), ', ');
    END IF;
    IF p_as_of IS NULL THEN
        RAISE EXCEPTION 'kb_retrieve: as_of must not be NULL'
            USING HINT = 'leave it out for now(), or pass the date the answer should hold for';
    END IF;
    IF p_max_per_document < 0 OR p_max_per_document > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: max_per_document must be between 0 (no cap) and 1000 (got %)', p_max_per_document
            USING HINT = 'the most chunks of one document among the k returned; NULL for the setting max_per_document';
    END IF;
    filters := kb_pipeline.check_filters(p_filters);
    IF cardinality(p_context) > kb_pipeline.max_context_turns() THEN
        RAISE EXCEPTION 'kb_retrieve: context has % turns; at most %', cardinality(p_context), kb_pipeline.max_context_turns()
            USING HINT = format('pass the last %s turns of the conversation (oldest first)', kb_pipeline.max_context_turns());
    END IF;
    IF array_ndims(p_context) > 1 THEN
        RAISE EXCEPTION 'kb_retrieve: context must be a one-dimensional array of turns (got % dimensions)',
            array_ndims(p_context)
            USING HINT = 'e.g. ARRAY[''first question'', ''second question'']';
    END IF;

    query := kb.strip_blank(p_query);
    IF length(query) > kb_pipeline.max_query_chars() THEN
        notes := notes || format('query truncated to its first %s of %s characters', kb_pipeline.max_query_chars(), length(query));
        query := left(query, kb_pipeline.max_query_chars());
    END IF;
    -- each turn is cut where the query is, before it reaches query analysis
    context := ARRAY(
        SELECT left(t.turn, kb_pipeline.max_query_chars()) FROM unnest(p_context) WITH ORDINALITY AS t (turn, n) ORDER BY t.n
    );
    notes := notes || ARRAY(
        SELECT format('context turn %s truncated to its first %s of %s characters', t.n, kb_pipeline.max_query_chars(),
            length(t.turn))
        FROM unnest(p_context) WITH ORDINALITY AS t (turn, n)
        WHERE length(t.turn) > kb_pipeline.max_query_chars()
        ORDER BY t.n
    );
    RETURN ROW(query, p_k, p_namespace, mode, filters, kb.filters_restrict(filters), p_as_of,
        CASE WHEN p_context IS NOT NULL THEN context END, notes, p_max_per_document, p_merge_adjacent,
        NULL::text[]);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.validated_request(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'Checks kb_retrieve''s arguments before any work (each error names the argument, its hint the fix): a query not blank by kb.is_blank, k in 1..1000, a namespace that can exist, a known mode, as_of, filters of bounded size and depth with typed values, at most kb_pipeline.max_context_turns() turns, max_per_document in 0..1000 (0: no cap, as the setting) or NULL. Normalises them: query trimmed of blanks and cut to kb_pipeline.max_query_chars() (so is each turn, with a note), lower-case mode.';

CREATE OR REPLACE FUNCTION kb_pipeline.assembly_max_per_document(
    p_request kb_pipeline.retrieval_request, p_settings kb_pipeline.retrieval_settings
)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- 0 means no cap, as an argument and as the setting
    IF p_request.max_per_document IS NOT NULL THEN
        RETURN nullif(p_request.max_per_document, 0);
    END IF;
    -- the setting's range (0 to 1000) is checked where it is read (kb.setting)
    RETURN nullif(p_settings.max_per_document, 0);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.assembly_max_per_document(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings) IS
'The per-document cap of a call: its max_per_document argument, else the setting max_per_document (0 in either: no cap); NULL for no cap. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.assembly_merge_adjacent(
    p_request kb_pipeline.retrieval_request, p_settings kb_pipeline.retrieval_settings
)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce(p_request.merge_adjacent, p_settings.merge_adjacent)
$$;
COMMENT ON FUNCTION kb_pipeline.assembly_merge_adjacent(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings) IS
'Whether a call merges adjacent chunks: its merge_adjacent argument, else the setting merge_adjacent. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.model_has_vectors(p_model text, p_namespaces text[])
RETURNS boolean
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- of documents the session's role may read (kb.may_read_document): a
    -- private document's vectors must not switch another role's mode
    IF p_namespaces IS NULL THEN
        RETURN EXISTS (
            SELECT 1 FROM kb.embeddings AS e
            INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
            INNER JOIN kb.documents AS d ON d.id = c.document_id
            WHERE e.model = p_model AND kb.may_read_document(d.reader_ids)
        );
    END IF;
    -- the namespaces' chunks first: another tenant's millions of vectors are not read
    RETURN EXISTS (
        SELECT 1 FROM kb.chunks AS c
        INNER JOIN kb.embeddings AS e ON e.chunk_id = c.id AND e.model = p_model
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE c.namespace = ANY(p_namespaces) AND kb.may_read_document(d.reader_ids)
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.model_has_vectors(text, text[]) IS
'Whether the model has vectors of chunks in the namespaces given (NULL: in any the caller may see), of documents the session''s role may read: the readiness that mode auto and a shard''s corpus statistics report.';

CREATE OR REPLACE FUNCTION kb_pipeline.plan_retrieval(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    p_model_ready boolean DEFAULT NULL,
    p_analysis jsonb DEFAULT NULL
)
RETURNS kb_pipeline.retrieval_plan
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    plan kb_pipeline.retrieval_plan;
    provider kb.embedding_providers;
BEGIN
    IF NOT p_settings.fusion = ANY(ARRAY['linear', 'rrf']) THEN
        RAISE EXCEPTION 'kb_retrieve: unknown fusion "%" (setting fusion: linear or rrf)', p_settings.fusion;
    END IF;
    -- p_analysis: this request's analysis when a plan was made before (a coordinator plans
    -- twice: before and after the shards say whether they have vectors)
    plan.analysis := coalesce(p_analysis, kb.analyze_query(p_request.query, p_request.context));
    plan.stages := ARRAY(SELECT jsonb_array_elements_text(plan.analysis -> 'stages'));
    plan.identifiers := ARRAY(SELECT jsonb_array_elements_text(coalesce(plan.analysis -> 'identifiers', '[]')));
    plan.notes := '{}';
    plan.candidates := greatest(p_request.k * 5, p_settings.candidates_per_leg);
    plan.weight_dense := p_settings.weight_dense;
    plan.weight_lexical := p_settings.weight_lexical;
    SELECT m INTO plan.model FROM kb.models AS m WHERE m.active;
    -- ready when the model has vectors in any namespace the role may read (not
    -- only the one asked for: a namespace without documents answers with no
    -- rows, as under isolation off); p_model_ready: whether any database of
    -- a sharded corpus has them (its coordinator found out)
    -- (a statement of its own: a coordinator's caller may not run kb_pipeline.model_has_vectors)
    plan.model_ready := (plan.model).name IS NOT NULL AND p_model_ready;
    IF (plan.model).name IS NOT NULL AND p_model_ready IS NULL THEN
        plan.model_ready := kb_pipeline.model_has_vectors((plan.model).name,
            CASE WHEN p_request.scope IS NOT NULL THEN kb.allowed_namespaces(kb.session_role()) END);
    END IF;
    -- a model's options may override its provider's similarity thresholds
    SELECT p.* INTO provider FROM kb.embedding_providers AS p WHERE p.provider = (plan.model).provider;
    plan.min_similarity := coalesce(((plan.model).options ->> 'min_similarity')::float8, provider.min_similarity);
    plan.strong_similarity := coalesce(((plan.model).options ->> 'strong_similarity')::float8,
        provider.strong_similarity);
    plan.language_correction := p_settings.language_correction AND coalesce(provider.language_correction, false);
    plan.mode := p_request.mode_requested;
    IF plan.mode = 'auto' THEN
        plan.mode := CASE WHEN plan.model_ready THEN 'hybrid' ELSE 'lexical' END;
        IF NOT plan.model_ready THEN
            plan.notes := plan.notes || 'no vectors of an active model yet: lexical only'::text;
        END IF;
    ELSIF plan.mode IN ('dense', 'hybrid') AND NOT plan.model_ready THEN
        RAISE EXCEPTION 'kb_retrieve: mode % needs vectors of the active model, and there are none yet', plan.mode
            USING HINT = 'use mode auto or lexical, or run pgkb backfill';
    END IF;
    RETURN plan;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.plan_retrieval(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings, boolean, jsonb) IS
'What a kb_retrieve call will do: query analysis (its stages and each stage''s BM25 terms, one PL/Python call, or p_analysis when the request was analysed before), the mode (auto: hybrid when the active model has vectors the role may read, or, p_model_ready, on any database of a sharded corpus), the active model, base fusion weights and similarity thresholds (used when the language correction does not apply).';
