-- The Retrieval Lab as the place where a team chooses its settings.
--
-- An evaluation run records its complete effective configuration (every
-- retrieval setting in force, not only the ones overridden) and a key that
-- names it, so trends draw one line per configuration; each case records
-- what it was asked with (namespace, follow-up context, as_of, k, forbidden
-- sources), so a case can be asked again exactly as the run asked it. Runs
-- stored before keep what they recorded: their configuration is the
-- overrides they named, marked incomplete.
ALTER TABLE kb.eval_runs
ADD COLUMN configuration jsonb NOT NULL DEFAULT '{}',
ADD COLUMN configuration_key text GENERATED ALWAYS AS (
    left(md5(mode || '|' || coalesce(model, '') || '|' || (configuration - 'complete')::text), 12)
) STORED;

UPDATE kb.eval_runs
SET configuration = jsonb_build_object(
    'settings', coalesce(params -> 'settings', '{}'), 'k', params -> 'k', 'complete', false
);

COMMENT ON COLUMN kb.eval_runs.configuration IS
'What the run retrieved with: settings (every session-overridable retrieval setting in force, by key), k, and complete (false for runs stored before configurations were recorded: settings then holds only the overrides).';
COMMENT ON COLUMN kb.eval_runs.configuration_key IS
'Names a configuration: runs with the same mode, model and configuration share it (one trend line each).';

ALTER TABLE kb.eval_results
ADD COLUMN namespace text,
ADD COLUMN context text[],
ADD COLUMN as_of text,
ADD COLUMN k integer,
ADD COLUMN forbidden text[] NOT NULL DEFAULT '{}';

COMMENT ON COLUMN kb.eval_results.namespace IS 'The namespace the case was asked in (the case''s own, else the run''s; NULL: all the role reads).';
COMMENT ON COLUMN kb.eval_results.context IS 'The earlier questions of a follow-up case, as asked.';
COMMENT ON COLUMN kb.eval_results.as_of IS 'The case''s as_of as written in the case (NULL: the time of the run).';
COMMENT ON COLUMN kb.eval_results.k IS 'The k the case was asked with.';
COMMENT ON COLUMN kb.eval_results.forbidden IS 'Sources the case must not return.';

-- Judgments: a person (in the lab) or an application (kb.record_judgment,
-- e.g. a chat product's thumbs-up) says whether a source answers a question.
-- Under the row-level security of the judged document (sql/096_judgments.sql):
-- a role reads and writes judgments only of documents it may read. One
-- judgment per role, namespace, question and source: judging again replaces it.
CREATE TABLE kb.judgments (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL CONSTRAINT judgments_namespace_valid CHECK (
        namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
    ),
    query text NOT NULL CONSTRAINT judgments_query_valid CHECK (
        query = btrim(query) AND query <> '' AND length(query) <= 2000
    ),
    context text[] NOT NULL DEFAULT '{}' CONSTRAINT judgments_context_valid CHECK (cardinality(context) <= 20),
    as_of date,
    source text NOT NULL CONSTRAINT judgments_source_valid CHECK (source <> '' AND length(source) <= 1000),
    judgment text NOT NULL CONSTRAINT judgments_judgment_valid CHECK (
        judgment IN ('relevant', 'not relevant', 'forbidden')
    ),
    judged_by name NOT NULL DEFAULT current_user,
    judged_at timestamptz NOT NULL DEFAULT now(),
    origin text NOT NULL DEFAULT 'sql' CONSTRAINT judgments_origin_valid CHECK (
        origin <> '' AND length(origin) <= 100
    ),
    note text CONSTRAINT judgments_note_valid CHECK (length(note) <= 2000)
);
CREATE UNIQUE INDEX judgments_one_per_role ON kb.judgments (namespace, judged_by, md5(query), source);

COMMENT ON TABLE kb.judgments IS
'Whether a source answers a question (relevant, not relevant, forbidden), judged by a role in the lab or by an application through kb.record_judgment; kb.judged_cases turns them into golden cases. Row-level security: the judged document''s.';
