"""Where the dense stage's time goes, on an existing real-vector benchmark database (read only).

``python -m bench dense_breakdown --db pgkb_bench_real_25000 [--queries 30]`` times, per
real question (half short, half long; its vector from ``kb.embed_query``), interleaved, with
``jit = off`` as inside ``kb_retrieve``:

* ``language_moments``: ``kb.language_moments`` of the query (PL/Python, per language group);
* ``dense_corrected_100``: ``kb_node.dense_candidates(..., 100, kb.language_moments(...))``, the call
  ``kb_retrieve`` makes for a model with language correction (one HNSW scan per group);
* ``dense_raw_100``: the same without moments (one scan of the model's index of all languages);
* ``dense_raw_10``: the same with limit 10;
* ``bare_hnsw_10``: the bare pgvector top 10 (no visibility check).

Report: ``bench/results/dense_breakdown_real.json`` (or ``--out``) and stdout; a table on stderr
with each call's p50 / p95 and its p50 over the bare top 10's (the baseline, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from .config import database_dsn, default_datasets_dir, default_dsn, default_results_dir
from .realcorpus import real_queries
from .timing import pct, prewarm

CALLS = {
    "language_moments": "SELECT kb.language_moments(%(m)s, %(v)s, NULL, %(n)s, %(q)s)",
    "dense_corrected_100": "SELECT count(*) FROM kb_node.dense_candidates(%(v)s, %(m)s, %(d)s, now(), NULL, '{}', "
    "100, kb.language_moments(%(m)s, %(v)s, NULL, %(n)s, %(q)s))",
    "dense_raw_100": "SELECT count(*) FROM kb_node.dense_candidates(%(v)s, %(m)s, %(d)s, now(), NULL, '{}', 100, "
    "'{}'::kb.language_moment[])",
    "dense_raw_10": "SELECT count(*) FROM kb_node.dense_candidates(%(v)s, %(m)s, %(d)s, now(), NULL, '{}', 10, "
    "'{}'::kb.language_moment[])",
}


def table(latency: dict) -> str:
    """p50 / p95 per call and p50 over the bare top-10 HNSW scan's."""
    base = latency["bare_hnsw_10"]["p50"]
    lines = ["| call | p50 / p95 ms | p50 / bare HNSW p50 |", "| --- | --- | --- |"]
    for name, figures in latency.items():
        ratio = round(figures["p50"] / base, 2) if base and figures["p50"] is not None else None
        lines.append(f"| {name} | {figures['p50']} / {figures['p95']} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.retrieval.dense_breakdown", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=default_dsn())
    ap.add_argument("--db", required=True)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--datasets", type=Path, default=default_datasets_dir())
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    qs = real_queries(args.datasets, args.seed, 60)
    texts = qs["short"][: args.queries // 2] + qs["long"][: args.queries - args.queries // 2]
    load_start = [round(x, 2) for x in os.getloadavg()]
    with psycopg.connect(database_dsn(args.dsn, args.db), autocommit=True) as conn:
        conn.execute("SET jit = off")
        model, dims = conn.execute("SELECT name, dimensions FROM kb.models WHERE active").fetchone()
        n = int(conn.execute("SELECT kb.setting('language_min_vectors') #>> '{}'").fetchone()[0])
        prewarm(conn, ["kb.embeddings", "kb.chunks", "kb.documents"], create_extension=False)
        bare = (
            f"SELECT chunk_id FROM kb.embeddings WHERE model = %(m)s "
            f"ORDER BY embedding::vector({dims}) <=> %(v)s::vector({dims}) LIMIT 10"
        )
        calls = CALLS | {"bare_hnsw_10": bare}
        params = [
            {
                "m": model,
                "d": dims,
                "n": n,
                "q": q,
                "v": conn.execute("SELECT kb.embed_query(%s, %s)", [q, model]).fetchone()[0],
            }
            for q in texts
        ]
        for p in params[:3]:  # warm-up
            for sql in calls.values():
                conn.execute(sql, p).fetchall()
        times: dict[str, list[float]] = {k: [] for k in calls}
        for p in params:
            for key, sql in calls.items():
                t = time.perf_counter()
                conn.execute(sql, p).fetchall()
                times[key].append((time.perf_counter() - t) * 1000.0)
    report = {
        "benchmark": "dense_breakdown",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": args.db,
        "model": model,
        "queries": len(params),
        "loadavg_start": load_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "latency_ms": {k: pct(v) for k, v in times.items()},
        "calls": calls,
    }
    out = args.out or default_results_dir() / "dense_breakdown_real.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(table(report["latency_ms"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
