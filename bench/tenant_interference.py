"""What another tenant's data costs a tenant's query, and what the id sequences tell it.

Tenant isolation promises that nothing another tenant stores can be *read*; it does not promise
that nothing can be *felt*. This benchmark measures the two ways that remain (docs/RELIABILITY.md,
"What isolation does not hide"):

* **time**: tenant A (a reader granted namespace ``a``) asks for a word that A's documents hold
  as often as a control word, but that tenant B's namespace ``b`` holds in ``--b-documents``
  documents too. The control word exists in A only. Per query, interleaved: A's lexical
  ``kb_retrieve`` for the shared word and for the control word; the ratio of their medians is
  what B's postings cost A (1.0: nothing). Then the same for hybrid mode.
* **volume**: A's writer inserts a document before and after B loads its documents; the gap
  between A's two document ids, and between the first chunk ids of the two, is what A learns of
  B's ingest volume (the ids come from one sequence per table).

A database ``--db`` on the server (default: the embedded cluster), re-created on every run, the
``hash`` provider (64 dimensions): the vectors' meaning is not the point. Prints JSON (``--out``
also writes it) and a short table.

    /opt/pgkb/venv/bin/python -m bench.tenant_interference [--b-documents 20000] [--queries 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

from bench.retrieval.config import default_dsn
from harness.config import load_settings
from harness.migrate import migrate

A_DOCUMENTS = 200
SHARED = "refund"
CONTROL = "voucher"


def recreate(dsn: str, db: str) -> str:
    with psycopg.connect(f"{dsn}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}"')
    target = f"{dsn}/{db}"
    migrate(target, load_settings())
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("DELETE FROM kb.models")
        conn.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 64, '{}', true)")
        conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
        for role, group in (("bench_a_reader", "pgkb_reader"), ("bench_a_writer", "pgkb_writer")):
            conn.execute(f"DROP ROLE IF EXISTS {role}")
            conn.execute(f"CREATE ROLE {role} NOLOGIN IN ROLE {group}")
            conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'a')", (role,))
    return target


def load(conn: psycopg.Connection, namespace: str, count: int, words: str, prefix: str) -> None:
    rows = [
        (namespace, f"{prefix}-{i}.md", f"# Note {i}\n\n{words} item {i} of the {namespace} collection.")
        for i in range(count)
    ]
    for start in range(0, len(rows), 1000):
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb.documents (namespace, source, body) VALUES (%s, %s, %s)", rows[start : start + 1000]
            )
    conn.execute("SELECT kb.refresh_lexical_stats()")
    conn.execute("SELECT kb.refresh_term_stats(NULL)")


def writer_ids(conn: psycopg.Connection, source: str) -> tuple[int, int]:
    conn.execute("SET ROLE bench_a_writer")
    row = conn.execute(
        "INSERT INTO kb.documents (namespace, source, body) VALUES ('a', %s, 'A probe.') RETURNING id", (source,)
    ).fetchone()
    chunk = conn.execute("SELECT min(id) FROM kb.chunks WHERE document_id = %s", (row[0],)).fetchone()
    conn.execute("RESET ROLE")
    return row[0], chunk[0]


def timed(conn: psycopg.Connection, query: str, mode: str) -> float:
    start = time.perf_counter()
    conn.execute("SELECT count(*) FROM kb_retrieve(%s, 10, NULL, %s)", (query, mode)).fetchone()
    return (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=default_dsn(), help="the server (default %(default)s)")
    ap.add_argument("--db", default="pgkb_bench_interference")
    ap.add_argument("--b-documents", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    target = recreate(args.dsn, args.db)
    with psycopg.connect(target, autocommit=True) as owner:
        # A holds the shared word and the control word equally often
        load(owner, "a", A_DOCUMENTS, f"{SHARED} {CONTROL} policy", "a")
        before = writer_ids(owner, "probe-before.md")
        start = time.perf_counter()
        load(owner, "b", args.b_documents, f"{SHARED} policy", "b")
        b_load_s = time.perf_counter() - start
        after = writer_ids(owner, "probe-after.md")
        b_chunks = owner.execute("SELECT count(*) FROM kb.chunks WHERE namespace = 'b'").fetchone()[0]

    series: dict[str, list[float]] = {}
    with psycopg.connect(target, autocommit=True) as reader:
        reader.execute("SET ROLE bench_a_reader")
        for mode in ("lexical", "hybrid"):
            for word in (SHARED, CONTROL):
                timed(reader, f"{word} policy", mode)  # warm
            for i in range(args.queries):
                # alternate which goes first, so background load hits both alike
                for word in (SHARED, CONTROL) if i % 2 == 0 else (CONTROL, SHARED):
                    series.setdefault(f"{mode} {word}", []).append(timed(reader, f"{word} policy", mode))

    p50 = {name: statistics.median(values) for name, values in series.items()}
    result = {
        "b_documents": args.b_documents,
        "b_chunks": b_chunks,
        "b_load_s": round(b_load_s, 1),
        "a_documents": A_DOCUMENTS,
        "queries": args.queries,
        "p50_ms": {k: round(v, 2) for k, v in p50.items()},
        "cost_of_b_postings": {
            mode: round(p50[f"{mode} {SHARED}"] / p50[f"{mode} {CONTROL}"], 2) for mode in ("lexical", "hybrid")
        },
        "document_id_gap": after[0] - before[0] - 1,
        "chunk_id_gap": after[1] - before[1] - 1,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    print(f"\n{'mode':<8} {'shared word p50 ms':>19} {'control p50 ms':>15} {'ratio':>6}", file=sys.stderr)
    for mode in ("lexical", "hybrid"):
        print(
            f"{mode:<8} {p50[f'{mode} {SHARED}']:>19.2f} {p50[f'{mode} {CONTROL}']:>15.2f}"
            f" {result['cost_of_b_postings'][mode]:>6.2f}",
            file=sys.stderr,
        )
    print(
        f"B stored {args.b_documents} documents ({b_chunks} chunks): A's ids moved by "
        f"{result['document_id_gap']} documents and {result['chunk_id_gap']} chunks",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
