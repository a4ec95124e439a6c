"""`pgkb mcp`: an MCP server over stdio. Tools `kb_retrieve`, `kb_explain` and `kb_status`; the current
documents as resources; optionally one retrieval tool per described namespace.

An assistant (Claude Desktop, an IDE agent, anything that speaks the Model Context
Protocol) starts `pgkb mcp` as a child process and talks JSON-RPC on its stdin/stdout.
So stdout carries protocol messages only: every log line goes to stderr.

Everything runs as the database role named by PGKB_MCP_ROLE when it is set (the
connection does `SET ROLE` right after connecting), so the role's grants and any
row-level security policies decide what the assistant can read: passages, documents and
namespace descriptions alike. Database errors become tool errors with PostgreSQL's own
message; they never end the server.

* Resources: every document current now that the role may read (the view
  kb.current_documents), listed in pages of PGKB_MCP_PAGE_SIZE (default 100) in (namespace,
  source) order, as ``pgkb://documents/<namespace>/<source>``; reading one returns the whole
  text and, as JSON, its lifecycle and provenance (kb.read_document). ``?as_of=DATE`` reads the
  version that was current that day.
* Per-namespace tools (PGKB_MCP_NAMESPACE_TOOLS=1 or `pgkb mcp --namespace-tools`): one tool
  ``kb_retrieve_<namespace>`` per row of kb.namespace_descriptions the role can read, described
  by that row. The list is read again at every tools/list, and a tools/call that finds it
  changed first sends notifications/tools/list_changed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import json
import logging
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qs, quote, unquote, urlsplit

import anyio
import psycopg
import uvicorn
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from . import retrieval, roles, status, version
from .config import load_settings
from .db import connect, connection_lost, redacted

ROLE_ENV = "PGKB_MCP_ROLE"
NAMESPACE_TOOLS_ENV = "PGKB_MCP_NAMESPACE_TOOLS"
PAGE_SIZE_ENV = "PGKB_MCP_PAGE_SIZE"
MAX_K = 1000  # kb_retrieve's own bound
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
DOCUMENT_URI = "pgkb://documents/"
NAMESPACE_TOOL_PREFIX = "kb_retrieve_"
MAX_TOOL_NAME = 64  # what the strictest clients accept: ^[a-zA-Z0-9_-]{1,64}$

log = logging.getLogger("pgkb.mcp")


class ToolError(Exception):
    """A tool call that failed for a reason the assistant should read (the server goes on)."""


T = TypeVar("T")

INSTRUCTIONS = """\
pgkb answers questions from a team's knowledge base (decision records, policies, manuals) kept in PostgreSQL.
Call kb_retrieve with the user's question; it returns passages from the documents that are current at `as_of`
(default: now), each with source, section path, version and effective dates. Answer from those passages only,
cite them (the `citation` field is ready to quote), and say so when no passage supports an answer.
Use as_of (an ISO date) for questions about what applied on a past day. Each passage's `document_uri` is a
resource holding the whole document; kb_explain shows why passages ranked as they did."""

# What a result carries by default: what an answer cites and needs to tell versions apart, nothing
# else (an assistant pays for every character). With detail=true every column of kb_retrieve's row
# goes but the per-leg raw scores: they sit on different scales (cosine similarity, BM25) and invite
# comparisons that mean nothing; the per-leg ranks and the fused score carry the explanation.
COMPACT_FIELDS = (
    "rank", "source", "section_path", "content", "relevance", "version", "effective_from", "effective_to"
)  # fmt: skip
WITHHELD_FIELDS = frozenset({"dense_score", "lexical_score"})
DETAIL_DESCRIPTION = (
    "true: every column of each passage (title, snippet, score, ranks per leg, match type, provenance: file, "
    "pages, parser, ingest time); false (default): the passage, its source, section, version, dates, "
    "citation and document_uri."
)
# The retrieval tools only read: an assistant may call them freely.
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

# The retrieval tools' parameters (kb_retrieve, kb_explain and the per-namespace tools) are the fields of
# harness.retrieval.RetrievalRequest, each with the request's description, but for the differences below.
Query = Annotated[str, Field(description=retrieval.description("query"))]
# Where a field as the request types it would not do for an assistant: k and mode show the database's
# defaults and take only what the database accepts (k and max_per_document with a ceiling an answer can
# use), and as_of is text, as every date is in JSON.
TOOL_TYPES: dict[str, tuple[Any, Any]] = {  # name -> (type, default)
    "k": (Annotated[int, Field(ge=1, le=MAX_K)], 8),
    "mode": (Literal[retrieval.MODES], "auto"),
    "as_of": (str | None, None),
    "max_per_document": (Annotated[int | None, Field(ge=0, le=MAX_K)], None),
}
# The tools take doc_type, the filter an assistant needs most, beside filters (a JSON object); doc_type
# follows namespace, since both narrow where the passages come from.
TOOL_OMITS: frozenset[str] = frozenset()
DOC_TYPE_DESCRIPTION = "Only documents of this type, e.g. 'policy' or 'decision'."

RETRIEVE_RETURNS = """\
Every result carries the passage (content), source, section_path, `relevance` (the probability, 0 to 1, that
this passage is one the answer is drawn from; it means the same in every call), version,
effective_from/effective_to, a ready-made `citation` (with page numbers where the document is a parsed file)
and `document_uri`, the resource holding the whole document; detail=true adds title, snippet, score, ranks per
leg, match_type and provenance (file name, content type and size, parser and chunker versions, pages, content
hash, when it was ingested). `answerability` says whether the passages answer the question ("answer": answer
from them), whether that is in real doubt ("low confidence": say so, or ask), and `evidence` is the calibrated
probability (0 to 1) that the top 3 passages hold the answer; an empty `results` list is "no evidence": the
knowledge base does not touch the question, so do not answer from it."""


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


def document_uri(namespace: str, source: str) -> str:
    """The resource URI of a document: pgkb://documents/<namespace>/<source>, the source percent-encoded
    except for its slashes."""
    return f"{DOCUMENT_URI}{quote(namespace, safe='')}/{quote(source, safe='/')}"


def parse_document_uri(uri: str) -> tuple[str, str, str | None]:
    """(namespace, source, as_of or None) of a document URI; ValueError for anything else."""
    parts = urlsplit(uri)
    if parts.scheme != "pgkb" or parts.netloc != "documents" or parts.path.count("/") < 2:
        raise ValueError(f"not a pgkb document URI (pgkb://documents/<namespace>/<source>): {uri}")
    namespace, _, source = parts.path[1:].partition("/")
    query = parse_qs(parts.query)
    unknown = set(query) - {"as_of"}
    if unknown:
        raise ValueError(f"a document URI takes only ?as_of=DATE, not {', '.join(sorted(unknown))}")
    as_of = query.get("as_of", [None])[-1]
    if not namespace or not source:
        raise ValueError(f"a document URI names a namespace and a source: {uri}")
    return unquote(namespace), unquote(source), as_of


def namespace_tool_name(namespace: str) -> str:
    """The tool name of a namespace's retrieval tool: kb_retrieve_<namespace>, valid for every client
    (letters, digits, _ and -, at most 64 characters). A namespace that does not fit as it is (a '.', or
    too long) gets its other characters as '_' and a short hash of its name, so two namespaces never
    share a tool."""
    name = NAMESPACE_TOOL_PREFIX + namespace
    if re.fullmatch(r"[A-Za-z0-9_-]+", namespace) and len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", namespace)[: MAX_TOOL_NAME - len(NAMESPACE_TOOL_PREFIX) - 9]
    return f"{NAMESPACE_TOOL_PREFIX}{slug}_{digest}"


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
                except psycopg.Error as exc:
                    if not connection_lost(exc, self._conn):
                        raise ToolError(_db_message(exc)) from exc
                    # The server went away (restart, idle timeout): reopen once, then give up.
                    self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise ToolError(f"lost the connection to the pgkb database: {_db_message(exc)}") from exc
                    log.warning("connection lost (%s); reconnecting", _db_message(exc))
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


def _answer(db: Database, role: str | None, query: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """kb_retrieve's answer as a tool returns it: the rows (without the leg scores) with citations and
    document URIs, and the call's decision."""
    if not query.strip():
        raise ToolError("query is empty")
    detail = arguments.pop("detail", False)
    filters = _filters(arguments)
    context = arguments.pop("context") or None
    rows = db.run(lambda conn: retrieval.retrieve(conn, query, filters=filters, context=context, **arguments))
    log.info(
        "kb_retrieve mode=%s k=%d namespace=%s: %d rows",
        arguments["mode"],
        arguments["k"],
        arguments["namespace"],
        len(rows),
    )
    results = []
    for row in rows:
        kept = (name for name in row if name not in WITHHELD_FIELDS) if detail else COMPACT_FIELDS
        item = {name: _plain(row[name]) for name in kept if row[name] is not None or detail}
        item["citation"] = citation(row)
        item["document_uri"] = document_uri(row["namespace"], row["source"])
        results.append(item)
    answer: dict[str, Any] = {
        "query": query,
        "as_of": arguments["as_of"] or "now",
        "count": len(results),
        # the call's decision, in every row as well: an empty result is "no evidence"
        "answerability": rows[0]["answerability"] if rows else "no evidence",
        "evidence": rows[0]["evidence"] if rows else 0.0,
        "results": results,
    }
    if detail:
        answer |= {"namespace": arguments["namespace"], "filters": filters, "mode": arguments["mode"], "role": role}
    if not results:
        answer["note"] = "No passage matched: the knowledge base has no evidence for this question."
    return answer


def _filters(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The call's filters: the filters object with doc_type in it (doc_type wins), None for none."""
    doc_type = arguments.pop("doc_type")
    filters = dict(arguments.pop("filters") or {})
    if doc_type:
        filters["doc_type"] = doc_type
    return filters or None


def _explain(db: Database, query: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if not query.strip():
        raise ToolError("query is empty")
    arguments.pop("detail", None)
    filters = _filters(arguments)
    context = arguments.pop("context") or None
    result = db.run(lambda conn: retrieval.explain(conn, query, filters=filters, context=context, **arguments))
    log.info("kb_explain mode=%s k=%d namespace=%s", arguments["mode"], arguments["k"], arguments["namespace"])
    return result


def _tool_parameter(name: str, annotation: Any, default: Any, description: str) -> inspect.Parameter:
    return inspect.Parameter(
        name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=default,
        annotation=Annotated[annotation, Field(description=description)],
    )


def tool_parameters(fixed: frozenset[str] = frozenset(), detail: bool = True) -> list[inspect.Parameter]:
    """A retrieval tool's parameters: the query, then every optional field of RetrievalRequest but
    TOOL_OMITS and the ``fixed`` ones (a per-namespace tool's namespace), typed as the request types it
    (or as TOOL_TYPES says), and doc_type after namespace."""
    parameters = [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Query)]
    for argument in retrieval.OPTIONAL_FIELDS:
        name = argument.name
        if name not in TOOL_OMITS | fixed:
            annotation, default = TOOL_TYPES.get(name, (retrieval.FIELD_TYPES[name], None))
            parameters.append(_tool_parameter(name, annotation, default, argument.metadata["description"]))
        if name == "namespace":
            parameters.append(_tool_parameter("doc_type", str | None, None, DOC_TYPE_DESCRIPTION))
    if detail:
        parameters.append(_tool_parameter("detail", bool, False, DETAIL_DESCRIPTION))
    return parameters


def one_copy(data: dict[str, Any]) -> str:
    """A tool's answer as compact JSON text, its only copy: an assistant pays for every character, and a
    structured copy beside the text would double them (so no output schema is advertised either)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the server lists it (``tool``), the model its arguments are checked against (the input
    schema is that model's JSON schema) and what a call runs: ``run(arguments)`` returns the answer's text."""

    tool: Tool
    arguments: type[BaseModel]
    run: Callable[[dict[str, Any]], str]

    def call(self, given: dict[str, Any]) -> str:
        try:
            arguments = self.arguments.model_validate(given).model_dump()
        except ValidationError as exc:
            # the fields and what they take; the rejected values are the caller's own data
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors(include_input=False)
            )
            raise ToolError(f"invalid arguments for {self.tool.name}: {problems}") from exc
        return self.run(arguments)


def tool_spec(
    name: str,
    title: str,
    description: str,
    parameters: list[inspect.Parameter],
    run: Callable[[dict[str, Any]], str],
    schema_title: str | None = None,
) -> ToolSpec:
    """A read-only tool whose arguments are ``parameters`` (their annotations and defaults), described by
    ``description``; ``schema_title`` titles its input schema (default: the tool's name)."""
    fields = {p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default) for p in parameters}
    model = create_model(schema_title or name, __config__=ConfigDict(extra="forbid"), **fields)
    tool = Tool(
        name=name, title=title, description=description, input_schema=model.model_json_schema(), annotations=READ_ONLY
    )
    return ToolSpec(tool, model, run)


def retrieval_tool_spec(
    name: str,
    title: str,
    description: str,
    run: Callable[[str, dict[str, Any]], dict[str, Any]],
    fixed: dict[str, Any] | None = None,
    detail: bool = True,
) -> ToolSpec:
    """A retrieval tool: its arguments are tool_parameters(); a call passes the query and the other arguments
    (with the ``fixed`` ones) to ``run`` and answers with one_copy of its result. Every per-namespace tool's
    input schema has one title, retrieve_in_namespace."""
    fixed = fixed or {}

    def answer(arguments: dict[str, Any]) -> str:
        return one_copy(run(arguments.pop("query"), {**arguments, **fixed}))

    schema_title = "retrieve_in_namespace" if fixed else None
    return tool_spec(name, title, description, tool_parameters(frozenset(fixed), detail), answer, schema_title)


def _status(db: Database, role: str | None) -> str:
    db.run(lambda conn: conn.execute("SELECT 1"))  # checks the connection and the role first, with clear errors
    try:
        data = status.collect(db.role_dsn())
    except psycopg.Error as exc:
        raise ToolError(f"kb_status: {_db_message(exc)}") from exc
    data["role"] = role
    return one_copy(data)


def fixed_tools(db: Database, role: str | None) -> list[ToolSpec]:
    """kb_retrieve, kb_explain and kb_status."""
    return [
        retrieval_tool_spec(
            "kb_retrieve",
            "Search the knowledge base",
            "Search the knowledge base and return ranked passages from the documents current at `as_of`."
            f"\n\n{RETRIEVE_RETURNS}",
            lambda query, arguments: _answer(db, role, query, arguments),
        ),
        retrieval_tool_spec(
            "kb_explain",
            "Explain a search",
            "Why kb_retrieve ranks what it ranks for the same arguments (kb_retrieve_explain): the query "
            "analysis\n(language, terms, answer type), the stages tried, candidates and scores per leg (lexical, "
            "dense), the\nevidence and the answerability decision, timings per stage, the model used, and the "
            "results in short.",
            lambda query, arguments: _explain(db, query, arguments),
            detail=False,
        ),
        tool_spec(
            "kb_status",
            "Knowledge base status",
            "The state of the knowledge base: PostgreSQL and extension versions, applied migrations, embedding "
            "models\n(embedded, pending, failed, stale chunks) and documents per namespace.",
            [],
            lambda arguments: _status(db, role),
        ),
    ]


class NamespaceTools:
    """The per-namespace retrieval tools, kept equal to the rows of kb.namespace_descriptions the role
    can read (row-level security decides which)."""

    def __init__(self, db: Database, role: str | None):
        self.db = db
        self.role = role
        self.described: dict[str, tuple[str, str]] = {}  # tool name -> (namespace, description)
        self.tools: dict[str, ToolSpec] = {}

    def read(self) -> dict[str, tuple[str, str]]:
        rows = self.db.run(
            lambda conn: conn.execute(
                "SELECT namespace, description FROM kb.namespace_descriptions ORDER BY namespace"
            ).fetchall()
        )
        return {namespace_tool_name(r["namespace"]): (r["namespace"], r["description"]) for r in rows}

    def spec(self, name: str, namespace: str, description: str) -> ToolSpec:
        return retrieval_tool_spec(
            name,
            f"Search {namespace}",
            f"Search the namespace {namespace!r}: {description}\n\n"
            f"Returns ranked passages from its documents current at `as_of` (default now). {RETRIEVE_RETURNS}",
            lambda query, arguments: _answer(self.db, self.role, query, arguments),
            {"namespace": namespace},
        )

    async def refresh(self) -> bool:
        """Read the descriptions again and make the tools follow them; True when the list changed. A
        database error keeps the tools as they were (logged)."""
        try:
            wanted = await anyio.to_thread.run_sync(self.read)
        except ToolError as exc:
            log.warning("namespace tools not refreshed: %s", exc)
            return False
        if wanted == self.described:
            return False
        self.described = wanted
        self.tools = {name: self.spec(name, *about) for name, about in wanted.items()}
        log.info("namespace tools: %s", ", ".join(sorted(self.tools)) or "(none)")
        return True


def _encode_cursor(namespace: str, source: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([namespace, source]).encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        namespace, source = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(namespace, str) and isinstance(source, str):
            return namespace, source
    except (ValueError, TypeError, binascii.Error):
        pass
    raise MCPError(INVALID_PARAMS, "invalid cursor (pass the nextCursor of the previous page as it is)")


def _mime_type(source: str) -> str:
    return "text/markdown" if source.lower().endswith((".md", ".markdown")) else "text/plain"


class DocumentResources:
    """resources/list pages through kb.current_documents; resources/read returns kb.read_document."""

    def __init__(self, db: Database, role: str | None, page_size: int):
        self.db = db
        self.role = role
        self.page_size = page_size

    def page(self, after: tuple[str, str] | None) -> list[dict[str, Any]]:
        return self.db.run(
            lambda conn: conn.execute(
                """SELECT namespace, source, title, doc_type, status, version, effective_from, effective_to,
                          characters
                   FROM kb.current_documents
                   WHERE %(after_namespace)s::text IS NULL
                      OR (namespace, source) > (%(after_namespace)s::text, %(after_source)s::text)
                   ORDER BY namespace, source LIMIT %(limit)s""",
                {
                    "after_namespace": after[0] if after else None,
                    "after_source": after[1] if after else None,
                    "limit": self.page_size + 1,
                },
            ).fetchall()
        )

    async def list(self, ctx, params: PaginatedRequestParams | None) -> ListResourcesResult:
        after = _decode_cursor(params.cursor) if params and params.cursor else None
        try:
            rows = await anyio.to_thread.run_sync(self.page, after)
        except ToolError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from exc
        more = len(rows) > self.page_size
        rows = rows[: self.page_size]
        resources = []
        for r in rows:
            details = [r["namespace"], r["doc_type"], r["version"] and f"version {r['version']}"]
            if r["effective_from"] or r["effective_to"]:
                details.append(
                    f"effective {_plain(r['effective_from']) or '…'} to {_plain(r['effective_to']) or 'open'}"
                )
            resources.append(
                Resource(
                    uri=document_uri(r["namespace"], r["source"]),
                    name=r["source"],
                    title=r["title"],
                    description=" · ".join(d for d in details if d),
                    mime_type=_mime_type(r["source"]),
                )
            )
        cursor = _encode_cursor(rows[-1]["namespace"], rows[-1]["source"]) if more else None
        log.info("resources/list: %d documents%s", len(resources), " (more)" if more else "")
        return ListResourcesResult(resources=resources, next_cursor=cursor)

    async def templates(self, ctx, params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
        template = ResourceTemplate(
            uri_template=DOCUMENT_URI + "{namespace}/{+source}",
            name="document",
            title="A document of the knowledge base",
            description="The whole document current now (append ?as_of=YYYY-MM-DD for the version current that "
            "day), with its lifecycle and provenance as JSON.",
        )
        return ListResourceTemplatesResult(resource_templates=[template])

    async def read(self, ctx, params: ReadResourceRequestParams) -> ReadResourceResult:
        uri = str(params.uri)
        try:
            namespace, source, as_of = parse_document_uri(uri)
        except ValueError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc), {"uri": uri}) from exc
        try:
            row = await anyio.to_thread.run_sync(
                lambda: self.db.run(
                    lambda conn: conn.execute(
                        "SELECT * FROM kb.read_document(%s, %s, coalesce(%s::timestamptz, now()))",
                        (namespace, source, as_of),
                    ).fetchone()
                )
            )
        except ToolError as exc:
            raise MCPError(INVALID_PARAMS, str(exc), {"uri": uri}) from exc
        if row is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"no document {source!r} in namespace {namespace!r}", {"uri": uri})
        if row["lifecycle"] != "current":
            successor = f" (superseded by {', '.join(row['superseded_by'])})" if row["superseded_by"] else ""
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"{source!r} in namespace {namespace!r} is not current {'on ' + as_of if as_of else 'now'}: "
                f"it is {row['lifecycle']}{successor}",
                {"uri": uri, "lifecycle": row["lifecycle"], "superseded_by": row["superseded_by"]},
            )
        about = {name: _plain(value) for name, value in row.items() if name != "body"}
        about["as_of"] = as_of or "now"
        about["role"] = self.role
        log.info("resources/read: one document (%d characters)", len(row["body"]))
        return ReadResourceResult(
            contents=[
                TextResourceContents(uri=uri, text=row["body"], mime_type=_mime_type(source), _meta=about),
                TextResourceContents(uri=uri, text=json.dumps(about, ensure_ascii=False), mime_type="application/json"),
            ]
        )


class KnowledgeBaseServer:
    """pgkb's MCP server on the SDK's low-level ``Server``: tools, document resources, no prompts (none is
    registered, so none is advertised). ``namespace_tools``: tools/list reads the namespaces again first, and a
    tools/call that finds them changed tells the client (notifications/tools/list_changed)."""

    def __init__(
        self, dsn: str, role: str | None, *, namespace_tools: bool = False, page_size: int = DEFAULT_PAGE_SIZE
    ):
        self.db = Database(dsn, role)
        self.fixed = {spec.tool.name: spec for spec in fixed_tools(self.db, role)}
        self.namespace_tools = NamespaceTools(self.db, role) if namespace_tools else None
        resources = DocumentResources(self.db, role, page_size)
        self.server = Server(
            "pgkb",
            version=version(),
            title="pgkb knowledge base",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=resources.list,
            on_list_resource_templates=resources.templates,
            on_read_resource=resources.read,
        )

    def tools(self) -> dict[str, ToolSpec]:
        return self.fixed | (self.namespace_tools.tools if self.namespace_tools else {})

    async def _list_tools(self, ctx, params: PaginatedRequestParams | None) -> ListToolsResult:
        if self.namespace_tools:
            await self.namespace_tools.refresh()
        return ListToolsResult(tools=[spec.tool for spec in self.tools().values()])

    async def _call_tool(self, ctx, params: CallToolRequestParams) -> CallToolResult:
        if self.namespace_tools and await self.namespace_tools.refresh():
            if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await ctx.session.send_tool_list_changed()
        return await self.call(params.name, params.arguments or {})

    async def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """One tool call; a failure is a tool error the assistant reads (the server goes on)."""
        spec = self.tools().get(name)
        try:
            if spec is None:
                raise ToolError(f"unknown tool {name!r}")
            text = await anyio.to_thread.run_sync(spec.call, dict(arguments))
        except ToolError as exc:
            log.info("tool %s failed: %r", name, str(exc))
            return CallToolResult(content=[TextContent(text=str(exc))], is_error=True)
        return CallToolResult(content=[TextContent(text=text)])

    def initialization_options(self):
        return self.server.create_initialization_options(
            NotificationOptions(tools_changed=self.namespace_tools is not None)
        )

    def close(self) -> None:
        self.db.close()


def build_server(
    dsn: str, role: str | None, *, namespace_tools: bool = False, page_size: int = DEFAULT_PAGE_SIZE
) -> KnowledgeBaseServer:
    return KnowledgeBaseServer(dsn, role, namespace_tools=namespace_tools, page_size=page_size)


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pgkb mcp: %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(os.environ.get("PGKB_MCP_LOG_LEVEL", "INFO").upper())
    log.propagate = False


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _page_size() -> int:
    text = os.environ.get(PAGE_SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_PAGE_SIZE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise ValueError(f"{PAGE_SIZE_ENV} must be a whole number from 1 to {MAX_PAGE_SIZE} (got {text!r})")
    return int(text)


def run_stdio(server: KnowledgeBaseServer) -> None:
    """Serve on stdin/stdout until the client closes stdin."""

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.server.run(read_stream, write_stream, server.initialization_options())

    anyio.run(run)


TOKEN_ENV = "PGKB_MCP_TOKEN"
DEFAULT_HTTP_PORT = 8766


def token_guard(app: Callable, token: str) -> Callable:
    """The ASGI app behind a bearer token: an HTTP request without ``Authorization: Bearer <token>`` gets 401
    before it reaches the MCP server (lifespan events pass through)."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                body = b'{"error": "missing or wrong bearer token (PGKB_MCP_TOKEN)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def http_app(server: KnowledgeBaseServer, host: str, token: str) -> Callable:
    """The server's Streamable HTTP app (at /mcp) behind the token."""
    return token_guard(server.server.streamable_http_app(host=host), token)


def serve(
    namespace_tools: bool = False, http: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT
) -> int:
    """Run the stdio server until the client closes stdin, or with ``http`` the Streamable HTTP server at
    http://host:port/mcp until interrupted (a bearer token required: PGKB_MCP_TOKEN, else one made and logged)."""
    configure_logging()
    try:
        role = validate_role(os.environ.get(ROLE_ENV))
        page_size = _page_size()
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    namespace_tools = namespace_tools or _flag(NAMESPACE_TOOLS_ENV)
    # everything here only reads: a hot standby may serve it (PGKB_READ_DSN)
    dsn = load_settings().read_dsn
    server = build_server(dsn, role, namespace_tools=namespace_tools, page_size=page_size)
    where = f"http://{host}:{port}/mcp" if http else "stdio"
    log.info(
        "serving on %s; database %s; role %s%s",
        where,
        redacted(dsn),
        role or "(connection user)",
        "; one tool per described namespace" if namespace_tools else "",
    )
    try:
        if http:
            token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
            if not os.environ.get(TOKEN_ENV):
                log.info("no %s set: clients must send Authorization: Bearer %s", TOKEN_ENV, token)
            uvicorn.run(http_app(server, host, token), host=host, port=port, log_level="warning")
        else:
            run_stdio(server)
    finally:
        server.close()
    return 0
