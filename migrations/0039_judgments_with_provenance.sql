-- Judgments as data with scope, provenance and history; evaluation runs that
-- say what they compared and who ran them.
--
-- kb.judgments
--   judgment 'no answer'   an explicit judgment that nothing in the namespace
--                          answers the question (it names no source); a case
--                          expects no evidence only from one of these, never
--                          from "not relevant" judgments
--   asked_in               the namespace the question was asked in (NULL: all
--                          the rater reads)
--   shown                  the namespace/source of every passage the rater
--                          was shown with the question: the question is
--                          readable only by roles that may read all of them
--   rater_kind, status     an admin's judgment is accepted when made; any
--                          other role's is suggested until an admin accepts
--                          (or rejects) it; cases read accepted ones only
--   retired_at, retired_by a judgment is never updated or deleted: judging
--                          again or deleting retires the live one (kept as
--                          history), restoring makes a retired one live again
--   case_key               the case a judgment belongs to: namespace,
--                          question, earlier questions and as_of (the same
--                          question at two dates is two cases)
ALTER TABLE kb.judgments
ALTER COLUMN source DROP NOT NULL,
DROP CONSTRAINT judgments_judgment_valid,
ADD CONSTRAINT judgments_judgment_valid CHECK (
    judgment IN ('relevant', 'not relevant', 'forbidden', 'no answer')
    AND (judgment = 'no answer') = (source IS NULL)
),
ADD COLUMN asked_in text CONSTRAINT judgments_asked_in_valid CHECK (
    asked_in ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
),
ADD COLUMN shown text[] NOT NULL DEFAULT '{}' CONSTRAINT judgments_shown_valid CHECK (cardinality(shown) <= 1000),
ADD COLUMN rater_kind text NOT NULL DEFAULT 'reader' CONSTRAINT judgments_rater_kind_valid CHECK (
    rater_kind IN ('admin', 'reader')
),
ADD COLUMN status text NOT NULL DEFAULT 'suggested' CONSTRAINT judgments_status_valid CHECK (
    status IN ('accepted', 'suggested', 'rejected')
),
ADD COLUMN reviewed_by name,
ADD COLUMN reviewed_at timestamptz,
ADD COLUMN retired_at timestamptz,
ADD COLUMN retired_by name,
ADD COLUMN case_key text;

COMMENT ON COLUMN kb.judgments.asked_in IS 'The namespace the question was asked in when judged (NULL: every namespace the rater reads).';
COMMENT ON COLUMN kb.judgments.shown IS 'namespace/source of every passage shown with the question when judged: the question is readable only by roles that may read all of them.';
COMMENT ON COLUMN kb.judgments.rater_kind IS 'admin (a member of pgkb_admin, or the owner) or reader (any other role), when judged.';
COMMENT ON COLUMN kb.judgments.status IS 'accepted (an admin''s judgment, or a suggestion an admin accepted), suggested (another role''s, waiting for review) or rejected; golden cases read accepted judgments only.';
COMMENT ON COLUMN kb.judgments.retired_at IS 'When the judgment stopped being live (judged again, or deleted); NULL: live. Retired judgments are the history.';
COMMENT ON COLUMN kb.judgments.case_key IS 'The case the judgment belongs to: namespace, question, earlier questions and as_of.';

-- what the judgments of 0.1.0 meant: an admin's stand, another role's a suggestion
UPDATE kb.judgments AS j
SET
    rater_kind = 'admin',
    status = 'accepted'
WHERE EXISTS (
    SELECT 1 FROM pg_catalog.pg_roles AS r
    WHERE
        r.rolname = j.judged_by
        AND (r.rolsuper OR pg_catalog.pg_has_role(r.oid, 'pgkb_admin', 'MEMBER'))
);

-- the key of kb.judgment_case_key (sql/096_judgments/01_rules.sql), which
-- sets it on every new judgment
UPDATE kb.judgments
SET case_key = left(md5(
    namespace || chr(31) || query || chr(31) || array_to_string(context, chr(30)) || chr(31)
    || coalesce((as_of - date '2000-01-01')::text, '')
), 16);
ALTER TABLE kb.judgments ALTER COLUMN case_key SET NOT NULL;

DROP INDEX kb.judgments_one_per_role;
CREATE UNIQUE INDEX judgments_one_live_per_role ON kb.judgments (
    namespace, judged_by, case_key, coalesce(source, '')
) WHERE retired_at IS NULL;
CREATE INDEX judgments_case ON kb.judgments (namespace, case_key);

-- Who ran an evaluation and on what: the role (row-level security shows a
-- role its own runs), the version of the case set and a fingerprint of the
-- documents and statistics the run saw. Runs stored before name no role:
-- only roles that read every namespace see them.
ALTER TABLE kb.eval_runs
ADD COLUMN role_name name DEFAULT current_user,
ADD COLUMN case_set_version text,
ADD COLUMN corpus_fingerprint text;
UPDATE kb.eval_runs SET role_name = NULL;
COMMENT ON COLUMN kb.eval_runs.role_name IS 'The role that ran the evaluation (NULL: stored before runs recorded it).';
COMMENT ON COLUMN kb.eval_runs.case_set_version IS 'A hash of the cases as asked (id, question, context, namespace, as_of, expected, forbidden): two runs with the same value asked the same cases.';
COMMENT ON COLUMN kb.eval_runs.corpus_fingerprint IS 'A hash of the current documents the running role could read in the run''s namespace (source, content hash, status, dates) and of their statistics: two runs with the same value searched the same corpus.';

-- sql/096_judgments/ re-creates these with other columns and parameters
DROP VIEW IF EXISTS kb.judged_cases;
DROP FUNCTION IF EXISTS kb.record_judgment(text, text, text, text, text[], date, text, text);
