-- The judge's decision (docs/RETRIEVAL.md, "The decision"): the signals a call
-- computes anyway, the probability the answerability model gives them that the
-- top 3 passages answer the question, and the decision two settings draw from it.
-- Pure steps: one node and a shard coordinator judge alike.

CREATE OR REPLACE FUNCTION kb_pipeline.answer_check_depth()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 3 $$;
COMMENT ON FUNCTION kb_pipeline.answer_check_depth() IS
'How many passages of the fused ranking the decision is about: the answer-type check reads them and the probability is that one of them answers (where the evaluation counts a pass).';

CREATE OR REPLACE FUNCTION kb_pipeline.answer_checked(
    p_plan kb_pipeline.retrieval_plan,
    p_best kb_pipeline.retrieval_stage,
    p_rows kb.retrieval_row[]
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb_pipeline.retrieval_stage := p_best;
    answer_type text := p_plan.analysis ->> 'answer_type';
BEGIN
    -- A question that asks for a price, a duration, a date, a count, a person, a
    -- place or a phone number is answered only by a passage holding a value of
    -- that type bound to what it asks about (in the sentence or table row that
    -- carries its subject terms). Both legs find the right document for a fact it
    -- does not state, so the scores cannot tell; the top passages' text can. What
    -- it found is a signal of the model (answer_bound, answer_unbound). No type
    -- (claims, keywords) or no rows: no PL/Python call.
    IF answer_type IS NULL OR p_best IS NULL OR coalesce(cardinality(p_rows), 0) = 0 THEN
        RETURN result;
    END IF;
    result.answer_check := kb.answer_check(answer_type,
        coalesce(p_plan.analysis ->> 'composed', p_plan.analysis ->> 'original'),
        ARRAY(
            SELECT concat('# ', r.section_path, E'\n', r.content)
            FROM unnest(p_rows) AS r
            ORDER BY r.rank
            LIMIT kb_pipeline.answer_check_depth()
        ));
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.answer_checked(kb_pipeline.retrieval_plan, kb_pipeline.retrieval_stage, kb.retrieval_row[]) IS
'The answer-type check: for a question with an answer type (analysis answer_type), whether one of the top kb_pipeline.answer_check_depth passages holds a value of that type bound to the question''s subject (kb.answer_check). The stage with answer_check set (NULL: not checked). Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.answerability_signals(
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage,
    p_ranked kb_pipeline.ranked_hit[],
    p_identifier_found boolean
)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Every signal is bounded, so that no single value can carry the probability
    -- alone. dense_z: the best dense hit's z margin (of any language;
    -- kb_pipeline.dense_margins), -4 when the leg found nothing. dense_cosine:
    -- the best own-language cosine (0 when there is none: a corpus in the other
    -- language says nothing here).
    WITH hits AS (
        SELECT d.chunk_id, d.rank, d.own, d.z_margin, d.cosine
        FROM kb_pipeline.dense_margins(p_plan, p_settings, p_best) AS d
    ),
    -- the ranked hits, not the rows: their chunk ids are the legs' (a coordinator's global ids)
    top AS (
        SELECT r.chunk_id, r.rank, r.lexical_rank, r.dense_rank
        FROM unnest(p_ranked) AS r
        WHERE r.rank <= kb_pipeline.answer_check_depth()
    )
    SELECT jsonb_build_object(
        'lexical_coverage', round(least(1, greatest(0, coalesce(p_best.lexical_top_coverage, 0)))::numeric, 4),
        -- the part of it the top BM25 hit owes to ambiguous translations: the
        -- coverage their words get whole, less what their share of the word gives
        'ambiguous_coverage', round(least(1, greatest(0, coalesce(
            (p_best.lexical[1]).coverage - (p_best.lexical[1]).weighted_coverage, 0)))::numeric, 4),
        'dense_z', round(least(6, greatest(-4, coalesce((SELECT max(h.z_margin) FROM hits AS h), -4)))::numeric, 4),
        'dense_cosine', round(least(4, greatest(-4, coalesce((SELECT max(h.cosine) FROM hits AS h), 0)))::numeric, 4),
        -- how far the first hit of each leg stands above its second: one passage that
        -- stands out, rather than several alike (a question about a neighbour of theirs)
        'dense_gap', round(least(4, greatest(0, coalesce((
            SELECT max(h.z_margin) FILTER (WHERE h.rank = 1) - max(h.z_margin) FILTER (WHERE h.rank = 2)
            FROM hits AS h
        ), 0)))::numeric, 4),
        'lexical_gap', round(coalesce((
            SELECT CASE WHEN count(*) = 1 THEN 1 ELSE 1 - min(l.score) / nullif(max(l.score), 0) END
            FROM unnest(p_best.lexical) AS l
            WHERE l.rank <= 2 AND NOT l.trigram
        ), 0)::numeric, 4),
        'legs_agree', (SELECT count(*) FILTER (WHERE t.lexical_rank <= 3 AND t.dense_rank <= 3) > 0
            FROM top AS t)::integer,
        'identifier_found', coalesce(p_identifier_found, false)::integer,
        'answer_bound', (p_best.answer_check IS NOT NULL AND p_best.answer_check -> 'bound' <> 'null'::jsonb)::integer,
        'answer_unbound', (p_best.answer_check IS NOT NULL AND p_best.answer_check -> 'bound' = 'null'::jsonb)::integer,
        'cross_lingual', coalesce((
            SELECT NOT h.own FROM top AS t JOIN hits AS h USING (chunk_id) WHERE t.rank = 1
        ), false)::integer
    )
$$;
COMMENT ON FUNCTION kb_pipeline.answerability_signals(
    kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_stage, kb_pipeline.ranked_hit[],
    boolean
) IS
'The signals of a call the answerability model reads (kb.answerability_signal_names): the top lexical idf coverage, the best dense z above its group''s noise level, the raw cosine of the best own-language hit against the provider''s thresholds, whether both legs rank a top-3 passage in their top 3, an identifier found verbatim, the answer-type check''s outcome, and whether the first passage is in another language than the question. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.answer_probability(p_signals jsonb, p_model jsonb, p_mode text)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- logistic: 1 / (1 + exp(-(intercept + sum of weight x signal))), the linear
    -- part held to +-30 (exp overflows far beyond; the probability is 0 or 1 there)
    SELECT 1 / (1 + exp(-least(30, greatest(-30,
        coalesce((p_model -> 'coefficients' -> p_mode ->> 'intercept')::float8, 0)
        + coalesce((
            SELECT sum((c.value #>> '{}')::float8 * (p_signals ->> c.key)::float8)
            FROM jsonb_each(p_model -> 'coefficients' -> p_mode) AS c
            WHERE c.key <> 'intercept' AND p_signals ? c.key
        ), 0)))))
$$;
COMMENT ON FUNCTION kb_pipeline.answer_probability(jsonb, jsonb, text) IS
'The probability that a call''s top 3 passages answer its question: the answerability model''s logistic function of the call''s signals, with the coefficients of its mode. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.answerability(p_probability double precision, p_settings kb_pipeline.retrieval_settings)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- no evidence: no probability (nothing found) or below no_evidence_probability
    -- (no rows while the cutoff is on); answer: at or above answer_probability;
    -- low confidence: between the two
    SELECT CASE
        WHEN coalesce(p_probability, 0) <= 0 OR p_probability < p_settings.no_evidence_probability THEN 'no evidence'
        WHEN p_probability >= p_settings.answer_probability THEN 'answer'
        ELSE 'low confidence'
    END
$$;
COMMENT ON FUNCTION kb_pipeline.answerability(double precision, kb_pipeline.retrieval_settings) IS
'The decision of a call from its probability (kb_pipeline.judged): no evidence below no_evidence_probability (kb_pipeline.abstains: no rows while the cutoff is on), answer at or above answer_probability, low confidence between. Every kb_retrieve row carries it. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.abstains(p_probability double precision, p_settings kb_pipeline.retrieval_settings)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT p_settings.no_evidence_cutoff AND kb_pipeline.answerability(p_probability, p_settings) = 'no evidence'
$$;
COMMENT ON FUNCTION kb_pipeline.abstains(double precision, kb_pipeline.retrieval_settings) IS
'Whether a call returns no rows: the cutoff is on and its decision (kb_pipeline.answerability) is no evidence. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.judged(
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage,
    p_ranked kb_pipeline.ranked_hit[],
    p_rows kb.retrieval_row[],
    p_identifier_found boolean
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb_pipeline.retrieval_stage;
BEGIN
    -- the answer-type check on the ranked rows, the signals, and the model's
    -- probability that the top passages answer; no rows at all: probability 0
    IF p_best IS NULL THEN
        RETURN NULL;
    END IF;
    result := kb_pipeline.answer_checked(p_plan, p_best, p_rows);
    result.signals := kb_pipeline.answerability_signals(p_plan, p_settings, result, p_ranked, p_identifier_found);
    result.probability := CASE WHEN coalesce(cardinality(p_rows), 0) = 0 THEN 0
        ELSE kb_pipeline.answer_probability(result.signals, p_settings.answerability_model, p_plan.mode) END;
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.judged(
    kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_stage, kb_pipeline.ranked_hit[],
    kb.retrieval_row[], boolean
) IS
'The judge of a call on its ranked rows: the answer-type check (kb_pipeline.answer_checked), the signals (kb_pipeline.answerability_signals) and the probability (kb_pipeline.answer_probability) set on the stage used. Pure: one node and a shard coordinator judge alike.';

CREATE OR REPLACE FUNCTION kb_pipeline.answerability_explain(
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage
)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    WITH decision AS (
        SELECT kb_pipeline.answerability(p_best.probability, p_settings) AS decision,
            round(coalesce(p_best.probability, 0)::numeric, 3) AS probability,
            p_settings.answerability_model -> 'coefficients' -> p_plan.mode AS coefficients
    ),
    contributions AS (
        SELECT s.name, (p_best.signals ->> s.name)::numeric AS value,
            coalesce((d.coefficients ->> s.name)::numeric, 0) AS weight,
            round((p_best.signals ->> s.name)::numeric * coalesce((d.coefficients ->> s.name)::numeric, 0), 3)
                AS contribution
        FROM decision AS d
        CROSS JOIN unnest(kb.answerability_signal_names()) AS s (name)
        WHERE p_best.signals ? s.name
    )
    SELECT jsonb_build_object(
        'decision', d.decision,
        'probability', d.probability,
        -- one sentence that reads the same numbers as the fields beside it
        'reason', CASE
            WHEN p_best.signals IS NULL THEN 'nothing found: no evidence'
            WHEN d.decision = 'answer' THEN format('probability %s is at or above answer_probability %s: answer',
                d.probability, p_settings.answer_probability)
            WHEN d.decision = 'low confidence' THEN format(
                'probability %s is below answer_probability %s and at or above no_evidence_probability %s: low confidence',
                d.probability, p_settings.answer_probability, p_settings.no_evidence_probability)
            ELSE format('probability %s is below no_evidence_probability %s: no evidence%s', d.probability,
                p_settings.no_evidence_probability, CASE WHEN p_settings.no_evidence_cutoff THEN ' (no rows)' ELSE '' END)
            END || coalesce((
                SELECT '; it rests most on ' || string_agg(format('%s %s', c.name,
                    CASE WHEN c.contribution >= 0 THEN '+' ELSE '' END || c.contribution), ', '
                    ORDER BY abs(c.contribution) DESC)
                FROM (SELECT * FROM contributions AS c WHERE c.contribution <> 0
                    ORDER BY abs(c.contribution) DESC LIMIT 3) AS c
            ), ''),
        'model', p_settings.answerability_model ->> 'source',
        'mode', p_plan.mode,
        'intercept', coalesce((d.coefficients ->> 'intercept')::numeric, 0),
        'signals', coalesce((
            SELECT jsonb_object_agg(c.name, jsonb_build_object('value', c.value, 'weight', c.weight,
                'contribution', c.contribution))
            FROM contributions AS c
        ), '{}'),
        'answer_probability', p_settings.answer_probability,
        'no_evidence_probability', p_settings.no_evidence_probability,
        'cutoff', p_settings.no_evidence_cutoff,
        'answer_type', p_plan.analysis -> 'answer_type',
        'answer_check', CASE WHEN p_best.answer_check IS NOT NULL THEN jsonb_build_object(
            'rule', 'a passage among the top ' || kb_pipeline.answer_check_depth()
                || ' holds a value of the answer type in a sentence or table row holding at least '
                || (p_best.answer_check ->> 'min_subject_share') || ' of the question''s subject terms '
                || '(a passage in the other language: through identifiers and a Chinese question''s Latin words, '
                || 'or in first place); the outcome is the signal answer_bound or answer_unbound',
            'subject_terms', p_best.answer_check -> 'subject_terms',
            'passages_read', p_best.answer_check -> 'passages_read',
            'bound_value', p_best.answer_check -> 'bound',
            'min_subject_share', p_best.answer_check -> 'min_subject_share') END
    )
    FROM decision AS d
$$;
COMMENT ON FUNCTION kb_pipeline.answerability_explain(
    kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_stage
) IS
'The explain entry of a call''s decision: the decision, the probability, a reason sentence built from the same numbers, the model in force, each signal''s value, weight and contribution, the intercept, both thresholds and the answer-type check. Pure.';
