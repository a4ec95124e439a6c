"""Alternative HNSW builds of a benchmark database, on a copy (the source is never written).

``python -m bench.retrieval.variants --source pgkb_bench_real_100000 --prefix pgkb_bench_real_m32 --m 32
--ef-construction 128`` copies the source (``CREATE DATABASE ... TEMPLATE``) to ``<prefix>_<chunks>``,
drops the active model's HNSW indexes there (the one over all its vectors and one per language
group) and builds them again, under the same names and predicates, with the given ``m`` and
``ef_construction``, timing each build and recording its size. The copy's comment is the source's
build comment plus ``hnsw_variant``, so ``python -m bench.retrieval --reuse --no-migrate
--recall-only --db-prefix <prefix>`` measures it like the source (never migrate it: migrate would
keep these indexes, since ``kb.ensure_hnsw_indexes`` only creates missing ones, but it would measure
other functions).

``--halfvec`` instead adds, on the copy, one index over ``embedding::halfvec(D)`` of the model's
vectors (half-precision; kb_node.dense_candidates casts to ``vector(D)`` and would not use it), and
measures in the same run, per ef_search, the bare query through that index against the bare query
through the model's ``vector`` index: recall@10 against exact float32 search over all the model's
vectors, and p50/p95 client wall time, with real questions embedded by the database
(``kb.embed_query``). Report: ``bench/results/hnsw_halfvec.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from .config import (
    DB_PREFIX_GUARD,
    BenchModel,
    database_dsn,
    default_datasets_dir,
    default_dsn,
    default_results_dir,
    log,
)
from .load import existing_meta
from .queries import query_vectors
from .realcorpus import real_queries
from .recall import hnsw_indexes
from .timing import pct, prewarm, timed


def copy_database(server: str, source: str, target: str) -> None:
    with psycopg.connect(database_dsn(server, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(target)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(target), sql.Identifier(source)))


def active_model(conn) -> tuple[str, int]:
    return conn.execute("SELECT name, dimensions FROM kb.models WHERE active").fetchone()


def rebuild(conn, m: int, ef_construction: int) -> dict:
    """Drop and re-create the active model's HNSW indexes with other build options."""
    name, _ = active_model(conn)
    conn.execute("SET maintenance_work_mem = '1GB'")
    out = {}
    for idx in hnsw_indexes(conn, name):
        indexdef = conn.execute("SELECT pg_get_indexdef(%s::regclass)", [f"kb.{idx['name']}"]).fetchone()[0]
        head, _, rest = indexdef.partition(" WITH (")
        _, _, predicate = rest.partition(")")
        new = f"{head} WITH (m = {int(m)}, ef_construction = {int(ef_construction)}){predicate}"
        conn.execute(sql.SQL("DROP INDEX kb.{}").format(sql.Identifier(idx["name"])))
        t = time.perf_counter()
        conn.execute(new)
        out[idx["name"]] = {"build_s": round(time.perf_counter() - t, 1), "definition": new}
        log(f"{idx['name']}: {out[idx['name']]['build_s']} s")
    for idx in hnsw_indexes(conn, name):
        out[idx["name"]]["bytes"] = idx["bytes"]
    conn.execute("ANALYZE kb.embeddings")
    return out


def halfvec(conn, datasets: Path, seed: int, n_queries: int, ef_values: list[int]) -> dict:
    """Add a halfvec HNSW index of the active model and compare bare queries through it with the
    vector index's, against exact float32 search."""
    name, dims = active_model(conn)
    idx = f"bench_halfvec_{name}"[:60]
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute(sql.SQL("DROP INDEX IF EXISTS kb.{}").format(sql.Identifier(idx)))
    t = time.perf_counter()
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON kb.embeddings USING hnsw ((embedding::halfvec({})) halfvec_cosine_ops) "
            "WITH (m = 16, ef_construction = 64) WHERE model = {}"
        ).format(sql.Identifier(idx), sql.Literal(dims), sql.Literal(name))
    )
    build_s = time.perf_counter() - t
    size = conn.execute("SELECT pg_relation_size(%s::regclass)", [f"kb.{idx}"]).fetchone()[0]
    conn.execute("ANALYZE kb.embeddings")
    prewarm(conn, ["kb.embeddings"])
    register_vector(conn)
    conn.prepare_threshold = None
    qs = real_queries(datasets, seed, n_queries // 2)
    texts = [q for pair in zip(qs["short"], qs["long"], strict=False) for q in pair][:n_queries]
    vectors = query_vectors(conn, texts, BenchModel(name, "in-database", "", dims))
    nl = "\n"
    q_vec = (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{name}' "
        f"ORDER BY embedding::vector({dims}) <=> %s::vector({dims}) LIMIT 10"
    )
    q_half = (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{name}' "
        f"ORDER BY embedding::halfvec({dims}) <=> %s::halfvec({dims}) LIMIT 10"
    )
    q_exact = (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{name}' "
        f"ORDER BY embedding <=> %s::vector, chunk_id LIMIT 10"
    )
    truth = []
    for v in vectors:
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            truth.append({r[0] for r in conn.execute(q_exact, [v]).fetchall()})
    plans = {}
    for label, q in (("vector", q_vec), ("halfvec", q_half)):
        with conn.transaction():
            plan = conn.execute("EXPLAIN " + q, [vectors[0]]).fetchall()
        plans[label] = nl.join(r[0] for r in plan)
    points: dict = {(ef, leg): [] for ef in ef_values for leg in ("vector", "halfvec")}
    for _ in range(2):  # warm-up passes (buffers, plans), untimed
        for ef in ef_values:
            for q in (q_vec, q_half):
                for v in vectors[:3]:
                    with conn.transaction():
                        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                        timed(conn, q, [v])
    for v, tr in zip(vectors, truth, strict=True):
        for ef in ef_values:
            for leg, q in (("vector", q_vec), ("halfvec", q_half)):
                with conn.transaction():
                    conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    ms, rows = timed(conn, q, [v])
                points[(ef, leg)].append((len(tr & {r[0] for r in rows}) / max(len(tr), 1), ms))
    sweep = [
        {
            "ef_search": ef,
            **{
                leg: {
                    "recall_at_10": round(float(np.mean([p[0] for p in points[(ef, leg)]])), 4),
                    "latency_ms": pct([p[1] for p in points[(ef, leg)]]),
                }
                for leg in ("vector", "halfvec")
            },
        }
        for ef in ef_values
    ]
    vec_bytes = sum(
        i["bytes"] for i in hnsw_indexes(conn, name) if i["name"] != idx and "language" not in i["predicate"]
    )
    return {
        "model": name,
        "dims": dims,
        "queries": len(vectors),
        "halfvec_index": {"name": idx, "build_s": round(build_s, 1), "bytes": size},
        "vector_index_bytes": vec_bytes,
        "uses_index": {leg: "Index Scan using" in p for leg, p in plans.items()},
        "note": "bare queries over all the model's vectors, no lifecycle filter; recall against exact float32 "
        "search; kb_node.dense_candidates casts to vector(D), so the product would not use a halfvec index",
        "sweep": sweep,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.retrieval.variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=default_dsn())
    ap.add_argument("--source", required=True, help="the benchmark database to copy (never written)")
    ap.add_argument("--prefix", required=True, help=f"the copy is <prefix>_<chunks>; must start with {DB_PREFIX_GUARD}")
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=128)
    ap.add_argument("--halfvec", action="store_true", help="add a halfvec index and compare bare queries instead")
    ap.add_argument("--queries", type=int, default=60, help="--halfvec: real questions (half short, half long)")
    ap.add_argument("--ef-search-sweep", default="20,40,64,100,200")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--datasets", type=Path, default=default_datasets_dir())
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.prefix.startswith(DB_PREFIX_GUARD):
        ap.error(f"--prefix must start with {DB_PREFIX_GUARD}")
    meta = existing_meta(args.dsn, args.source)
    if not meta or "chunks" not in meta:
        ap.error(f"{args.source}: not a benchmark database (no build comment)")
    target = f"{args.prefix}_{meta['chunks']}"
    if target == args.source:
        ap.error("the copy must have another name than the source")
    started = time.perf_counter()
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    log(f"copying {args.source} to {target}")
    copy_database(args.dsn, args.source, target)
    copy_s = time.perf_counter() - started
    with psycopg.connect(database_dsn(args.dsn, target), autocommit=True) as conn:
        if args.halfvec:
            ef_values = [int(v) for v in args.ef_search_sweep.split(",") if v.strip()]
            variant = {"halfvec": halfvec(conn, args.datasets, args.seed, args.queries, ef_values)}
        else:
            variant = {
                "m": args.m,
                "ef_construction": args.ef_construction,
                "indexes": rebuild(conn, args.m, args.ef_construction),
            }
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(target),
                sql.Literal(json.dumps(meta | {"hnsw_variant": variant, "copy_of": args.source})),
            )
        )
    report = {
        "benchmark": "hnsw_variant",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "source": args.source,
        "database": target,
        "loadavg_start": loadavg_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "copy_s": round(copy_s, 1),
        "variant": variant,
        "total_s": round(time.perf_counter() - started, 1),
    }
    name = "hnsw_halfvec.json" if args.halfvec else f"hnsw_variant_m{args.m}_efc{args.ef_construction}.json"
    out = args.out or default_results_dir() / name
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
