"""Latency of ``kb_retrieve`` against its bare legs, on one database, short and long queries apart.

Per query, interleaved so that background load hits every leg alike:

* ``hybrid``: ``kb_retrieve(q, 10, NULL, 'hybrid')`` (the query is embedded in the database by the
  active model's provider: ``hash``, or the real model of ``--corpus real``);
* ``explain_total`` and the stages: ``kb_retrieve_explain`` of the same call gives the total and
  the ``embed`` (query analysis included), ``lexical``, ``dense`` and ``fuse`` stage times;
  ``hybrid_excl_embed`` is the hybrid wall time minus that embed time;
* ``bare_dense``: ``ORDER BY embedding::vector(D) <=> $1::vector(D) LIMIT 10`` through the model's
  partial HNSW index with a precomputed query vector (``kb.embed_query``'s for a real model),
  ``hnsw.ef_search`` = the database's
  ``hnsw_ef_search`` setting;
* ``bare_trigram``: ``WHERE $1 <% content ORDER BY word_similarity($1, content) DESC LIMIT 10``,
  only for the first ``trigram_queries`` queries of each kind (it is slow);
* ``bare_bm25``: ``kb_node.lexical_candidates(terms, now(), NULL, '{}', 100)`` with precomputed terms.

Before measuring, ``warmup`` queries of each kind run every leg once, untimed (PL/Python imports,
plan caches). Timeouts and budgets: see ``timing``.
"""

from __future__ import annotations

import numpy as np
from pgkb_plpy import lexical
from pgvector.psycopg import register_vector

from .config import BenchModel
from .queries import query_vectors
from .timing import TIMEOUT_MS, pct, run

K = 10
BM25_LIMIT = 100
Q_HYBRID = "SELECT chunk_id, score FROM kb_retrieve(%s, 10, NULL, 'hybrid')"
Q_EXPLAIN = "SELECT kb_retrieve_explain(%s, 10, NULL, 'hybrid')"
Q_TRIGRAM = "SELECT id FROM kb.chunks WHERE %s <%% content ORDER BY word_similarity(%s, content) DESC LIMIT 10"
Q_BM25 = "SELECT chunk_id FROM kb_node.lexical_candidates(%s::text[], now(), NULL, '{}', 100)"

SERIES = (
    "hybrid",
    "explain_total",
    "embed",
    "hybrid_excl_embed",
    "explain_total_excl_embed",
    "stage_lexical",
    "stage_dense",
    "stage_fuse",
    "bare_dense",
    "bare_trigram",
    "bare_bm25",
)


def q_dense(model: BenchModel) -> str:
    dims = model.dims
    return (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{model.name}' "
        f"ORDER BY embedding::vector({dims}) <=> %s::vector({dims}) LIMIT 10"
    )


def measure(
    conn, queries: dict[str, list[str]], model: BenchModel, warmup: int, trigram_queries: int, ef_search: int
) -> tuple[dict, dict]:
    """``(latency, diagnostics)``: per kind of query, ``pct`` of every series in ``SERIES``, and
    stages run, queries with trigram results, queries with no rows, timeouts, an example."""
    register_vector(conn)  # query vectors go out as numpy arrays
    dense = q_dense(model)
    conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")  # the hnsw_ef_search setting
    conn.execute(f"SET statement_timeout = {int(TIMEOUT_MS)}")
    # as inside kb_retrieve (SET jit = off): a bare leg called at top level would otherwise pay
    # JIT compilation (seconds for kb_node.lexical_candidates when its estimates pass jit_above_cost)
    conn.execute("SET jit = off")
    prepared = {
        kind: list(zip(qs, query_vectors(conn, qs, model), [lexical.query_terms(q) for q in qs], strict=True))
        for kind, qs in queries.items()
    }
    warm_timeouts: dict[str, int] = {}
    scratch: dict[str, list[float]] = {k: [] for k in ("hybrid", "explain", "dense", "bm25")}
    for kind in prepared:
        for q, vec, terms in prepared[kind][:warmup]:
            run(conn, scratch, warm_timeouts, "hybrid", Q_HYBRID, [q])
            run(conn, scratch, warm_timeouts, "explain", Q_EXPLAIN, [q])
            run(conn, scratch, warm_timeouts, "dense", dense, [vec])
            run(conn, scratch, warm_timeouts, "bm25", Q_BM25, [terms])
    latency: dict = {}
    diagnostics: dict = {}
    for kind, items in prepared.items():
        series: dict[str, list[float]] = {k: [] for k in SERIES}
        stages_run, trigram_hits, empty = [], 0, 0
        timeouts: dict[str, int] = {}

        for n, (q, vec, terms) in enumerate(items):
            rows = run(conn, series, timeouts, "hybrid", Q_HYBRID, [q])
            empty += rows is not None and not rows
            ex = run(conn, series, timeouts, "explain_total", Q_EXPLAIN, [q])
            if ex is not None:
                ex = ex[0][0]
                tm = ex["timings_ms"]
                embed = float(tm["embed"])
                series["explain_total"][-1] = float(tm["total"])
                series["embed"].append(embed)
                series["hybrid_excl_embed"].append(series["hybrid"][-1] - embed)
                series["explain_total_excl_embed"].append(float(tm["total"]) - embed)
                series["stage_lexical"].append(float(tm["lexical"]))
                series["stage_dense"].append(float(tm["dense"]))
                series["stage_fuse"].append(float(tm["fuse"]))
                stages_run.append(len(ex.get("stages") or []))
                trigram_hits += any(r.get("match_type", "").startswith("trigram") for r in ex.get("results") or [])
            run(conn, series, timeouts, "bare_dense", dense, [vec])
            if n < trigram_queries:
                run(conn, series, timeouts, "bare_trigram", Q_TRIGRAM, [q, q])
            run(conn, series, timeouts, "bare_bm25", Q_BM25, [terms])
        latency[kind] = {k: pct(v) for k, v in series.items()}
        diagnostics[kind] = {
            "stages_run_mean": round(float(np.mean(stages_run)), 2) if stages_run else None,
            "queries_with_more_than_one_stage": int(sum(s > 1 for s in stages_run)),
            "queries_with_trigram_results": trigram_hits,
            "queries_with_no_rows": empty,
            "timeouts": timeouts,
            "example": items[0][0],
        }
    return latency, diagnostics


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _sum(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 2)


def ratios(latency: dict) -> dict:
    """Per kind: hybrid p95 over the sum of the three bare legs' p95 (with and without the embed
    time), and hybrid excluding the embed time over bare dense + bare BM25 only."""
    out = {}
    for kind, s in latency.items():
        bare3 = _sum(s["bare_dense"]["p95"], s["bare_trigram"]["p95"], s["bare_bm25"]["p95"])
        bare2 = _sum(s["bare_dense"]["p95"], s["bare_bm25"]["p95"])
        out[kind] = {
            "sum_bare_p95_ms": bare3,
            "hybrid_p95_over_sum_bare_p95": _div(s["hybrid"]["p95"], bare3),
            "hybrid_excl_embed_p95_over_sum_bare_p95": _div(s["hybrid_excl_embed"]["p95"], bare3),
            "sum_bare_dense_bm25_p95_ms": bare2,
            "hybrid_excl_embed_p95_over_dense_plus_bm25_p95": _div(s["hybrid_excl_embed"]["p95"], bare2),
        }
    return out
