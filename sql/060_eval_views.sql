-- Evaluation views for BI tools.

CREATE OR REPLACE VIEW kb.eval_run_summary WITH (security_invoker = true) AS
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

CREATE OR REPLACE VIEW kb.eval_metric_trend WITH (security_invoker = true) AS
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

CREATE OR REPLACE FUNCTION kb.corpus_fingerprint(p_namespace text)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- SECURITY INVOKER: what the calling role's retrievals would search now
    -- (the current documents it may read, their content and chunk counts,
    -- the BM25 statistics of their namespaces, the active model)
    SELECT left(md5(concat_ws(chr(30),
        (SELECT string_agg(concat_ws(chr(31), d.namespace, d.source, d.content_hash, d.chunk_count::text),
            chr(29) ORDER BY d.namespace, d.source)
         FROM kb.documents AS d
         WHERE (p_namespace IS NULL OR d.namespace = p_namespace) AND kb.document_is_current(d.id, now())),
        (SELECT string_agg(concat_ws(chr(31), s.namespace, s.chunk_count::text, s.total_length::text),
            chr(29) ORDER BY s.namespace)
         FROM kb.lexical_stats AS s
         WHERE p_namespace IS NULL OR s.namespace = p_namespace),
        (SELECT m.name FROM kb.models AS m WHERE m.active)
    )), 16)
$$;
COMMENT ON FUNCTION kb.corpus_fingerprint(text) IS
'A hash of what the calling role''s retrievals in p_namespace (NULL: all it reads) would search now: the current documents it may read (source, content hash, chunk count), the BM25 statistics of their namespaces and the active model. kb.eval_runs.corpus_fingerprint holds it per run: equal values searched the same corpus.';
