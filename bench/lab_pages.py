"""Warm times of the lab's pages: each page asked once to warm it, then the median of five.

    /opt/pgkb/venv/bin/python -m bench lab_pages --dsn postgresql://postgres@localhost:5498/lab_dev \\
        [--role pgkb_admin] [--repeat 5]

The database is any migrated one with documents (e.g. `pgkb ingest examples/corpus` with the default
model); the lab runs in-process (Starlette's TestClient), as --role, so the times are the server's:
templates, the database calls, no network or browser. The baseline, in the same run: a static
asset through the same client (routing, middleware, headers; no database), the floor every page
pays; each page's median is also given above it. Prints JSON on stdout and a Markdown table on
stderr."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from starlette.testclient import TestClient

from harness.lab.app import create_app

QUESTION = "退款期限是几天？"
FLOOR = "static asset (baseline)"


def pages_of(client: TestClient) -> dict:
    """The pages timed, each a call of the client; the baseline first."""
    return {
        FLOOR: lambda: client.get("/static/highlight.css"),
        "query (answer)": lambda: client.post("/query", data={"q": QUESTION}),
        "query (low confidence)": lambda: client.post("/query", data={"q": "How do I train a dragon to cook pasta?"}),
        "explain": lambda: client.post("/explain", data={"q": QUESTION}),
        "compare": lambda: client.post("/compare", data={"q": QUESTION, "a.mode": "lexical", "b.mode": "hybrid"}),
        "documents": lambda: client.get("/documents"),
        "evaluation": lambda: client.get("/eval"),
        "judgments": lambda: client.get("/judgments"),
    }


def median_ms(name: str, ask, repeat: int) -> float:
    """One warm-up call (it must answer 200), then the median of `repeat` timed calls."""
    answer = ask()
    if answer.status_code != 200:
        raise SystemExit(f"{name}: HTTP {answer.status_code}")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        ask()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--role", default="pgkb_admin")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    app = create_app(args.dsn, args.role)
    try:
        medians = {name: median_ms(name, ask, args.repeat) for name, ask in pages_of(TestClient(app)).items()}
    finally:
        app.state.database.close()
    floor = medians[FLOOR]
    report = {
        "benchmark": "lab_pages",
        "role": args.role,
        "repeat": args.repeat,
        "median_ms": {name: round(ms, 1) for name, ms in medians.items()},
        "above_baseline_ms": {name: round(ms - floor, 1) for name, ms in medians.items() if name != FLOOR},
    }
    print(json.dumps(report, ensure_ascii=False, indent=2))
    print("| page | median ms | above the baseline |\n| --- | --- | --- |", file=sys.stderr)
    for name, ms in medians.items():
        print(f"| {name} | {ms:.0f} | {'' if name == FLOOR else f'{ms - floor:.0f}'} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
