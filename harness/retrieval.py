"""Calling `kb_retrieve` and `kb_retrieve_explain` from Python: the one place the call is spelled.

`RetrievalRequest` is the one description of a retrieval request: the query and the optional
arguments of both SQL functions, in signature order, each with its SQL type and a one-line
description. Everything else that offers those arguments (the MCP tools, the framework retrievers,
the lab's query form, `pgkb query`) builds its parameters from its fields, so an argument added to
`kb_retrieve` is added here once (tests/unit/test_retrieval_request.py holds every place to it).

An argument left as None is not passed at all, so the database's own default applies (k 8, mode
auto, no namespace, no filters, as_of now(), no context, and for max_per_document / merge_adjacent
the settings of those names); the defaults live in the database only.
The result columns are whatever `kb_retrieve` returns (one dict per row, in column order).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import psycopg
from pgkb_plpy import vocabulary
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

# The retrieval modes kb_retrieve accepts, in the order reports list them (pgkb_plpy.vocabulary's
# list; tests check that the database agrees).
MODES = vocabulary.RETRIEVAL_MODES

# The SQL functions that take a RetrievalRequest's arguments.
FUNCTIONS = ("kb_retrieve", "kb_retrieve_explain")


def _argument(sql_type: str, description: str) -> Any:
    """An optional field of RetrievalRequest: None by default, its SQL type and the line help texts show."""
    return field(default=None, metadata={"sql_type": sql_type, "description": description})


@dataclass(frozen=True)
class RetrievalRequest:
    """One call of kb_retrieve / kb_retrieve_explain: the query and the optional arguments, in the
    SQL signature's order; None leaves an argument to the database's default.

    ``filters`` is a dict (or a psycopg Jsonb) sent as jsonb; ``as_of`` a date, datetime or a string
    PostgreSQL reads as timestamptz; ``context`` the earlier questions of a conversation."""

    query: str = field(metadata={"sql_type": "text", "description": "The question or search text, in any language."})
    k: int | None = _argument("integer", "How many passages to return.")
    namespace: str | None = _argument("text", "Search only this namespace (default: all).")
    mode: str | None = _argument("text", "Retrieval mode; 'auto' picks per query.")
    filters: dict[str, Any] | None = _argument(
        "jsonb",
        'Metadata the documents must match, a JSON object such as {"doc_type": "policy"} (default: none).',
    )
    as_of: str | date | datetime | None = _argument(
        "timestamptz", "ISO date or timestamp: answer with the documents current on that day (default now)."
    )
    context: Sequence[str] | None = _argument(
        "text[]", "Earlier questions of the conversation, for follow-up questions."
    )
    max_per_document: int | None = _argument(
        "integer",
        "At most this many passages from one document, so that other relevant documents get places; "
        "0: no cap (default: the knowledge base's setting).",
    )
    merge_adjacent: bool | None = _argument(
        "boolean",
        "Join passages that follow each other in one document into one passage, in document order, "
        "their overlap removed (default: the knowledge base's setting).",
    )

    def given_arguments(self) -> dict[str, Any]:
        """The optional arguments that are not None, by name, in signature order."""
        return {f.name: getattr(self, f.name) for f in OPTIONAL_FIELDS if getattr(self, f.name) is not None}

    def sql_call(self, function: str) -> tuple[str, dict[str, Any]]:
        """The SQL text `function(query, name => value, ...)` with named arguments for the given values
        only, and its parameters (function: one of FUNCTIONS)."""
        if function not in FUNCTIONS:
            raise ValueError(f"{function} does not take a retrieval request; {' and '.join(FUNCTIONS)} do")
        params: dict[str, Any] = {"query": self.query}
        arguments = [f"%(query)s::{QUERY_FIELD.metadata['sql_type']}"]
        for name, value in self.given_arguments().items():
            sql_type = OPTIONAL_ARGUMENTS[name]
            params[name] = _sql_value(value, sql_type)
            arguments.append(f"{name} => %({name})s::{sql_type}")
        return f"{function}({', '.join(arguments)})", params


def _sql_value(value: Any, sql_type: str) -> Any:
    """A Python value as psycopg should send it for an argument of that SQL type."""
    if sql_type == "jsonb" and not isinstance(value, Jsonb):
        return Jsonb(value)
    if sql_type.endswith("[]"):
        return list(value)
    return value


QUERY_FIELD = dataclasses.fields(RetrievalRequest)[0]
# The optional arguments' fields, in signature order: what other code builds its parameters from.
OPTIONAL_FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(RetrievalRequest)[1:]
# The optional arguments with their SQL types, in signature order.
OPTIONAL_ARGUMENTS: dict[str, str] = {f.name: f.metadata["sql_type"] for f in OPTIONAL_FIELDS}
# The Python type of each field (RetrievalRequest's annotations, resolved), for signatures and models.
FIELD_TYPES: dict[str, Any] = typing.get_type_hints(RetrievalRequest)


def description(name: str) -> str:
    """The one-line description of a field of RetrievalRequest (the query or an optional argument)."""
    return next(f for f in dataclasses.fields(RetrievalRequest) if f.name == name).metadata["description"]


def check_argument_names(names: Any) -> None:
    """TypeError naming every name that is not an optional argument of kb_retrieve."""
    unknown = set(names) - set(OPTIONAL_ARGUMENTS)
    if unknown:
        raise TypeError(
            f"kb_retrieve has no argument {', '.join(sorted(unknown))}; it takes {', '.join(OPTIONAL_ARGUMENTS)}"
        )


def request_of(query: str | RetrievalRequest, arguments: dict[str, Any]) -> RetrievalRequest:
    """A request from a query and keyword arguments, or a request with some arguments replaced."""
    check_argument_names(arguments)
    if isinstance(query, RetrievalRequest):
        return dataclasses.replace(query, **arguments)
    return RetrievalRequest(query, **arguments)


def retrieve(conn: psycopg.Connection, query: str | RetrievalRequest, **arguments: Any) -> list[dict[str, Any]]:
    """The rows of `kb_retrieve(query, ...)`, ranked, one dict per passage (column name -> value).

    ``query`` is the question, or a whole RetrievalRequest; ``arguments`` are RetrievalRequest's
    optional fields by name (over the request's own, when one is given): k, namespace, mode, filters,
    as_of, context, max_per_document (the most chunks of one document among the k) and merge_adjacent
    (whether consecutive chunks of one document come as one passage). An unknown name is a TypeError.
    Database errors (bad arguments, missing grants) propagate as psycopg errors."""
    call, params = request_of(query, arguments).sql_call("kb_retrieve")
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT * FROM {call}", params).fetchall()


async def aretrieve(
    conn: psycopg.AsyncConnection, query: str | RetrievalRequest, **arguments: Any
) -> list[dict[str, Any]]:
    """`retrieve` on an async connection (psycopg.AsyncConnection): the same call, the same rows."""
    call, params = request_of(query, arguments).sql_call("kb_retrieve")
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(f"SELECT * FROM {call}", params)
        return await cur.fetchall()


def explain(conn: psycopg.Connection, query: str | RetrievalRequest, **arguments: Any) -> dict[str, Any]:
    """The object `kb_retrieve_explain(query, ...)` returns for the same arguments as `retrieve`:
    query analysis, stages, candidates per leg, timings, low-confidence flag, model and a
    short form of the result rows under "results" (what passage assembly did under "assembly")."""
    call, params = request_of(query, arguments).sql_call("kb_retrieve_explain")
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
