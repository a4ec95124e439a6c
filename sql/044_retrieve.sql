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

CREATE OR REPLACE FUNCTION kb_pipeline.ms_since(p_start timestamptz)
RETURNS numeric
LANGUAGE sql
VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT round((extract(epoch FROM clock_timestamp() - p_start) * 1000)::numeric, 2) $$;
COMMENT ON FUNCTION kb_pipeline.ms_since(timestamptz) IS 'Milliseconds elapsed since a clock_timestamp(), for explain timings.';

CREATE OR REPLACE FUNCTION kb_pipeline.identifier_chunks(
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
    FROM kb_pipeline.identifier_candidates(
        p_plan.identifiers, p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates
    ) AS i
    WHERE cardinality(p_plan.identifiers) > 0 AND p_plan.mode <> 'dense'
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.identifier_chunks(kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan) IS
'Chunks that hold an identifier of the query verbatim (none in dense mode), most identifiers matched first: strong evidence, and boosted.';

CREATE OR REPLACE FUNCTION kb_pipeline.merged_expansions(p_glossary jsonb, p_dictionary jsonb)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- one expansion for the lexical leg: the glossary's matches, then the
    -- dictionary's; a term both add is the glossary's (a team's word first)
    SELECT CASE WHEN p_glossary IS NOT NULL OR p_dictionary IS NOT NULL THEN jsonb_build_object(
        'matches', coalesce(p_glossary -> 'matches', '[]') || coalesce(p_dictionary -> 'matches', '[]'),
        'added_terms', coalesce(p_glossary -> 'added_terms', '[]') || coalesce((
            SELECT jsonb_agg(t.term ORDER BY t.n)
            FROM jsonb_array_elements_text(p_dictionary -> 'added_terms') WITH ORDINALITY AS t (term, n)
            WHERE NOT coalesce(p_glossary -> 'added_terms', '[]') ? t.term
        ), '[]'),
        'dropped_terms', coalesce((p_glossary ->> 'dropped_terms')::bigint, 0)
            + coalesce((p_dictionary ->> 'dropped_terms')::bigint, 0)) END
$$;
COMMENT ON FUNCTION kb_pipeline.merged_expansions(jsonb, jsonb) IS
'The glossary''s and the dictionary''s expansions of a stage''s terms as one (matches of both, added terms once, dropped terms summed); NULL when both are NULL (off). Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.lexical_inputs(
    p_plan kb_pipeline.retrieval_plan, p_scope text[], p_settings kb_pipeline.retrieval_settings
)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    inputs jsonb := '[]';
    terms jsonb;
    skipped boolean;
    expansion jsonb;
BEGIN
    -- per stage: its BM25 terms (from the query analysis), whether it is
    -- skipped (a later stage with the same terms as the one before it, the
    -- question form having dropped only stop words, would find the same
    -- evidence again) and the glossary equivalents and dictionary translations
    -- of its terms (docs/GLOSSARY.md, docs/RETRIEVAL.md; none in dense mode)
    FOR stage_no IN 1 .. coalesce(cardinality(p_plan.stages), 0) LOOP
        terms := coalesce(p_plan.analysis -> 'stage_terms' -> (stage_no - 1), '[]');
        skipped := p_plan.mode IN ('lexical', 'hybrid') AND stage_no > 1
            AND terms = p_plan.analysis -> 'stage_terms' -> (stage_no - 2);
        -- a skipped stage has the terms of the one before, so its expansion too
        IF NOT skipped THEN
            expansion := CASE WHEN p_plan.mode IN ('lexical', 'hybrid') THEN kb_pipeline.merged_expansions(
                CASE WHEN p_settings.glossary_expansion
                    THEN (kb.glossary_expansion_of_terms(ARRAY(SELECT jsonb_array_elements_text(terms)), p_scope,
                        p_settings.glossary_max_terms)).explain END,
                CASE WHEN p_settings.dictionary_expansion
                    THEN kb.dictionary_expansion_of_terms(ARRAY(SELECT jsonb_array_elements_text(terms)),
                        p_settings.dictionary_max_terms) END) END;
        END IF;
        inputs := inputs || jsonb_build_array(jsonb_build_object(
            'terms', terms, 'skipped', skipped, 'glossary', expansion));
    END LOOP;
    RETURN inputs;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.lexical_inputs(kb_pipeline.retrieval_plan, text[], kb_pipeline.retrieval_settings) IS
'What the lexical leg of each stage is given, as a jsonb array: terms (the analysis''s stage_terms), skipped (same terms as the stage before) and glossary: the expansion of its terms by the glossary (kb.glossary_expansion_of_terms over the namespaces of p_scope) and the bilingual dictionary (kb.dictionary_expansion_of_terms), merged (kb_pipeline.merged_expansions); NULL when both are off and in dense mode.';

CREATE OR REPLACE FUNCTION kb_pipeline.dense_inputs(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_query text
)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    query_vector text;
    moments kb.language_moment[] := '{}';
BEGIN
    -- the query vector of a stage and its language moments (over the
    -- namespaces of the request's scope); an embedding that fails skips the
    -- dense leg with a note, unless dense mode was asked for
    IF p_plan.mode NOT IN ('dense', 'hybrid') THEN
        RETURN jsonb_build_object('embed_ms', 0);
    END IF;
    BEGIN
        query_vector := kb.embed_query(p_query, (p_plan.model).name);
    EXCEPTION WHEN OTHERS THEN
        IF p_request.mode_requested = 'dense' THEN
            RAISE;
        END IF;
        RETURN jsonb_build_object('note', 'query embedding failed, dense leg skipped: ' || SQLERRM,
            'embed_ms', kb_pipeline.ms_since(t));
    END;
    IF p_plan.language_correction THEN
        moments := kb.language_moments((p_plan.model).name, query_vector, p_request.scope,
            p_settings.language_min_vectors, p_query);
    END IF;
    RETURN jsonb_build_object('query_vector', query_vector, 'language_moments', to_jsonb(moments),
        'embed_ms', kb_pipeline.ms_since(t));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.dense_inputs(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, text
) IS
'What the dense leg of a stage is given, as jsonb: query_vector (kb.embed_query), language_moments (kb.language_moments over the request''s scope, when the correction applies), a note when the embedding failed (outside dense mode), embed_ms. Empty outside dense and hybrid mode.';

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

CREATE OR REPLACE FUNCTION kb_pipeline.new_stage(
    p_plan kb_pipeline.retrieval_plan, p_stage_no integer, p_lexical jsonb, p_dense jsonb
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- what the inputs say (terms, skipped, glossary; the embedding's note, time and
    -- language moments), before any leg ran: no hits, no evidence yet
    RETURN ROW(p_stage_no, p_plan.stages[p_stage_no], ARRAY(SELECT jsonb_array_elements_text(p_lexical -> 'terms')),
        coalesce((p_lexical ->> 'skipped')::boolean, false), '{}', '{}', NULL, NULL, 0,
        ARRAY(SELECT p_dense ->> 'note' WHERE p_dense ? 'note'), coalesce((p_dense ->> 'embed_ms')::numeric, 0),
        0, 0, NULL, NULL, NULL, ARRAY(
            SELECT jsonb_populate_record(NULL::kb.language_moment, m.moment)
            FROM jsonb_array_elements(coalesce(p_dense -> 'language_moments', '[]')) WITH ORDINALITY AS m (moment, n)
            ORDER BY m.n
        ), 0, 0, nullif(p_lexical -> 'glossary', 'null'), NULL, NULL, NULL)::kb_pipeline.retrieval_stage;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.new_stage(kb_pipeline.retrieval_plan, integer, jsonb, jsonb) IS
'A stage as its inputs describe it (kb_pipeline.lexical_inputs and kb_pipeline.dense_inputs, or a coordinator''s), before any leg ran: one node''s kb_pipeline.gather_stage and a coordinator''s kb_pipeline.merged_stage start from it. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.gather_stage(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_stage_no integer,
    p_lexical jsonb,
    p_dense jsonb,
    p_lexical_corpus jsonb
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
-- STABLE: its statements read the snapshot of the kb_retrieve call (see kb_pipeline.retrieve_core)
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    query text := p_plan.stages[p_stage_no];
    stage kb_pipeline.retrieval_stage;
    t timestamptz;
BEGIN
    -- p_lexical, p_dense: the stage's inputs (kb_pipeline.lexical_inputs,
    -- kb_pipeline.dense_inputs, or a coordinator's); p_lexical_corpus: the
    -- BM25 statistics of a sharded corpus (NULL: this database's)
    stage := kb_pipeline.new_stage(p_plan, p_stage_no, p_lexical, p_dense);
    IF stage.skipped THEN
        RETURN stage;
    END IF;
    IF p_plan.mode IN ('lexical', 'hybrid') THEN
        t := clock_timestamp();
        stage.lexical := ARRAY(
            SELECT ROW(l.chunk_id, row_number() OVER (ORDER BY l.score DESC, l.chunk_id), l.score, l.coverage,
                false, NULL, kb_pipeline.calibrate(l.coverage, p_settings.min_lexical_coverage,
                    p_settings.strong_lexical_coverage), NULL, NULL, l.weighted_coverage)::kb_pipeline.leg_hit
            FROM kb_pipeline.lexical_candidates(stage.terms, p_request.as_of, p_request.scope, p_request.filters,
                p_plan.candidates, stage.glossary, p_lexical_corpus) AS l
            ORDER BY l.score DESC, l.chunk_id
        );
        -- fuzzy fallback only: a short query that BM25 could not match at all
        IF (p_plan.analysis ->> 'is_short')::boolean AND cardinality(stage.lexical) = 0 THEN
            stage.lexical := ARRAY(
                SELECT ROW(g.chunk_id, row_number() OVER (ORDER BY g.score DESC, g.chunk_id), g.score, 0, true,
                    NULL, NULL, NULL, NULL, 0)::kb_pipeline.leg_hit
                FROM kb_pipeline.trigram_candidates(query, p_request.as_of, p_request.scope, p_request.filters,
                    p_plan.candidates) AS g
                ORDER BY g.score DESC, g.chunk_id
            );
        END IF;
        stage.lexical_ms := kb_pipeline.ms_since(t);
    END IF;
    IF p_dense ->> 'query_vector' IS NOT NULL THEN
        t := clock_timestamp();
        stage.dense := ARRAY(
            SELECT ROW(d.chunk_id, row_number() OVER (ORDER BY d.score DESC, d.chunk_id), d.score, NULL,
                -- a hit's own evidence only when corrected (noise_z: the z-scores of its
                -- group); fusion then weighs by it
                false, d.similarity, CASE WHEN d.noise_z IS NOT NULL
                    THEN kb_pipeline.calibrate(d.score, d.noise_z + p_settings.min_dense_z,
                        d.noise_z + p_settings.strong_dense_z) END,
                -- in hybrid mode: the lexical leg read the passages of the question's
                -- language (both, for a mixed question); one in the other language it
                -- could read only in part
                p_plan.mode = 'hybrid' AND d.language IN ('zh', 'en')
                AND p_plan.analysis ->> 'language' IN ('zh', 'en') AND d.language <> p_plan.analysis ->> 'language',
                d.language, NULL
            )::kb_pipeline.leg_hit
            FROM kb_pipeline.dense_candidates(p_dense ->> 'query_vector', (p_plan.model).name,
                (p_plan.model).dimensions, p_request.as_of, p_request.scope, p_request.filters, p_plan.candidates,
                stage.language_moments) AS d
            ORDER BY d.score DESC, d.chunk_id
        );
        stage.dense_ms := kb_pipeline.ms_since(t);
    END IF;
    -- Fusion weighs each hit by its own evidence only when both legs' evidence
    -- is calibrated on this corpus (the dense leg's z-scores) and the scope
    -- holds both languages (kb_pipeline.weighs_hits_by_evidence); otherwise it
    -- keeps the plain weighted scores. The stage's evidence is judged from the
    -- scores (kb_pipeline.stage_evidence), not from the hits' evidence.
    IF NOT kb_pipeline.weighs_hits_by_evidence(stage.language_moments) THEN
        stage.lexical := ARRAY(SELECT ROW(h.chunk_id, h.rank, h.score, h.coverage, h.trigram, h.similarity,
            NULL, NULL, NULL, h.weighted_coverage)::kb_pipeline.leg_hit FROM unnest(stage.lexical) AS h ORDER BY h.rank);
        stage.dense := ARRAY(SELECT ROW(h.chunk_id, h.rank, h.score, h.coverage, h.trigram, h.similarity,
            NULL, h.other_language, h.language, h.weighted_coverage)::kb_pipeline.leg_hit FROM unnest(stage.dense) AS h ORDER BY h.rank);
    END IF;
    RETURN stage;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.gather_stage(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, integer, jsonb, jsonb,
    jsonb
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

CREATE OR REPLACE FUNCTION kb_pipeline.gather_here(
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
    lexical jsonb := kb_pipeline.lexical_inputs(p_plan, p_request.scope, p_settings);
    stage kb_pipeline.retrieval_stage;
    stages kb_pipeline.retrieval_stage[] := '{}';
BEGIN
    -- stage by stage, each query embedded only when reached, until one is
    -- at full evidence (kb_pipeline.best_stage would choose it)
    FOR stage_no IN 1 .. coalesce(cardinality(p_plan.stages), 0) LOOP
        stage := kb_pipeline.gather_stage(p_request, p_plan, p_settings, stage_no, lexical -> (stage_no - 1),
            CASE WHEN NOT (lexical -> (stage_no - 1) ->> 'skipped')::boolean
                THEN kb_pipeline.dense_inputs(p_request, p_plan, p_settings, p_plan.stages[stage_no]) END,
            NULL);
        IF NOT stage.skipped THEN
            stage := kb_pipeline.stage_evidence(stage, p_plan, p_settings, p_identifier_found);
        END IF;
        stages := stages || stage;
        EXIT WHEN stage.evidence >= 1;
    END LOOP;
    RETURN stages;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.gather_here(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, boolean
) IS
'The stages of a call over this database (kb_pipeline.gather_stage with this database''s inputs and statistics, judged by kb_pipeline.stage_evidence), until one is at full evidence.';

CREATE OR REPLACE FUNCTION kb_pipeline.with_answer(p_rows kb.retrieval_row[], p_decision text, p_evidence double precision)
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN kb_pipeline.rows_with(p_rows, array_fill(
        jsonb_build_object('answerability', p_decision,
            'evidence', round(greatest(coalesce(p_evidence, 0), 0)::numeric, 3)),
        ARRAY[coalesce(cardinality(p_rows), 0)]));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.with_answer(kb.retrieval_row[], text, double precision) IS
'The rows with the call''s answerability decision (kb_pipeline.answerability) and evidence, its probability (rounded to 3 places), in every row. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.language_correction_explain(
    p_plan kb_pipeline.retrieval_plan, p_settings kb_pipeline.retrieval_settings, p_stage kb_pipeline.retrieval_stage
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
        'min_vectors', p_settings.language_min_vectors,
        -- the passage nearest in the question's language, when the guard moved it up
        'own_language_first_kept', (
            SELECT jsonb_build_object('chunk_id', k.chunk_id, 'corrected_rank', h.rank, 'kept_rank', k.rank)
            FROM unnest(kb_pipeline.own_language_first_kept(p_stage.dense, p_plan.analysis ->> 'language')) AS k
            INNER JOIN unnest(p_stage.dense) AS h ON h.chunk_id = k.chunk_id
            WHERE k.rank < h.rank
        )
    )
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.language_correction_explain(kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_stage) IS
'The explain entry of the language correction: whether it is on for this model (the setting and the provider''s language_correction), whether it applied, the query''s offset and scale per language group, and the passage kb_pipeline.own_language_first_kept moved up (its chunk, the dense rank the correction gave it and the rank it kept; NULL when none).';

CREATE OR REPLACE FUNCTION kb_pipeline.explain_object(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    p_plan kb_pipeline.retrieval_plan,
    p_stages kb_pipeline.retrieval_stage[],
    p_best kb_pipeline.retrieval_stage,
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
            'rule', CASE
                WHEN p_settings.fusion <> 'linear' THEN 'weight / (rrf_k + rank), summed over the legs'
                WHEN kb_pipeline.weighs_hits_by_evidence(p_best.language_moments)
                THEN 'weight x min-max normalised score x the hit''s own evidence, summed over the legs; '
                    'for a dense hit in another language than the question''s the lexical part is the larger of its own '
                    'and its dense part x (1 - the lexical leg''s best evidence)'
                ELSE 'weight x min-max normalised score, summed over the legs' END,
            'weighs_hits_by_evidence', p_settings.fusion = 'linear'
                AND kb_pipeline.weighs_hits_by_evidence(p_best.language_moments),
            'weight_dense', p_plan.weight_dense, 'weight_lexical', p_plan.weight_lexical, 'rrf_k', p_settings.rrf_k,
            'freshness_margin', p_settings.freshness_margin),
        'stages', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'stage', s.stage_no, 'query', s.query, 'lexical_candidates', cardinality(s.lexical),
                'dense_candidates', cardinality(s.dense), 'lexical_top_coverage', s.lexical_top_coverage,
                'dense_other_language', (SELECT count(*) FROM unnest(s.dense) AS h WHERE h.other_language),
                'dense_top_similarity', s.dense_top_similarity, 'dense_evidence_z', s.dense_evidence_z,
                'dense_evidence_language', s.dense_evidence_language, 'dense_z_floor', s.dense_min_z,
                'lexical_evidence', round(s.lexical_evidence::numeric, 3),
                'dense_evidence', round(s.dense_evidence::numeric, 3),
                'evidence', round(s.evidence::numeric, 3)
            ) ORDER BY s.stage_no)
            FROM unnest(p_stages) AS s
            WHERE NOT s.skipped
        ), '[]'),
        'language_correction', kb_pipeline.language_correction_explain(p_plan, p_settings, p_best),
        'glossary', p_best.glossary,
        'answerability', kb_pipeline.answerability_explain(p_plan, p_settings, p_best),
        'stage_used', p_best.query,
        'candidates', jsonb_build_object('lexical', coalesce(cardinality(p_best.lexical), 0),
            'dense', coalesce(cardinality(p_best.dense), 0), 'identifier', cardinality(p_identifier_chunks)),
        -- the call's evidence is its probability (the stages' evidence chose the stage)
        'evidence', round(coalesce(p_best.probability, 0)::numeric, 3),
        'low_confidence', kb_pipeline.answerability(p_best.probability, p_settings) <> 'answer',
        'no_evidence', kb_pipeline.answerability(p_best.probability, p_settings) = 'no evidence',
        -- every threshold in force, each under the name that sets it: settings, or the
        -- model's options (kb.models.options) over its provider's for the two similarities
        'thresholds', jsonb_build_object('min_lexical_coverage', p_settings.min_lexical_coverage,
            'strong_lexical_coverage', p_settings.strong_lexical_coverage, 'min_dense_z', p_settings.min_dense_z,
            'same_language_z_margin', p_settings.same_language_z_margin, 'strong_dense_z', p_settings.strong_dense_z,
            'min_similarity', p_plan.min_similarity, 'strong_similarity', p_plan.strong_similarity,
            'similarities_set_by', 'the model''s options min_similarity and strong_similarity (kb.models.options), '
                || 'else its provider''s (kb.embedding_providers)',
            'answer_probability', p_settings.answer_probability,
            'no_evidence_probability', p_settings.no_evidence_probability,
            'no_evidence_cutoff', p_settings.no_evidence_cutoff),
        'returned', p_returned,
        'notes', to_jsonb(p_request.notes || p_plan.notes
            || coalesce((SELECT array_agg(n ORDER BY s.stage_no) FROM unnest(p_stages) AS s, unnest(s.notes) AS n), '{}')),
        'timings_ms', p_timings
    )
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.explain_object(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_stage[], kb_pipeline.retrieval_stage,
    bigint[], integer, jsonb
) IS
'The explain object of a kb_retrieve call: query analysis, mode, model, fusion, stages tried, candidates, evidence, thresholds, notes, timings.';

CREATE OR REPLACE FUNCTION kb_pipeline.explain_assembly(
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
COMMENT ON FUNCTION kb_pipeline.explain_assembly(integer, boolean, bigint[], kb.retrieval_row[], kb.retrieval_row[]) IS
'The explain entry of passage assembly: the cap in force and which chunks of the uncapped top k it dropped (the next best chunks of other documents took their places), whether adjacent chunks were merged and which passages were (their chunks in document order), chunks selected and rows returned.';

CREATE OR REPLACE FUNCTION kb_pipeline.ranked(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage,
    p_identifier_chunks bigint[],
    p_facts kb_pipeline.candidate[]
)
RETURNS kb_pipeline.ranked_hit[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- always ranked: the judge decides on the ranked rows (kb_pipeline.judged)
    IF p_best IS NULL THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(
        SELECT r FROM kb_pipeline.rank(
            ARRAY(SELECT kb_pipeline.fuse(p_best.lexical,
                kb_pipeline.own_language_first_kept(p_best.dense, p_plan.analysis ->> 'language'),
                p_identifier_chunks, p_settings.fusion,
                p_plan.weight_lexical, p_plan.weight_dense, p_settings.rrf_k)),
            p_facts, p_plan.analysis ->> 'core_terms', p_settings, p_request.k,
            kb_pipeline.assembly_max_per_document(p_request, p_settings)) AS r
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.ranked(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings,
    kb_pipeline.retrieval_stage, bigint[], kb_pipeline.candidate[]
) IS
'The best stage''s hits fused (kb_pipeline.fuse) and ranked (kb_pipeline.rank: the top k, then the chunks the cap displaced); none when every stage was skipped. Pure: the candidates'' facts are given.';

CREATE OR REPLACE FUNCTION kb_pipeline.stage_candidates(p_stage kb_pipeline.retrieval_stage, p_identifier_chunks bigint[])
RETURNS bigint[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT ARRAY(
        SELECT h.chunk_id FROM unnest(p_stage.lexical) AS h
        UNION
        SELECT h.chunk_id FROM unnest(p_stage.dense) AS h
        UNION
        SELECT i.chunk_id FROM unnest(p_identifier_chunks) AS i (chunk_id)
    )
$$;
COMMENT ON FUNCTION kb_pipeline.stage_candidates(kb_pipeline.retrieval_stage, bigint[]) IS
'Every chunk a stage''s legs or the identifier hits named, once: the candidates whose facts ranking needs. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.result_of(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    p_plan kb_pipeline.retrieval_plan,
    p_stages kb_pipeline.retrieval_stage[],
    p_best kb_pipeline.retrieval_stage,
    p_identifier_chunks bigint[],
    p_ranked kb_pipeline.ranked_hit[],
    p_rows kb.retrieval_row[],
    p_timings jsonb,
    p_explain boolean
)
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    merge_adjacent boolean := kb_pipeline.assembly_merge_adjacent(p_request, p_settings);
    rows kb.retrieval_row[] := coalesce(p_rows, '{}');
    decision text := kb_pipeline.answerability(p_best.probability, p_settings);
    timings jsonb;
BEGIN
    -- the end every orchestrator shares: adjacent chunks merged (when asked),
    -- snippets, the answerability on every row, and the explain object (or,
    -- without p_explain, only what the retrieval log records)
    IF merge_adjacent AND cardinality(rows) > 0 THEN
        rows := kb_pipeline.merged_passages(rows);
    END IF;
    IF p_settings.snippets AND cardinality(rows) > 0 THEN
        rows := kb_pipeline.with_snippets(rows, p_best.query);
    END IF;
    rows := kb_pipeline.with_answer(rows, decision, p_best.probability);
    timings := jsonb_build_object(
        'embed', (p_timings ->> 'analysis')::numeric + (SELECT coalesce(sum(s.embed_ms), 0) FROM unnest(p_stages) AS s),
        'lexical', (p_timings ->> 'identifiers')::numeric
            + (SELECT coalesce(sum(s.lexical_ms), 0) FROM unnest(p_stages) AS s),
        'dense', (SELECT coalesce(sum(s.dense_ms), 0) FROM unnest(p_stages) AS s),
        'fuse', (p_timings ->> 'fuse')::numeric, 'snippets', kb_pipeline.ms_since(t),
        'total', kb_pipeline.ms_since((p_timings ->> 'started')::timestamptz)) || (p_timings - 'analysis'
            - 'identifiers' - 'fuse' - 'started');
    IF NOT p_explain THEN
        -- what the retrieval log records (kb.log_retrieval), without the rest of the explain object
        RETURN ROW(rows, jsonb_build_object('query', p_request.query, 'mode_requested', p_request.mode_requested,
            'mode', p_plan.mode, 'low_confidence', decision <> 'answer', 'no_evidence', decision = 'no evidence',
            'timings_ms', timings));
    END IF;
    RETURN ROW(rows, kb_pipeline.explain_object(p_request, p_settings, p_plan, p_stages, p_best, p_identifier_chunks,
        cardinality(rows), timings)
        || jsonb_build_object('assembly', kb_pipeline.explain_assembly(
            kb_pipeline.assembly_max_per_document(p_request, p_settings), merge_adjacent,
            ARRAY(SELECT h.chunk_id FROM unnest(p_ranked) AS h WHERE h.rank IS NULL ORDER BY h.uncapped_rank),
            p_rows, rows)));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.result_of(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_plan,
    kb_pipeline.retrieval_stage[], kb_pipeline.retrieval_stage, bigint[], kb_pipeline.ranked_hit[], kb.retrieval_row[],
    jsonb, boolean
) IS
'The end of every retrieval, on one node or over shards: the ranked rows with adjacent chunks merged (when asked), snippets and the answerability decision, and the explain object (p_explain; else what the retrieval log records). p_timings: started (the call''s clock_timestamp), analysis, identifiers and fuse in ms, and any others to report.';

CREATE OR REPLACE FUNCTION kb_pipeline.retrieve_core(
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
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
-- STABLE, and so is everything it calls that reads tables: a STABLE function
-- runs every statement on the snapshot of the query that called it, so one
-- kb_retrieve call sees one state of the documents even under READ COMMITTED
-- (a VOLATILE one takes a new snapshot per statement, and a document updated
-- meanwhile could be missing from one leg and present in the next). It
-- writes nothing: kb_pipeline.retrieve logs.
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
-- JIT compilation costs far more than these millisecond queries ever save
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    timings jsonb := jsonb_build_object('started', clock_timestamp());
    request kb_pipeline.retrieval_request := kb_pipeline.validated_request(p_query, p_k, p_namespace, p_mode,
        p_filters, p_as_of, p_context, p_max_per_document, p_merge_adjacent);
    settings kb_pipeline.retrieval_settings := kb_pipeline.read_retrieval_settings();
    plan kb_pipeline.retrieval_plan;
    identifier_chunks bigint[];
    stages kb_pipeline.retrieval_stage[];
    best kb_pipeline.retrieval_stage;
    ranked kb_pipeline.ranked_hit[];
    rows kb.retrieval_row[];
BEGIN
    -- analyse: the namespaces this call may read, from the session's role
    -- (kb.read_scope: every step below applies them), and the plan
    request.scope := kb.read_scope(request.namespace);
    plan := kb_pipeline.plan_retrieval(request, settings);
    timings := timings || jsonb_build_object('analysis', kb_pipeline.ms_since(t));
    t := clock_timestamp();
    identifier_chunks := kb_pipeline.identifier_chunks(request, plan);
    timings := timings || jsonb_build_object('identifiers', kb_pipeline.ms_since(t));
    -- gather and judge
    stages := kb_pipeline.gather_here(request, plan, settings, cardinality(identifier_chunks) > 0);
    best := stages[kb_pipeline.best_stage(stages)];
    -- fuse and rank, then the passages
    t := clock_timestamp();
    ranked := kb_pipeline.ranked(request, plan, settings, best, identifier_chunks,
        kb_pipeline.candidate_facts(kb_pipeline.stage_candidates(best, identifier_chunks)));
    timings := timings || jsonb_build_object('fuse', kb_pipeline.ms_since(t));
    rows := kb_pipeline.passage_rows(ranked);
    -- judge: the probability that the top passages answer, from the signals
    t := clock_timestamp();
    best := kb_pipeline.judged(plan, settings, best, ranked, rows, cardinality(identifier_chunks) > 0);
    IF kb_pipeline.abstains(best.probability, settings) THEN
        ranked := '{}';
        rows := '{}';
    END IF;
    timings := timings || jsonb_build_object('answer_check', kb_pipeline.ms_since(t));
    RETURN kb_pipeline.result_of(request, settings, plan, stages, best, identifier_chunks, ranked, rows, timings,
        p_explain);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean, boolean) IS
'The retrieval pipeline of one database, behind kb_retrieve and kb_retrieve_explain: analyse (request, scope, plan), gather and judge (kb_pipeline.gather_here, kb_pipeline.best_stage), fuse and rank (kb_pipeline.ranked), passages (kb_pipeline.passage_rows, kb_pipeline.result_of). Returns the rows and, with p_explain, the explain object (else what the retrieval log records).';

CREATE OR REPLACE FUNCTION kb_pipeline.coordinator_steps()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- A shard coordinator runs as its caller (each caller reaches the shards
    -- as itself), so it may execute these: each is pure or reads only what
    -- every reader may read. 090_grants.sql revokes every other function of
    -- kb_pipeline from PUBLIC.
    SELECT ARRAY[
        'coordinator_steps', 'read_retrieval_settings', 'validated_request', 'max_filters_bytes',
        'max_filters_depth', 'filter_value_error', 'check_filters', 'retrieval_modes', 'max_query_chars',
        'max_namespace_chars', 'namespace_pattern', 'max_context_turns', 'assembly_max_per_document',
        'assembly_merge_adjacent', 'plan_retrieval', 'merged_expansions', 'lexical_inputs', 'dense_inputs', 'ms_since', 'calibrate',
        'noise_z', 'uncorrected_evidence_floor', 'new_stage', 'stage_evidence',
        'best_stage', 'answerability', 'abstains', 'answer_checked', 'answer_check_depth', 'judged',
        'answerability_signals', 'answer_probability', 'answerability_explain',
        'own_language_first_rank', 'own_language_first_kept', 'weighs_hits_by_evidence', 'fuse', 'rank', 'ranked',
        'result_of', 'rows_with', 'with_snippets', 'with_answer', 'explain_object', 'explain_assembly',
        'language_correction_explain',
        -- 046_shard_coordinator_steps.sql
        'retrieve_over_shards', 'stage_inputs_over_shards', 'merged_stage', 'merged_leg', 'shard_facts',
        'global_id', 'rows_over_shards'
    ]
$$;
COMMENT ON FUNCTION kb_pipeline.coordinator_steps() IS
'The kb_pipeline functions a shard coordinator, which runs as its caller, may execute (pure, or reading only what every reader may read); 090_grants.sql revokes the others from PUBLIC.';

CREATE OR REPLACE FUNCTION kb_pipeline.retrieve(
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
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb_pipeline.retrieval_result;
BEGIN
    -- one statement, one snapshot: the whole retrieval (kb_pipeline.retrieve_core
    -- is STABLE); the log row is written after it, by a statement of its own
    result := kb_pipeline.retrieve_core(p_query, p_k, p_namespace, p_mode, p_filters, p_as_of, p_context,
        p_max_per_document, p_merge_adjacent, p_explain);
    PERFORM kb.log_retrieval(result.explain, result.rows, p_namespace, p_k);
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean, boolean) IS
'A retrieval and its log row: kb_pipeline.retrieve_core on one snapshot, then kb.log_retrieval. What the doors kb_retrieve and kb_retrieve_explain call once they hold kb.pipeline_door.';

-- The doors keep no variable of a kb_pipeline type: one compiled before a
-- migrate re-created the schema would name a type that no longer exists.
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
BEGIN
    PERFORM kb.enter_pipeline();
    RETURN QUERY SELECT r.*
        FROM kb_pipeline.retrieve(query, k, namespace, mode, filters, as_of, context, max_per_document,
            merge_adjacent, false) AS x
        CROSS JOIN LATERAL unnest(x.rows) AS r
        ORDER BY r.rank;
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'Ranked passages for a question from the documents current at as_of that the session''s role may read: hybrid BM25 + HNSW, per-leg ranks and scores, snippets, provenance, and the call''s answerability on every row. Modes: lexical, dense, hybrid, auto. max_per_document caps the chunks of one document among the k, merge_adjacent joins consecutive chunks of one document into one passage (NULL: the settings of the same names). Runs with the owner''s rights over the namespaces kb.read_scope gives the session''s role.';

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
BEGIN
    PERFORM kb.enter_pipeline();
    -- the explain object, the results as kb_retrieve returns them without the
    -- passage text, and whether the call was logged (not on a hot standby, nor
    -- in a read-only transaction)
    RETURN (
        SELECT x.explain || jsonb_build_object('results', coalesce((
            SELECT jsonb_agg(to_jsonb(r) - 'content' - 'snippet' ORDER BY r.rank) FROM unnest(x.rows) AS r
        ), '[]'), 'retrieval_log', kb.retrieval_log_state())
        FROM kb_pipeline.retrieve(query, k, namespace, mode, filters, as_of, context, max_per_document,
            merge_adjacent, true) AS x
    );
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'How kb_retrieve answered: query analysis, stages tried, candidates per leg, evidence and the answerability decision, model, timings per stage, passage assembly (cap, merges), and the results.';
