"""The first query of a fresh connection, as a script that connects per question pays it.

    /opt/pgkb/venv/bin/python -m bench.first_query [--dsn postgresql://postgres@127.0.0.1:5499/pgkb]
        [--rounds 10] [--query '退款期限是几天？'] [--out bench/results/first_query.json]

Each round opens a new connection (a new backend: PL/Python starts, imports pgkb_plpy, and the
dense and hybrid calls load the embedding model) and times connect + one statement: `SELECT 1`
(the baseline), then `kb_retrieve` in hybrid, dense and lexical mode, each on a connection of its
own, the order rotating from round to round. Prints JSON and a table: p50 and max per series and
each mode's p50 above `SELECT 1`. Defaults to README command 1's database (the embedded cluster's
`pgkb`, the sample corpus, the bundled model)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

SERIES = {
    "select_1": "SELECT 1",
    "hybrid": "SELECT count(*) FROM kb_retrieve(%s, 8, NULL, 'hybrid')",
    "dense": "SELECT count(*) FROM kb_retrieve(%s, 8, NULL, 'dense')",
    "lexical": "SELECT count(*) FROM kb_retrieve(%s, 8, NULL, 'lexical')",
}


def fresh_call_ms(dsn: str, sql: str, query: str) -> float:
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql, [query] if "%s" in sql else None).fetchall()
    return (time.perf_counter() - start) * 1000


def measure(dsn: str, rounds: int, query: str) -> dict[str, list[float]]:
    names = list(SERIES)
    times: dict[str, list[float]] = {name: [] for name in names}
    fresh_call_ms(dsn, SERIES["hybrid"], query)  # the files the first backend reads are then in the page cache
    for n in range(rounds):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            times[name].append(fresh_call_ms(dsn, SERIES[name], query))
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5499/pgkb")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--query", default="退款期限是几天？")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    times = measure(args.dsn, args.rounds, args.query)
    p50 = {name: round(statistics.median(v), 1) for name, v in times.items()}
    report = {
        "rounds": args.rounds,
        "query": args.query,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "p50_ms": p50,
        "max_ms": {name: round(max(v), 1) for name, v in times.items()},
        "p50_above_select_1_ms": {name: round(p50[name] - p50["select_1"], 1) for name in p50 if name != "select_1"},
    }
    text = json.dumps(report, indent=1, ensure_ascii=False)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    for name in times:
        above = report["p50_above_select_1_ms"].get(name, 0.0)
        line = f"{name:<10}{p50[name]:>9.1f} ms p50{report['max_ms'][name]:>9.1f} ms max{above:>+9.1f} ms"
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
