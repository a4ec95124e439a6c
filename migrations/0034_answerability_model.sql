-- Answerability as a calibrated probability (docs/RETRIEVAL.md, "The decision"):
-- a logistic model over the pipeline's own signals gives every call the
-- probability that its top 3 passages answer the question; two settings turn it
-- into the decision (answer_probability, no_evidence_probability).
--
-- kb.answerability_models  models fitted for this knowledge base by
--                          `pgkb fit-answerability` (its golden cases and
--                          judgments). At most one is active; with none the
--                          shipped default (kb.shipped_answerability_model) applies.
--   coefficients  {"<mode>": {"intercept": b, "<signal>": w, ...}} for the modes
--                 lexical, dense and hybrid; every number within +-50 (bounded
--                 when written here, checked against the signal list when read:
--                 kb.answerability_model)
--   fitted_on     what it was fitted on (cases, judgments, their counts)
--   validation    the cross-validation folds' figures, before (the model in force
--                 then) and after
--   replaced      the model in force when this one was fitted (NULL: the shipped
--                 default): `pgkb fit-answerability --undo` goes back to it
CREATE TABLE kb.answerability_models (
    id bigserial PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL DEFAULT current_user,
    fitted_on jsonb NOT NULL,
    coefficients jsonb NOT NULL,
    validation jsonb NOT NULL DEFAULT '{}',
    replaced bigint REFERENCES kb.answerability_models (id),
    active boolean NOT NULL DEFAULT false,
    CONSTRAINT answerability_models_bounded CHECK (
        jsonb_typeof(coefficients) = 'object'
        AND NOT jsonb_path_exists(coefficients, 'strict $.* ? (@.type() != "object")')
        AND NOT jsonb_path_exists(coefficients, 'strict $.*.* ? (@.type() != "number" || @ > 50 || @ < -50)')
        AND NOT jsonb_path_exists(coefficients, 'strict $.keyvalue() ? (!(@.key like_regex "^(lexical|dense|hybrid)$"))')
    )
);
CREATE UNIQUE INDEX answerability_models_one_active ON kb.answerability_models (active) WHERE active;
COMMENT ON TABLE kb.answerability_models IS
'Answerability models fitted for this knowledge base (pgkb fit-answerability); the active one, else the shipped default, gives every kb_retrieve call its probability.';

-- min_evidence meant "stage evidence at or below which no rows"; the decision is
-- a probability now, with two thresholds of their own (sql/005_settings.sql). An
-- admin's old value would silently mean something else, so the key goes.
DELETE FROM kb.settings WHERE key = 'min_evidence';

-- the decision and probability of each evaluated case, with the signals behind it
ALTER TABLE kb.eval_results ADD COLUMN answerability jsonb;
COMMENT ON COLUMN kb.eval_results.answerability IS
'The call''s decision, probability and signals ({"decision", "probability", "signals"}): what pgkb fit-answerability fits on.';
