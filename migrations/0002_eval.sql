-- Evaluation runs and per-case results, kept for trends (pgkb eval writes them).

CREATE TABLE kb.eval_runs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    dataset text NOT NULL,
    mode text NOT NULL,
    model text,
    git_commit text,
    params jsonb NOT NULL DEFAULT '{}',
    metrics jsonb NOT NULL DEFAULT '{}',
    metrics_by_category jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX eval_runs_dataset ON kb.eval_runs (dataset, mode, started_at);

CREATE TABLE kb.eval_results (
    run_id bigint NOT NULL REFERENCES kb.eval_runs (id) ON DELETE CASCADE,
    case_id text NOT NULL,
    category text,
    query text NOT NULL,
    expected text[] NOT NULL,
    returned text[] NOT NULL,
    first_relevant_rank integer,
    ndcg_10 double precision,
    forbidden_hit boolean NOT NULL DEFAULT false,
    low_confidence boolean,
    latency_ms double precision,
    error text,
    PRIMARY KEY (run_id, case_id)
);
