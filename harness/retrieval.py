"""Calling `kb_retrieve` and `kb_retrieve_explain` from Python: the one place the call is spelled.

Both functions take the SQL functions' arguments under the same names. An argument left as
None is not passed at all, so the database's own default applies (k 8, mode auto, no
namespace, no filters, as_of now(), no context, and for max_per_document / merge_adjacent the
settings of those names); the defaults live in the database only.
The result columns are whatever `kb_retrieve` returns (one dict per row, in column order).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import psycopg
from pgkb_plpy import vocabulary
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

# The retrieval modes kb_retrieve accepts, in the order reports list them (pgkb_plpy.vocabulary's
# list; tests check that the database agrees).
MODES = vocabulary.RETRIEVAL_MODES

# Optional arguments of kb_retrieve / kb_retrieve_explain with their SQL types, in signature order.
OPTIONAL_ARGUMENTS = {
    "k": "integer",
    "namespace": "text",
    "mode": "text",
    "filters": "jsonb",
    "as_of": "timestamptz",
    "context": "text[]",
    "max_per_document": "integer",
    "merge_adjacent": "boolean",
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
    max_per_document: int | None,
    merge_adjacent: bool | None,
) -> tuple[str, dict[str, Any]]:
    """The SQL text `function(query, name => value, ...)` with named arguments for the given values only."""
    given = {
        "k": k,
        "namespace": namespace,
        "mode": mode,
        "filters": filters,
        "as_of": as_of,
        "context": context,
        "max_per_document": max_per_document,
        "merge_adjacent": merge_adjacent,
    }
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
    max_per_document: int | None = None,
    merge_adjacent: bool | None = None,
) -> list[dict[str, Any]]:
    """The rows of `kb_retrieve(query, ...)`, ranked, one dict per passage (column name -> value).

    `filters` is a dict (or a psycopg Jsonb) sent as jsonb; `as_of` a date, datetime or a string
    PostgreSQL reads as timestamptz; `context` the earlier questions of a conversation;
    `max_per_document` the most chunks of one document among the k, `merge_adjacent` whether
    consecutive chunks of one document come as one passage (None: the database settings).
    Database errors (bad arguments, missing grants) propagate as psycopg errors."""
    call, params = _call(
        "kb_retrieve",
        query,
        k=k,
        namespace=namespace,
        mode=mode,
        filters=filters,
        as_of=as_of,
        context=context,
        max_per_document=max_per_document,
        merge_adjacent=merge_adjacent,
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT * FROM {call}", params).fetchall()


async def aretrieve(
    conn: psycopg.AsyncConnection,
    query: str,
    *,
    k: int | None = None,
    namespace: str | None = None,
    mode: str | None = None,
    filters: Any = None,
    as_of: str | date | datetime | None = None,
    context: Sequence[str] | None = None,
    max_per_document: int | None = None,
    merge_adjacent: bool | None = None,
) -> list[dict[str, Any]]:
    """`retrieve` on an async connection (psycopg.AsyncConnection): the same call, the same rows."""
    call, params = _call(
        "kb_retrieve",
        query,
        k=k,
        namespace=namespace,
        mode=mode,
        filters=filters,
        as_of=as_of,
        context=context,
        max_per_document=max_per_document,
        merge_adjacent=merge_adjacent,
    )
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"SELECT * FROM {call}", params)
        return await cur.fetchall()


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
    max_per_document: int | None = None,
    merge_adjacent: bool | None = None,
) -> dict[str, Any]:
    """The object `kb_retrieve_explain(query, ...)` returns for the same arguments as `retrieve`:
    query analysis, stages, candidates per leg, timings, low-confidence flag, model and a
    short form of the result rows under "results" (what passage assembly did under "assembly")."""
    call, params = _call(
        "kb_retrieve_explain",
        query,
        k=k,
        namespace=namespace,
        mode=mode,
        filters=filters,
        as_of=as_of,
        context=context,
        max_per_document=max_per_document,
        merge_adjacent=merge_adjacent,
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT {call} AS explain", params).fetchone()["explain"]


def pages(provenance: dict[str, Any] | None) -> str | None:
    """The pages of a passage of a paged file (PDF), "p. 3" or "pp. 3–5"; None for other files."""
    first, last = (provenance or {}).get("page_start"), (provenance or {}).get("page_end")
    if first is None:
        return None
    return f"p. {first}" if last in (None, first) else f"pp. {first}–{last}"


def parser_name(provenance: dict[str, Any] | None) -> str | None:
    """The parser library and its version ("pypdfium2 5.15.2"), without the build details the database keeps."""
    parser = (provenance or {}).get("parser")
    return parser.split(" (", 1)[0] if parser else None


def _plain_date(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime | date) else value


def citation(row: dict[str, Any]) -> str:
    """One line to quote for a passage (a kb_retrieve row): source § section (pages, version, effective
    window, status, parser), each detail only when the passage has it."""
    provenance = row.get("provenance")
    text = row["source"]
    if row.get("section_path"):
        text += f" § {row['section_path']}"
    details = []
    if pages(provenance):
        details.append(pages(provenance))
    if row.get("version"):
        details.append(f"version {row['version']}")
    start, end = row.get("effective_from"), row.get("effective_to")
    if start or end:
        details.append(f"effective {_plain_date(start) or '…'} to {_plain_date(end) or 'open'}")
    if row.get("status") and row["status"] != "active":
        details.append(row["status"])
    if parser_name(provenance):
        details.append(f"parsed by {parser_name(provenance)}")
    return text + (f" ({', '.join(details)})" if details else "")
