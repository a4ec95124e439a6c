-- Which documents a retrieval may see: lifecycle (DESIGN.md "current"), namespace, filters.

CREATE OR REPLACE FUNCTION kb.escape_like(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_')
$$;
COMMENT ON FUNCTION kb.escape_like(text) IS 'Escapes \, % and _ so user text matches literally in LIKE/ILIKE.';

CREATE OR REPLACE FUNCTION kb.escape_regex(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT regexp_replace(p_text, '([][\\.^$*+?(){}|/-])', '\\\1', 'g')
$$;
COMMENT ON FUNCTION kb.escape_regex(text) IS 'Escapes regular expression metacharacters so user text matches literally in ~ and ~*.';

CREATE OR REPLACE FUNCTION kb.check_filters(p_filters jsonb)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    key text;
BEGIN
    IF p_filters IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    IF jsonb_typeof(p_filters) <> 'object' THEN
        RAISE EXCEPTION 'kb_retrieve: filters must be a JSON object, got %', jsonb_typeof(p_filters);
    END IF;
    FOR key IN SELECT jsonb_object_keys(p_filters) LOOP
        IF key NOT IN ('doc_type', 'status', 'include_history', 'metadata', 'tags', 'source_prefix') THEN
            RAISE EXCEPTION 'kb_retrieve: unknown filter key "%"', key
                USING HINT = 'known keys: doc_type, status, include_history, metadata, tags, source_prefix';
        END IF;
    END LOOP;
    IF p_filters ? 'metadata' AND jsonb_typeof(p_filters -> 'metadata') <> 'object' THEN
        RAISE EXCEPTION 'kb_retrieve: filters.metadata must be an object (matched by containment)';
    END IF;
    IF p_filters ? 'include_history' AND jsonb_typeof(p_filters -> 'include_history') <> 'boolean' THEN
        RAISE EXCEPTION 'kb_retrieve: filters.include_history must be true or false';
    END IF;
    RETURN p_filters;
END;
$$;
COMMENT ON FUNCTION kb.check_filters(jsonb) IS 'Validates kb_retrieve filters; unknown keys are errors that name the key.';

CREATE OR REPLACE FUNCTION kb.json_text_list(p_value jsonb)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT CASE jsonb_typeof(p_value)
        WHEN 'array' THEN ARRAY(SELECT jsonb_array_elements_text(p_value))
        WHEN 'string' THEN ARRAY[p_value #>> '{}']
    END
$$;
COMMENT ON FUNCTION kb.json_text_list(jsonb) IS 'A JSON string or array of strings as text[] (NULL otherwise).';

CREATE OR REPLACE FUNCTION kb.visible_documents(p_as_of timestamptz, p_namespace text, p_filters jsonb)
RETURNS SETOF bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Current at as_of (DESIGN.md): not a draft, inside its effective window
    -- (effective_to inclusive; a deprecated document needs an end date), not
    -- removed from its folder by then, and not superseded. A document is
    -- superseded when a document in force at as_of names it in `supersedes`,
    -- directly or through a chain (v3 -> v2 -> v1 hides v1 and v2).
    -- A status filter or include_history lifts the lifecycle rule.
    WITH RECURSIVE
    opts AS (
        SELECT
            p_as_of::date AS day,
            coalesce((p_filters ->> 'include_history')::boolean, false) OR p_filters ? 'status' AS history,
            kb.json_text_list(p_filters -> 'doc_type') AS doc_types,
            kb.json_text_list(p_filters -> 'status') AS statuses,
            kb.json_text_list(p_filters -> 'tags') AS tags,
            p_filters -> 'metadata' AS meta,
            p_filters ->> 'source_prefix' AS source_prefix
    ),
    scoped AS (
        SELECT d.id, d.namespace, d.source, d.supersedes, d.status, d.effective_from, d.effective_to, d.removed_at
        FROM kb.documents AS d, opts AS o
        WHERE (p_namespace IS NULL OR d.namespace = p_namespace)
            AND (o.doc_types IS NULL OR d.doc_type = ANY(o.doc_types))
            AND (o.statuses IS NULL OR d.status = ANY(o.statuses))
            AND (o.meta IS NULL OR d.metadata @> o.meta)
            AND (o.tags IS NULL OR d.metadata -> 'tags' ?| o.tags)
            AND (o.source_prefix IS NULL OR starts_with(d.source, o.source_prefix))
    ),
    in_force AS (
        SELECT s.* FROM scoped AS s, opts AS o
        WHERE s.status <> 'draft'
            AND (s.effective_from IS NULL OR s.effective_from <= o.day)
            AND (s.effective_to IS NULL OR o.day <= s.effective_to)
            AND (s.status <> 'deprecated' OR s.effective_to IS NOT NULL)
            AND (s.removed_at IS NULL OR s.removed_at > p_as_of)
    ),
    superseders AS (
        -- any document in force (of any scope) can supersede one in the same namespace
        SELECT d.namespace, d.supersedes AS source, d.source AS origin
        FROM kb.documents AS d, opts AS o
        WHERE d.supersedes IS NOT NULL
            AND (p_namespace IS NULL OR d.namespace = p_namespace)
            AND d.status <> 'draft'
            AND (d.effective_from IS NULL OR d.effective_from <= o.day)
            AND (d.effective_to IS NULL OR o.day <= d.effective_to)
            AND (d.status <> 'deprecated' OR d.effective_to IS NOT NULL)
            AND (d.removed_at IS NULL OR d.removed_at > p_as_of)
    ),
    superseded (namespace, source, origin) AS (
        SELECT namespace, source, origin FROM superseders
        UNION
        SELECT d.namespace, d.supersedes, s.origin
        FROM superseded AS s
        INNER JOIN kb.documents AS d ON d.namespace = s.namespace AND d.source = s.source
        WHERE d.supersedes IS NOT NULL
    )
    SELECT s.id FROM scoped AS s, opts AS o WHERE o.history
    UNION ALL
    SELECT f.id FROM in_force AS f, opts AS o
    WHERE NOT o.history
        -- NOT IN over the (small) superseded set is a hashed subplan, linear in documents
        -- (a chain that cycles back to its origin does not hide the origin)
        AND (f.namespace, f.source) NOT IN (SELECT x.namespace, x.source FROM superseded AS x WHERE x.source <> x.origin)
$$;
COMMENT ON FUNCTION kb.visible_documents(timestamptz, text, jsonb) IS
'Ids of the documents a retrieval may use: current at as_of (lifecycle rules of DESIGN.md) within the namespace and filters; a status filter or include_history returns history too.';

DROP FUNCTION IF EXISTS kb.visibility(timestamptz, text, jsonb);

CREATE OR REPLACE FUNCTION kb.filters_restrict(p_filters jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce((p_filters ->> 'include_history')::boolean, false)
        OR coalesce(p_filters ?| ARRAY['status', 'doc_type', 'metadata', 'tags', 'source_prefix'], false)
$$;
COMMENT ON FUNCTION kb.filters_restrict(jsonb) IS
'True when filters (or include_history) decide visibility, so the legs use kb.visible_documents instead of kb.document_is_current.';

CREATE OR REPLACE FUNCTION kb.document_is_current(p_document_id bigint, p_as_of timestamptz)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The per-candidate form of kb.visible_documents' lifecycle rule, for the
    -- legs without filters: its cost is a few index probes per candidate, not a
    -- pass over the documents. The chain holds the document and every document
    -- naming it in `supersedes`, directly or through others (v3 -> v2 -> v1);
    -- it is current when it is in force and none of the others is.
    WITH RECURSIVE chain (id, namespace, source, status, effective_from, effective_to, removed_at) AS (
        SELECT d.id, d.namespace, d.source, d.status, d.effective_from, d.effective_to, d.removed_at
        FROM kb.documents AS d
        WHERE d.id = p_document_id
        UNION
        SELECT d.id, d.namespace, d.source, d.status, d.effective_from, d.effective_to, d.removed_at
        FROM chain AS c
        INNER JOIN kb.documents AS d ON d.namespace = c.namespace AND d.supersedes = c.source
    ),
    judged AS (
        SELECT
            c.id = p_document_id AS self,
            c.status <> 'draft'
            AND (c.effective_from IS NULL OR c.effective_from <= p_as_of::date)
            AND (c.effective_to IS NULL OR p_as_of::date <= c.effective_to)
            AND (c.status <> 'deprecated' OR c.effective_to IS NOT NULL)
            AND (c.removed_at IS NULL OR c.removed_at > p_as_of) AS in_force
        FROM chain AS c
    )
    SELECT coalesce(bool_or(j.in_force) FILTER (WHERE j.self), false)
        AND NOT coalesce(bool_or(j.in_force) FILTER (WHERE NOT j.self), false)
    FROM judged AS j
$$;
COMMENT ON FUNCTION kb.document_is_current(bigint, timestamptz) IS
'Whether one document is current at as_of (DESIGN.md lifecycle: in force and not superseded by a document in force, through chains); same rule as kb.visible_documents.';
