-- Which documents a retrieval may see: the lifecycle rule of docs/LIFECYCLE.md
-- ("current at as_of"), namespace and filters. kb.in_force is the rule's one
-- spelling; kb.visible_documents applies it to a whole scope,
-- kb.document_is_current to one document, and kb.visible_candidate is the one
-- condition every retrieval leg puts on its candidates.

-- kb.in_force and kb.visible_candidate carry no SET search_path: a SET clause
-- stops PostgreSQL from inlining a SQL function, and these two must become
-- part of the query that calls them (a per-row call costs tens of
-- microseconds, and the legs must keep their plans). Every name in them is
-- schema-qualified; pg_catalog is searched first.

CREATE OR REPLACE FUNCTION kb.in_force(
    p_status text, p_effective_from date, p_effective_to date, p_removed_at timestamptz, p_as_of timestamptz
)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    -- not a draft, inside its effective window (effective_to inclusive; a
    -- deprecated document needs an end date), not removed from its folder by then
    SELECT p_status <> 'draft'
        AND (p_effective_from IS NULL OR p_effective_from <= p_as_of::date)
        AND (p_effective_to IS NULL OR p_as_of::date <= p_effective_to)
        AND (p_status <> 'deprecated' OR p_effective_to IS NOT NULL)
        AND (p_removed_at IS NULL OR p_removed_at > p_as_of)
$$;
COMMENT ON FUNCTION kb.in_force(text, date, date, timestamptz, timestamptz) IS
'The lifecycle rule''s first half (docs/LIFECYCLE.md): whether a document with these attributes is in force at as_of. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb.visible_documents(p_as_of timestamptz, p_namespace text, p_filters jsonb)
RETURNS SETOF bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Current at as_of (docs/LIFECYCLE.md): in force, and not superseded: no
    -- document in force at as_of names it in `supersedes`, directly or
    -- through a chain (v3 -> v2 -> v1 hides v1 and v2). A status filter or
    -- include_history lifts the lifecycle rule.
    WITH RECURSIVE
    opts AS (
        SELECT
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
        SELECT s.* FROM scoped AS s
        WHERE kb.in_force(s.status, s.effective_from, s.effective_to, s.removed_at, p_as_of)
    ),
    superseders AS (
        -- any document in force (of any scope) can supersede one in the same namespace
        SELECT d.namespace, d.supersedes AS source, d.source AS origin
        FROM kb.documents AS d
        WHERE d.supersedes IS NOT NULL
            AND (p_namespace IS NULL OR d.namespace = p_namespace)
            AND kb.in_force(d.status, d.effective_from, d.effective_to, d.removed_at, p_as_of)
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
'Ids of the documents a retrieval may use: current at as_of (docs/LIFECYCLE.md) within the namespace and filters; a status filter or include_history returns history too.';

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
'True when filters (or include_history) decide visibility, so kb.visible_candidate uses kb.visible_documents instead of kb.document_is_current.';

CREATE OR REPLACE FUNCTION kb.document_is_current(p_document_id bigint, p_as_of timestamptz)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The per-document form of kb.visible_documents' rule, for retrievals
    -- without filters: a few index probes, not a pass over the documents.
    -- The chain holds the document and every document naming it in
    -- `supersedes`, directly or through others (v3 -> v2 -> v1); it is
    -- current when it is in force and none of the others is.
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
            kb.in_force(c.status, c.effective_from, c.effective_to, c.removed_at, p_as_of) AS in_force
        FROM chain AS c
    )
    SELECT coalesce(bool_or(j.in_force) FILTER (WHERE j.self), false)
        AND NOT coalesce(bool_or(j.in_force) FILTER (WHERE NOT j.self), false)
    FROM judged AS j
$$;
COMMENT ON FUNCTION kb.document_is_current(bigint, timestamptz) IS
'Whether one document is current at as_of (docs/LIFECYCLE.md: in force and not superseded by a document in force, through chains); the same rule as kb.visible_documents.';

CREATE OR REPLACE FUNCTION kb.visible_candidate(
    p_document_id bigint, p_as_of timestamptz, p_namespace text, p_filters jsonb, p_filters_restrict boolean
)
RETURNS SETOF bigint
LANGUAGE sql
STABLE PARALLEL SAFE
ROWS 1
AS $$
    -- The document's id when a retrieval with these arguments may use it, no
    -- row otherwise. Used as CROSS JOIN LATERAL by every leg; inlined, so the
    -- filtered branch stays one hashed subplan of the leg's query (computed
    -- once, not per candidate). Without filters, a plain document (active,
    -- undated, not removed) that no document names in `supersedes` is current
    -- without further probes; any other is judged by kb.document_is_current.
    SELECT d.id
    FROM kb.documents AS d
    WHERE d.id = p_document_id
        AND CASE WHEN p_filters_restrict
            THEN d.id IN (SELECT kb.visible_documents(p_as_of, p_namespace, p_filters))
            ELSE (
                d.status = 'active' AND d.effective_from IS NULL AND d.effective_to IS NULL AND d.removed_at IS NULL
                AND NOT EXISTS (SELECT 1 FROM kb.documents AS s WHERE s.namespace = d.namespace AND s.supersedes = d.source)
            ) OR kb.document_is_current(d.id, p_as_of) END
$$;
COMMENT ON FUNCTION kb.visible_candidate(bigint, timestamptz, text, jsonb, boolean) IS
'The visibility condition of every retrieval leg: the document id when the document may be used (current at as_of, or matching filters that lift the lifecycle rule), else no row. Inlined into its callers.';
