-- kb_retrieve and kb_retrieve_explain: the orchestration of the named parts.
-- request (041) -> scope and plan (041, 090) -> stages of the legs (042) ->
-- fusion and passages (043) -> snippets -> explain object and log.
--
-- The reader's door: the two gateways run with the owner's rights (SECURITY
-- DEFINER). They never take the caller's namespaces from an argument:
-- kb.read_scope works them out from the session's role (kb.session_role) and
-- every leg applies them inside its index scans, where row-level security
-- could not use the indexes (pg_trgm's operators are not leakproof) and
-- re-checked its policy per row. The internals are not executable by
-- readers (090_grants.sql); the tables' policies stay as the second wall for
-- every other way in (docs/RELIABILITY.md, "One door").

CREATE OR REPLACE FUNCTION kb.ms_since(p_start timestamptz)
RETURNS numeric
LANGUAGE sql
VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT round((extract(epoch FROM clock_timestamp() - p_start) * 1000)::numeric, 2) $$;
COMMENT ON FUNCTION kb.ms_since(timestamptz) IS 'Milliseconds elapsed since a clock_timestamp(), for explain timings.';

CREATE OR REPLACE FUNCTION kb.identifier_chunks(p_request kb.retrieval_request, p_plan kb.retrieval_plan)
RETURNS bigint[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- the same for every stage, so found once per call; the dense mode does not look
BEGIN
    RETURN (
    SELECT coalesce(array_agg(i.chunk_id), '{}')
    FROM kb.identifier_candidates(
        p_plan.identifiers, p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates
    ) AS i
    WHERE cardinality(p_plan.identifiers) > 0 AND p_plan.mode <> 'dense'
    );
END;
$$;
COMMENT ON FUNCTION kb.identifier_chunks(kb.retrieval_request, kb.retrieval_plan) IS
'Chunks that hold an identifier of the query verbatim (none in dense mode): strong evidence, and boosted.';

CREATE OR REPLACE FUNCTION kb.stage_evidence(
    p_stage kb.retrieval_stage,
    p_plan kb.retrieval_plan,
    p_settings kb.retrieval_settings,
    p_identifier_found boolean,
    p_dense_languages text[]
)
RETURNS kb.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- p_dense_languages: the language of each dense hit's chunk, in the order
    -- of p_stage.dense (pure, so that a coordinator judges the legs it merged
    -- from several shards by the rule a single node uses)
    result kb.retrieval_stage := p_stage;
BEGIN
    result.lexical_top_coverage := (result.lexical[1]).coverage;
    result.dense_top_similarity := (result.dense[1]).similarity;
    -- each leg's evidence from its best hit: lexical from the share of the
    -- query's idf mass it holds; dense, when corrected, from how far above
    -- the passages of its language a hit stands (z units), else from its
    -- cosine similarity
    result.lexical_evidence := CASE WHEN p_plan.mode = 'dense' THEN 0
        ELSE kb.calibrate(result.lexical_top_coverage, p_settings.min_lexical_coverage,
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
        -- Thresholds are offsets from the group's noise level (kb.noise_z of
        -- its number of vectors), so they mean the same at any corpus size.
        SELECT h.evidence, h.z, h.language, h.min_z
        INTO result.dense_evidence, result.dense_evidence_z, result.dense_evidence_language, result.dense_min_z
        FROM (
            SELECT b.language, b.score AS z, t.min_z,
                kb.calibrate(b.score, t.min_z, t.min_z - p_settings.min_dense_z + p_settings.strong_dense_z)
                    AS evidence
            FROM (
                -- unnest, not a subscript per row: a subscript walks the array
                -- from its start (its elements are of variable length)
                SELECT DISTINCT ON (l.language) u.score, l.language
                FROM unnest(result.dense) WITH ORDINALITY AS u
                INNER JOIN unnest(p_dense_languages) WITH ORDINALITY AS l (language, n) ON l.n = u.ordinality
                ORDER BY l.language, u.score DESC
            ) AS b
            CROSS JOIN LATERAL (
                SELECT m.vectors FROM unnest(result.language_moments) AS m WHERE m.language = b.language
            ) AS g
            CROSS JOIN LATERAL (SELECT kb.noise_z(g.vectors) + p_settings.min_dense_z + CASE
                WHEN p_plan.mode = 'hybrid' AND (b.language = p_plan.analysis ->> 'language'
                    OR p_plan.analysis ->> 'language' = 'mixed')
                    THEN p_settings.same_language_z_margin ELSE 0 END AS min_z) AS t
        ) AS h
        ORDER BY h.evidence DESC, h.z DESC
        LIMIT 1;
        result.dense_evidence := coalesce(result.dense_evidence, 0);
    ELSE
        result.dense_evidence := kb.calibrate(result.dense_top_similarity, p_plan.min_similarity,
            p_plan.strong_similarity);
    END IF;
    -- the better leg decides; an identifier found verbatim is strong evidence
    result.evidence := CASE WHEN p_identifier_found THEN 1
        ELSE greatest(result.lexical_evidence, result.dense_evidence) END;
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb.stage_evidence(
    kb.retrieval_stage, kb.retrieval_plan, kb.retrieval_settings, boolean, text[]
) IS
'The evidence of a stage''s legs: lexical from the top hit''s idf coverage, dense from the z-score of the best hit of each language against its group''s noise level (with language moments) or from the top cosine similarity; the better leg decides, an identifier found verbatim is 1 (kb.calibrate against the thresholds). Pure.';

CREATE OR REPLACE FUNCTION kb.run_stage(
    p_request kb.retrieval_request,
    p_plan kb.retrieval_plan,
    p_settings kb.retrieval_settings,
    p_stage_no integer,
    p_query text,
    p_previous_terms text[],
    p_identifier_found boolean
)
RETURNS kb.retrieval_stage
LANGUAGE plpgsql
-- STABLE: its statements read the snapshot of the kb_retrieve call (see kb.retrieve_core)
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    stage kb.retrieval_stage;
    t timestamptz;
    query_vector text;
    -- on a shard: what the coordinator computed once for this stage (request corpus)
    given jsonb := p_request.corpus -> 'stages' -> (p_stage_no - 1);
BEGIN
    stage := ROW(p_stage_no, p_query, NULL, false, '{}', '{}', NULL, NULL, 0, '{}', 0, 0, 0,
        NULL, NULL, NULL, '{}', 0, 0, NULL);
    IF p_plan.mode IN ('lexical', 'hybrid') THEN
        t := clock_timestamp();
        stage.terms := kb.query_terms(p_query);
        -- a later stage with the same BM25 terms (the question form only dropped
        -- stop words) would find the same evidence again
        IF p_stage_no > 1 AND stage.terms = p_previous_terms THEN
            stage.skipped := true;
            stage.lexical_ms := kb.ms_since(t);
            RETURN stage;
        END IF;
        -- the glossary equivalents of the terms the query contains (docs/GLOSSARY.md;
        -- none while kb.glossary is empty): the lexical leg searches their terms too
        -- (a shard is given the coordinator's expansion, made over the glossaries of all shards)
        IF given IS NOT NULL THEN
            stage.glossary := nullif(given -> 'glossary', 'null'::jsonb);
        ELSIF (kb.setting('glossary_expansion') #>> '{}')::boolean THEN
            stage.glossary := (kb.glossary_expansion_of_terms(stage.terms, p_request.scope,
                (kb.setting('glossary_max_terms') #>> '{}')::integer)).explain;
        END IF;
        stage.lexical := ARRAY(
            SELECT ROW(l.chunk_id, row_number() OVER (ORDER BY l.score DESC, l.chunk_id), l.score, l.coverage,
                false, NULL, kb.calibrate(l.coverage, p_settings.min_lexical_coverage,
                    p_settings.strong_lexical_coverage), NULL)::kb.leg_hit
            FROM kb.lexical_candidates(stage.terms, p_request.as_of, p_request.scope, p_request.filters,
                p_plan.candidates, stage.glossary, p_request.corpus -> 'lexical') AS l
            ORDER BY l.score DESC, l.chunk_id
        );
        -- fuzzy fallback only: a short query that BM25 could not match at all
        IF (p_plan.analysis ->> 'is_short')::boolean AND cardinality(stage.lexical) = 0 THEN
            stage.lexical := ARRAY(
                SELECT ROW(g.chunk_id, row_number() OVER (ORDER BY g.score DESC, g.chunk_id), g.score, 0, true,
                    NULL, NULL, NULL)::kb.leg_hit
                FROM kb.trigram_candidates(p_query, p_request.as_of, p_request.scope, p_request.filters,
                    p_plan.candidates) AS g
                ORDER BY g.score DESC, g.chunk_id
            );
        END IF;
        stage.lexical_ms := kb.ms_since(t);
    END IF;
    IF p_plan.mode IN ('dense', 'hybrid') THEN
        t := clock_timestamp();
        IF given IS NOT NULL THEN
            query_vector := given ->> 'query_vector';
        ELSE
            BEGIN
                query_vector := kb.embed_query(p_query, (p_plan.model).name);
            EXCEPTION WHEN OTHERS THEN
                IF p_request.mode_requested = 'dense' THEN
                    RAISE;
                END IF;
                stage.notes := stage.notes || ('query embedding failed, dense leg skipped: ' || SQLERRM);
            END;
        END IF;
        stage.embed_ms := kb.ms_since(t);
        t := clock_timestamp();
        IF query_vector IS NOT NULL THEN
            -- a shard is given the moments pooled over every shard's language statistics
            IF given IS NOT NULL THEN
                stage.language_moments := ARRAY(
                    SELECT jsonb_populate_record(NULL::kb.language_moment, m.moment)
                    FROM jsonb_array_elements(coalesce(given -> 'language_moments', '[]'::jsonb))
                        WITH ORDINALITY AS m (moment, n)
                    ORDER BY m.n
                );
            ELSIF p_plan.language_correction THEN
                stage.language_moments := kb.language_moments((p_plan.model).name, query_vector,
                    p_request.scope, p_settings.language_min_vectors, p_query);
            END IF;
            stage.dense := ARRAY(
                SELECT ROW(d.chunk_id, row_number() OVER (ORDER BY d.score DESC, d.chunk_id), d.score, NULL,
                    -- a hit's own evidence only when corrected (noise_z: the z-scores of its
                    -- group); fusion then weighs by it (see below)
                    false, d.similarity, CASE WHEN d.noise_z IS NOT NULL
                        THEN kb.calibrate(d.score, d.noise_z + p_settings.min_dense_z,
                            d.noise_z + p_settings.strong_dense_z) END,
                    -- in hybrid mode: the lexical leg read the passages of the question's
                    -- language (both, for a mixed question); one in the other language it
                    -- could read only in part
                    p_plan.mode = 'hybrid' AND d.language IN ('zh', 'en')
                    AND p_plan.analysis ->> 'language' IN ('zh', 'en') AND d.language <> p_plan.analysis ->> 'language'
                )::kb.leg_hit
                FROM kb.dense_candidates(query_vector, (p_plan.model).name, (p_plan.model).dimensions,
                    p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates,
                    stage.language_moments) AS d
                ORDER BY d.score DESC, d.chunk_id
            );
        END IF;
        stage.dense_ms := kb.ms_since(t);
    END IF;
    -- Fusion weighs each hit by its own evidence only when both legs' evidence
    -- is calibrated on this corpus (the dense leg's z-scores); with raw cosine
    -- and a provider's fixed thresholds it keeps the plain weighted scores. The
    -- lexical leg ran before that was known: its evidence goes here.
    IF cardinality(stage.language_moments) = 0 THEN
        stage.lexical := ARRAY(SELECT ROW(h.chunk_id, h.rank, h.score, h.coverage, h.trigram, h.similarity,
            NULL, NULL)::kb.leg_hit FROM unnest(stage.lexical) AS h ORDER BY h.rank);
    END IF;
    RETURN kb.stage_evidence(stage, p_plan, p_settings, p_identifier_found, ARRAY(
        SELECT c.language FROM unnest(stage.dense) WITH ORDINALITY AS h LEFT JOIN kb.chunks AS c ON h.chunk_id = c.id
        ORDER BY h.ordinality
    ));
END;
$$;
COMMENT ON FUNCTION kb.run_stage(
    kb.retrieval_request, kb.retrieval_plan, kb.retrieval_settings, integer, text, text[], boolean
) IS
'One stage of the staged fallback: the lexical leg (BM25, trigram when a short query matched nothing) and the dense leg for one form of the query, and the evidence of their best hits (kb.calibrate against the thresholds).';

CREATE OR REPLACE FUNCTION kb.answerability(p_evidence double precision, p_settings kb.retrieval_settings)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- no evidence: at or below min_evidence (no rows, unless the cutoff is
    -- off); low confidence: some evidence, but neither leg at its "strong"
    -- level; answer: a leg at its strong level, or an identifier found verbatim
    SELECT CASE
        WHEN coalesce(p_evidence, 0) <= p_settings.min_evidence THEN 'no evidence'
        WHEN p_evidence < 1 THEN 'low confidence'
        ELSE 'answer'
    END
$$;
COMMENT ON FUNCTION kb.answerability(double precision, kb.retrieval_settings) IS
'The answerability decision of a call from the evidence of its best stage: no evidence (at or below min_evidence: kb.abstains returns no rows while the cutoff is on), low confidence (below 1), answer (1: a leg at its strong level or an identifier found verbatim). Every kb_retrieve row carries it.';

CREATE OR REPLACE FUNCTION kb.abstains(p_evidence double precision, p_settings kb.retrieval_settings)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT p_settings.no_evidence_cutoff AND kb.answerability(p_evidence, p_settings) = 'no evidence'
$$;
COMMENT ON FUNCTION kb.abstains(double precision, kb.retrieval_settings) IS
'Whether a call returns no rows: the cutoff is on and its answerability (kb.answerability) is no evidence, i.e. the best stage''s evidence is at or below min_evidence (0 by default: neither leg above its "no evidence" level).';

CREATE OR REPLACE FUNCTION kb.with_answer(p_rows kb.retrieval_row[], p_decision text, p_evidence double precision)
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN kb.rows_with(p_rows, array_fill(
        jsonb_build_object('answerability', p_decision,
            'evidence', round(greatest(coalesce(p_evidence, 0), 0)::numeric, 3)),
        ARRAY[coalesce(cardinality(p_rows), 0)]));
END;
$$;
COMMENT ON FUNCTION kb.with_answer(kb.retrieval_row[], text, double precision) IS
'The rows with the call''s answerability decision (kb.answerability) and evidence (rounded to 3 places) in every row. Pure.';

CREATE OR REPLACE FUNCTION kb.language_correction_explain(
    p_plan kb.retrieval_plan, p_settings kb.retrieval_settings, p_stage kb.retrieval_stage
)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN (
    SELECT jsonb_build_object(
        'enabled', p_plan.language_correction,
        'applied', cardinality(p_stage.language_moments) > 0,
        'rule', 'dense score = (similarity - offset) / scale of the passage''s language group; '
            'a group of another language than the question''s is searched without the question''s language mean',
        'groups', coalesce((
            SELECT jsonb_agg(jsonb_build_object('language', m.language, 'vectors', m.vectors,
                'offset', round(m."offset"::numeric, 5), 'scale', round(m.scale::numeric, 5), 'pooled', m.pooled,
                'query_centred', m.query_vector IS NOT NULL)
                ORDER BY m.language)
            FROM unnest(p_stage.language_moments) AS m
        ), '[]'),
        'min_vectors', p_settings.language_min_vectors
    )
    );
END;
$$;
COMMENT ON FUNCTION kb.language_correction_explain(kb.retrieval_plan, kb.retrieval_settings, kb.retrieval_stage) IS
'The explain entry of the language correction: whether it is on for this model (the setting and the provider''s language_correction), whether it applied, and the query''s offset and scale per language group.';

CREATE OR REPLACE FUNCTION kb.explain_object(
    p_request kb.retrieval_request,
    p_settings kb.retrieval_settings,
    p_plan kb.retrieval_plan,
    p_stages kb.retrieval_stage[],
    p_best kb.retrieval_stage,
    p_identifier_chunks bigint[],
    p_returned integer,
    p_timings jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN (
    SELECT jsonb_build_object(
        'query', p_request.query,
        'analysis', p_plan.analysis,
        'mode_requested', p_request.mode_requested,
        'mode', p_plan.mode,
        'model', CASE WHEN (p_plan.model).name IS NULL THEN NULL ELSE jsonb_build_object(
            'name', (p_plan.model).name, 'provider', (p_plan.model).provider, 'model', (p_plan.model).model,
            'dimensions', (p_plan.model).dimensions, 'ready', p_plan.model_ready) END,
        'fusion', jsonb_build_object('method', p_settings.fusion,
            'rule', CASE p_settings.fusion WHEN 'linear'
                THEN 'weight x min-max normalised score x the hit''s own evidence, summed over the legs; '
                    'for a dense hit in another language than the question''s the lexical part is the larger of its own '
                    'and its dense part x (1 - the lexical leg''s best evidence)'
                ELSE 'weight / (rrf_k + rank), summed over the legs' END,
            'weight_dense', p_plan.weight_dense, 'weight_lexical', p_plan.weight_lexical, 'rrf_k', p_settings.rrf_k,
            'freshness_margin', p_settings.freshness_margin),
        'stages', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'stage', s.stage_no, 'query', s.query, 'lexical_candidates', cardinality(s.lexical),
                'dense_candidates', cardinality(s.dense), 'lexical_top_coverage', s.lexical_top_coverage,
                'dense_other_language', (SELECT count(*) FROM unnest(s.dense) AS h WHERE h.other_language),
                'dense_top_similarity', s.dense_top_similarity, 'dense_evidence_z', s.dense_evidence_z,
                'dense_evidence_language', s.dense_evidence_language, 'dense_min_z', s.dense_min_z,
                'lexical_evidence', round(s.lexical_evidence::numeric, 3),
                'dense_evidence', round(s.dense_evidence::numeric, 3),
                'evidence', round(s.evidence::numeric, 3)
            ) ORDER BY s.stage_no)
            FROM unnest(p_stages) AS s
            WHERE NOT s.skipped
        ), '[]'),
        'language_correction', kb.language_correction_explain(p_plan, p_settings, p_best),
        'glossary', p_best.glossary,
        'answerability', jsonb_build_object(
            'decision', kb.answerability(p_best.evidence, p_settings),
            'signal', CASE WHEN p_identifier_chunks <> '{}' THEN 'identifier found verbatim'
                WHEN coalesce(p_best.lexical_evidence, 0) >= coalesce(p_best.dense_evidence, 0)
                    THEN 'lexical: top idf coverage'
                WHEN cardinality(p_best.language_moments) > 0
                    THEN 'dense: z-score within its language of the best hit in ' || p_best.dense_evidence_language
                ELSE 'dense: top cosine similarity' END,
            'value', CASE WHEN p_identifier_chunks <> '{}' THEN NULL
                WHEN coalesce(p_best.lexical_evidence, 0) >= coalesce(p_best.dense_evidence, 0)
                    THEN p_best.lexical_top_coverage
                WHEN cardinality(p_best.language_moments) > 0 THEN round(p_best.dense_evidence_z::numeric, 4)
                ELSE round(p_best.dense_top_similarity::numeric, 4) END,
            'evidence', round(greatest(coalesce(p_best.evidence, 0), 0)::numeric, 3),
            'threshold', CASE WHEN p_identifier_chunks <> '{}' THEN NULL
                WHEN coalesce(p_best.lexical_evidence, 0) >= coalesce(p_best.dense_evidence, 0)
                    THEN p_settings.min_lexical_coverage
                WHEN p_best.dense_min_z IS NOT NULL THEN p_best.dense_min_z
                ELSE p_plan.min_similarity END,
            'min_evidence', p_settings.min_evidence,
            'cutoff', p_settings.no_evidence_cutoff),
        'stage_used', p_best.query,
        'candidates', jsonb_build_object('lexical', coalesce(cardinality(p_best.lexical), 0),
            'dense', coalesce(cardinality(p_best.dense), 0), 'identifier', cardinality(p_identifier_chunks)),
        'evidence', round(greatest(coalesce(p_best.evidence, 0), 0)::numeric, 3),
        'low_confidence', kb.answerability(p_best.evidence, p_settings) <> 'answer',
        'no_evidence', kb.answerability(p_best.evidence, p_settings) = 'no evidence',
        'thresholds', jsonb_build_object('min_lexical_coverage', p_settings.min_lexical_coverage,
            'strong_lexical_coverage', p_settings.strong_lexical_coverage, 'min_dense_z', p_settings.min_dense_z,
            'same_language_z_margin', p_settings.same_language_z_margin, 'strong_dense_z', p_settings.strong_dense_z, 'min_similarity', p_plan.min_similarity,
            'strong_similarity', p_plan.strong_similarity, 'min_evidence', p_settings.min_evidence,
            'no_evidence_cutoff', p_settings.no_evidence_cutoff),
        'returned', p_returned,
        'notes', to_jsonb(p_request.notes || p_plan.notes
            || coalesce((SELECT array_agg(n ORDER BY s.stage_no) FROM unnest(p_stages) AS s, unnest(s.notes) AS n), '{}')),
        'timings_ms', p_timings
    )
    );
END;
$$;
COMMENT ON FUNCTION kb.explain_object(
    kb.retrieval_request, kb.retrieval_settings, kb.retrieval_plan, kb.retrieval_stage[], kb.retrieval_stage,
    bigint[], integer, jsonb
) IS
'The explain object of a kb_retrieve call: query analysis, mode, model, fusion, stages tried, candidates, evidence, thresholds, notes, timings.';

CREATE OR REPLACE FUNCTION kb.explain_assembly(
    p_max_per_document integer,
    p_merge_adjacent boolean,
    p_dropped bigint[],
    p_selected kb.retrieval_row[],
    p_rows kb.retrieval_row[]
)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- p_dropped: the chunks the cap moved out of the top k, in their uncapped
    -- order; p_selected: the rows before merging; p_rows: the rows returned
BEGIN
    RETURN (
    SELECT jsonb_build_object(
        'max_per_document', p_max_per_document,
        'merge_adjacent', p_merge_adjacent,
        'dropped_by_cap', coalesce(cardinality(p_dropped), 0),
        'dropped_chunk_ids', to_jsonb(coalesce(p_dropped, '{}')),
        'chunks_selected', coalesce(cardinality(p_selected), 0),
        'merged', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'rank', r.rank, 'source', r.source, 'document_id', r.document_id,
                'chunk_ids', jsonb_path_query_array(r.provenance, '$.chunks[*].chunk_id'),
                'ordinals', jsonb_path_query_array(r.provenance, '$.chunks[*].ordinal')
            ) ORDER BY r.rank)
            FROM unnest(p_rows) AS r
            WHERE jsonb_array_length(r.provenance -> 'chunks') > 1
        ), '[]'),
        'returned', coalesce(cardinality(p_rows), 0)
    )
    );
END;
$$;
COMMENT ON FUNCTION kb.explain_assembly(integer, boolean, bigint[], kb.retrieval_row[], kb.retrieval_row[]) IS
'The explain entry of passage assembly: the cap in force and which chunks of the uncapped top k it dropped (the next best chunks of other documents took their places), whether adjacent chunks were merged and which passages were (their chunks in document order), chunks selected and rows returned.';

CREATE OR REPLACE FUNCTION kb.retrieve_core(
    p_query text,
    p_k integer,
    p_namespace text,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_max_per_document integer,
    p_merge_adjacent boolean,
    p_explain boolean
)
RETURNS kb.retrieval_result
LANGUAGE plpgsql
-- STABLE, and so is everything it calls that reads tables: a STABLE function
-- runs every statement on the snapshot of the query that called it, so one
-- kb_retrieve call sees one state of the documents even under READ COMMITTED
-- (a VOLATILE one takes a new snapshot per statement, and a document updated
-- meanwhile could be missing from one leg and present in the next). It
-- writes nothing: the callers log.
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
-- JIT compilation costs far more than these millisecond queries ever save
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    t timestamptz := clock_timestamp();
    request kb.retrieval_request := kb.validated_request(p_query, p_k, p_namespace, p_mode, p_filters, p_as_of, p_context,
        p_max_per_document, p_merge_adjacent);
    max_per_document integer := kb.assembly_max_per_document(request);
    merge_adjacent boolean := kb.assembly_merge_adjacent(request);
    settings kb.retrieval_settings := kb.read_retrieval_settings();
    plan kb.retrieval_plan;
    analysis_ms numeric;  -- reported with embedding
    identifier_ms numeric;
    identifier_chunks bigint[];
    stage kb.retrieval_stage;
    stages kb.retrieval_stage[] := '{}';
    best kb.retrieval_stage;
    rows kb.retrieval_row[] := '{}';
    fused kb.fused_hit[];
    ranked kb.retrieval_row[];
    dropped bigint[];
    selected kb.retrieval_row[] := '{}';
    fuse_ms numeric;
    decision text;
    timings jsonb;
    explain jsonb;
BEGIN
    -- the namespaces this call may read, from the session's role (kb.read_scope):
    -- every step below applies them
    request.scope := kb.read_scope(request.namespace);
    plan := kb.plan_retrieval(request, settings);
    analysis_ms := kb.ms_since(t);
    t := clock_timestamp();
    identifier_chunks := kb.identifier_chunks(request, plan);
    identifier_ms := kb.ms_since(t);
    FOR stage_no IN 1 .. coalesce(cardinality(plan.stages), 0) LOOP
        stage := kb.run_stage(request, plan, settings, stage_no, plan.stages[stage_no],
            (stages[cardinality(stages)]).terms, cardinality(identifier_chunks) > 0);
        stages := stages || stage;
        CONTINUE WHEN stage.skipped;
        IF best IS NULL OR stage.evidence > best.evidence THEN
            best := stage;
        END IF;
        EXIT WHEN stage.evidence >= 1;
    END LOOP;

    t := clock_timestamp();
    IF NOT kb.abstains(best.evidence, settings) THEN
        fused := ARRAY(SELECT kb.fuse(best.lexical, best.dense, identifier_chunks, settings.fusion, plan.weight_lexical,
            plan.weight_dense, settings.rrf_k));
        -- with a cap, the chunks it moved out of the top k come along (rank NULL), for the explain object
        ranked := ARRAY(SELECT p FROM kb.passages(fused, plan.analysis ->> 'core_terms', settings.boost_identifier,
            settings.boost_title, request.k, settings.freshness_margin, max_per_document,
            max_per_document IS NOT NULL) AS p);
        selected := ARRAY(SELECT p FROM unnest(ranked) AS p WHERE p.rank IS NOT NULL ORDER BY p.rank);
        dropped := ARRAY(SELECT p.chunk_id FROM unnest(ranked) WITH ORDINALITY AS p WHERE p.rank IS NULL
            ORDER BY p.ordinality);
        rows := CASE WHEN merge_adjacent THEN kb.merged_passages(selected) ELSE selected END;
    END IF;
    fuse_ms := kb.ms_since(t);
    t := clock_timestamp();
    IF settings.snippets AND cardinality(rows) > 0 THEN
        rows := kb.with_snippets(rows, best.query);
    END IF;
    decision := kb.answerability(best.evidence, settings);
    rows := kb.with_answer(rows, decision, best.evidence);

    timings := jsonb_build_object(
        'embed', analysis_ms + (SELECT coalesce(sum(s.embed_ms), 0) FROM unnest(stages) AS s),
        'lexical', identifier_ms + (SELECT coalesce(sum(s.lexical_ms), 0) FROM unnest(stages) AS s),
        'dense', (SELECT coalesce(sum(s.dense_ms), 0) FROM unnest(stages) AS s),
        'fuse', fuse_ms, 'snippets', kb.ms_since(t), 'total', kb.ms_since(started));
    IF p_explain THEN
        explain := kb.explain_object(request, settings, plan, stages, best, identifier_chunks, cardinality(rows),
            timings)
            || jsonb_build_object('assembly', kb.explain_assembly(max_per_document, merge_adjacent, dropped, selected,
                rows));
    ELSE
        -- what the retrieval log records (kb.log_retrieval), without the rest of the explain object
        explain := jsonb_build_object('query', request.query, 'mode_requested', request.mode_requested,
            'mode', plan.mode, 'low_confidence', decision <> 'answer', 'no_evidence', decision = 'no evidence',
            'timings_ms', timings);
    END IF;
    RETURN ROW(rows, explain);
END;
$$;
COMMENT ON FUNCTION kb.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean, boolean) IS
'The retrieval pipeline behind kb_retrieve and kb_retrieve_explain: the passages (kb.retrieval_row[]: capped per document, adjacent chunks merged when asked) and, with p_explain, the explain object (else only what the retrieval log records: query, modes, low_confidence, no_evidence, timings_ms).';

CREATE OR REPLACE FUNCTION public.kb_retrieve(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL,
    max_per_document integer DEFAULT NULL,
    merge_adjacent boolean DEFAULT NULL
)
RETURNS SETOF kb.retrieval_row
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb.retrieval_result;
BEGIN
    -- one statement, one snapshot: the whole retrieval (kb.retrieve_core is
    -- STABLE); the log row is written after it, by a statement of its own
    result := kb.retrieve_core(query, k, namespace, mode, filters, as_of, context, max_per_document,
        merge_adjacent, false);
    PERFORM kb.log_retrieval(result.explain, result.rows, namespace, k);
    RETURN QUERY SELECT r.* FROM unnest(result.rows) AS r ORDER BY r.rank;
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'Ranked passages for a question from the documents current at as_of that the session''s role may read: hybrid BM25 + HNSW, per-leg ranks and scores, snippets, provenance. Modes: lexical, dense, hybrid, auto. max_per_document caps the chunks of one document among the k, merge_adjacent joins consecutive chunks of one document into one passage (NULL: the settings of the same names). Runs with the owner''s rights over the namespaces kb.read_scope gives the session''s role.';

CREATE OR REPLACE FUNCTION public.kb_retrieve_explain(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL,
    max_per_document integer DEFAULT NULL,
    merge_adjacent boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb.retrieval_result;
BEGIN
    -- as kb_retrieve: the retrieval on one snapshot, then the log
    result := kb.retrieve_core(query, k, namespace, mode, filters, as_of, context, max_per_document,
        merge_adjacent, true);
    PERFORM kb.log_retrieval(result.explain, result.rows, namespace, k);
    -- the results as kb_retrieve returns them, without the passage text
    -- and whether the call was logged (not on a hot standby, nor in a read-only transaction)
    RETURN result.explain || jsonb_build_object('results', coalesce((
        SELECT jsonb_agg(to_jsonb(x) - 'content' - 'snippet' ORDER BY x.rank) FROM unnest(result.rows) AS x
    ), '[]'), 'retrieval_log', kb.retrieval_log_state());
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'How kb_retrieve answered: query analysis, stages tried, candidates per leg, evidence and low-confidence flag, model, timings per stage, passage assembly (cap, merges), and the results.';
