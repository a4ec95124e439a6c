"""kb_retrieve under concurrent load, and the first query of a fresh client with and without PgBouncer.

    /opt/pgkb/venv/bin/python bench/concurrency.py [--clients 1,4,16] [--seconds 15] [--documents 2000]
        [--first-queries 10] [--out bench/results/concurrency.json]

A throwaway cluster (temporary folder, free port). Two databases:

* `pgkb` (load): `--documents` documents with the `hash` provider (384 dims) — the vectors'
  meaning is not the point here, the pipeline's cost under contention is. For each client count,
  that many threads (one connection each, warmed by one call) call `kb_retrieve` (hybrid, rotating
  queries) for `--seconds` while a writer inserts one document per transaction; throughput,
  p50/p95/p99 and errors (expected 0) per client count; 1 client is the baseline of the ratios.
* `pgkb_e5` (first query): a few documents with the bundled default model, because what a fresh
  connection pays is PL/Python start, imports and the model's load. "Fresh client" = connect and
  run the first `kb_retrieve` (dense, the model embeds the query), timed together: directly
  against PostgreSQL (a new backend each time) and through PgBouncer 1.18 in transaction mode
  whose pool was warmed (its server connections have already loaded the model). PgBouncer is
  started by this script as the `postgres` user on a free port; without /usr/sbin/pgbouncer that
  part is skipped with a message (`apt-get install pgbouncer`).

Clients through PgBouncer in transaction mode must not use server-side prepared statements
(psycopg: prepare_threshold=None) nor session state (SET ROLE, SET pgkb.*): each transaction may
run on another server connection."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
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

PGBOUNCER = Path("/usr/sbin/pgbouncer")
WORDS = (
    "refund policy shipping parcel warehouse security incident rotate key laptop mentor runbook deploy "
    "rollback database replica standby latency throughput budget invoice contract vendor audit backup "
    "restore region customer ticket escalation release schedule holiday overtime travel expense"
).split()
QUERIES = [
    "refund policy",
    "rotate the keys after an incident",
    "replica latency budget",
    "travel expense",
    "how do I roll back a release on holiday",
    "vendor contract audit schedule",
]


def body(rng: random.Random, i: int) -> str:
    return f"# Document {i}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 160))) + "."


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 2)


def load(dsn: str, documents: int, rng: random.Random) -> None:
    with connect(dsn) as conn:
        conn.execute("DELETE FROM kb.models")
        conn.execute("SELECT kb.register_model('bench-hash', 'hash', 'hash', 384, '{}', true)")
        with conn.transaction():
            for i in range(documents):
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
                    (f"doc-{i}.md", body(rng, i)),
                )
        conn.execute("SELECT kb.refresh_lexical_stats()")


def load_run(dsn: str, clients: int, seconds: float) -> dict:
    stop = threading.Event()
    start_line = threading.Barrier(clients + 1)
    times: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    written = {"documents": 0}

    def client(n: int) -> None:
        rng = random.Random(n)
        try:
            with connect(dsn) as conn:
                conn.execute("SELECT count(*) FROM kb_retrieve('warm up', mode => 'hybrid')")
                start_line.wait()
                while not stop.is_set():
                    started = time.perf_counter()
                    conn.execute(
                        "SELECT count(*) FROM kb_retrieve(%s, mode => 'hybrid')", (rng.choice(QUERIES),)
                    ).fetchone()
                    times[n].append((time.perf_counter() - started) * 1000)
        except (psycopg.Error, threading.BrokenBarrierError) as exc:
            errors.append(f"client {n}: {str(exc).splitlines()[0]}")

    def writer() -> None:
        rng = random.Random(10_000 + clients)
        try:
            with connect(dsn) as conn:
                while not stop.is_set():
                    i = rng.randrange(10**9)
                    conn.execute(
                        "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
                        (f"live-{clients}-{i}.md", body(rng, i)),
                    )
                    written["documents"] += 1
        except psycopg.Error as exc:
            errors.append(f"writer: {str(exc).splitlines()[0]}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    start_line.wait()
    w = threading.Thread(target=writer)
    w.start()
    started = time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in [*threads, w]:
        t.join()
    elapsed = time.monotonic() - started
    every = [x for per in times for x in per]
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "queries": len(every),
        "queries_per_s": round(len(every) / elapsed, 1),
        "p50_ms": percentile(every, 50),
        "p95_ms": percentile(every, 95),
        "p99_ms": percentile(every, 99),
        "errors": errors,
        "writer_documents": written["documents"],
    }


def first_query_ms(dsn: str, repeats: int, **connect_args) -> list[float]:
    """Connect and run the first kb_retrieve (dense: the model embeds the query), timed together."""
    out = []
    for i in range(repeats):
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True, **connect_args) as conn:
            conn.execute(
                "SELECT count(*) FROM kb_retrieve(%s, mode => 'dense')", (QUERIES[i % len(QUERIES)],)
            ).fetchone()
            out.append((time.perf_counter() - started) * 1000)
    return out


def start_pgbouncer(work: Path, db_port: int, pool_size: int) -> tuple[subprocess.Popen, int]:
    port = cluster.free_port()
    work.mkdir(parents=True, exist_ok=True)
    (work / "users.txt").write_text('"postgres" ""\n')
    (work / "pgbouncer.ini").write_text(
        f"""[databases]
* = host=127.0.0.1 port={db_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work}/users.txt
pool_mode = transaction
default_pool_size = {pool_size}
min_pool_size = {pool_size}
server_lifetime = 86400
server_idle_timeout = 0
logfile = {work}/pgbouncer.log
pidfile = {work}/pgbouncer.pid
"""
    )
    shutil.chown(work, "postgres")
    for f in work.iterdir():
        shutil.chown(f, "postgres")
    cmd = [str(PGBOUNCER), str(work / "pgbouncer.ini")]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/pgkb_e5", connect_timeout=2).close()
            return proc, port
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (work / "pgbouncer.log").read_text() if (work / "pgbouncer.log").exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {log[-500:]}") from None
            time.sleep(0.2)


def warm_pool(dsn: str, pool_size: int) -> None:
    """Make every server connection of the pool load PL/Python and the model: pool_size clients
    each hold a transaction with a dense kb_retrieve at the same time."""
    barrier = threading.Barrier(pool_size)

    def one() -> None:
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
            with conn.transaction():
                conn.execute("SELECT count(*) FROM kb_retrieve('warm up', mode => 'dense')").fetchone()
                barrier.wait(30)

    threads = [threading.Thread(target=one) for _ in range(pool_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--first-queries", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "concurrency.json")
    args = parser.parse_args()
    client_counts = [int(c) for c in args.clients.split(",")]
    settings = cluster.throwaway_settings("pgkb-bench-concurrency-")
    bouncer = None
    report: dict = {"benchmark": "concurrency", "documents": args.documents, "provider_load": "hash (384 dims)"}
    try:
        cluster.init(settings)
        cluster.start(settings)
        cluster.ensure_database(settings)
        cluster.ensure_database(settings, "pgkb_e5")
        base = f"postgresql://postgres@127.0.0.1:{settings.port}"
        migrate(f"{base}/pgkb", settings)
        migrate(f"{base}/pgkb_e5", settings)  # keeps the default model, e5-small
        load(f"{base}/pgkb", args.documents, random.Random(1))
        with connect(f"{base}/pgkb_e5") as conn:
            for i, q in enumerate(QUERIES):
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
                    (f"e5-{i}.md", f"# {q}\n\nThis page explains {q} in detail."),
                )
        with open("/proc/loadavg") as f:
            report["load_average_before"] = float(f.read().split()[0])
        report["load"] = [load_run(f"{base}/pgkb", c, args.seconds) for c in client_counts]
        one = report["load"][0]
        for r in report["load"]:
            r["throughput_ratio_vs_first"] = round(r["queries_per_s"] / one["queries_per_s"], 2)
        direct = first_query_ms(f"{base}/pgkb_e5", args.first_queries)
        first: dict = {"direct_ms": {"p50": percentile(direct, 50), "max": percentile(direct, 100), "all": direct}}
        if PGBOUNCER.exists():
            bouncer, bport = start_pgbouncer(settings.home / "pgbouncer", settings.port, args.pool_size)
            pooled_dsn = f"postgresql://postgres@127.0.0.1:{bport}/pgkb_e5"
            warm_pool(pooled_dsn, args.pool_size)
            pooled = first_query_ms(pooled_dsn, args.first_queries, prepare_threshold=None)
            first["pgbouncer_transaction_ms"] = {
                "p50": percentile(pooled, 50),
                "max": percentile(pooled, 100),
                "all": pooled,
                "pool_size": args.pool_size,
            }
            first["ratio_pgbouncer_vs_direct_p50"] = round(percentile(pooled, 50) / percentile(direct, 50), 3)
        else:
            first["pgbouncer_transaction_ms"] = None
            print(f"skipped the PgBouncer part: {PGBOUNCER} not found (apt-get install pgbouncer)", file=sys.stderr)
        report["first_query"] = first
    finally:
        if bouncer is not None:
            bouncer.terminate()
            bouncer.wait(10)
        cluster.destroy(settings)
        shutil.rmtree(settings.home, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print("\n| clients | queries/s | ratio vs 1 | p50 ms | p95 ms | p99 ms | errors | writer docs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in report["load"]:
        print(
            f"| {r['clients']} | {r['queries_per_s']} | {r['throughput_ratio_vs_first']} | {r['p50_ms']} | "
            f"{r['p95_ms']} | {r['p99_ms']} | {len(r['errors'])} | {r['writer_documents']} |"
        )
    f = report["first_query"]
    pooled = f["pgbouncer_transaction_ms"]
    print(
        f"\nfirst query on a fresh client: direct p50 {f['direct_ms']['p50']} ms; "
        + (
            f"through PgBouncer p50 {pooled['p50']} ms (ratio {f['ratio_pgbouncer_vs_direct_p50']})"
            if pooled
            else "PgBouncer skipped"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
