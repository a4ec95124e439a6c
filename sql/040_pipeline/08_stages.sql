-- The staged fallback: each stage's legs gathered (kb_node.gather_stage),
-- its evidence (kb_pipeline.stage_evidence), the stage a call answers from
-- (kb_pipeline.best_stage) and one database's loop over them
-- (kb_node.gather_here).

CREATE OR REPLACE FUNCTION kb_pipeline.leg_hit_of(
    p_chunk_id bigint,
    p_rank bigint,
    p_score double precision,
    p_coverage double precision DEFAULT NULL,
    p_trigram boolean DEFAULT false,
    p_similarity double precision DEFAULT NULL,
    p_evidence double precision DEFAULT NULL,
    p_other_language boolean DEFAULT NULL,
    p_language text DEFAULT NULL,
    p_weighted_coverage double precision DEFAULT NULL
)
RETURNS kb_pipeline.leg_hit
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
-- no SET search_path, so that it is inlined into the legs' queries (see 030_lifecycle/01_visibility.sql)
AS $$
    SELECT ROW(p_chunk_id, p_rank::integer, p_score, p_coverage, p_trigram, p_similarity, p_evidence,
        p_other_language, p_language, p_weighted_coverage)::kb_pipeline.leg_hit
$$;
COMMENT ON FUNCTION kb_pipeline.leg_hit_of(
    bigint, bigint, double precision, double precision, boolean, double precision, double precision, boolean, text,
    double precision
) IS
'The one constructor of kb_pipeline.leg_hit: callers name the fields they set (a new field is the type and this). Pure. Inlined.';

CREATE OR REPLACE FUNCTION kb_pipeline.calibrate(p_value double precision, p_low double precision, p_high double precision)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    -- NaN (PostgreSQL sorts it above every number) and infinities are no
    -- evidence. Called once per candidate of each leg: no SET clause, so that
    -- the planner inlines it into its callers (whose search_path is pinned)
    SELECT CASE WHEN p_value IS NULL OR p_value IN ('NaN', 'Infinity', '-Infinity') THEN 0
        ELSE least(greatest((p_value - p_low) / nullif(p_high - p_low, 0), 0), 1) END
$$;
COMMENT ON FUNCTION kb_pipeline.calibrate(double precision, double precision, double precision) IS
'Maps a leg''s top score to evidence in [0, 1]: 0 at or below the "no evidence" level, 1 at or above the "strong" level. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb_pipeline.uncorrected_evidence_floor()
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 0.01::double precision $$;
COMMENT ON FUNCTION kb_pipeline.uncorrected_evidence_floor() IS
'The stage evidence a language-corrected dense leg keeps when no hit stands above its group''s noise level but the raw cosine of one passes the provider''s min_similarity (the uncorrected rule): such a stage is preferred over one where nothing passes. The call''s decision is its probability (kb_pipeline.judged), which reads the raw cosine as a signal of its own.';

CREATE OR REPLACE FUNCTION kb_pipeline.stage_evidence(
    p_stage kb_pipeline.retrieval_stage,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_identifier_found boolean
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb_pipeline.retrieval_stage := p_stage;
BEGIN
    result.lexical_top_coverage := (result.lexical[1]).coverage;
    result.dense_top_similarity := (result.dense[1]).similarity;
    -- each leg's evidence from its best hit: lexical from the share of the
    -- query's idf mass it holds; dense, when corrected, from how far above
    -- the passages of its language a hit stands (z units), else from its
    -- cosine similarity
    result.lexical_evidence := CASE WHEN p_plan.mode = 'dense' THEN 0
        ELSE kb_pipeline.calibrate(result.lexical_top_coverage, p_settings.min_lexical_coverage,
            p_settings.strong_lexical_coverage) END;
    IF p_plan.mode = 'lexical' THEN
        result.dense_evidence := 0;
    ELSIF cardinality(result.language_moments) > 0 THEN
        -- In hybrid mode the lexical leg could have matched a passage in the
        -- question's own language (either, for a mixed question): that it
        -- found little there is evidence against such a passage, so a dense
        -- hit in that language must stand higher (same_language_z_margin). In
        -- another language the lexical leg cannot tell, and min_dense_z holds.
        -- The best hit of each language is judged; the most convincing decides.
        -- Thresholds are offsets from the group's noise level (kb_pipeline.noise_z of
        -- its number of vectors), so they mean the same at any corpus size.
        SELECT h.evidence, h.z, h.language, h.min_z
        INTO result.dense_evidence, result.dense_evidence_z, result.dense_evidence_language, result.dense_min_z
        FROM (
            SELECT b.language, b.score AS z, t.min_z,
                kb_pipeline.calibrate(b.score, t.min_z, t.min_z - p_settings.min_dense_z + p_settings.strong_dense_z)
                    AS evidence
            FROM (
                SELECT DISTINCT ON (u.language) u.score, u.language
                FROM unnest(result.dense) AS u
                ORDER BY u.language, u.score DESC
            ) AS b
            CROSS JOIN LATERAL (
                SELECT m.vectors FROM unnest(result.language_moments) AS m WHERE m.language = b.language
            ) AS g
            CROSS JOIN LATERAL (SELECT kb_pipeline.noise_z(g.vectors) + p_settings.min_dense_z + CASE
                WHEN p_plan.mode = 'hybrid' AND (b.language = p_plan.analysis ->> 'language'
                    OR p_plan.analysis ->> 'language' = 'mixed')
                    THEN p_settings.same_language_z_margin ELSE 0 END AS min_z) AS t
        ) AS h
        ORDER BY h.evidence DESC, h.z DESC
        LIMIT 1;
        result.dense_evidence := coalesce(result.dense_evidence, 0);
        -- A stage where the uncorrected rule sees something (a raw cosine past
        -- the provider's min_similarity) keeps the least evidence
        -- (kb_pipeline.uncorrected_evidence_floor), so it is preferred over a
        -- stage where nothing passes. (A hit of another language's group carries
        -- its cosine with the centred query, which stays far below
        -- min_similarity: in effect the question's own language decides.)
        IF result.dense_evidence = 0 AND (SELECT max(h.similarity) FROM unnest(result.dense) AS h)
            >= p_plan.min_similarity THEN
            result.dense_evidence := kb_pipeline.uncorrected_evidence_floor();
        END IF;
    ELSE
        result.dense_evidence := kb_pipeline.calibrate(result.dense_top_similarity, p_plan.min_similarity,
            p_plan.strong_similarity);
    END IF;
    -- the better leg decides; an identifier found verbatim is strong evidence
    result.evidence := CASE WHEN p_identifier_found THEN 1
        ELSE greatest(result.lexical_evidence, result.dense_evidence) END;
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.stage_evidence(
    kb_pipeline.retrieval_stage, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, boolean
) IS
'The evidence of a stage''s legs: lexical from the top hit''s idf coverage, dense from the z-score of the best hit of each language (the hits carry it) against its group''s noise level (with language moments; kb_pipeline.uncorrected_evidence_floor when none stands above it but a raw cosine passes min_similarity) or from the top cosine similarity; the better leg decides, an identifier found verbatim is 1 (kb_pipeline.calibrate against the thresholds). Pure: a coordinator judges the legs it merged from several shards by the rule one node uses.';

CREATE OR REPLACE FUNCTION kb_node.gather_stage(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_stage_no integer,
    p_lexical kb_pipeline.lexical_input,
    p_dense kb_pipeline.dense_input,
    p_lexical_corpus jsonb
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
-- STABLE: its statements read the snapshot of the kb_retrieve call (see kb_node.retrieve_core)
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    query text := p_plan.stages[p_stage_no];
    stage kb_pipeline.retrieval_stage;
    weighs boolean;
    t timestamptz;
BEGIN
    -- p_lexical, p_dense: the stage's inputs (kb_pipeline.lexical_inputs,
    -- kb_pipeline.dense_inputs, or a coordinator's); p_lexical_corpus: the
    -- BM25 statistics of a sharded corpus (NULL: this database's)
    stage := kb_pipeline.new_stage(p_plan, p_stage_no, p_lexical, p_dense);
    IF stage.skipped THEN
        RETURN stage;
    END IF;
    -- Fusion weighs each hit by its own evidence only when both legs' evidence
    -- is calibrated on this corpus (the dense leg's z-scores) and the scope
    -- holds both languages (kb_pipeline.weighs_hits_by_evidence); otherwise the
    -- hits carry none and fusion keeps the plain weighted scores. The stage's
    -- evidence is judged from the scores (kb_pipeline.stage_evidence), not from
    -- the hits' evidence.
    weighs := kb_pipeline.weighs_hits_by_evidence(stage.language_moments);
    IF p_plan.mode IN ('lexical', 'hybrid') THEN
        t := clock_timestamp();
        stage.lexical := ARRAY(
            SELECT kb_pipeline.leg_hit_of(p_chunk_id => l.chunk_id,
                p_rank => row_number() OVER (ORDER BY l.score DESC, l.chunk_id), p_score => l.score,
                p_coverage => l.coverage, p_weighted_coverage => l.weighted_coverage,
                p_evidence => CASE WHEN weighs THEN kb_pipeline.calibrate(l.coverage,
                    p_settings.min_lexical_coverage, p_settings.strong_lexical_coverage) END)
            FROM kb_node.lexical_candidates(stage.terms, p_request.as_of, p_request.scope, p_request.filters,
                p_plan.candidates, stage.glossary, p_lexical_corpus, p_settings) AS l
            ORDER BY l.score DESC, l.chunk_id
        );
        -- fuzzy fallback only: a short query that BM25 could not match at all
        IF (p_plan.analysis ->> 'is_short')::boolean AND cardinality(stage.lexical) = 0 THEN
            stage.lexical := ARRAY(
                SELECT kb_pipeline.leg_hit_of(p_chunk_id => g.chunk_id,
                    p_rank => row_number() OVER (ORDER BY g.score DESC, g.chunk_id), p_score => g.score,
                    p_coverage => 0, p_trigram => true, p_weighted_coverage => 0)
                FROM kb_node.trigram_candidates(query, p_request.as_of, p_request.scope, p_request.filters,
                    p_plan.candidates) AS g
                ORDER BY g.score DESC, g.chunk_id
            );
        END IF;
        stage.lexical_ms := kb_pipeline.ms_since(t);
    END IF;
    IF p_dense.query_vector IS NOT NULL THEN
        t := clock_timestamp();
        stage.dense := ARRAY(
            SELECT kb_pipeline.leg_hit_of(p_chunk_id => d.chunk_id,
                p_rank => row_number() OVER (ORDER BY d.score DESC, d.chunk_id), p_score => d.score,
                p_similarity => d.similarity, p_language => d.language,
                -- a hit's own evidence only when corrected (noise_z: the z-scores of its
                -- group)
                p_evidence => CASE WHEN weighs AND d.noise_z IS NOT NULL
                    THEN kb_pipeline.calibrate(d.score, d.noise_z + p_settings.min_dense_z,
                        d.noise_z + p_settings.strong_dense_z) END,
                -- in hybrid mode: the lexical leg read the passages of the question's
                -- language (both, for a mixed question); one in the other language it
                -- could read only in part
                p_other_language => p_plan.mode = 'hybrid' AND d.language IN ('zh', 'en')
                    AND p_plan.analysis ->> 'language' IN ('zh', 'en')
                    AND d.language <> p_plan.analysis ->> 'language')
            FROM kb_node.dense_candidates(p_dense.query_vector, (p_plan.model).name,
                (p_plan.model).dimensions, p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates,
                stage.language_moments, p_settings.hnsw_ef_search) AS d
            ORDER BY d.score DESC, d.chunk_id
        );
        stage.dense_ms := kb_pipeline.ms_since(t);
    END IF;
    RETURN stage;
END;
$$;
COMMENT ON FUNCTION kb_node.gather_stage(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, integer,
    kb_pipeline.lexical_input, kb_pipeline.dense_input, jsonb
) IS
'The legs of one stage of the staged fallback over this database: BM25 (trigram when a short query matched nothing) and HNSW, with the inputs given (kb_pipeline.lexical_inputs, kb_pipeline.dense_inputs or a coordinator''s) and p_lexical_corpus (a sharded corpus''s BM25 statistics; NULL: this database''s). Its evidence is kb_pipeline.stage_evidence''s.';

CREATE OR REPLACE FUNCTION kb_pipeline.best_stage(p_stages kb_pipeline.retrieval_stage[])
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- the first stage at full evidence (later stages are only tried until
    -- then), else the one with the most, the earlier on a tie; NULL when
    -- every stage was skipped
    SELECT s.ordinality::integer
    FROM unnest(p_stages) WITH ORDINALITY AS s
    WHERE NOT s.skipped
    ORDER BY s.evidence >= 1 DESC, s.evidence DESC, s.ordinality
    LIMIT 1
$$;
COMMENT ON FUNCTION kb_pipeline.best_stage(kb_pipeline.retrieval_stage[]) IS
'The judge of a call: which of its stages answers (its place in p_stages): the first at full evidence, else the one with the most evidence (the earlier on a tie); skipped stages never. Pure.';

CREATE OR REPLACE FUNCTION kb_node.gather_here(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_identifier_found boolean
)
RETURNS kb_pipeline.retrieval_stage[]
LANGUAGE plpgsql
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    lexical kb_pipeline.lexical_input[] := kb_pipeline.lexical_inputs(p_plan, p_request.scope, p_settings);
    dense kb_pipeline.dense_input;
    dense_hits kb_pipeline.leg_hit[];
    stage kb_pipeline.retrieval_stage;
    stages kb_pipeline.retrieval_stage[] := '{}';
BEGIN
    -- stage by stage until one is at full evidence (kb_pipeline.best_stage
    -- would choose it). A query is embedded when its stage is reached and only
    -- when its embedding key differs from the last one embedded: a stage that
    -- differs from it by punctuation and white space reuses its vector and its
    -- dense hits (docs/RETRIEVAL.md, "Stages and the query vector").
    FOR stage_no IN 1 .. coalesce(cardinality(p_plan.stages), 0) LOOP
        IF lexical[stage_no].skipped THEN
            stage := kb_node.gather_stage(p_request, p_plan, p_settings, stage_no, lexical[stage_no], NULL, NULL);
        ELSIF dense IS NULL OR dense.embedding_key IS DISTINCT FROM kb_pipeline.embedding_key(p_plan.stages[stage_no])
        THEN
            dense := kb_pipeline.dense_inputs(p_request, p_plan, p_settings, stage_no);
            stage := kb_node.gather_stage(p_request, p_plan, p_settings, stage_no, lexical[stage_no], dense, NULL);
            dense_hits := stage.dense;
        ELSE
            stage := kb_node.gather_stage(p_request, p_plan, p_settings, stage_no, lexical[stage_no],
                kb_pipeline.reused(dense), NULL);
            stage.dense := dense_hits;
        END IF;
        IF NOT stage.skipped THEN
            stage := kb_pipeline.stage_evidence(stage, p_plan, p_settings, p_identifier_found);
        END IF;
        stages := stages || stage;
        EXIT WHEN stage.evidence >= 1;
    END LOOP;
    RETURN stages;
END;
$$;
COMMENT ON FUNCTION kb_node.gather_here(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, boolean
) IS
'The stages of a call over this database (kb_node.gather_stage with this database''s inputs and statistics, judged by kb_pipeline.stage_evidence), until one is at full evidence.';
