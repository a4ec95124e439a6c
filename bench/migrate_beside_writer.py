"""``pgkb migrate`` beside a live writer and reader: each migrate's wall time, and what the two felt.

    /opt/pgkb/venv/bin/python -m bench migrate_beside_writer [--dsn postgresql://postgres@127.0.0.1:5499]
        [--runs 5] [--baseline-seconds 10] [--gap-seconds 3] [--cli] [--out bench/results/migrate_beside_writer.json]

On the server of ``--dsn`` (default: the embedded cluster, ``pgkb up`` running) this makes its own
database ``pgkb_bench_migrate_writer`` (dropped first when it exists, dropped again at the end
unless ``--keep``), migrates it (the default model: the bundled e5-small, ``embed_mode`` sync) and
seeds a few documents; every migrate reads a copy of migrations/ and sql/ made at the start
(others may edit the working tree meanwhile; the report lists what it changes). Then, for the whole run:

* one writer (its own connection, autocommit) inserts a small document into ``kb.documents`` in a
  loop: every INSERT embeds its chunks in the trigger with the bundled model;
* one reader (its own connection) calls ``kb_retrieve`` (hybrid) in a loop.

Both record when each operation ended and every error (and reconnect after one). First a
baseline of ``--baseline-seconds`` with no migrate: the writer's median INSERT and the reader's
median call. Then ``--runs`` times, ``--gap-seconds`` apart: ``pgkb migrate`` against that
database (in-process: ``harness.migrate.migrate(dsn, settings)``, what ``pgkb migrate`` calls; with
``--cli`` the command itself as a subprocess, its start and health checks included), timed. Per
migrate: its wall time, the writer's and reader's errors while it ran, their longest stall (the
longest gap between two successful operations that overlaps the migrate), the transactions the
database rolled back meanwhile (the migrate's lock-timeout retries, when writer and reader make
no errors), and where the three backends waited (pg_stat_activity sampled every 20 ms: wait
events and, for lock waits, the relation). The ratios: migrate time and stall / the writer's
baseline median. The done-when of issue 42: the maximum migrate ≤ 5 s with 0 errors.

Prints JSON (also written to ``--out``) and a short table."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import migrate as migrate_module  # noqa: E402
from harness.config import MIGRATIONS_DIR, SQL_DIR, load_settings  # noqa: E402

DATABASE = "pgkb_bench_migrate_writer"
MIGRATE_APP = "pgkb_bench_migrate"
WRITER_APP = "pgkb_bench_writer"
READER_APP = "pgkb_bench_reader"
QUERIES = ["refund policy", "how long is the warranty", "rotate the keys after an incident", "travel expense"]
SEED = [
    ("policies/refund.md", "# Refund policy\n\nCustomers may ask for a refund within 14 days of delivery."),
    ("policies/warranty.md", "# Warranty\n\nEvery device has a warranty of two years."),
    ("runbooks/keys.md", "# Key rotation\n\nRotate the keys after a security incident, then tell the team."),
    ("hr/travel.md", "# Travel\n\nTravel expenses are paid back within a month with receipts."),
]
LIMIT_S = 5.0


def default_dsn() -> str:
    server = os.environ.get("PGKB_BENCH_DSN") or os.environ.get("PGKB_DSN")
    return server or f"postgresql://postgres@127.0.0.1:{load_settings().port}/postgres"


def recreate_database(server_dsn: str, drop_only: bool = False) -> None:
    with psycopg.connect(make_conninfo(server_dsn, dbname="postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {DATABASE}")


class Loop:
    """One connection doing one operation again and again in a thread: when each success ended,
    how long each took, every error (with its time); reconnects after an error."""

    def __init__(self, name: str, dsn: str, operation):
        self.name, self.dsn, self.operation = name, dsn, operation
        self.done: list[tuple[float, float]] = []  # (ended at, seconds taken)
        self.errors: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.count = 0

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(make_conninfo(self.dsn, application_name=self.name), autocommit=True)

    def _run(self) -> None:
        conn = self._connect()
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.operation(conn, self.count)
                ended = time.monotonic()
                self.done.append((ended, ended - started))
            except psycopg.Error as exc:
                self.errors.append((time.monotonic(), str(exc).splitlines()[0]))
                conn.close()
                time.sleep(0.05)
                conn = self._connect()
            self.count += 1
        conn.close()

    def successes_between(self, start: float, end: float) -> list[float]:
        return [d for t, d in self.done if start <= t <= end]

    def longest_stall(self, start: float, end: float) -> float:
        """The longest gap between two successive successes (or the window's edge) that overlaps [start, end]."""
        ends = [t for t, _ in self.done]
        before = [t for t in ends if t < start]
        inside = [t for t in ends if start <= t <= end]
        after = [t for t in ends if t > end]
        points = ([before[-1]] if before else [start]) + inside + ([after[0]] if after else [time.monotonic()])
        return max(b - a for a, b in zip(points, points[1:], strict=False))


def insert_document(conn: psycopg.Connection, i: int) -> None:
    conn.execute(
        "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)",
        (f"live/{i}.md", f"# Note {i}\n\nA small note number {i} about refunds, keys and travel."),
    )


def retrieve(conn: psycopg.Connection, i: int) -> None:
    conn.execute("SELECT count(*) FROM kb_retrieve(%s, mode => 'hybrid')", (QUERIES[i % len(QUERIES)],)).fetchone()


class Waits:
    """pg_stat_activity of the three backends sampled every `every` seconds: (time, application, wait)."""

    SQL = """SELECT a.application_name,
                    coalesce(a.wait_event_type || ':' || a.wait_event, 'running'),
                    (SELECT string_agg(DISTINCT coalesce(l.relation::regclass::text, l.locktype) || ' ' || l.mode, ', ')
                     FROM pg_locks AS l WHERE l.pid = a.pid AND NOT l.granted)
             FROM pg_stat_activity AS a
             WHERE a.datname = current_database() AND a.application_name = ANY(%s) AND a.state = 'active'"""

    def __init__(self, dsn: str, every: float = 0.02):
        self.dsn, self.every = dsn, every
        self.samples: list[tuple[float, str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="waits", daemon=True)

    def _run(self) -> None:
        apps = [MIGRATE_APP, WRITER_APP, READER_APP]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                now = time.monotonic()
                for app, wait, lock in conn.execute(self.SQL, (apps,)).fetchall():
                    self.samples.append((now, app, f"{wait} on {lock}" if lock else wait))
                time.sleep(self.every)

    def between(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """Per backend, its non-running states seen in [start, end] and how many samples (× every = seconds)."""
        out: dict[str, Counter] = {}
        for t, app, wait in self.samples:
            if start <= t <= end and wait != "running":
                out.setdefault(app, Counter())[wait] += 1
        return {app: dict(c.most_common(6)) for app, c in out.items()}


def rollbacks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").fetchone()[
            0
        ]


def run_migrate(dsn: str, cli: bool, tree: Path) -> dict:
    """One ``pgkb migrate`` against dsn (tagged with MIGRATE_APP) with the migrations and sql/ of
    ``tree``, timed; its error, if any."""
    tagged = make_conninfo(dsn, application_name=MIGRATE_APP)
    started = time.monotonic()
    error = None
    if cli:  # the command reads sql/ of the checkout (only the migrations' folder can be moved)
        done = subprocess.run(
            [str(Path(sys.executable).with_name("pgkb")), "migrate", "--dsn", tagged],
            capture_output=True,
            text=True,
            env={**os.environ, "PGKB_MIGRATIONS_DIR": str(tree / "migrations")},
        )
        if done.returncode != 0:
            error = (done.stderr or done.stdout).strip().splitlines()[-1:]
    else:
        try:
            migrate_module.migrate(tagged, load_settings(), tree / "migrations", tree / "sql")
        except (migrate_module.MigrationError, psycopg.Error) as exc:
            error = str(exc).splitlines()[0]
    return {"started": started, "ended": time.monotonic(), "error": error}


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def measure(dsn: str, args: argparse.Namespace) -> dict:
    """Writer, reader and sampler running: the baseline, then the migrates."""
    writer, reader = Loop(WRITER_APP, dsn, insert_document), Loop(READER_APP, dsn, retrieve)
    waits = Waits(dsn)
    for t in (writer.thread, reader.thread, waits.thread):
        t.start()
    try:
        time.sleep(2)  # both backends load PL/Python and the model before the baseline counts
        base_start = time.monotonic()
        time.sleep(args.baseline_seconds)
        base_end = time.monotonic()
        runs = []
        for n in range(1, args.runs + 1):
            before = rollbacks(dsn)
            m = run_migrate(dsn, args.cli, args.tree)
            time.sleep(1.0)  # the stall that ends after the migrate; statistics flushed
            runs.append(one_run(n, m, writer, reader, waits, rollbacks(dsn) - before))
            time.sleep(args.gap_seconds)
    finally:
        for loop in (writer, reader, waits):
            loop.stop.set()
        for t in (writer.thread, reader.thread, waits.thread):
            t.join(30)
    base_w = writer.successes_between(base_start, base_end)
    base_r = reader.successes_between(base_start, base_end)
    baseline = {
        "seconds": round(base_end - base_start, 1),
        "writer_inserts": len(base_w),
        "writer_median_ms": ms(statistics.median(base_w)) if base_w else None,
        "writer_longest_gap_ms": ms(writer.longest_stall(base_start, base_end)),
        "writer_errors": len([e for e in writer.errors if base_start <= e[0] <= base_end]),
        "reader_calls": len(base_r),
        "reader_median_ms": ms(statistics.median(base_r)) if base_r else None,
        "reader_longest_gap_ms": ms(reader.longest_stall(base_start, base_end)),
        "reader_errors": len([e for e in reader.errors if base_start <= e[0] <= base_end]),
    }
    for r in runs:
        median = baseline["writer_median_ms"]
        r["migrate_over_writer_median"] = round(r["migrate_ms"] / median, 1) if median else None
        r["writer_stall_over_median"] = round(r["writer_stall_ms"] / median, 1) if median else None
    return {"baseline": baseline, "runs": runs, "writer_total": len(writer.done), "reader_total": len(reader.done)}


def one_run(n: int, m: dict, writer: Loop, reader: Loop, waits: Waits, rolled_back: int) -> dict:
    start, end = m["started"], m["ended"]
    in_window = [e for e in writer.errors + reader.errors if start <= e[0] <= end + 1.0]
    return {
        "run": n,
        "migrate_ms": ms(end - start),
        "migrate_error": m["error"],
        "writer_errors": len([e for e in writer.errors if start <= e[0] <= end + 1.0]),
        "reader_errors": len([e for e in reader.errors if start <= e[0] <= end + 1.0]),
        "error_messages": sorted({msg for _, msg in in_window})[:5],
        "writer_stall_ms": ms(writer.longest_stall(start, end)),
        "reader_stall_ms": ms(reader.longest_stall(start, end)),
        "writer_inserts_during": len(writer.successes_between(start, end)),
        "reader_calls_during": len(reader.successes_between(start, end)),
        "transactions_rolled_back": rolled_back,
        "waits_samples_20ms": waits.between(start, end),
    }


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def uncommitted() -> list[str]:
    """What the working tree changes in what a migrate runs (its files were copied at the start)."""
    paths = ["migrations", "sql", "plpython", "harness/migrate.py"]
    done = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=REPO, capture_output=True, text=True)
    return done.stdout.splitlines()


def table(report: dict) -> str:
    b = report["baseline"]
    lines = [
        f"baseline ({b['seconds']} s, no migrate): writer median {b['writer_median_ms']} ms "
        f"({b['writer_inserts']} inserts, longest gap {b['writer_longest_gap_ms']} ms), "
        f"reader median {b['reader_median_ms']} ms ({b['reader_calls']} calls, "
        f"longest gap {b['reader_longest_gap_ms']} ms)",
        "",
        "| run | migrate ms | / writer median | writer stall ms | / median | reader stall ms "
        "| writer errors | reader errors | rolled back | inserts during |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['run']} | {r['migrate_ms']} | {r['migrate_over_writer_median']} | {r['writer_stall_ms']} | "
            f"{r['writer_stall_over_median']} | {r['reader_stall_ms']} | {r['writer_errors']} | "
            f"{r['reader_errors']} | {r['transactions_rolled_back']} | {r['writer_inserts_during']} |"
        )
    s = report["summary"]
    lines.append(
        f"\nmax migrate {s['max_migrate_ms']} ms (limit {LIMIT_S * 1000:.0f}), errors {s['errors']}: "
        f"{'met' if s['met'] else 'NOT met'}; load average {report['load_average']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=default_dsn(), help="the server (its database part is replaced)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-seconds", type=float, default=10)
    ap.add_argument("--gap-seconds", type=float, default=3)
    ap.add_argument("--cli", action="store_true", help="run the pgkb migrate command as a subprocess")
    ap.add_argument("--keep", action="store_true", help="leave the database behind")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "migrate_beside_writer.json")
    args = ap.parse_args(argv)
    dsn = make_conninfo(args.dsn, dbname=DATABASE)
    # every migrate reads the same files: a copy of migrations/ and sql/ as they are now (the working
    # tree may be edited meanwhile)
    args.tree = Path(tempfile.mkdtemp(prefix="pgkb-bench-migrate-"))
    shutil.copytree(MIGRATIONS_DIR, args.tree / "migrations")
    shutil.copytree(SQL_DIR, args.tree / "sql")
    recreate_database(args.dsn)
    try:
        # keeps the default model, e5-small, embed_mode sync
        migrate_module.migrate(dsn, load_settings(), args.tree / "migrations", args.tree / "sql")
        with psycopg.connect(dsn, autocommit=True) as conn:
            model = conn.execute("SELECT name, provider FROM kb.models WHERE active").fetchone()
            mode = conn.execute("SELECT value #>> '{}' FROM kb.settings WHERE key = 'embed_mode'").fetchone()[0]
            for source, body in SEED:
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) VALUES ('bench', %s, %s)", (source, body)
                )
        started = time.monotonic()
        settings = load_settings()
        migrate_module.sync_plpython_modules(settings)
        sync_ms = ms(time.monotonic() - started)
        load_before = os.getloadavg()[0]
        result = measure(dsn, args)
    finally:
        shutil.rmtree(args.tree, ignore_errors=True)
        if not args.keep:
            recreate_database(args.dsn, drop_only=True)
    worst = max(r["migrate_ms"] for r in result["runs"])
    errors = sum(r["writer_errors"] + r["reader_errors"] + bool(r["migrate_error"]) for r in result["runs"])
    report = {
        "benchmark": "migrate_beside_writer",
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": commit(),
        "uncommitted": uncommitted(),
        "database": DATABASE,
        "model": {"name": model[0], "provider": model[1]},
        "embed_mode": mode,
        "migrate": "pgkb migrate (subprocess)" if args.cli else "harness.migrate.migrate in-process",
        "plpython_sync_alone_ms": sync_ms,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        **result,
        "summary": {
            "max_migrate_ms": worst,
            "median_migrate_ms": round(statistics.median(r["migrate_ms"] for r in result["runs"]), 1),
            "max_writer_stall_ms": max(r["writer_stall_ms"] for r in result["runs"]),
            "max_reader_stall_ms": max(r["reader_stall_ms"] for r in result["runs"]),
            "errors": errors,
            "met": worst <= LIMIT_S * 1000 and errors == 0,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
