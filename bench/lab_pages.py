"""Warm times of the lab's pages: each page asked once to warm it, then the median of five.

    /opt/pgkb/venv/bin/python bench/lab_pages.py --dsn postgresql://postgres@localhost:5498/lab_dev \\
        [--role pgkb_admin] [--repeat 5]

The database is any migrated one with documents (e.g. `pgkb ingest examples/corpus` with the default
model); the lab runs in-process (Starlette's TestClient), as --role, so the times are the server's:
templates, the database calls, no network or browser. Prints a Markdown table."""

from __future__ import annotations

import argparse
import statistics
import time

from starlette.testclient import TestClient

from harness.lab.app import create_app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--role", default="pgkb_admin")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    app = create_app(args.dsn, args.role)
    client = TestClient(app)
    question = "退款期限是几天？"
    pages = {
        "query (answer)": lambda: client.post("/query", data={"q": question}),
        "query (low confidence)": lambda: client.post("/query", data={"q": "How do I train a dragon to cook pasta?"}),
        "explain": lambda: client.post("/explain", data={"q": question}),
        "compare": lambda: client.post("/compare", data={"q": question, "a.mode": "lexical", "b.mode": "hybrid"}),
        "documents": lambda: client.get("/documents"),
        "evaluation": lambda: client.get("/eval"),
        "judgments": lambda: client.get("/judgments"),
    }
    print("| page | median ms |\n| --- | --- |")
    try:
        for name, ask in pages.items():
            answer = ask()
            if answer.status_code != 200:
                raise SystemExit(f"{name}: HTTP {answer.status_code}")
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                ask()
                times.append((time.perf_counter() - started) * 1000)
            print(f"| {name} | {statistics.median(times):.0f} |")
    finally:
        app.state.database.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
