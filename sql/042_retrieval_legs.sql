-- The retrieval legs. Each returns its best candidates among the documents a
-- retrieval may see (kb.visible_candidate, judged inside the leg, before
-- ranking): BM25 over the postings, pg_trgm for short fuzzy queries,
-- verbatim identifiers, and HNSW over the active model's vectors.

CREATE OR REPLACE FUNCTION kb_pipeline.bm25_weight(
    p_idf double precision, p_tf integer, p_length integer, p_k1 double precision, p_b double precision,
    p_avgdl double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle.sql)
AS $$
    SELECT p_idf * p_tf * (p_k1 + 1) / (p_tf + p_k1 * (1 - p_b + p_b * p_length / p_avgdl))
$$;
COMMENT ON FUNCTION kb_pipeline.bm25_weight(double precision, integer, integer, double precision, double precision, double precision) IS
'A posting''s BM25 weight: idf x tf saturation (k1) with length normalisation (b, average length avgdl). Inlined.';

CREATE OR REPLACE FUNCTION kb_pipeline.lexical_corpus(p_terms text[], p_namespaces text[])
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
COMMENT ON FUNCTION kb_pipeline.lexical_corpus(text[], text[]) IS
'The BM25 corpus statistics of the terms: chunk_count and total_length (summed over the namespaces of p_namespaces, the call''s scope; NULL: all the caller may see) and each term''s df, as jsonb; sums, so that shards'' statistics add up to one node''s (kb_pipeline.lexical_candidates ranks with it, or with a coordinator''s sum).';

CREATE OR REPLACE FUNCTION kb_pipeline.glossary_match_terms(p_glossary jsonb)
RETURNS TABLE (n bigint, term text, own boolean, translated boolean)
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle.sql)
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
COMMENT ON FUNCTION kb_pipeline.glossary_match_terms(jsonb) IS
'The terms of each match of an expansion (kb_pipeline.merged_expansions of the glossary''s and the dictionary''s): its own terms (own) and the terms it adds, numbered by match; translated for a dictionary''s match. Pure. Inlined.';

CREATE OR REPLACE FUNCTION kb_pipeline.lexical_term_weights(
    p_terms text[], p_glossary jsonb, p_corpus jsonb, p_per_term integer
)
RETURNS TABLE (
    term text, pos bigint, df double precision, idf double precision, raw_idf double precision, read_limit integer,
    truncated boolean, counted boolean
)
LANGUAGE sql
STABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the lexical leg (see 030_lifecycle.sql)
AS $$
    -- Robertson idf from the corpus statistics (kb_pipeline.lexical_corpus, or a
    -- coordinator's sum of it over the shards); a term a glossary match adds
    -- (p_glossary: kb.glossary_expansion_of_terms(p_terms, ...).explain; its
    -- terms come after the query's own) weighs glossary_weight x its idf.
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
    match_terms AS MATERIALIZED (SELECT * FROM kb_pipeline.glossary_match_terms(p_glossary)),
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
                        -- a scalar subquery: read once, not once per added term
                        THEN (SELECT (kb.setting('glossary_weight') #>> '{}')::float8) * coalesce(sc.factor, 1) ELSE 1 END
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
COMMENT ON FUNCTION kb_pipeline.lexical_term_weights(text[], jsonb, jsonb, integer) IS
'The BM25 weight of each query term (and of the terms a glossary expansion adds): df and Robertson idf from the corpus statistics (idf weighted as an added term, raw_idf as is), how many of its highest-impact postings the leg reads (p_per_term, NULL: all) and whether that truncates it, and whether a chunk''s coverage counts it (the query''s own terms but CJK bigrams straddling two of its words). Inlined.';

-- Candidates from the postings of each term (at most its read_limit best, by
-- impact, in the namespaces of the scope), a shortlist of the best p_shortlist by
-- their partial score (NULL: all), and for those the exact score: the truncated
-- terms' weights looked up per chunk. With a glossary, a concept counts once per
-- chunk (below). all_read: no posting was left unread (no term truncated, nothing
-- cut from the shortlist), so every score of every chunk with a posting is here.
CREATE OR REPLACE FUNCTION kb_pipeline.lexical_scores(
    p_terms text[], p_glossary jsonb, p_corpus jsonb, p_namespaces text[], p_per_term integer, p_shortlist integer
)
RETURNS TABLE (
    chunk_id bigint, document_id bigint, score double precision, coverage double precision,
    weighted_coverage double precision, all_read boolean
)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    own_count integer := cardinality(p_terms);
    credited boolean := jsonb_array_length(coalesce(p_glossary -> 'added_terms', '[]'::jsonb)) > 0;
    k1 double precision := (kb.setting('bm25_k1') #>> '{}')::float8;
    b double precision := (kb.setting('bm25_b') #>> '{}')::float8;
    avgdl double precision := greatest(coalesce(
        (p_corpus ->> 'total_length')::numeric / nullif((p_corpus ->> 'chunk_count')::numeric, 0), 1), 1)::float8;
BEGIN
    RETURN QUERY
    WITH
    idf AS MATERIALIZED (SELECT * FROM kb_pipeline.lexical_term_weights(p_terms, p_glossary, p_corpus, p_per_term)),
    match_terms AS MATERIALIZED (SELECT * FROM kb_pipeline.glossary_match_terms(p_glossary)),
    own AS (SELECT i.term, i.idf FROM idf AS i WHERE i.counted),
    total AS (SELECT nullif(sum(o.idf), 0) AS idf_mass FROM own AS o),
    candidates AS MATERIALIZED (
        SELECT
            p.chunk_id,
            p.document_id,
            sum(p.weight) AS partial_score,
            coalesce(sum(p.weight) FILTER (WHERE NOT i.truncated), 0) AS exact_part,
            coalesce(sum(i.idf) FILTER (WHERE NOT i.truncated AND i.pos <= own_count), 0) AS exact_idf,
            -- with a glossary: which terms, and their weights (same order)
            array_agg(i.term) FILTER (WHERE NOT i.truncated AND credited) AS exact_terms,
            array_agg(p.weight) FILTER (WHERE NOT i.truncated AND credited) AS exact_weights
        FROM idf AS i
        CROSS JOIN LATERAL (
            SELECT lp.chunk_id, lp.document_id, kb_pipeline.bm25_weight(i.idf, lp.tf, lp.chunk_length, k1, b, avgdl) AS weight
            FROM kb.lexical_postings AS lp
            WHERE lp.term = i.term AND (p_namespaces IS NULL OR lp.namespace = ANY(p_namespaces))
            ORDER BY lp.impact DESC
            LIMIT i.read_limit  -- NULL: all
        ) AS p
        GROUP BY p.chunk_id, p.document_id
    ),
    shortlisted AS MATERIALIZED (
        SELECT c.* FROM candidates AS c
        ORDER BY c.partial_score DESC, c.chunk_id
        LIMIT p_shortlist
    ),
    completed AS (
        -- the shortlisted chunks' exact part, plus the truncated terms' weights
        -- by primary-key probes (LIMIT 1 keeps each a (term, chunk_id) lookup)
        SELECT s.chunk_id, s.document_id, s.exact_part AS weight, s.exact_idf AS idf,
            s.exact_terms AS terms, s.exact_weights AS weights
        FROM shortlisted AS s
        UNION ALL
        SELECT s.chunk_id, s.document_id, w.weight, CASE WHEN i.pos <= own_count THEN w.idf ELSE 0 END,
            CASE WHEN credited THEN ARRAY[i.term] END, CASE WHEN credited THEN ARRAY[w.weight] END
        FROM shortlisted AS s
        CROSS JOIN idf AS i
        CROSS JOIN LATERAL (
            SELECT i.idf, kb_pipeline.bm25_weight(i.idf, x.tf, x.chunk_length, k1, b, avgdl) AS weight
            FROM kb.lexical_postings AS x
            WHERE x.term = i.term AND x.chunk_id = s.chunk_id
            LIMIT 1
        ) AS w
        WHERE i.truncated
    ),
    -- With an expansion, a concept counts once per chunk, in whichever words
    -- the chunk has it: the terms a match adds count only in chunks that lack
    -- some of its own terms, and a chunk that contains an added term covers
    -- the own terms of its match (a passage in the other language can answer
    -- as fully as one in the query's; through a dictionary's translations,
    -- by their share). Rows only when credited.
    chunk_terms AS MATERIALIZED (
        SELECT c.chunk_id, u.term, u.weight
        FROM completed AS c
        CROSS JOIN LATERAL unnest(c.terms, c.weights) AS u (term, weight)
    ),
    complete_matches AS (
        -- the matches whose own terms the chunk all contains
        SELECT ct.chunk_id, mt.n
        FROM chunk_terms AS ct
        INNER JOIN match_terms AS mt ON mt.own AND ct.term = mt.term
        GROUP BY ct.chunk_id, mt.n
        HAVING count(DISTINCT mt.term) = (SELECT count(*) FROM match_terms AS x WHERE x.n = mt.n AND x.own)
    ),
    redundant AS (
        SELECT r.chunk_id, sum(r.weight) AS weight
        FROM (
            SELECT DISTINCT ct.chunk_id, ct.term, ct.weight
            FROM chunk_terms AS ct
            INNER JOIN match_terms AS ma ON NOT ma.own AND ct.term = ma.term
            INNER JOIN complete_matches AS cm ON ct.chunk_id = cm.chunk_id AND ma.n = cm.n
        ) AS r
        GROUP BY r.chunk_id
    ),
    -- per dictionary match: the weight of its translations that some chunk
    -- holds (a chunk holding one of four equally weighted ones has a quarter
    -- of the match), and the idf of its own words
    translation_mass AS (
        SELECT mt.n, sum(i.idf) FILTER (WHERE NOT mt.own AND i.df > 0) AS mass,
            sum(i.raw_idf) FILTER (WHERE mt.own) AS word_mass
        FROM match_terms AS mt
        INNER JOIN idf AS i ON mt.term = i.term
        WHERE mt.translated
        GROUP BY mt.n
    ),
    credits AS (
        -- an own term in the chunk, or one whose glossary equivalent it holds: whole
        SELECT ct.chunk_id, coalesce(mo.term, ct.term) AS term, 1::float8 AS worth, 1::float8 AS credit
        FROM chunk_terms AS ct
        LEFT JOIN match_terms AS ma ON NOT ma.own AND NOT ma.translated AND ct.term = ma.term
        LEFT JOIN match_terms AS mo ON mo.own AND ma.n = mo.n
        UNION ALL
        -- one whose dictionary translations it holds: worth at most what they
        -- tell apart in this corpus (their idf against the word's: a
        -- translation every document holds is no evidence of the word), and
        -- weighted by their share of the match
        SELECT x.chunk_id, mo.term, w.worth, w.worth * least(1, x.present / tm.mass)
        FROM (
            SELECT ct.chunk_id, ma.n, sum(i.idf) AS present, sum(i.raw_idf) AS held_idf
            FROM chunk_terms AS ct
            INNER JOIN match_terms AS ma ON NOT ma.own AND ma.translated AND ct.term = ma.term
            INNER JOIN idf AS i ON ct.term = i.term
            GROUP BY ct.chunk_id, ma.n
        ) AS x
        INNER JOIN translation_mass AS tm ON x.n = tm.n
        CROSS JOIN LATERAL (SELECT least(1, x.held_idf / nullif(tm.word_mass, 0)) AS worth) AS w
        INNER JOIN match_terms AS mo ON mo.own AND x.n = mo.n
    ),
    covered AS (
        SELECT c.chunk_id, sum(o.idf * c.worth) AS idf, sum(o.idf * c.credit) AS weighted_idf
        FROM (SELECT cr.chunk_id, cr.term, max(cr.worth) AS worth, max(cr.credit) AS credit FROM credits AS cr
            GROUP BY cr.chunk_id, cr.term) AS c
        INNER JOIN own AS o ON c.term = o.term
        GROUP BY c.chunk_id
    )
    SELECT s.chunk_id, s.document_id, s.score - coalesce(rd.weight, 0),
        coalesce(CASE WHEN credited THEN cv.idf ELSE s.idf END / (SELECT t.idf_mass FROM total AS t), 0),
        coalesce(CASE WHEN credited THEN cv.weighted_idf ELSE s.idf END / (SELECT t.idf_mass FROM total AS t), 0),
        NOT (EXISTS (SELECT 1 FROM idf AS i WHERE i.truncated)
            OR (SELECT count(*) FROM candidates) > (SELECT count(*) FROM shortlisted))
    FROM (
        SELECT c.chunk_id, c.document_id, sum(c.weight) AS score, sum(c.idf) AS idf
        FROM completed AS c
        GROUP BY c.chunk_id, c.document_id
    ) AS s
    LEFT JOIN redundant AS rd ON s.chunk_id = rd.chunk_id
    LEFT JOIN covered AS cv ON s.chunk_id = cv.chunk_id;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.lexical_scores(text[], jsonb, jsonb, text[], integer, integer) IS
'The BM25 score and idf coverage (an expansion''s match credited whole, a dictionary''s translations at most their own idf against the word''s; and weighted: translations also by their share of the match) of every candidate chunk of the terms in the namespaces given (NULL: all), visible or not: the postings each term''s weight (kb_pipeline.lexical_term_weights) lets the leg read, the exact score of a shortlist of p_shortlist (NULL: every candidate), a glossary concept counted once per chunk; all_read says that no posting was left unread.';

CREATE OR REPLACE FUNCTION kb_pipeline.lexical_candidates(
    p_terms text[], p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer,
    p_glossary jsonb DEFAULT NULL, p_corpus jsonb DEFAULT NULL
)
RETURNS TABLE (chunk_id bigint, score double precision, coverage double precision, weighted_coverage double precision)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
-- JIT compilation of its statements costs seconds and saves nothing at these sizes; kb_retrieve
-- turns it off, and so does the leg for anyone who calls it directly
SET jit = 'off'  -- noqa: PRS
AS $$
#variable_conflict use_column
DECLARE
    restricted boolean := kb.filters_restrict(p_filters);
    per_term integer := CASE WHEN NOT restricted
        THEN (kb.setting('bm25_postings_per_term') #>> '{}')::integer END;  -- NULL: read all
    shortlist integer := CASE WHEN NOT restricted THEN greatest(2 * p_limit, 200) END;  -- NULL: all
    -- p_corpus: the statistics of a whole sharded corpus (kb_pipeline.lexical_corpus summed
    -- over the shards), else this database's own
    corpus jsonb := coalesce(p_corpus, kb_pipeline.lexical_corpus(
        p_terms || ARRAY(SELECT jsonb_array_elements_text(coalesce(p_glossary -> 'added_terms', '[]'::jsonb))),
        p_namespaces));
    ids bigint[];
    scores double precision[];
    coverages double precision[];
    weighted_coverages double precision[];
    crowded boolean;
BEGIN
    -- BM25 (kb_pipeline.lexical_scores: Robertson idf, k1/b from settings, N, average
    -- length and df from kb_pipeline.lexical_corpus or a coordinator's sum of it over
    -- the shards; coverage = share of the query's idf mass that the chunk
    -- contains). Without filters only the best postings of a common term are
    -- read and only a shortlist gets its exact score; with filters every
    -- posting is read and every score is exact. Visibility is judged last,
    -- once per document, until p_limit visible chunks are found. Hidden
    -- candidates take places in the shortlist and among a truncated term's
    -- best postings (many versions of one text score alike, and ties go to
    -- the older chunk): when the first pass finds fewer than p_limit visible
    -- chunks while some candidates were hidden and some postings were left
    -- unread, a second pass reads every posting and scores every candidate,
    -- so a current document is never lost behind hidden ones; its cost is
    -- that of a filtered query, proportional to the terms' postings.
    -- (plpgsql for its plan cache: a SQL function would plan this on every call)
    FOR pass IN 1 .. 2 LOOP
        WITH
        ranked AS MATERIALIZED (
            SELECT * FROM kb_pipeline.lexical_scores(p_terms, p_glossary, corpus, p_namespaces, per_term, shortlist)
        ),
        visible AS MATERIALIZED (
            -- judged lazily, once per document, best exact score first, until
            -- p_limit visible documents are found (their chunks hold the
            -- p_limit best visible chunks): the many chunks of a hidden
            -- version cost one judgement (OFFSET 0 keeps the condition from
            -- being pushed below the sort)
            SELECT r.document_id
            FROM (
                SELECT x.document_id, max(x.score) AS best FROM ranked AS x GROUP BY x.document_id
                ORDER BY 2 DESC, 1
                OFFSET 0
            ) AS r
            CROSS JOIN LATERAL kb.visible_candidate(r.document_id, p_as_of, p_namespaces, p_filters, restricted) AS v
            LIMIT p_limit
        ),
        best AS (
            SELECT r.chunk_id, r.score, r.coverage, r.weighted_coverage
            FROM ranked AS r
            WHERE r.document_id IN (SELECT v.document_id FROM visible AS v)
            ORDER BY r.score DESC, r.chunk_id
            LIMIT p_limit
        )
        SELECT
            (SELECT array_agg(b.chunk_id ORDER BY b.score DESC, b.chunk_id) FROM best AS b),
            (SELECT array_agg(b.score ORDER BY b.score DESC, b.chunk_id) FROM best AS b),
            (SELECT array_agg(b.coverage ORDER BY b.score DESC, b.chunk_id) FROM best AS b),
            (SELECT array_agg(b.weighted_coverage ORDER BY b.score DESC, b.chunk_id) FROM best AS b),
            -- fewer than p_limit visible chunks, and some candidates were hidden
            -- (then every document was judged), while postings were left unread
            (SELECT count(*) FROM best) < p_limit
            AND (SELECT count(DISTINCT r.document_id) FROM ranked AS r) > (SELECT count(*) FROM visible)
            AND NOT (SELECT bool_and(r.all_read) FROM ranked AS r)
        INTO ids, scores, coverages, weighted_coverages, crowded;
        EXIT WHEN NOT crowded;
        per_term := NULL;
        shortlist := NULL;
    END LOOP;
    RETURN QUERY SELECT u.chunk_id, u.score, u.coverage, u.weighted_coverage
        FROM unnest(ids, scores, coverages, weighted_coverages) AS u (chunk_id, score, coverage, weighted_coverage);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.lexical_candidates(text[], timestamptz, text[], jsonb, integer, jsonb, jsonb) IS
'BM25 lexical leg: top chunks for the terms among visible documents, with score and idf coverage (whole, and with translations weighted by their share: kb_pipeline.lexical_scores), a second pass over every posting when hidden versions crowded the first; p_glossary (kb.glossary_expansion_of_terms) adds the equivalents'' terms, a concept counting once per chunk; p_corpus (kb_pipeline.lexical_corpus of a whole sharded corpus) replaces this database''s statistics.';

CREATE OR REPLACE FUNCTION kb_pipeline.trigram_candidates(
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
COMMENT ON FUNCTION kb_pipeline.trigram_candidates(text, timestamptz, text[], jsonb, integer) IS
'pg_trgm leg for short queries: word_similarity over chunk text via the GIN index (pg_trgm.word_similarity_threshold).';

CREATE OR REPLACE FUNCTION kb_pipeline.identifier_candidates(
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
    -- (kb_pipeline.rare_identifier_chunks) singles out the passages about it.
    kept AS (
        SELECT m.ident
        FROM matches AS m
        GROUP BY m.ident
        HAVING m.ident !~ '^[[:alpha:]]+$' OR count(*) <= kb_pipeline.rare_identifier_chunks(p_namespaces)
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
COMMENT ON FUNCTION kb_pipeline.identifier_candidates(text[], timestamptz, text[], jsonb, integer) IS
'Chunks that contain the query''s identifiers verbatim as whole tokens (trigram-indexed ILIKE, escaped input); an identifier of letters only (camelCase) counts only where it is rare (kb_pipeline.rare_identifier_chunks).';

CREATE OR REPLACE FUNCTION kb_pipeline.rare_identifier_chunks(p_namespaces text[])
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
COMMENT ON FUNCTION kb_pipeline.rare_identifier_chunks(text[]) IS
'How many chunks a letters-only identifier (camelCase: PostgreSQL) may occur in and still count as an identifier: 1 % of the chunks of the scope (kb.lexical_stats), at least 3. A name common in the corpus would otherwise boost every passage that mentions it.';

CREATE OR REPLACE FUNCTION kb_pipeline.noise_z(p_vectors bigint)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    -- about the largest of n standard normal scores: what the best of n
    -- passages that have nothing to do with the question reaches by chance,
    -- so that the dense thresholds mean the same in a corpus of 50 passages
    -- (2.8) and of a million (5.3). Called once per dense candidate: no SET
    -- clause, so that the planner inlines it (callers pin search_path)
    SELECT sqrt(2 * ln(greatest(p_vectors, 2)::float8))
$$;
COMMENT ON FUNCTION kb_pipeline.noise_z(bigint) IS
'sqrt(2 ln n): about the best z-score n unrelated passages reach by chance; the dense leg''s evidence thresholds are offsets from it. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb_pipeline.dense_candidates(
    p_query_vector text, p_model text, p_dimensions integer,
    p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer,
    p_moments kb.language_moment[]
)
RETURNS TABLE (
    chunk_id bigint, similarity double precision, score double precision, language text, noise_z double precision
)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'  -- noqa: PRS
SET hnsw.ef_search = '100'
AS $$
DECLARE
    moment kb.language_moment;
BEGIN
    -- The model's partial HNSW index is used because the query repeats its
    -- expression and predicate literally. The visibility condition runs inside
    -- the index scan, row by row in distance order, and iterative scans keep
    -- fetching until p_limit rows pass it. EXECUTE plans with the bound values,
    -- so the CASE over filters_restrict is decided before the scan.
    -- ef_search below the number of rows wanted makes the iterative scan start
    -- a second pass (about doubling the time); 1.5 x p_limit leaves room for
    -- the rows the visibility condition removes
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(
        (kb.setting('hnsw_ef_search') #>> '{}')::integer, p_limit * 3 / 2))::text, true);
    IF cardinality(p_moments) = 0 THEN
        -- no language correction: the raw cosine similarity is the score
        RETURN QUERY EXECUTE format(
            'SELECT h.chunk_id, h.similarity, h.similarity, NULL::text, NULL::float8
             FROM (
                 SELECT e.chunk_id, (1 - (e.embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 AS similarity
                 FROM kb.embeddings AS e
                 INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
                 CROSS JOIN LATERAL kb.visible_candidate(c.document_id, $2, $3, $4, $6) AS v
                 WHERE e.model = %2$L
                     AND ($3::text[] IS NULL OR c.namespace = ANY($3))
                 ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                 LIMIT $5
             ) AS h',
            p_dimensions, p_model
        ) USING p_query_vector, p_as_of, p_namespaces, p_filters, p_limit, kb.filters_restrict(p_filters);
        RETURN;
    END IF;
    -- One scan per language group, each of the model's partial HNSW index of
    -- that group (kb.ensure_hnsw_indexes; the predicate is literal so the
    -- planner matches it), with the vector the group is searched with (the
    -- query, or in a group of another language the query without its
    -- language's mean): the order inside a group is the order of that
    -- similarity, so each scan is the index's own. A hit's score is its
    -- similarity z-scored within its group; the caller merges the groups by
    -- score. A passage of the zh or en group is placed between the two groups'
    -- moments (for the group's vector) by its share of Chinese (a bilingual
    -- passage's vector carries some of both languages), when both groups have
    -- moments of their own.
    FOREACH moment IN ARRAY p_moments LOOP
        RETURN QUERY EXECUTE format(
            'SELECT h.chunk_id, h.similarity,
                 CASE WHEN $7 IS NOT NULL AND $9 IS NOT NULL AND h.han_share IS NOT NULL AND %3$L IN (''zh'', ''en'')
                     THEN (h.similarity - (h.han_share * $7 + (1 - h.han_share) * $9))
                         / (h.han_share * $8 + (1 - h.han_share) * $10)
                     ELSE (h.similarity - $11) / $12 END,
                 %3$L::text, kb_pipeline.noise_z($13)
             FROM (
                 SELECT e.chunk_id, c.han_share,
                     (1 - (e.embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 AS similarity
                 FROM kb.embeddings AS e
                 INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
                 CROSS JOIN LATERAL kb.visible_candidate(c.document_id, $2, $3, $4, $6) AS v
                 WHERE e.model = %2$L AND e.language = %3$L
                     AND ($3::text[] IS NULL OR c.namespace = ANY($3))
                 ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                 LIMIT $5
             ) AS h',
            p_dimensions, p_model, moment.language
        ) USING coalesce(moment.query_vector, p_query_vector), p_as_of, p_namespaces, p_filters, p_limit,
            kb.filters_restrict(p_filters), moment.zh_offset, moment.zh_scale, moment.en_offset, moment.en_scale,
            moment."offset", moment.scale, moment.vectors;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.dense_candidates(text, text, integer, timestamptz, text[], jsonb, integer, kb.language_moment[]) IS
'Dense leg: HNSW cosine search over the named model''s vectors with the visibility condition inside the scan (iterative scan); with language moments, one scan per language group with the group''s query vector, the similarity z-scored within its group as the score, and the group''s noise level (kb_pipeline.noise_z).';
