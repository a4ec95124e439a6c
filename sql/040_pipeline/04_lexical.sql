-- The BM25 leg. Like every leg, it returns its best candidates among the
-- documents a retrieval may see (kb.visible_candidate, judged inside the leg,
-- before ranking): scores over the postings (kb_node.lexical_scores), the
-- candidates with their coverage (kb_node.lexical_candidates).
--
-- The functions a retrieval calls once per call are plpgsql: PL/pgSQL keeps a
-- statement's plan for the session, while a SQL function that is not inlined
-- (a SET clause forbids it) is planned on every call (the ranking step: 2.7 ms
-- as SQL, 0.3 ms as plpgsql, at 10k chunks).

-- Candidates from the postings of each term (at most its read_limit best, by
-- impact, in the namespaces of the scope), a shortlist of the best p_shortlist by
-- their partial score (NULL: all), and for those the exact score: the truncated
-- terms' weights looked up per chunk. With a glossary, a concept counts once per
-- chunk (below). all_read: no posting was left unread (no term truncated, nothing
-- cut from the shortlist), so every score of every chunk with a posting is here.
CREATE OR REPLACE FUNCTION kb_node.lexical_scores(
    p_terms text[], p_glossary jsonb, p_corpus jsonb, p_namespaces text[], p_per_term integer, p_shortlist integer,
    p_k1 double precision, p_b double precision, p_glossary_weight double precision
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
    avgdl double precision := greatest(coalesce(
        (p_corpus ->> 'total_length')::numeric / nullif((p_corpus ->> 'chunk_count')::numeric, 0), 1), 1)::float8;
BEGIN
    RETURN QUERY
    WITH
    idf AS MATERIALIZED (SELECT * FROM kb_node.lexical_term_weights(p_terms, p_glossary, p_corpus, p_per_term, p_glossary_weight)),
    match_terms AS MATERIALIZED (SELECT * FROM kb_node.glossary_match_terms(p_glossary)),
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
            SELECT lp.chunk_id, lp.document_id, kb_node.bm25_weight(i.idf, lp.tf, lp.chunk_length, p_k1, p_b, avgdl) AS weight
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
            SELECT i.idf, kb_node.bm25_weight(i.idf, x.tf, x.chunk_length, p_k1, p_b, avgdl) AS weight
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
COMMENT ON FUNCTION kb_node.lexical_scores(
    text[], jsonb, jsonb, text[], integer, integer, double precision, double precision, double precision
) IS
'The BM25 score and idf coverage (an expansion''s match credited whole, a dictionary''s translations at most their own idf against the word''s; and weighted: translations also by their share of the match) of every candidate chunk of the terms in the namespaces given (NULL: all), visible or not: the postings each term''s weight (kb_node.lexical_term_weights) lets the leg read, the exact score of a shortlist of p_shortlist (NULL: every candidate), a glossary concept counted once per chunk; all_read says that no posting was left unread.';

CREATE OR REPLACE FUNCTION kb_node.lexical_candidates(
    p_terms text[], p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer,
    p_glossary jsonb DEFAULT NULL, p_corpus jsonb DEFAULT NULL, p_settings kb_pipeline.retrieval_settings DEFAULT NULL
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
    -- p_settings: the call's (NULL: read them, for a direct call)
    settings kb_pipeline.retrieval_settings := coalesce(p_settings, kb_pipeline.read_retrieval_settings());
    restricted boolean := kb.filters_restrict(p_filters);
    per_term integer := CASE WHEN NOT restricted THEN settings.bm25_postings_per_term END;  -- NULL: read all
    shortlist integer := CASE WHEN NOT restricted THEN greatest(2 * p_limit, 200) END;  -- NULL: all
    -- p_corpus: the statistics of a whole sharded corpus (kb_node.lexical_corpus summed
    -- over the shards), else this database's own
    corpus jsonb := coalesce(p_corpus, kb_node.lexical_corpus(
        p_terms || ARRAY(SELECT jsonb_array_elements_text(coalesce(p_glossary -> 'added_terms', '[]'::jsonb))),
        p_namespaces));
    ids bigint[];
    scores double precision[];
    coverages double precision[];
    weighted_coverages double precision[];
    crowded boolean;
BEGIN
    -- BM25 (kb_node.lexical_scores: Robertson idf, k1/b from settings, N, average
    -- length and df from kb_node.lexical_corpus or a coordinator's sum of it over
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
            SELECT * FROM kb_node.lexical_scores(p_terms, p_glossary, corpus, p_namespaces, per_term, shortlist,
                settings.bm25_k1, settings.bm25_b, settings.glossary_weight)
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
COMMENT ON FUNCTION kb_node.lexical_candidates(
    text[], timestamptz, text[], jsonb, integer, jsonb, jsonb, kb_pipeline.retrieval_settings
) IS
'BM25 lexical leg: top chunks for the terms among visible documents, with score and idf coverage (whole, and with translations weighted by their share: kb_node.lexical_scores), a second pass over every posting when hidden versions crowded the first; p_glossary (kb.glossary_expansion_of_terms) adds the equivalents'' terms, a concept counting once per chunk; p_corpus (kb_node.lexical_corpus of a whole sharded corpus) replaces this database''s statistics.';
