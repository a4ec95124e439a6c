-- The exact legs: pg_trgm for a short query BM25 matched nothing of, and
-- identifiers found verbatim (error codes, ticket numbers, versions): the leg
-- that matches them, the rare ones of a corpus, the chunks a call's
-- identifiers name.

CREATE OR REPLACE FUNCTION kb_node.trigram_candidates(
    p_query text, p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- Fuzzy matching of a short query (typos, partial identifiers) through the
    -- GIN trigram index; <% uses pg_trgm.word_similarity_threshold (default 0.6),
    -- which keeps the candidate set small. Visibility is judged once per
    -- document, best first, until p_limit visible documents are found (their
    -- chunks hold the p_limit best visible chunks), so hidden versions cost a
    -- probe per document, never a place.
BEGIN
    RETURN QUERY
    WITH hits AS MATERIALIZED (
        SELECT c.id, c.document_id, word_similarity(p_query, c.content)::float8 AS score
        FROM kb.chunks AS c
        WHERE p_query <% c.content AND (p_namespaces IS NULL OR c.namespace = ANY(p_namespaces))
    ),
    visible AS MATERIALIZED (
        SELECT r.document_id
        FROM (
            SELECT h.document_id, max(h.score) AS best FROM hits AS h GROUP BY h.document_id ORDER BY 2 DESC, 1 OFFSET 0
        ) AS r
        CROSS JOIN LATERAL kb.visible_candidate(
            r.document_id, p_as_of, p_namespaces, p_filters, kb.filters_restrict(p_filters)
        ) AS v
        LIMIT p_limit
    )
    SELECT h.id, h.score
    FROM hits AS h
    WHERE h.document_id IN (SELECT v.document_id FROM visible AS v)
    ORDER BY h.score DESC, h.id
    LIMIT p_limit;
END;
$$;
COMMENT ON FUNCTION kb_node.trigram_candidates(text, timestamptz, text[], jsonb, integer) IS
'pg_trgm leg for short queries: word_similarity over chunk text via the GIN index (pg_trgm.word_similarity_threshold).';

CREATE OR REPLACE FUNCTION kb_node.identifier_candidates(
    p_identifiers text[], p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, matched integer)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- chunks containing identifiers verbatim (case-insensitive, LIKE-escaped) as
    -- whole tokens: E-4031 is not found inside E-40310 (the ILIKE uses the trigram
    -- index, the regular expression with escaped input rechecks the boundaries).
    -- Visibility once per document, as in kb.trigram_candidates.
BEGIN
    RETURN QUERY
    WITH matches AS MATERIALIZED (
        SELECT c.id, c.document_id, i.ident
        FROM kb.chunks AS c
        INNER JOIN unnest(p_identifiers) AS i (ident)
            ON length(i.ident) >= 3
            AND c.content ILIKE '%' || kb.escape_like(i.ident) || '%'
            AND c.content ~* ('(^|[^a-z0-9_])' || kb.escape_regex(i.ident) || '($|[^a-z0-9_])')
        WHERE p_namespaces IS NULL OR c.namespace = ANY(p_namespaces)
    ),
    -- An identifier by its shape alone (a digit or a connector: E-4031,
    -- session.ttl_seconds) is kept; one of letters only (camelCase: PostgreSQL,
    -- JetStream) is a name as often as an identifier, and only a rare one
    -- (kb_node.rare_identifier_chunks) singles out the passages about it.
    kept AS (
        SELECT m.ident
        FROM matches AS m
        GROUP BY m.ident
        HAVING m.ident !~ '^[[:alpha:]]+$' OR count(*) <= kb_node.rare_identifier_chunks(p_namespaces)
    ),
    hits AS MATERIALIZED (
        SELECT m.id, m.document_id, count(*)::integer AS matched
        FROM matches AS m
        WHERE m.ident IN (SELECT k.ident FROM kept AS k)
        GROUP BY m.id, m.document_id
    ),
    visible AS MATERIALIZED (
        SELECT r.document_id
        FROM (
            SELECT h.document_id, max(h.matched) AS best FROM hits AS h GROUP BY h.document_id ORDER BY 2 DESC, 1 OFFSET 0
        ) AS r
        CROSS JOIN LATERAL kb.visible_candidate(
            r.document_id, p_as_of, p_namespaces, p_filters, kb.filters_restrict(p_filters)
        ) AS v
        LIMIT p_limit
    )
    SELECT h.id, h.matched
    FROM hits AS h
    WHERE h.document_id IN (SELECT v.document_id FROM visible AS v)
    ORDER BY h.matched DESC, h.id
    LIMIT p_limit;
END;
$$;
COMMENT ON FUNCTION kb_node.identifier_candidates(text[], timestamptz, text[], jsonb, integer) IS
'Chunks that contain the query''s identifiers verbatim as whole tokens (trigram-indexed ILIKE, escaped input); an identifier of letters only (camelCase) counts only where it is rare (kb_node.rare_identifier_chunks).';

CREATE OR REPLACE FUNCTION kb_node.rare_identifier_chunks(p_namespaces text[])
RETURNS bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- rare: in at most 1 % of the chunks of the scope the statistics count, and at
    -- least 3 (a small corpus still has a name in a few passages)
    SELECT greatest(3, floor(0.01 * coalesce(sum(st.chunk_count), 0)))::bigint
    FROM kb.lexical_stats AS st
    WHERE p_namespaces IS NULL OR st.namespace = ANY(p_namespaces)
$$;
COMMENT ON FUNCTION kb_node.rare_identifier_chunks(text[]) IS
'How many chunks a letters-only identifier (camelCase: PostgreSQL) may occur in and still count as an identifier: 1 % of the chunks of the scope (kb.lexical_stats), at least 3. A name common in the corpus would otherwise boost every passage that mentions it.';

CREATE OR REPLACE FUNCTION kb_node.identifier_chunks(
    p_request kb_pipeline.retrieval_request, p_plan kb_pipeline.retrieval_plan
)
RETURNS bigint[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- the same for every stage, so found once per call; the dense mode does not look
BEGIN
    RETURN (
    SELECT coalesce(array_agg(i.chunk_id ORDER BY i.matched DESC, i.chunk_id), '{}')
    FROM kb_node.identifier_candidates(
        p_plan.identifiers, p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates
    ) AS i
    WHERE cardinality(p_plan.identifiers) > 0 AND p_plan.mode <> 'dense'
    );
END;
$$;
COMMENT ON FUNCTION kb_node.identifier_chunks(kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan) IS
'Chunks that hold an identifier of the query verbatim (none in dense mode), most identifiers matched first: strong evidence, and boosted.';
