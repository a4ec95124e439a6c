"""Replay lag of a hot standby during a bulk ingest, and what the ingest does to reads on it.

    /opt/pgkb/venv/bin/python bench/replica_lag.py [--documents 1500] [--batch 50] [--queries 40]
        [--out bench/results/replica_lag.json]

A throwaway primary and its streaming standby (harness.cluster: pg_basebackup, temporary folders,
free ports). The model is the `hash` provider (384 dims): the vectors' meaning is not the point,
their WAL is (vectors, HNSW pages, chunks, postings all replicate). Phases, same run:

1. baseline: `kb_retrieve` (hybrid) latency on the idle standby;
2. a writer inserts `--documents` documents in transactions of `--batch` on the primary while a
   sampler reads, every 100 ms, the bytes between the primary's WAL position and the standby's
   replay position and `pg_stat_replication.replay_lag`, and a reader keeps querying the standby
   (latency, errors such as conflicts with recovery);
3. after the last commit: seconds until the standby has replayed everything.

Prints JSON and a short table; the standby's read latency during the ingest is given as a ratio
to its idle baseline."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from harness import cluster  # noqa: E402
from harness.db import connect  # noqa: E402
from harness.migrate import migrate  # noqa: E402

WORDS = (
    "refund policy shipping parcel warehouse security incident rotate key laptop mentor runbook deploy "
    "rollback database replica standby latency throughput budget invoice contract vendor audit backup "
    "restore region customer ticket escalation release schedule holiday overtime travel expense"
).split()
QUERIES = ["refund policy", "rotate the keys after an incident", "replica latency budget", "travel expense"]


def body(rng: random.Random, i: int) -> str:
    sections = [
        f"## Part {s}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120))) + "." for s in range(3)
    ]
    return f"# Document {i}\n\n" + "\n\n".join(sections)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def query_latencies(dsn: str, count: int, stop: threading.Event | None = None) -> tuple[list[float], list[str]]:
    times, errors = [], []
    with connect(dsn) as conn:
        conn.execute("SELECT count(*) FROM kb_retrieve('warm up', mode => 'hybrid')")
        n = 0
        while (stop is None and n < count) or (stop is not None and not stop.is_set()):
            q = QUERIES[n % len(QUERIES)]
            started = time.perf_counter()
            try:
                conn.execute("SELECT count(*) FROM kb_retrieve(%s, mode => 'hybrid')", (q,)).fetchone()
                times.append((time.perf_counter() - started) * 1000)
            except psycopg.Error as exc:  # e.g. canceling statement due to conflict with recovery
                errors.append(str(exc).splitlines()[0])
                if conn.closed or conn.broken:
                    conn = connect(dsn)
            n += 1
    return times, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--queries", type=int, default=40, help="baseline queries on the idle standby")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "replica_lag.json")
    args = parser.parse_args()
    primary = cluster.throwaway_settings("pgkb-bench-primary-")
    standby = cluster.throwaway_settings("pgkb-bench-standby-")
    rng = random.Random(7)
    try:
        cluster.init(primary)
        cluster.start(primary)
        cluster.ensure_database(primary)
        migrate(primary.embedded_dsn, primary)
        pdsn, sdsn = primary.embedded_dsn, standby.embedded_dsn
        with connect(pdsn) as conn:
            conn.execute("DELETE FROM kb.models")
            conn.execute("SELECT kb.register_model('bench-hash', 'hash', 'hash', 384, '{}', true)")
            for i in range(200):  # something to retrieve before the bulk load
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
                    (f"seed-{i}.md", body(rng, i)),
                )
        cluster.create_standby(primary, standby)
        cluster.wait_for_replay(pdsn, sdsn)
        baseline, baseline_errors = query_latencies(sdsn, args.queries)

        samples: list[dict] = []
        stop = threading.Event()
        reader_out: dict = {}

        def sampler() -> None:
            with connect(pdsn) as p, connect(sdsn) as s:
                while not stop.is_set():
                    lsn = p.execute("SELECT pg_current_wal_lsn()::text AS l").fetchone()["l"]
                    lag = p.execute(
                        "SELECT extract(epoch FROM replay_lag) AS s FROM pg_stat_replication LIMIT 1"
                    ).fetchone()
                    behind = s.execute(
                        "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()) AS b", (lsn,)
                    ).fetchone()["b"]
                    samples.append(
                        {"bytes": max(0, float(behind)), "replay_lag_s": float(lag["s"] or 0) if lag else None}
                    )
                    stop.wait(0.1)

        def reader() -> None:
            reader_out["times"], reader_out["errors"] = query_latencies(sdsn, 0, stop)

        with connect(pdsn) as conn:
            wal_start = conn.execute("SELECT pg_current_wal_lsn()::text AS l").fetchone()["l"]
        threads = [threading.Thread(target=sampler), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        started = time.monotonic()
        with connect(pdsn) as conn:
            for first in range(0, args.documents, args.batch):
                with conn.transaction():
                    for i in range(first, min(first + args.batch, args.documents)):
                        conn.execute(
                            "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
                            (f"bulk-{i}.md", body(rng, i)),
                        )
            ingest_s = time.monotonic() - started
            chunks = conn.execute("SELECT count(*) AS n FROM kb.chunks").fetchone()["n"]
            wal_bytes = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn) AS b", (wal_start,)
            ).fetchone()["b"]
        catch_up_s = cluster.wait_for_replay(pdsn, sdsn, timeout=600)
        stop.set()
        for t in threads:
            t.join()
    finally:
        for settings in (standby, primary):
            cluster.destroy(settings)
            shutil.rmtree(settings.home, ignore_errors=True)

    lag_bytes = [s["bytes"] for s in samples]
    lag_s = [s["replay_lag_s"] for s in samples if s["replay_lag_s"] is not None]
    during = reader_out.get("times", [])
    report = {
        "benchmark": "replica_lag",
        "provider": "hash (384 dims)",
        "documents": args.documents,
        "batch": args.batch,
        "ingest_seconds": round(ingest_s, 2),
        "documents_per_s": round(args.documents / ingest_s, 1),
        "chunks_total": chunks,
        "wal_mb": round(float(wal_bytes) / 1e6, 1),
        "wal_mb_per_s": round(float(wal_bytes) / 1e6 / ingest_s, 2),
        "lag_kb": {
            p: round((percentile(lag_bytes, q) or 0) / 1e3, 1) for p, q in (("p50", 50), ("p95", 95), ("max", 100))
        },
        "replay_lag_ms": {
            p: round((percentile(lag_s, q) or 0) * 1e3, 1) for p, q in (("p50", 50), ("p95", 95), ("max", 100))
        },
        "catch_up_after_last_commit_s": round(catch_up_s, 3),
        "standby_query_ms_idle": {"p50": percentile(baseline, 50), "p95": percentile(baseline, 95), "n": len(baseline)},
        "standby_query_ms_during_ingest": {
            "p50": percentile(during, 50),
            "p95": percentile(during, 95),
            "n": len(during),
        },
        "standby_errors": baseline_errors + reader_out.get("errors", []),
        "samples": len(samples),
    }
    if baseline and during:
        report["standby_p50_ratio_during_vs_idle"] = round(percentile(during, 50) / percentile(baseline, 50), 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print("\n| measure | value |\n| --- | --- |")
    for key in (
        "documents_per_s",
        "wal_mb_per_s",
        "lag_kb",
        "replay_lag_ms",
        "catch_up_after_last_commit_s",
        "standby_p50_ratio_during_vs_idle",
    ):
        print(f"| {key} | {report.get(key)} |")
    print(f"| standby errors | {len(report['standby_errors'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
