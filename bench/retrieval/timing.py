"""Timing primitives shared by the measurements: percentiles, timed statements, warm buffers.

Times are client wall time of one statement (execute and fetch) over the connection, in ms.
A statement cut off by ``statement_timeout`` counts as ``TIMEOUT_MS``; after
``SKIP_AFTER_TIMEOUTS`` timeouts, or once a series has used ``LEG_BUDGET_MS``, ``run`` stops
running that series (its figures then rest on fewer queries: see each figure's ``n``).
"""

from __future__ import annotations

import time

import numpy as np
import psycopg

SKIP_AFTER_TIMEOUTS = 3
LEG_BUDGET_MS = 60_000.0  # per leg and kind of query; keeps a run on a slow build bounded
TIMEOUT_MS = 10000.0  # statement_timeout of the measuring session; a cut-off query counts as this


def pct(values: list[float]) -> dict:
    """``n``, p50, p95, mean and max of ``values`` (ms, 2 decimals); None figures when empty."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "mean": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "mean": round(float(a.mean()), 2),
        "max": round(float(a.max()), 2),
    }


def timed(conn, query, params) -> tuple[float, list]:
    """(ms, rows) of one statement."""
    t = time.perf_counter()
    rows = conn.execute(query, params).fetchall()
    return (time.perf_counter() - t) * 1000.0, rows


def run(conn, series: dict, timeouts: dict, leg: str, query: str, params: list) -> list | None:
    """Time one statement into ``series[leg]`` and return its rows; None when it timed out or the
    leg is no longer run (see the module docstring)."""
    if timeouts.get(leg, 0) >= SKIP_AFTER_TIMEOUTS or sum(series[leg]) > LEG_BUDGET_MS:
        return None
    try:
        ms, rows = timed(conn, query, params)
    except psycopg.errors.QueryCanceled:
        ms, rows = TIMEOUT_MS, None
        timeouts[leg] = timeouts.get(leg, 0) + 1
    series[leg].append(ms)
    return rows


def prewarm(conn, tables: list[str] | None = None, create_extension: bool = True) -> bool:
    """pg_prewarm every ``kb`` relation, or only ``tables`` with their btree and HNSW indexes.

    ``create_extension``: create pg_prewarm when missing; otherwise a database without it is left
    as it is and nothing is pre-warmed. Returns whether anything was pre-warmed."""
    if create_extension:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    elif not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_prewarm'").fetchone():
        return False
    if tables is None:
        conn.execute(
            """SELECT pg_prewarm(c.oid) FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
               WHERE n.nspname = 'kb' AND c.relkind IN ('r', 'i') AND c.relpersistence = 'p'"""
        )
        return True
    conn.execute(
        """SELECT pg_prewarm(r) FROM (
               SELECT t::regclass AS r FROM unnest(%s::text[]) AS t
               UNION ALL
               SELECT i.indexrelid::regclass FROM pg_index AS i
               JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS am ON am.oid = c.relam
               WHERE i.indrelid IN (SELECT t::regclass FROM unnest(%s::text[]) AS t)
                 AND am.amname IN ('btree', 'hnsw')) AS x""",
        [tables, tables],
    )
    return True
