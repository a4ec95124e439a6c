-- The answerability model: which signals it reads (one list), the shipped
-- default, and the one accessor that checks a fitted model when it is read.
-- The pipeline step that applies it is kb_pipeline.judged (sql/040_pipeline/12_answerability.sql);
-- docs/RETRIEVAL.md, "The decision", says how the default was fitted and validated.

CREATE OR REPLACE FUNCTION kb.answerability_signal_names()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- kb_pipeline.answerability_signals computes exactly these; a model may weigh any of them
    SELECT ARRAY[
        'lexical_coverage', 'lexical_gap', 'dense_z', 'dense_cosine', 'dense_gap', 'legs_agree',
        'identifier_found', 'answer_bound', 'answer_unbound', 'cross_lingual', 'ambiguous_coverage'
    ]
$$;
COMMENT ON FUNCTION kb.answerability_signal_names() IS
'The signals an answerability model may weigh (kb_pipeline.answerability_signals computes them): the one list that the model check, the explain output and pgkb fit-answerability read.';

CREATE OR REPLACE FUNCTION kb.shipped_answerability_model()
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Fitted by bench/answerability_fit.py on the shared datasets (docs/RETRIEVAL.md,
    -- "The decision": what it was fitted on, and the sets it was validated on).
    SELECT '{
        "hybrid": {"intercept": -4.8003, "lexical_coverage": 5.6237, "ambiguous_coverage": 0.3746, "lexical_gap": 1.0322, "dense_z": 0.7442, "dense_cosine": 1.3808, "dense_gap": 0.3151, "legs_agree": 1.0118, "identifier_found": 0.7316, "answer_bound": 0.2675, "answer_unbound": -0.6207, "cross_lingual": 1.3921},
        "dense": {"intercept": -2.6501, "dense_z": 1.3999, "dense_cosine": 2.0965, "dense_gap": 0.2503, "answer_bound": 0.1748, "answer_unbound": -0.7604, "cross_lingual": 0.6655},
        "lexical": {"intercept": -2.7807, "lexical_coverage": 6.7751, "ambiguous_coverage": 1.62, "lexical_gap": 2.0714, "identifier_found": 0.7175, "answer_bound": 0.7554, "answer_unbound": -0.4884}
    }'::jsonb
$$;
COMMENT ON FUNCTION kb.shipped_answerability_model() IS
'The answerability model a knowledge base uses until pgkb fit-answerability fits its own: logistic coefficients per mode over kb.answerability_signal_names(), fitted on the shared datasets (docs/RETRIEVAL.md, "The decision").';

CREATE OR REPLACE FUNCTION kb.answerability_model_error(p_coefficients jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- NULL when the coefficients are usable: an object per mode (lexical, dense,
    -- hybrid, each present), numbers within +-50, only known signals and "intercept"
    SELECT CASE
        WHEN jsonb_typeof(p_coefficients) IS DISTINCT FROM 'object' THEN 'coefficients must be a JSON object'
        WHEN NOT p_coefficients ?& ARRAY['lexical', 'dense', 'hybrid']
            THEN 'coefficients need an object for each mode: lexical, dense, hybrid'
        ELSE (
            SELECT string_agg(format('%s.%s: %s', m.key, c.key, CASE
                    WHEN NOT c.key = ANY(kb.answerability_signal_names() || 'intercept'::text)
                        THEN 'unknown signal (known: ' || array_to_string(kb.answerability_signal_names(), ', ') || ')'
                    WHEN jsonb_typeof(c.value) <> 'number' THEN 'not a number'
                    ELSE 'outside -50 to 50' END), '; ' ORDER BY m.key, c.key)
            FROM jsonb_each(p_coefficients) AS m
            CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(m.value) = 'object' THEN m.value ELSE '{}' END) AS c
            WHERE NOT c.key = ANY(kb.answerability_signal_names() || 'intercept'::text)
                OR jsonb_typeof(c.value) <> 'number'
                OR abs((c.value #>> '{}')::numeric) > 50
        )
    END
$$;
COMMENT ON FUNCTION kb.answerability_model_error(jsonb) IS
'What is wrong with an answerability model''s coefficients (every problem, naming mode and signal), NULL when they are usable: the check applied when a model is written (pgkb fit-answerability) and when it is read (kb.answerability_model).';

CREATE OR REPLACE FUNCTION kb.answerability_model()
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
-- a reader (and a shard coordinator, which runs as its caller) needs the model,
-- not the table: who fitted it and on what stays with the admins
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    fitted kb.answerability_models;
    problem text;
BEGIN
    SELECT * INTO fitted FROM kb.answerability_models AS m WHERE m.active;
    IF fitted.id IS NULL THEN
        RETURN jsonb_build_object('source', 'shipped', 'coefficients', kb.shipped_answerability_model());
    END IF;
    problem := kb.answerability_model_error(fitted.coefficients);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'kb_retrieve: the active answerability model (kb.answerability_models id %) is not usable: %',
            fitted.id, problem
            USING HINT = 'pgkb fit-answerability --undo goes back to the model before it';
    END IF;
    RETURN jsonb_build_object('source', 'fit ' || fitted.id, 'coefficients', fitted.coefficients);
END;
$$;
COMMENT ON FUNCTION kb.answerability_model() IS
'The answerability model in force, checked (kb.answerability_model_error): {"source": "shipped" or "fit <id>", "coefficients"}; read once per kb_retrieve call with the settings.';
