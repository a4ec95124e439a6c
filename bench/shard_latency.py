"""Latency of a retrieval through the shard coordinator against one node holding the same corpus.

    /opt/pgkb/venv/bin/python bench/shard_latency.py [--rounds 5] [--warmup-rounds 1] [--k 10]
        [--json-out [bench/results/shard_latency.json]]

Throwaway clusters (harness.shards.local_sharded_corpus, which tests/test_shards.py uses too):
three shard clusters and a fourth cluster holding the coordinator
(`pgkb`, `pgkb shards init` + 3 shards, `--user postgres`) and the one-node reference
(`pgkb_reference`). Every database is migrated, has `hash-64` as its only model, with the `hash`
provider's language correction on (so the dense leg pools language moments over the shards). The
example corpus (`examples/corpus`, 19 documents in Chinese and English) goes to the reference by
the folder loader and through the coordinator's routed ingest (`harness.shards.ingest`), one
namespace per shard: policies -> shard0, support -> shard1, engineering -> shard2.

Measured, on one warm connection per target (a pooled client's), client wall time of
`SELECT * FROM f(q, k => 10, mode => m [, namespace => 'policies'])` with every row fetched:

* `one_node`: `kb_retrieve` on the reference, all namespaces (the baseline of the ratios);
* `coordinator_all`: `kb_shard.retrieve` on the coordinator, all namespaces (three rounds over
  the shards);
* `coordinator_namespace`: `kb_shard.retrieve` with `namespace => 'policies'` (routed to shard0);
* `shard_direct`: `kb_retrieve` on shard0 with the same namespace (the baseline of the routed call).

Interleaved: each round runs every mode (lexical, dense, hybrid), every question, and for each
question the four targets one after the other, their order rotated from call to call; one
unmeasured warm-up round first. The machine is shared: read the ratios, and the load average
recorded before and after. Prints JSON and a table; the clusters are stopped and removed at the
end, also on error."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import shards  # noqa: E402
from harness.db import connect  # noqa: E402

CORPUS = REPO / "examples" / "corpus"
RESULT = REPO / "bench" / "results" / "shard_latency.json"
MODEL = "hash-64"
NAMESPACES = ("policies", "support", "engineering")  # namespace i on shard i
ONE_NAMESPACE = "policies"  # on shard0
MODES = ("lexical", "dense", "hybrid")
# the questions tests/test_shards.py asks too: English and Chinese, one word, a typo, identifiers
QUESTIONS = json.loads((REPO / "examples" / "eval" / "corpus-questions.json").read_text(encoding="utf-8"))
TARGETS = ("one_node", "coordinator_all", "coordinator_namespace", "shard_direct")
LABELS = {
    "one_node": "one node",
    "coordinator_all": "coordinator, all namespaces",
    "coordinator_namespace": f"coordinator, namespace {ONE_NAMESPACE}",
    "shard_direct": f"shard0 directly, namespace {ONE_NAMESPACE}",
}


def prepare(dsn: str) -> None:
    """`hash-64` the only (active) model, language correction on for its provider."""
    with connect(dsn) as conn:
        conn.execute("DELETE FROM kb.models")
        conn.execute("SELECT kb.register_model(%s, 'hash', 'hash', 64, '{}', true)", (MODEL,))
        conn.execute("UPDATE kb.embedding_providers SET language_correction = true WHERE provider = 'hash'")


def retrieve(conn, function: str, question: str, k: int, mode: str, namespace: str | None) -> tuple[float, int]:
    """Client wall time in ms of one call with every row fetched, and the row count."""
    named = "k => %(k)s, mode => %(mode)s" + (", namespace => %(namespace)s" if namespace else "")
    started = time.perf_counter()
    rows = conn.execute(
        f"SELECT * FROM {function}(%(q)s, {named})", {"q": question, "k": k, "mode": mode, "namespace": namespace}
    ).fetchall()
    return (time.perf_counter() - started) * 1000, len(rows)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 1)


def measure(dsns: dict, rounds: int, warmup_rounds: int, k: int) -> tuple[dict, dict]:
    """{mode: {target: [ms, ...]}} over `rounds` measured rounds, and the row-count checks."""
    conns = {
        "one_node": connect(dsns["reference"]),
        "coordinator_all": connect(dsns["coordinator"]),
        "coordinator_namespace": connect(dsns["coordinator"]),
        "shard_direct": connect(dsns["shards"][0]),
    }
    calls = {
        "one_node": ("kb_retrieve", None),
        "coordinator_all": ("kb_shard.retrieve", None),
        "coordinator_namespace": ("kb_shard.retrieve", ONE_NAMESPACE),
        "shard_direct": ("kb_retrieve", ONE_NAMESPACE),
    }
    times: dict = {m: {t: [] for t in TARGETS} for m in MODES}
    rows: dict = {}
    checks = {"row_count_mismatches": []}
    try:
        for conn in conns.values():
            conn.execute("SET statement_timeout = '60s'")
        turn = 0
        for r in range(warmup_rounds + rounds):
            for mode in MODES:
                for question in QUESTIONS:
                    order = TARGETS[turn % 4 :] + TARGETS[: turn % 4]
                    turn += 1
                    for target in order:
                        function, namespace = calls[target]
                        ms, n = retrieve(conns[target], function, question, k, mode, namespace)
                        rows[(mode, question, target)] = n
                        if r >= warmup_rounds:
                            times[mode][target].append(ms)
    finally:
        for conn in conns.values():
            conn.close()
    # the same number of rows as the baseline of each pair (a cheap sanity check, not the test's)
    for mode in MODES:
        for question in QUESTIONS:
            for target, baseline in (("coordinator_all", "one_node"), ("coordinator_namespace", "shard_direct")):
                if rows[(mode, question, target)] != rows[(mode, question, baseline)]:
                    checks["row_count_mismatches"].append(
                        {
                            "mode": mode,
                            "question": question,
                            target: rows[(mode, question, target)],
                            baseline: rows[(mode, question, baseline)],
                        }
                    )
    checks["rows_per_call_one_node"] = {
        m: round(statistics.mean(rows[(m, q, "one_node")] for q in QUESTIONS), 1) for m in MODES
    }
    return times, checks


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds of every question in every mode")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="unmeasured rounds first")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--json-out",
        nargs="?",
        type=Path,
        const=RESULT,
        default=None,
        help=f"write the JSON report (default path {RESULT.relative_to(REPO)})",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    started = time.monotonic()
    load_before = os.getloadavg()
    with shards.local_sharded_corpus(CORPUS, NAMESPACES, prepare, prefix="pgkb-bench-") as built_corpus:
        dsns = {**built_corpus, "shards": [s.embedded_dsn for s in built_corpus["shards"]]}
        built = time.monotonic()
        times, checks = measure(dsns, args.rounds, args.warmup_rounds, args.k)
        measured = time.monotonic()
    load_after = os.getloadavg()

    modes = {}
    for mode in MODES:
        cell = {
            t: {"p50_ms": percentile(v, 50), "p95_ms": percentile(v, 95), "n": len(v)} for t, v in times[mode].items()
        }
        one, all_, ns, direct = (cell[t] for t in TARGETS)
        cell["ratio_coordinator_all_vs_one_node"] = {
            "p50": ratio(all_["p50_ms"], one["p50_ms"]),
            "p95": ratio(all_["p95_ms"], one["p95_ms"]),
        }
        cell["ratio_coordinator_namespace_vs_one_node"] = {
            "p50": ratio(ns["p50_ms"], one["p50_ms"]),
            "p95": ratio(ns["p95_ms"], one["p95_ms"]),
        }
        cell["ratio_coordinator_namespace_vs_shard_direct"] = {
            "p50": ratio(ns["p50_ms"], direct["p50_ms"]),
            "p95": ratio(ns["p95_ms"], direct["p95_ms"]),
        }
        modes[mode] = cell
    report = {
        "benchmark": "shard_latency",
        "setup": {
            "shards": 3,
            "placement": {ns: f"shard{i}" for i, ns in enumerate(NAMESPACES)},
            "reference": "one node, on the coordinator's cluster (database pgkb_reference)",
            "corpus": "examples/corpus",
            "documents": dsns["documents"],
            "model": f"{MODEL} (hash provider, language correction on)",
            "k": args.k,
            "questions": len(QUESTIONS),
            "rounds": args.rounds,
            "warmup_rounds": args.warmup_rounds,
            "one_namespace": ONE_NAMESPACE,
            "targets": LABELS,
        },
        "modes": modes,
        "checks": checks,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(),
        "build_seconds": round(built - started, 1),
        "measure_seconds": round(measured - built, 1),
        "total_seconds": round(time.monotonic() - started, 1),
    }
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=2, ensure_ascii=False))

    n = args.rounds * len(QUESTIONS)
    print(
        f"\nkb_retrieve vs kb_shard.retrieve, {n} calls per cell, p50 / p95 ms, "
        f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    print(
        "| mode | one node | coordinator, all namespaces | ratio p50 / p95 | coordinator, one namespace "
        "| shard directly, same namespace | ratio p50 (routed / direct) |",
        file=sys.stderr,
    )
    print("| --- | --- | --- | --- | --- | --- | --- |", file=sys.stderr)
    for mode, cell in modes.items():
        one, all_, ns, direct = (f"{cell[t]['p50_ms']} / {cell[t]['p95_ms']}" for t in TARGETS)
        r = cell["ratio_coordinator_all_vs_one_node"]
        routed = cell["ratio_coordinator_namespace_vs_shard_direct"]["p50"]
        print(f"| {mode} | {one} | {all_} | {r['p50']} / {r['p95']} | {ns} | {direct} | {routed} |", file=sys.stderr)
    if checks["row_count_mismatches"]:
        print(f"row count mismatches: {len(checks['row_count_mismatches'])} (see JSON)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
