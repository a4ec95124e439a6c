-- What a shard accepts from a coordinator (the doors of 01_shard_doors.sql):
-- a caller's arguments like any other, held to what kb_retrieve itself can
-- produce, so no caller of a shard door can make it work past kb_retrieve's
-- bounds or fail on forged statistics.

CREATE OR REPLACE FUNCTION kb_node.max_stage_terms(p_settings kb_pipeline.retrieval_settings)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- a stage's text is at most max_query_chars characters, which give no
    -- more terms than characters; the glossary and the dictionary add at
    -- most their settings' counts
    SELECT kb_pipeline.max_query_chars() + p_settings.glossary_max_terms + p_settings.dictionary_max_terms
$$;
COMMENT ON FUNCTION kb_node.max_stage_terms(kb_pipeline.retrieval_settings) IS
'The most BM25 terms one stage of a kb_retrieve call can have (its text''s terms, the glossary''s and the dictionary''s): the bound of the terms a coordinator may give a shard door. Pure.';

CREATE OR REPLACE FUNCTION kb_node.max_call_terms(p_settings kb_pipeline.retrieval_settings)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- a call has at most 3 stages (the question, normalised, its core terms:
    -- pgkb_plpy.query_analysis)
    SELECT 3 * kb_node.max_stage_terms(p_settings)
$$;
COMMENT ON FUNCTION kb_node.max_call_terms(kb_pipeline.retrieval_settings) IS
'The most distinct BM25 terms all stages of one kb_retrieve call can have (3 stages of kb_node.max_stage_terms): the bound of the terms a coordinator may ask a shard''s statistics of. Pure.';

CREATE OR REPLACE FUNCTION kb_node.checked_shard_inputs(
    p_inputs jsonb, p_stage_count integer, p_settings kb_pipeline.retrieval_settings
)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    stage jsonb;
    corpus jsonb := p_inputs -> 'lexical_corpus';
    bad text;
BEGIN
    -- A coordinator's inputs are a caller's arguments like any other, held
    -- to what kb_retrieve itself can produce: terms per stage
    -- (kb_node.max_stage_terms), statistics that are counts (a negative or
    -- fractional count would fail BM25 with an arithmetic error, a huge df
    -- bend every score), language moments that are finite, a scale above 0.
    IF jsonb_typeof(p_inputs) IS DISTINCT FROM 'object' THEN
        bad := 'the inputs are not a JSON object';
    ELSIF corpus IS NOT NULL AND NOT (
        jsonb_typeof(corpus -> 'chunk_count') = 'number' AND jsonb_typeof(corpus -> 'total_length') = 'number'
        AND (corpus ->> 'chunk_count')::numeric BETWEEN 0 AND 9e15
        AND (corpus ->> 'chunk_count')::numeric = trunc((corpus ->> 'chunk_count')::numeric)
        AND (corpus ->> 'total_length')::numeric BETWEEN 0 AND 9e18
        AND coalesce(jsonb_typeof(corpus -> 'df'), 'object') = 'object'
    ) THEN
        bad := 'lexical_corpus: chunk_count and total_length must be counts';
    ELSIF (SELECT count(*) FROM jsonb_each(coalesce(corpus -> 'df', '{}'))) > kb_node.max_call_terms(p_settings)
        OR EXISTS (
            SELECT 1
            FROM jsonb_each(coalesce(corpus -> 'df', '{}')) AS f
            CROSS JOIN LATERAL (
                SELECT CASE WHEN jsonb_typeof(f.value) = 'number' THEN f.value::numeric END AS n
            ) AS df
            WHERE NOT coalesce(df.n BETWEEN 0 AND (corpus ->> 'chunk_count')::numeric AND df.n = trunc(df.n), false)
        ) THEN
        bad := format('lexical_corpus: df must hold at most %s terms, each a count of at most chunk_count chunks',
            kb_node.max_call_terms(p_settings));
    ELSIF jsonb_array_length(coalesce(p_inputs -> 'stages', '[]')) < p_stage_count THEN
        bad := format('%s stages given, the query has %s', jsonb_array_length(coalesce(p_inputs -> 'stages', '[]')),
            p_stage_count);
    END IF;
    FOR stage_no IN 1 .. p_stage_count LOOP
        EXIT WHEN bad IS NOT NULL;
        stage := p_inputs -> 'stages' -> (stage_no - 1);
        IF coalesce(jsonb_array_length(stage #> '{lexical,terms}'), 0) > kb_node.max_stage_terms(p_settings)
            OR coalesce(jsonb_array_length(stage #> '{lexical,glossary,matches}'), 0)
            > p_settings.glossary_max_terms + p_settings.dictionary_max_terms
            OR EXISTS (
                SELECT 1 FROM jsonb_array_elements_text(coalesce(stage #> '{lexical,terms}', '[]')) AS term (t)
                WHERE length(term.t) > kb_pipeline.max_query_chars()
            ) THEN
            bad := format('stage %s: at most %s terms of at most %s characters, at most %s glossary matches', stage_no,
                kb_node.max_stage_terms(p_settings), kb_pipeline.max_query_chars(),
                p_settings.glossary_max_terms + p_settings.dictionary_max_terms);
        ELSIF coalesce(jsonb_array_length(stage #> '{dense,language_moments}'), 0) > 8 OR EXISTS (
            SELECT 1
            FROM jsonb_array_elements(coalesce(stage #> '{dense,language_moments}', '[]')) AS m (moment)
            CROSS JOIN LATERAL (
                SELECT
                    CASE WHEN jsonb_typeof(m.moment -> 'vectors') = 'number' THEN (m.moment -> 'vectors')::numeric END
                        AS vectors,
                    CASE WHEN jsonb_typeof(m.moment -> 'offset') = 'number' THEN (m.moment -> 'offset')::float8 END
                        AS "offset",
                    CASE WHEN jsonb_typeof(m.moment -> 'scale') = 'number' THEN (m.moment -> 'scale')::float8 END AS scale
            ) AS v
            WHERE NOT coalesce(v.vectors >= 0 AND abs(v."offset") < 'Infinity'::float8
                AND v.scale > 0 AND v.scale < 'Infinity'::float8, false)
        ) THEN
            bad := format('stage %s: language moments must count vectors and have a finite offset and a finite scale above 0',
                stage_no);
        END IF;
    END LOOP;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'kb.shard_stage_candidates: %', bad
            USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the inputs are a shard coordinator''s (kb_pipeline.stage_inputs_over_shards), bounded as kb_retrieve''s own';
    END IF;
    RETURN p_inputs;
END;
$$;
COMMENT ON FUNCTION kb_node.checked_shard_inputs(jsonb, integer, kb_pipeline.retrieval_settings) IS
'A coordinator''s inputs of a shard''s stages (kb_node.shard_gather), checked against what kb_retrieve itself produces: at most kb_node.max_stage_terms terms per stage, corpus statistics that are counts (df at most chunk_count), finite language moments; an error naming what is wrong otherwise. Pure; returns the inputs.';
