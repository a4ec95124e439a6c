"""Same-run comparison of ``kb_retrieve`` on two databases of one server (A: the baseline, B: the candidate).

Both databases must hold the same corpus (``facts.corpus_fingerprint``: row counts and md5 over the
documents' and chunks' content hashes; a mismatch is refused unless ``allow_different_corpora``);
their vector and posting counts are reported, not compared (a release may index differently).
The queries are ``queries.make_queries`` of database A, short and long, or the real questions
(``realcorpus.real_queries``) when ``corpus`` is a real corpus's datasets folder.

For each kind of query and each query, every mode of ``modes`` runs
``SELECT chunk_id, score FROM kb_retrieve(q, 10, NULL, <mode>)`` on both databases back to back,
A then B for even-numbered queries and B then A for odd ones, so that both see the same machine
noise and neither always runs second. Before that, ``warmup`` queries of each kind run every mode on
both, untimed. Times are client wall time (``timing.timed``), one connection per database, both
open all along.

A statement cut off by ``statement_timeout`` counts as ``timing.TIMEOUT_MS``; after
``timing.SKIP_AFTER_TIMEOUTS`` timeouts on either database a mode stops for that kind of query on
both, so that the two series stay paired.

Neither database is migrated or written: pg_prewarm is used only where it is installed, and a
database whose ``retrieval_log`` setting is on is refused (every call would append a log row).
The sessions cannot be read-only: ``kb_retrieve`` always runs its log statement, an ``INSERT``
that inserts nothing while ``retrieval_log`` is off, and PostgreSQL refuses any ``INSERT`` in a
read-only transaction. So the row count of ``kb.retrieval_log`` is checked instead: the run fails
if it changed on either database.

Reported per mode and kind: ``timing.pct`` of each database; ``b_over_a`` of p50, p95 and mean;
``paired_median_b_over_a``, the median over queries of B's time over A's; ``identical_results``,
the queries whose ranked chunk ids (and scores, to 1e-9) agree on both.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import psycopg

from .config import database_dsn, log
from .corpus import Corpus
from .facts import corpus_fingerprint, index_counts, schema_identity, setting
from .queries import make_queries
from .realcorpus import real_queries
from .timing import SKIP_AFTER_TIMEOUTS, TIMEOUT_MS, pct, prewarm, timed

MODES = ("hybrid", "lexical", "dense", "auto")
DEFAULT_MODES = ("hybrid", "lexical")


def retrieve_sql(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    return f"SELECT chunk_id, score FROM kb_retrieve(%s, 10, NULL, '{mode}')"


def _open(server_dsn: str, name: str) -> psycopg.Connection:
    conn = psycopg.connect(database_dsn(server_dsn, name), autocommit=True)
    conn.execute(f"SET statement_timeout = {int(TIMEOUT_MS)}")
    return conn


def _logged(conn) -> int:
    return conn.execute("SELECT count(*) FROM kb.retrieval_log").fetchone()[0]


def _one(conn, query: str, q: str) -> tuple[float, list | None]:
    try:
        return timed(conn, query, [q])
    except psycopg.errors.QueryCanceled:
        return TIMEOUT_MS, None


def _same(a: list | None, b: list | None) -> tuple[bool, bool]:
    """(same chunk ids in the same order, and same scores to 1e-9)."""
    if a is None or b is None:
        return False, False
    ids = [r[0] for r in a] == [r[0] for r in b]
    return ids, ids and all(abs((x[1] or 0.0) - (y[1] or 0.0)) <= 1e-9 for x, y in zip(a, b, strict=True))


def compare(
    server_dsn: str,
    db_a: str,
    db_b: str,
    corpus: Corpus | Path,
    seed: int,
    n_queries: int,
    warmup: int,
    modes: list[str],
    allow_different_corpora: bool = False,
) -> dict:
    """The comparison report of ``db_a`` (baseline) and ``db_b`` (see the module docstring)."""
    sqls = {mode: retrieve_sql(mode) for mode in modes}
    conns = {"a": _open(server_dsn, db_a), "b": _open(server_dsn, db_b)}
    try:
        databases = {}
        for side, conn in conns.items():
            if str(setting(conn, "retrieval_log", False)).lower() == "true":
                raise SystemExit(f"{conn.info.dbname}: retrieval_log is on; kb_retrieve would write a log row per call")
            databases[side] = {
                "name": conn.info.dbname,
                "corpus": corpus_fingerprint(conn),
                "index_counts": index_counts(conn),
                "schema": schema_identity(conn),
                "size": conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()[0],
            }
        logged = {side: _logged(conn) for side, conn in conns.items()}
        same_corpus = databases["a"]["corpus"] == databases["b"]["corpus"]
        if not same_corpus and not allow_different_corpora:
            raise SystemExit(
                f"{db_a} and {db_b} hold different corpora: {databases['a']['corpus']} vs {databases['b']['corpus']}"
            )
        if isinstance(corpus, Path):
            queries = real_queries(corpus, seed, n_queries)
        else:
            queries = make_queries(conns["a"], corpus, seed, n_queries)
        for side, conn in conns.items():
            databases[side]["prewarmed"] = prewarm(conn, create_extension=False)

        for qs in queries.values():
            for i, q in enumerate(qs[:warmup]):
                for mode in modes:
                    for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                        _one(conns[side], sqls[mode], q)

        results: dict = {}
        for kind, qs in queries.items():
            log(f"compare: {len(qs)} {kind} queries, modes {', '.join(modes)}")
            results[kind] = {}
            times = {mode: {"a": [], "b": []} for mode in modes}
            same = {mode: [0, 0] for mode in modes}
            timeouts = {mode: {"a": 0, "b": 0} for mode in modes}
            for i, q in enumerate(qs):
                for mode in modes:
                    if max(timeouts[mode].values()) >= SKIP_AFTER_TIMEOUTS:
                        continue
                    rows = {}
                    for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                        ms, rows[side] = _one(conns[side], sqls[mode], q)
                        times[mode][side].append(ms)
                        timeouts[mode][side] += rows[side] is None
                    ids, scores = _same(rows["a"], rows["b"])
                    same[mode][0] += ids
                    same[mode][1] += scores
            for mode in modes:
                a, b = times[mode]["a"], times[mode]["b"]
                sa, sb = pct(a), pct(b)
                results[kind][mode] = {
                    "a": sa,
                    "b": sb,
                    "b_over_a": {k: _ratio(sb[k], sa[k]) for k in ("p50", "p95", "mean")},
                    "paired_median_b_over_a": round(statistics.median(y / x for x, y in zip(a, b, strict=True)), 3)
                    if a
                    else None,
                    "identical_results": {"chunk_ids": same[mode][0], "chunk_ids_and_scores": same[mode][1]},
                    "timeouts": timeouts[mode],
                }
        for side, conn in conns.items():
            if _logged(conn) != logged[side]:
                raise SystemExit(f"{conn.info.dbname}: kb.retrieval_log changed during the comparison")
        return {
            "databases": databases,
            "same_corpus": same_corpus,
            "modes": list(modes),
            "queries_per_kind": n_queries,
            "examples": {kind: qs[0] for kind, qs in queries.items() if qs},
            "order": "per query and mode: A then B for even-numbered queries, B then A for odd ones",
            "results": results,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        for conn in conns.values():
            conn.close()


def _ratio(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None or not a else round(b / a, 3)
