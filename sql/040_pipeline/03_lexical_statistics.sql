-- What the BM25 leg weighs a query's terms by: the BM25 formula
-- (kb_node.bm25_weight), the corpus statistics of the terms over the
-- current versions (kb_node.lexical_corpus, or a sharded corpus's), and each
-- term's weight, idf and read limit with the glossary's and the dictionary's
-- added terms (kb_node.lexical_term_weights).

CREATE OR REPLACE FUNCTION kb_node.bm25_weight(
    p_idf double precision, p_tf integer, p_length integer, p_k1 double precision, p_b double precision,
    p_avgdl double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle/01_visibility.sql)
AS $$
    SELECT p_idf * p_tf * (p_k1 + 1) / (p_tf + p_k1 * (1 - p_b + p_b * p_length / p_avgdl))
$$;
COMMENT ON FUNCTION kb_node.bm25_weight(double precision, integer, integer, double precision, double precision, double precision) IS
'A posting''s BM25 weight: idf x tf saturation (k1) with length normalisation (b, average length avgdl). Inlined.';

CREATE OR REPLACE FUNCTION kb_node.lexical_corpus(p_terms text[], p_namespaces text[])
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- The corpus statistics BM25 ranks with, over the namespaces of the
    -- call's scope (p_namespaces, kb.read_scope; NULL: every namespace the
    -- caller's row-level security shows), so no tenant's statistics reach
    -- another's scores: chunks and their summed length from kb.lexical_stats, and each
    -- term's df from kb.lexical_terms plus the postings of chunks added since
    -- its refresh, of the documents the statistics count (shared and current
    -- now: kb.counts_in_statistics, as kb.recount_lexical_stats counts). Plain sums, so that the statistics of several databases
    -- (shards) add up to those of one holding all their namespaces.
BEGIN
    RETURN (
    WITH
    sizes AS (
        SELECT
            coalesce(sum(st.chunk_count), 0) AS chunk_count,
            coalesce(sum(st.total_length), 0) AS total_length,
            coalesce(min(st.terms_max_chunk_id) FILTER (WHERE st.chunk_count > 0), 0) AS watermark
        FROM kb.lexical_stats AS st
        WHERE p_namespaces IS NULL OR st.namespace = ANY(p_namespaces)
    ),
    terms AS (SELECT DISTINCT t.term FROM unnest(p_terms) AS t (term) WHERE t.term IS NOT NULL),
    term_df AS MATERIALIZED (
        -- a posting is counted live when its chunk is newer than its own
        -- namespace's watermark: the postings above the lowest watermark
        -- (sz.watermark) are a (term, chunk_id) range of the primary key,
        -- which does not hold the namespace; their chunks give it
        SELECT t.term,
            coalesce((
                SELECT sum(lt.df) FROM kb.lexical_terms AS lt
                WHERE lt.term = t.term AND (p_namespaces IS NULL OR lt.namespace = ANY(p_namespaces))
            ), 0)
            + (SELECT count(*)
                FROM (
                    SELECT posting.chunk_id FROM kb.lexical_postings AS posting
                    WHERE posting.term = t.term AND posting.chunk_id > sz.watermark
                    OFFSET 0
                ) AS fresh
                INNER JOIN kb.chunks AS c ON fresh.chunk_id = c.id
                LEFT JOIN kb.lexical_stats AS st ON c.namespace = st.namespace
                WHERE (p_namespaces IS NULL OR c.namespace = ANY(p_namespaces))
                    AND fresh.chunk_id > coalesce(st.terms_max_chunk_id, 0)
                    AND kb.counts_in_statistics(c.document_id)) AS df
        FROM terms AS t CROSS JOIN sizes AS sz
    )
    SELECT jsonb_build_object(
        'chunk_count', sz.chunk_count,
        'total_length', sz.total_length,
        'df', coalesce((SELECT jsonb_object_agg(f.term, f.df) FROM term_df AS f), '{}'::jsonb))
    FROM sizes AS sz
    );
END;
$$;
COMMENT ON FUNCTION kb_node.lexical_corpus(text[], text[]) IS
'The BM25 corpus statistics of the terms: chunk_count and total_length (summed over the namespaces of p_namespaces, the call''s scope; NULL: all the caller may see) and each term''s df, as jsonb; sums, so that shards'' statistics add up to one node''s (kb_node.lexical_candidates ranks with it, or with a coordinator''s sum).';

CREATE OR REPLACE FUNCTION kb_node.glossary_match_terms(p_glossary jsonb)
RETURNS TABLE (n bigint, term text, own boolean, translated boolean)
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle/01_visibility.sql)
AS $$
    -- each match n of the expansion: its own (query) terms and the terms it
    -- adds; translated: a dictionary's match (a translation can be ambiguous),
    -- not a team's glossary equivalent
    SELECT m.n, o.term, true, coalesce(m.match ->> 'source' = 'dictionary', false)
    FROM jsonb_array_elements(coalesce(p_glossary -> 'matches', '[]'::jsonb)) WITH ORDINALITY AS m (match, n)
    CROSS JOIN LATERAL jsonb_array_elements_text(m.match -> 'terms') AS o (term)
    UNION ALL
    SELECT m.n, a.term, false, coalesce(m.match ->> 'source' = 'dictionary', false)
    FROM jsonb_array_elements(coalesce(p_glossary -> 'matches', '[]'::jsonb)) WITH ORDINALITY AS m (match, n)
    CROSS JOIN LATERAL jsonb_array_elements_text(m.match -> 'added_terms') AS a (term)
$$;
COMMENT ON FUNCTION kb_node.glossary_match_terms(jsonb) IS
'The terms of each match of an expansion (kb_pipeline.merged_expansions of the glossary''s and the dictionary''s): its own terms (own) and the terms it adds, numbered by match; translated for a dictionary''s match. Pure. Inlined.';

CREATE OR REPLACE FUNCTION kb_node.lexical_term_weights(
    p_terms text[], p_glossary jsonb, p_corpus jsonb, p_per_term integer, p_glossary_weight double precision
)
RETURNS TABLE (
    term text, pos bigint, df double precision, idf double precision, raw_idf double precision, read_limit integer,
    truncated boolean, counted boolean
)
LANGUAGE sql
STABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle/01_visibility.sql)
AS $$
    -- Robertson idf from the corpus statistics (kb_node.lexical_corpus, or a
    -- coordinator's sum of it over the shards); a term a glossary match adds
    -- (p_glossary: kb.glossary_expansion_of_terms(p_terms, ...).explain; its
    -- terms come after the query's own) weighs p_glossary_weight x its idf.
    -- read_limit: the postings the leg reads of a term without filters
    -- (p_per_term, NULL: all), more for rarer terms; a term with more
    -- postings is truncated. counted: a term of the query whose idf mass a
    -- chunk should cover.
    WITH
    terms AS (
        SELECT t.term, min(t.pos) AS pos
        FROM unnest(p_terms || ARRAY(
            SELECT jsonb_array_elements_text(coalesce(p_glossary -> 'added_terms', '[]'::jsonb))
        )) WITH ORDINALITY AS t (term, pos)  -- added: after the query's own
        GROUP BY t.term
    ),
    raw_idf AS MATERIALIZED (
        SELECT f.term, f.pos, f.df,
            ln(1 + (greatest(greatest((p_corpus ->> 'chunk_count')::numeric, 1)::float8, f.df) - f.df + 0.5)
                / (f.df + 0.5)) AS idf
        FROM (
            SELECT t.term, t.pos, coalesce((p_corpus -> 'df' ->> t.term)::float8, 0) AS df FROM terms AS t
        ) AS f
    ),
    match_terms AS MATERIALIZED (SELECT * FROM kb_node.glossary_match_terms(p_glossary)),
    scaling AS (
        -- the terms a match adds weigh together at most what its own terms
        -- weigh: an equivalent of six CJK bigrams counts like the word it stands
        -- for, and each of a word's eight translations an eighth of it (the
        -- ones no chunk holds take no share)
        SELECT s.term, max(least(1, s.own_mass / nullif(s.added_mass, 0))) AS factor
        FROM (
            SELECT mt.term, mt.own,
                sum(r.idf) FILTER (WHERE mt.own) OVER (PARTITION BY mt.n) AS own_mass,
                sum(r.idf) FILTER (WHERE NOT mt.own AND r.df > 0) OVER (PARTITION BY mt.n) AS added_mass
            FROM match_terms AS mt
            INNER JOIN raw_idf AS r ON mt.term = r.term
        ) AS s
        WHERE NOT s.own
        GROUP BY s.term
    ),
    idf AS MATERIALIZED (
        SELECT w.*, coalesce(w.df > w.read_limit, false) AS truncated
        FROM (
            SELECT x.term, x.pos, x.df, x.idf, x.raw_idf,
                -- scaled to the rarest term that has postings: an added term no
                -- chunk holds has the highest idf and nothing to read
                greatest(ceil(p_per_term * x.idf / nullif(max(x.idf) FILTER (WHERE x.df > 0) OVER (), 0)),
                    p_per_term / 10)::integer AS read_limit
            FROM (
                SELECT r.term, r.pos, r.df, r.idf AS raw_idf,
                    r.idf * CASE WHEN r.pos > cardinality(p_terms)
                        THEN p_glossary_weight * coalesce(sc.factor, 1) ELSE 1 END
                        AS idf
                FROM raw_idf AS r
                LEFT JOIN scaling AS sc ON r.term = sc.term
            ) AS x
        ) AS w
    ),
    query_idf AS MATERIALIZED (
        -- the query's own terms, each with whether a glossary match holds it
        SELECT i.term, i.pos, i.df,
            EXISTS (SELECT 1 FROM match_terms AS m WHERE m.own AND m.term = i.term) AS matched
        FROM idf AS i
        WHERE i.pos <= cardinality(p_terms)
    ),
    junction AS (
        -- a CJK bigram that no chunk contains, between two query bigrams that some
        -- chunk does contain (公司|司员|员工): a word boundary of the query, not a
        -- missing concept, so it does not count against coverage (a bigram the
        -- glossary matched counts as contained: 会话|话过|过期)
        SELECT i.term
        FROM query_idf AS i
        INNER JOIN query_idf AS prev ON prev.pos = i.pos - 1
        INNER JOIN query_idf AS nxt ON nxt.pos = i.pos + 1
        WHERE i.df = 0 AND NOT i.matched
            AND (prev.df > 0 OR prev.matched) AND (nxt.df > 0 OR nxt.matched)
            AND length(i.term) = 2 AND length(prev.term) = 2 AND length(nxt.term) = 2
            AND right(prev.term, 1) = left(i.term, 1) AND right(i.term, 1) = left(nxt.term, 1)
    )
    SELECT i.term, i.pos, i.df, i.idf, i.raw_idf, i.read_limit, i.truncated,
        i.pos <= cardinality(p_terms) AND i.term NOT IN (SELECT j.term FROM junction AS j)
    FROM idf AS i
$$;
COMMENT ON FUNCTION kb_node.lexical_term_weights(text[], jsonb, jsonb, integer, double precision) IS
'The BM25 weight of each query term (and of the terms a glossary expansion adds): df and Robertson idf from the corpus statistics (idf weighted as an added term, raw_idf as is), how many of its highest-impact postings the leg reads (p_per_term, NULL: all) and whether that truncates it, and whether a chunk''s coverage counts it (the query''s own terms but CJK bigrams straddling two of its words). Inlined.';
