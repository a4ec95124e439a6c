-- Optional retrieval log (off by default; kb.settings retrieval_log = true turns it on).
-- The query itself is not stored, only its hash, so the log can be shared with BI tools.

CREATE TABLE kb.retrieval_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    logged_at timestamptz NOT NULL DEFAULT now(),
    query_hash text NOT NULL,
    namespace text,
    mode_requested text NOT NULL,
    mode text NOT NULL,
    k integer NOT NULL,
    result_count integer NOT NULL,
    low_confidence boolean NOT NULL,
    no_evidence boolean NOT NULL,
    sources text[] NOT NULL DEFAULT '{}',
    timings_ms jsonb NOT NULL,
    total_ms double precision NOT NULL,
    role_name text NOT NULL DEFAULT current_user
);
CREATE INDEX retrieval_log_time ON kb.retrieval_log (logged_at);

INSERT INTO kb.settings (key, value, description) VALUES
('retrieval_log', 'false', 'true: every kb_retrieve call appends a row to kb.retrieval_log (query hash, mode, timings, results)');
