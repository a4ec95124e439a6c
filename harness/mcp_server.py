"""`pgkb mcp`: an MCP server over stdio with two tools, `kb_retrieve` and `kb_status`.

An assistant (Claude Desktop, an IDE agent, anything that speaks the Model Context
Protocol) starts `pgkb mcp` as a child process and talks JSON-RPC on its stdin/stdout.
So stdout carries protocol messages only: every log line goes to stderr.

Both tools run as the database role named by PGKB_MCP_ROLE when it is set (the
connection does `SET ROLE` right after connecting), so the role's grants and any
row-level security policies decide what the assistant can read. Database errors
become tool errors with PostgreSQL's own message; they never end the server.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import date, datetime
from typing import Annotated, Any, Literal, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import Field

from . import retrieval, roles, status
from .config import load_settings
from .db import connect

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer
    from mcp.server.fastmcp.exceptions import ToolError

ROLE_ENV = "PGKB_MCP_ROLE"
MAX_K = 50

log = logging.getLogger("pgkb.mcp")
T = TypeVar("T")

INSTRUCTIONS = """\
pgkb answers questions from a team's knowledge base (decision records, policies, manuals) kept in PostgreSQL.
Call kb_retrieve with the user's question; it returns passages from the documents that are current at `as_of`
(default: now), each with source, section path, version and effective dates. Answer from those passages only,
cite them (the `citation` field is ready to quote), and say so when no passage supports an answer.
Use as_of (an ISO date) for questions about what applied on a past day."""

# Every column of kb_retrieve's row goes to the assistant except the per-leg raw scores: they sit on
# different scales (cosine similarity, BM25) and invite comparisons that mean nothing; the per-leg
# ranks and the fused score carry the explanation an answer needs.
WITHHELD_FIELDS = frozenset({"dense_score", "lexical_score"})


def validate_role(name: str | None) -> str | None:
    """The role name from ROLE_ENV, or None; ValueError for a name PostgreSQL cannot hold."""
    return roles.validate_role(name, ROLE_ENV)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def citation(row: dict[str, Any]) -> str:
    """One line an assistant can quote (harness.retrieval.citation)."""
    return retrieval.citation(row)


def _db_message(exc: psycopg.Error) -> str:
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag else None) or str(exc).strip()
    hint = diag.message_hint if diag else None
    return f"{message} (hint: {hint})" if hint else message


class Database:
    """One lazily opened connection (kept, so a backend's embedding model stays loaded), reopened when lost."""

    def __init__(self, dsn: str, role: str | None):
        self.dsn = dsn
        self.role = role
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def _open(self) -> psycopg.Connection:
        try:
            conn = connect(self.dsn)
        except psycopg.OperationalError as exc:
            raise ToolError(f"cannot connect to the pgkb database: {str(exc).strip()}") from exc
        if self.role:
            try:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(self.role)))
            except psycopg.Error as exc:
                conn.close()
                raise ToolError(f"cannot SET ROLE {self.role!r} (from {ROLE_ENV}): {_db_message(exc)}") from exc
        return conn

    def run(self, work: Callable[[psycopg.Connection], T]) -> T:
        with self._lock:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = self._open()
                try:
                    return work(self._conn)
                except psycopg.OperationalError as exc:
                    # The server went away (restart, idle timeout): reopen once, then give up.
                    self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise ToolError(f"lost the connection to the pgkb database: {_db_message(exc)}") from exc
                    log.warning("connection lost (%s); reconnecting", _db_message(exc))
                except psycopg.Error as exc:
                    raise ToolError(_db_message(exc)) from exc
        raise AssertionError("unreachable")

    def role_dsn(self) -> str:
        """The DSN with the role set at session start (for code that opens its own connection)."""
        if not self.role:
            return self.dsn
        escaped = self.role.replace("\\", "\\\\").replace(" ", "\\ ")
        options = conninfo_to_dict(self.dsn).get("options") or ""
        return make_conninfo(self.dsn, options=f"{options} -c role={escaped}".strip())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def build_server(dsn: str, role: str | None) -> MCPServer:
    db = Database(dsn, role)
    server = MCPServer(name="pgkb", instructions=INSTRUCTIONS)

    @server.tool()
    def kb_retrieve(
        query: Annotated[str, Field(description="The question or search text, in any language.")],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many passages to return.")] = 8,
        namespace: Annotated[str | None, Field(description="Search only this namespace (default: all).")] = None,
        doc_type: Annotated[
            str | None, Field(description="Only documents of this type, e.g. 'policy' or 'decision'.")
        ] = None,
        mode: Annotated[
            Literal[retrieval.MODES],
            Field(description="Retrieval mode; 'auto' picks per query."),
        ] = "auto",
        as_of: Annotated[
            str | None,
            Field(description="ISO date or timestamp: answer with the documents current on that day (default now)."),
        ] = None,
        context: Annotated[
            list[str] | None, Field(description="Earlier questions of the conversation, for follow-up questions.")
        ] = None,
        max_per_document: Annotated[
            int | None,
            Field(
                ge=0,
                le=MAX_K,
                description="At most this many passages from one document, so that other relevant documents get "
                "places; 0: no cap (default: the knowledge base's setting).",
            ),
        ] = None,
        merge_adjacent: Annotated[
            bool | None,
            Field(
                description="Join passages that follow each other in one document into one passage, in document "
                "order, their overlap removed (default: the knowledge base's setting)."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Search the knowledge base and return ranked passages from the documents current at `as_of`.

        Every result carries source, title, section_path, version, effective_from/effective_to, a snippet, the
        full passage (content), score, match_type and provenance (file name, content type and size, parser and
        chunker versions, pages of a PDF, heading path, content hash, when it was ingested), plus a ready-made
        `citation` (with page numbers and parser where the document is a parsed file). `answerability` says
        whether the passages answer the question ("answer"), only partly ("low confidence"), or not at all
        ("no evidence"), with the `evidence` in [0, 1]; an empty `results` list means the knowledge base holds
        no evidence for the question.
        """
        if not query.strip():
            raise ToolError("query is empty")
        filters = {"doc_type": doc_type} if doc_type else None
        rows = db.run(
            lambda conn: retrieval.retrieve(
                conn,
                query,
                k=k,
                namespace=namespace,
                mode=mode,
                filters=filters,
                as_of=as_of,
                context=context or None,
                max_per_document=max_per_document,
                merge_adjacent=merge_adjacent,
            )
        )
        log.info("kb_retrieve mode=%s k=%d namespace=%s: %d rows", mode, k, namespace, len(rows))
        results = []
        for row in rows:
            item = {name: _plain(value) for name, value in row.items() if name not in WITHHELD_FIELDS}
            item["citation"] = citation(row)
            results.append(item)
        answer: dict[str, Any] = {
            "query": query,
            "as_of": as_of or "now",
            "namespace": namespace,
            "doc_type": doc_type,
            "mode": mode,
            "role": role,
            "count": len(results),
            # the call's decision, in every row as well: an empty result is "no evidence"
            "answerability": rows[0]["answerability"] if rows else "no evidence",
            "evidence": rows[0]["evidence"] if rows else 0.0,
            "results": results,
        }
        if not results:
            answer["note"] = "No passage matched: the knowledge base has no evidence for this question."
        return answer

    @server.tool()
    def kb_status() -> dict[str, Any]:
        """The state of the knowledge base: PostgreSQL and extension versions, applied migrations, embedding models
        (embedded, pending, failed, stale chunks) and documents per namespace."""
        db.run(lambda conn: conn.execute("SELECT 1"))  # checks the connection and the role first, with clear errors
        try:
            data = status.collect(db.role_dsn())
        except psycopg.Error as exc:
            raise ToolError(f"kb_status: {_db_message(exc)}") from exc
        data["role"] = role
        return data

    server.pgkb_database = db  # type: ignore[attr-defined]  # closed by serve()
    return server


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pgkb mcp: %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(os.environ.get("PGKB_MCP_LOG_LEVEL", "INFO").upper())
    log.propagate = False


def serve() -> int:
    """Run the stdio server until the client closes stdin."""
    configure_logging()
    try:
        role = validate_role(os.environ.get(ROLE_ENV))
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    # both tools only read: a hot standby may serve them (PGKB_READ_DSN)
    dsn = load_settings().read_dsn
    server = build_server(dsn, role)
    log.info("serving on stdio; database %s; role %s", _redacted(dsn), role or "(connection user)")
    try:
        server.run("stdio")
    finally:
        server.pgkb_database.close()  # type: ignore[attr-defined]
    return 0


def _redacted(dsn: str) -> str:
    """The DSN without its password, for logs."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    parts.pop("password", None)
    return make_conninfo("", **parts)
