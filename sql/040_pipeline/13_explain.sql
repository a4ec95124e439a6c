-- The explain object of a call (kb_retrieve_explain, and what the retrieval
-- log records): analysis, stages, candidates, thresholds, timings, the
-- language correction and the assembly of passages.

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
                'dense_candidates', cardinality(s.dense), 'dense_query_stage', s.dense_query_stage,
                'lexical_top_coverage', s.lexical_top_coverage,
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
