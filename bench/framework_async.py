"""The framework retrievers' async calls against their sync calls, warm.

    /opt/pgkb/venv/bin/python -m bench framework_async [--dsn postgresql://postgres@127.0.0.1:5499/pgkb]
        [--rounds 20] [--query '退款期限是几天？'] [--out bench/results/framework_async.json]

LangChain's PgkbRetriever (harness.frameworks.langchain) on one event loop: `invoke` (sync, the pooled
connections of harness.frameworks.KnowledgeBase), `ainvoke` (async, the loop's pool), 4 `ainvoke`
at once (wall time), and as the baseline of what async cost before pools, one kb_retrieve on a new
async connection per call (a new backend loads the embedding model each time). Every series is warm
(one call first). Prints JSON and a table: p50 / max per series and the ratios async / sync and
4 concurrent / sync. Defaults to README command 1's database (the sample corpus, the bundled model)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

from harness import retrieval
from harness.frameworks.langchain import PgkbRetriever


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


async def measure(dsn: str, rounds: int, query: str) -> dict[str, list[float]]:
    retriever = PgkbRetriever(dsn=dsn, k=5)
    times: dict[str, list[float]] = {"sync": [], "async": [], "async_4_at_once": [], "async_new_connection": []}
    retriever.invoke(query)
    await retriever.ainvoke(query)
    await asyncio.gather(*(retriever.ainvoke(query) for _ in range(4)))  # the pool holds 4 warm connections
    for _ in range(rounds):
        start = time.perf_counter()
        retriever.invoke(query)
        times["sync"].append(_ms(start))
        start = time.perf_counter()
        await retriever.ainvoke(query)
        times["async"].append(_ms(start))
        start = time.perf_counter()
        await asyncio.gather(*(retriever.ainvoke(query) for _ in range(4)))
        times["async_4_at_once"].append(_ms(start))
    for _ in range(max(3, rounds // 5)):  # the old way is slow: fewer rounds
        start = time.perf_counter()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await retrieval.aretrieve(conn, query, k=5)
        times["async_new_connection"].append(_ms(start))
    retriever.close()
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5499/pgkb")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--query", default="退款期限是几天？")
    ap.add_argument("--out", default="bench/results/framework_async.json")
    args = ap.parse_args(argv)
    times = asyncio.run(measure(args.dsn, args.rounds, args.query))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    report = {
        "dsn": args.dsn,
        "rounds": args.rounds,
        "query": args.query,
        "p50_ms": {name: round(value, 2) for name, value in p50.items()},
        "max_ms": {name: round(max(values), 2) for name, values in times.items()},
        "async_over_sync_p50": round(p50["async"] / p50["sync"], 2),
        "four_at_once_over_sync_p50": round(p50["async_4_at_once"] / p50["sync"], 2),
        "new_connection_over_sync_p50": round(p50["async_new_connection"] / p50["sync"], 2),
        "targets": {"async_over_sync_p50": 1.5, "four_at_once_over_sync_p50": 4.0},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    print(f"{'series':<24} {'p50 ms':>8} {'max ms':>8}", file=sys.stderr)
    for name in times:
        print(f"{name:<24} {report['p50_ms'][name]:>8} {report['max_ms'][name]:>8}", file=sys.stderr)
    for ratio in ("async_over_sync_p50", "four_at_once_over_sync_p50", "new_connection_over_sync_p50"):
        print(f"{ratio:<32} {report[ratio]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
