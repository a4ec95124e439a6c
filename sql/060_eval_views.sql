-- Evaluation views for BI tools.

CREATE OR REPLACE VIEW kb.eval_run_summary AS
SELECT
    r.id AS run_id,
    r.started_at,
    r.dataset,
    r.mode,
    r.model,
    r.git_commit,
    (r.metrics ->> 'cases')::integer AS cases,
    (r.metrics ->> 'ndcg@10')::double precision AS ndcg_10,
    (r.metrics ->> 'mrr@10')::double precision AS mrr_10,
    (r.metrics ->> 'recall@10')::double precision AS recall_10,
    (r.metrics ->> 'pass_top1')::double precision AS pass_top1,
    (r.metrics ->> 'pass_top3')::double precision AS pass_top3,
    (r.metrics ->> 'no_answer_accuracy')::double precision AS no_answer_accuracy,
    (r.metrics ->> 'forbidden_hits')::integer AS forbidden_hits,
    (r.metrics ->> 'latency_p50_ms')::double precision AS latency_p50_ms,
    (r.metrics ->> 'latency_p95_ms')::double precision AS latency_p95_ms
FROM kb.eval_runs AS r;
COMMENT ON VIEW kb.eval_run_summary IS 'One row per evaluation run with its headline metrics.';

CREATE OR REPLACE VIEW kb.eval_metric_trend AS
SELECT
    r.started_at,
    r.dataset,
    r.mode,
    r.model,
    m.key AS metric,
    (m.value #>> '{}')::double precision AS value
FROM kb.eval_runs AS r
CROSS JOIN LATERAL jsonb_each(r.metrics) AS m
WHERE jsonb_typeof(m.value) = 'number';
COMMENT ON VIEW kb.eval_metric_trend IS 'Every numeric metric of every run, long format, for trend charts.';
