"""Calling `kb_retrieve` and `kb_retrieve_explain` from Python: the one place the call is spelled.

Both functions take the SQL functions' arguments under the same names. An argument left as
None is not passed at all, so the database's own default applies (k 8, mode auto, no
namespace, no filters, as_of now(), no context); the defaults live in the SQL signature only.
The result columns are whatever `kb_retrieve` returns (one dict per row, in column order).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .config import VOCABULARY

# The retrieval modes kb_retrieve accepts, in the order reports list them (pgkb_plpy.vocabulary's
# list; tests check that the database agrees).
MODES = VOCABULARY.RETRIEVAL_MODES

# Optional arguments of kb_retrieve / kb_retrieve_explain with their SQL types, in signature order.
OPTIONAL_ARGUMENTS = {
    "k": "integer",
    "namespace": "text",
    "mode": "text",
    "filters": "jsonb",
    "as_of": "timestamptz",
    "context": "text[]",
}


def _call(
    function: str,
    query: str,
    *,
    k: int | None,
    namespace: str | None,
    mode: str | None,
    filters: Any,
    as_of: str | date | datetime | None,
    context: Sequence[str] | None,
) -> tuple[str, dict[str, Any]]:
    """The SQL text `function(query, name => value, ...)` with named arguments for the given values only."""
    given = {"k": k, "namespace": namespace, "mode": mode, "filters": filters, "as_of": as_of, "context": context}
    params: dict[str, Any] = {"query": query}
    arguments = ["%(query)s::text"]
    for name, sql_type in OPTIONAL_ARGUMENTS.items():
        value = given[name]
        if value is None:
            continue
        if name == "filters" and not isinstance(value, Jsonb):
            value = Jsonb(value)
        elif name == "context":
            value = list(value)
        params[name] = value
        arguments.append(f"{name} => %({name})s::{sql_type}")
    return f"{function}({', '.join(arguments)})", params


def retrieve(
    conn: psycopg.Connection,
    query: str,
    *,
    k: int | None = None,
    namespace: str | None = None,
    mode: str | None = None,
    filters: Any = None,
    as_of: str | date | datetime | None = None,
    context: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The rows of `kb_retrieve(query, ...)`, ranked, one dict per passage (column name -> value).

    `filters` is a dict (or a psycopg Jsonb) sent as jsonb; `as_of` a date, datetime or a string
    PostgreSQL reads as timestamptz; `context` the earlier questions of a conversation.
    Database errors (bad arguments, missing grants) propagate as psycopg errors."""
    call, params = _call(
        "kb_retrieve", query, k=k, namespace=namespace, mode=mode, filters=filters, as_of=as_of, context=context
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT * FROM {call}", params).fetchall()


def explain(
    conn: psycopg.Connection,
    query: str,
    *,
    k: int | None = None,
    namespace: str | None = None,
    mode: str | None = None,
    filters: Any = None,
    as_of: str | date | datetime | None = None,
    context: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The object `kb_retrieve_explain(query, ...)` returns for the same arguments as `retrieve`:
    query analysis, stages, candidates per leg, timings, low-confidence flag, model and a
    short form of the result rows under "results"."""
    call, params = _call(
        "kb_retrieve_explain",
        query,
        k=k,
        namespace=namespace,
        mode=mode,
        filters=filters,
        as_of=as_of,
        context=context,
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT {call} AS explain", params).fetchone()["explain"]
