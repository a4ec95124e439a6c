"""`pgkb mcp`: the MCP server, driven by the SDK's own stdio client against a real database.

Each test spawns `python -m harness.cli mcp` as a child process with PGKB_DSN pointing at the
test's fresh database, as an assistant would. Async client code runs through anyio.run inside
plain sync tests (no pytest plugin needed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from helpers import insert_document, insert_refund_corpus, temporary_role

from harness.db import redacted
from harness.retrieval import retrieve

mcp = pytest.importorskip("mcp")
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp_types import PaginatedRequestParams  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SERVER_COMMAND = [sys.executable, "-m", "harness.cli", "mcp"]


@asynccontextmanager
async def mcp_session(dsn: str, **env: str):
    """An initialised ClientSession to a fresh `pgkb mcp`; `stray` collects anything on stdout that is not
    a protocol message (the SDK hands such lines to the message handler as exceptions), `notifications`
    the methods of the server's notifications."""
    stray: list[Exception] = []
    notifications: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            stray.append(message)
        else:
            notifications.append(message.method)

    params = StdioServerParameters(
        command=SERVER_COMMAND[0], args=SERVER_COMMAND[1:], cwd=str(REPO), env={"PGKB_DSN": dsn, **env}
    )
    with open("/dev/null", "w") as errlog:  # the server's stderr logs; not part of the protocol
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                session.initialized = await session.initialize()
                session.stray = stray
                session.notifications = notifications
                yield session
    assert not stray, f"non-protocol output on stdout: {stray}"


def call(dsn: str, calls: list[tuple[str, dict]], **env: str) -> list:
    """Run tool calls in one server session; returns the CallToolResults."""

    async def run():
        async with mcp_session(dsn, **env) as session:
            return [await session.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def payload(result) -> dict:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is None and len(result.content) == 1  # one copy: the JSON as text
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error, result
    return result.content[0].text


@pytest.fixture
def corpus(fresh_db):
    insert_refund_corpus(fresh_db)
    return fresh_db


def test_tools_are_listed_with_their_parameters_and_no_prompts_are_advertised(dsn):
    async def run():
        async with mcp_session(dsn) as session:
            return session.initialized, (await session.list_tools()).tools

    initialized, listed = anyio.run(run)
    tools = {t.name: t for t in listed}
    assert initialized.capabilities.prompts is None  # pgkb has no prompts, so it offers none
    assert initialized.server_info.name == "pgkb" and initialized.server_info.version
    assert set(tools) == {"kb_retrieve", "kb_explain", "kb_status"}
    props = tools["kb_retrieve"].input_schema["properties"]
    assert {"query", "k", "namespace", "doc_type", "mode", "as_of"} <= set(props)
    assert tools["kb_retrieve"].input_schema["required"] == ["query"]
    assert props["k"]["default"] == 8
    assert tools["kb_retrieve"].description and tools["kb_status"].description and tools["kb_explain"].description
    assert tools["kb_explain"].input_schema["properties"] == {k: v for k, v in props.items() if k != "detail"}
    assert props["k"]["maximum"] == 1000 and "filters" in props  # the same bounds and filters as SQL
    for tool in tools.values():
        assert tool.title and tool.annotations.read_only_hint is True and tool.annotations.destructive_hint is False


def test_a_default_retrieval_is_compact_and_detail_adds_every_column(corpus, dsn):
    compact, detailed = call(
        dsn,
        [("kb_retrieve", {"query": "refunds", "k": 8}), ("kb_retrieve", {"query": "refunds", "k": 8, "detail": True})],
    )
    small, full = payload(compact), payload(detailed)
    assert [r["source"] for r in small["results"]] == [r["source"] for r in full["results"]]
    assert all({"content", "citation", "document_uri", "source", "relevance"} <= set(r) for r in small["results"])
    assert all(0 <= r["relevance"] <= 1 for r in small["results"])
    assert not any("provenance" in r or "snippet" in r for r in small["results"])
    assert all("provenance" in r for r in full["results"])
    assert len(json.dumps(small, ensure_ascii=False)) < len(json.dumps(full, ensure_ascii=False)) / 2
    (filtered,) = call(dsn, [("kb_retrieve", {"query": "refunds", "filters": {"doc_type": "policy"}, "detail": True})])
    assert {r["doc_type"] for r in payload(filtered)["results"]} == {"policy"}


def test_retrieve_returns_citable_current_passages(corpus, dsn):
    now, past, policies, mixed = call(
        dsn,
        [
            ("kb_retrieve", {"query": "refund deadline days", "namespace": "public", "detail": True}),
            ("kb_retrieve", {"query": "refund deadline days", "namespace": "public", "as_of": "2023-06-01"}),
            ("kb_retrieve", {"query": "refunds", "doc_type": "policy", "k": 5, "detail": True}),
            ("kb_retrieve", {"query": "退款期限", "mode": "lexical"}),
        ],
    )
    data = payload(now)
    assert data["count"] == len(data["results"]) >= 1
    assert data["answerability"] in ("answer", "low confidence") and 0 < data["evidence"] <= 1
    assert {(r["answerability"], r["evidence"]) for r in data["results"]} == {(data["answerability"], data["evidence"])}
    top = data["results"][0]
    assert top["source"] == "policies/refund-v2.md"
    assert top["title"] == "Refund policy"
    assert top["section_path"] and "Deadline" in top["section_path"]
    assert top["version"] == "2"
    assert top["effective_from"] == "2024-03-01" and top["effective_to"] is None
    assert top["doc_type"] == "policy" and top["namespace"] == "public"
    assert "14 days" in top["content"] and top["snippet"]
    assert isinstance(top["score"], float) and top["match_type"]
    assert top["citation"].startswith("policies/refund-v2.md § ")
    assert "version 2" in top["citation"] and "2024-03-01" in top["citation"]
    # the superseded version is not current now ...
    assert "policies/refund-v1.md" not in {r["source"] for r in data["results"]}
    # ... but it is what applied in mid-2023
    assert [r["source"] for r in payload(past)["results"]][:1] == ["policies/refund-v1.md"]
    assert {r["doc_type"] for r in payload(policies)["results"]} == {"policy"}
    assert payload(mixed)["results"][0]["source"] == "policies/refund-v2.md"


def test_results_carry_every_kb_retrieve_column_but_the_leg_scores(corpus, dsn):
    (result,) = call(dsn, [("kb_retrieve", {"query": "refunds", "k": 10, "detail": True})])
    results = payload(result)["results"]
    columns = set(retrieve(corpus, "refunds", k=10)[0])
    leg_scores = {"dense_score", "lexical_score"}  # raw scores on different scales; the ranks explain a hit
    assert leg_scores < columns
    assert results and all(set(r) == columns - leg_scores | {"citation", "document_uri"} for r in results)


def test_no_evidence_is_an_empty_answer_not_an_error(corpus, dsn):
    (result,) = call(dsn, [("kb_retrieve", {"query": "quantum chromodynamics lattice", "mode": "lexical"})])
    data = payload(result)
    assert data["count"] == 0 and data["results"] == []
    assert "no evidence" in data["note"]
    assert data["answerability"] == "no evidence" and data["evidence"] == 0


def test_status(corpus, dsn):
    (result,) = call(dsn, [("kb_status", {})])
    data = payload(result)
    assert data["model"] == "hash-64"
    assert "vector" in data["extensions"]
    assert {ns["namespace"] for ns in data["namespaces"]} == {"public", "internal"}
    assert data["role"] is None


def test_database_errors_become_tool_errors(corpus, dsn):
    bad_date, empty, too_many, still_fine = call(
        dsn,
        [
            ("kb_retrieve", {"query": "refund", "as_of": "not a date"}),
            ("kb_retrieve", {"query": "   "}),
            ("kb_retrieve", {"query": "refund", "k": 1001}),
            ("kb_retrieve", {"query": "refund"}),
        ],
    )
    assert "invalid input syntax for type timestamp" in error_text(bad_date)
    assert "query is empty" in error_text(empty)
    assert "k" in error_text(too_many)
    assert payload(still_fine)["count"] >= 1  # the server survived the errors


def test_unreachable_database_is_a_clear_error():
    (result,) = call("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", [("kb_retrieve", {"query": "x"})])
    assert "cannot connect to the pgkb database" in error_text(result)


# -- database role and row-level security ------------------------------------------------------------


@pytest.fixture
def reader_role(corpus):
    """A NOLOGIN role the connecting user may SET ROLE to, with read grants, and an RLS policy that shows
    it only the `public` namespace."""
    with temporary_role(corpus, f"mcp_reader_{uuid.uuid4().hex[:8]}") as role:
        corpus.execute(f"GRANT {role} TO current_user")
        corpus.execute(f"GRANT USAGE ON SCHEMA kb TO {role}")
        corpus.execute(
            "GRANT SELECT ON kb.documents, kb.chunks, kb.embeddings, kb.lexical_postings, kb.lexical_stats, "
            "kb.lexical_terms, kb.embed_queue, "
            f"kb.models, kb.settings, kb.schema_migrations, kb.model_readiness, kb.ingest_status, "
            f"kb.current_documents, kb.namespace_descriptions TO {role}"
        )
        # pgkb's own row-level security: namespace grants, enforced with tenant_isolation on
        corpus.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
        corpus.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'public')", (role,))
        try:
            yield role
        finally:
            corpus.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'")
            corpus.execute("DELETE FROM kb.namespace_grants WHERE role_name = %s", (role,))


def test_retrieve_runs_as_the_configured_role(reader_role, dsn):
    as_role, status_result = call(
        dsn,
        [("kb_retrieve", {"query": "refunds", "k": 10, "detail": True}), ("kb_status", {})],
        PGKB_MCP_ROLE=reader_role,
    )
    data = payload(as_role)
    assert data["role"] == reader_role
    sources = {r["source"] for r in data["results"]}
    assert sources == {"policies/refund-v2.md"}, "row-level security hides the internal namespace"
    assert payload(status_result)["role"] == reader_role

    (as_owner,) = call(dsn, [("kb_retrieve", {"query": "refunds", "k": 10})])
    assert "decisions/adr-007-refund-automation.md" in {r["source"] for r in payload(as_owner)["results"]}


def test_role_without_grants_gets_permission_error(corpus, dsn):
    with temporary_role(corpus, f"mcp_nogrants_{uuid.uuid4().hex[:8]}") as role:
        (result,) = call(dsn, [("kb_retrieve", {"query": "refund"})], PGKB_MCP_ROLE=role)
        assert "permission denied" in error_text(result)


def test_nonexistent_role_is_a_clear_error(corpus, dsn):
    missing = "no such role; DROP TABLE kb.documents"  # quoted as an identifier, never spliced as SQL
    retrieve, status_result, tools = None, None, None

    async def run():
        nonlocal retrieve, status_result, tools
        async with mcp_session(dsn, PGKB_MCP_ROLE=missing) as session:
            retrieve = await session.call_tool("kb_retrieve", {"query": "refund"})
            status_result = await session.call_tool("kb_status", {})
            tools = await session.list_tools()  # still serving

    anyio.run(run)
    for result in (retrieve, status_result):
        text = error_text(result)
        assert "PGKB_MCP_ROLE" in text and "does not exist" in text, text
    assert len(tools.tools) == 3
    assert corpus.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 3


def test_invalid_role_name_refused_at_start(dsn):
    proc = subprocess.run(
        SERVER_COMMAND,
        cwd=REPO,
        env={"PGKB_DSN": dsn, "PGKB_MCP_ROLE": "r" * 64, "PATH": "/usr/bin:/bin"},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "PGKB_MCP_ROLE is longer than 63 bytes" in proc.stderr


# -- stdout is the protocol channel ------------------------------------------------------------------


def test_stdout_carries_only_protocol_messages(corpus, dsn):
    """Raw JSON-RPC over pipes: every stdout line is a JSON-RPC message; the logs are on stderr."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "kb_retrieve", "arguments": {"query": "refund deadline days", "namespace": "public"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "kb_retrieve", "arguments": {"query": "x", "as_of": "bad"}},
        },
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "kb_status", "arguments": {}}},
    ]
    proc = subprocess.Popen(
        SERVER_COMMAND,
        cwd=REPO,
        env={"PGKB_DSN": dsn, "PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    replies: dict[int, dict] = {}
    lines: list[str] = []
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:  # wait for the reply before the next request (initialize must finish first)
                while message["id"] not in replies:
                    line = proc.stdout.readline()
                    assert line, f"server closed stdout; stderr: {proc.stderr.read()}"
                    lines.append(line)
                    reply = json.loads(line)
                    if "id" in reply:
                        replies[reply["id"]] = reply
        proc.stdin.close()
        rest, stderr = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines += rest.splitlines(keepends=True)
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0", line
    assert replies[1]["result"]["serverInfo"]["name"] == "pgkb"
    assert json.loads(replies[3]["result"]["content"][0]["text"])["results"][0]["source"] == "policies/refund-v2.md"
    assert replies[4]["result"]["isError"] is True
    assert json.loads(replies[5]["result"]["content"][0]["text"])["model"] == "hash-64"
    assert "pgkb mcp: INFO serving on stdio" in stderr
    assert "kb_retrieve mode=auto" in stderr


def test_the_connection_string_the_server_logs_has_no_password():
    shown = redacted("postgresql://reader:s3cret@db.example:5432/pgkb?sslmode=require")
    assert "s3cret" not in shown
    assert all(part in shown for part in ("reader", "db.example", "5432", "pgkb", "sslmode=require"))
    assert "s3cret" not in redacted("host=db.example password=s3cret dbname=pgkb")
    assert redacted("host=db.example password='s3cret") == "(unparsable DSN)"  # never echoed half-parsed


def test_retrieve_passes_the_assembly_options_and_returns_provenance(fresh_db, dsn):
    guide = "# Guide\n\n" + "\n\n".join(f"## Part {i}\n\nRefund refund rule {i} of the refund desk." for i in range(4))
    doc = insert_document(fresh_db, "guide.md", guide)
    insert_document(fresh_db, "other.md", "# Other\n\nA refund is booked by finance.")
    ids = [
        r["id"] for r in fresh_db.execute("SELECT id FROM kb.chunks WHERE document_id = %s ORDER BY ordinal", (doc,))
    ]
    capped, merged, bad = call(
        dsn,
        [
            ("kb_retrieve", {"query": "refund", "mode": "lexical", "k": 3, "max_per_document": 1}),
            (
                "kb_retrieve",
                {
                    "query": "refund",
                    "mode": "lexical",
                    "k": 5,
                    "max_per_document": 5,
                    "merge_adjacent": True,
                    "detail": True,
                },
            ),
            ("kb_retrieve", {"query": "refund", "max_per_document": -1}),
        ],
    )
    capped_sources = [r["source"] for r in payload(capped)["results"]]
    assert capped_sources[:2] == ["guide.md", "other.md"]
    merged_results = payload(merged)["results"]
    top = next(r for r in merged_results if r["source"] == "guide.md")
    assert [c["chunk_id"] for c in top["provenance"]["chunks"]] == ids
    assert top["provenance"]["chunker_version"] and top["provenance"]["content_hash"]
    assert "max_per_document" in error_text(bad)


# -- kb_explain -----------------------------------------------------------------------------------------


def test_explain_tool_explains_the_retrieval_kb_retrieve_makes(corpus, dsn):
    explained, retrieved, empty = call(
        dsn,
        [
            ("kb_explain", {"query": "refund deadline days", "namespace": "public", "k": 3}),
            ("kb_retrieve", {"query": "refund deadline days", "namespace": "public", "k": 3}),
            ("kb_explain", {"query": "   "}),
        ],
    )
    data = payload(explained)
    assert {"analysis", "stages", "timings_ms", "low_confidence", "model", "results"} <= set(data)
    assert data["model"]["name"] == "hash-64"
    assert [r["source"] for r in data["results"]] == [r["source"] for r in payload(retrieved)["results"]]
    assert "query is empty" in error_text(empty)


# -- documents as resources ----------------------------------------------------------------------------


def list_all_resources(dsn: str, **env: str) -> tuple[list, list]:
    """Every page of resources/list (following nextCursor) and the templates, in one session."""

    async def run():
        async with mcp_session(dsn, **env) as session:
            pages, cursor = [], None
            while True:
                result = await session.list_resources(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                pages.append(result.resources)
                cursor = result.next_cursor
                if not cursor:
                    break
            return pages, (await session.list_resource_templates()).resource_templates

    return anyio.run(run)


def read(dsn: str, uris: list[str], **env: str) -> list:
    """resources/read of each URI in one session: the ReadResourceResult, or the McpError raised."""

    async def run():
        results = []
        async with mcp_session(dsn, **env) as session:
            for uri in uris:
                try:
                    results.append(await session.read_resource(uri))
                except Exception as exc:  # the SDK raises the server's JSON-RPC error
                    results.append(exc)
        return results

    return anyio.run(run)


def test_current_documents_are_resources_listed_in_pages(corpus, dsn):
    for i in range(3):
        insert_document(corpus, f"notes/note-{i}.txt", f"Note {i} about refunds.", namespace="public")
    pages, templates = list_all_resources(dsn, PGKB_MCP_PAGE_SIZE="2")
    assert [len(p) for p in pages] == [2, 2, 1]
    listed = [r for p in pages for r in p]
    expected = [
        ("internal", "decisions/adr-007-refund-automation.md"),
        ("public", "notes/note-0.txt"),
        ("public", "notes/note-1.txt"),
        ("public", "notes/note-2.txt"),
        ("public", "policies/refund-v2.md"),  # refund-v1.md is superseded: not a current document
    ]
    assert [str(r.uri) for r in listed] == [f"pgkb://documents/{ns}/{source}" for ns, source in expected]
    top = listed[-1]
    assert top.name == "policies/refund-v2.md" and top.title == "Refund policy"
    assert top.mime_type == "text/markdown" and listed[1].mime_type == "text/plain"
    assert "version 2" in top.description and "2024-03-01" in top.description
    assert [t.uri_template for t in templates] == ["pgkb://documents/{namespace}/{+source}"]


def test_reading_a_document_resource_returns_its_whole_text_lifecycle_and_provenance(corpus, dsn):
    (result,) = read(dsn, ["pgkb://documents/public/policies/refund-v2.md"])
    text, about = result.contents
    body = corpus.execute("SELECT body FROM kb.documents WHERE source = 'policies/refund-v2.md'").fetchone()["body"]
    assert text.text == body and text.mime_type == "text/markdown"
    assert about.mime_type == "application/json"
    meta = json.loads(about.text)
    assert meta == text.meta
    assert meta["lifecycle"] == "current" and meta["as_of"] == "now" and meta["role"] is None
    assert (meta["namespace"], meta["source"], meta["version"], meta["status"]) == (
        "public",
        "policies/refund-v2.md",
        "2",
        "active",
    )
    assert meta["effective_from"] == "2024-03-01" and meta["effective_to"] is None
    assert meta["supersedes"] == "policies/refund-v1.md" and meta["superseded_by"] is None
    provenance = meta["provenance"]
    assert provenance["chunk_count"] >= 1 and provenance["ingest_status"] == "indexed"
    assert provenance["chunker_version"] and provenance["content_hash"] and provenance["indexed_at"]


def test_a_superseded_document_is_no_current_resource_but_reads_as_of_its_day(corpus, dsn):
    now, then, missing, foreign = read(
        dsn,
        [
            "pgkb://documents/public/policies/refund-v1.md",
            "pgkb://documents/public/policies/refund-v1.md?as_of=2023-06-01",
            "pgkb://documents/public/policies/nothing.md",
            "https://example.org/policies/refund-v2.md",
        ],
    )
    assert "is not current now: it is superseded (superseded by policies/refund-v2.md)" in str(now)
    assert "within 7 days" in then.contents[0].text
    assert json.loads(then.contents[1].text)["lifecycle"] == "current"
    assert "no document 'policies/nothing.md' in namespace 'public'" in str(missing)
    assert "not a pgkb document URI" in str(foreign)


def test_document_resources_are_read_as_the_servers_role_under_row_level_security(reader_role, dsn):
    pages, _ = list_all_resources(dsn, PGKB_MCP_ROLE=reader_role)
    assert [r.name for p in pages for r in p] == ["policies/refund-v2.md"]
    mine, hidden = read(
        dsn,
        [
            "pgkb://documents/public/policies/refund-v2.md",
            "pgkb://documents/internal/decisions/adr-007-refund-automation.md",
        ],
        PGKB_MCP_ROLE=reader_role,
    )
    assert json.loads(mine.contents[1].text)["role"] == reader_role
    # another namespace's document does not exist for the role: the same answer as a missing one
    assert "no document 'decisions/adr-007-refund-automation.md' in namespace 'internal'" in str(hidden)


def test_retrieve_results_link_their_whole_document(corpus, dsn):
    async def run():
        async with mcp_session(dsn) as session:
            answer = payload(
                await session.call_tool("kb_retrieve", {"query": "refund deadline", "namespace": "public"})
            )
            uri = answer["results"][0]["document_uri"]
            return uri, await session.read_resource(uri)

    uri, document = anyio.run(run)
    assert uri == "pgkb://documents/public/policies/refund-v2.md"
    assert "14 days" in document.contents[0].text


def test_document_uris_round_trip_sources_with_spaces_slashes_and_chinese():
    from harness.mcp_server import document_uri, parse_document_uri

    for namespace, source in [("public", "a/b c/退款 政策.md"), ("x.y", "100%/#?.md")]:
        uri = document_uri(namespace, source)
        assert parse_document_uri(uri) == (namespace, source, None)
        assert parse_document_uri(uri + "?as_of=2024-01-01") == (namespace, source, "2024-01-01")


# -- one retrieval tool per namespace --------------------------------------------------------------------


def describe(conn, namespace: str, description: str) -> None:
    conn.execute(
        "INSERT INTO kb.namespace_descriptions (namespace, description) VALUES (%s, %s) "
        "ON CONFLICT (namespace) DO UPDATE SET description = excluded.description",
        (namespace, description),
    )


def test_namespace_names_map_to_valid_distinct_tool_names():
    import re

    from harness.mcp_server import namespace_tool_name

    names = ["public", "a.b", "a_b", "a-b", "A.B", "x" * 63, "x" * 62 + "y", "support.zh-CN"]
    tools = [namespace_tool_name(n) for n in names]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", t) for t in tools), tools
    assert len(set(tools)) == len(names)
    assert tools[:2] == ["kb_retrieve_public", tools[1]] and tools[1].startswith("kb_retrieve_a_b_")
    assert namespace_tool_name("a.b") == tools[1]  # the same name every time


def test_namespace_tools_are_offered_per_described_namespace_with_their_descriptions(corpus, dsn):
    describe(corpus, "public", "Customer-facing policies: refunds, deadlines, returns.")
    describe(corpus, "internal", "Engineering decision records (ADRs) about refund automation.")

    async def run():
        async with mcp_session(dsn, PGKB_MCP_NAMESPACE_TOOLS="1") as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            answer = await session.call_tool("kb_retrieve_public", {"query": "refunds", "k": 10, "detail": True})
            return tools, answer, session.notifications

    tools, answer, notifications = anyio.run(run)
    assert set(tools) == {"kb_retrieve", "kb_explain", "kb_status", "kb_retrieve_public", "kb_retrieve_internal"}
    public = tools["kb_retrieve_public"]
    assert public.description.startswith("Search the namespace 'public': Customer-facing policies: refunds")
    assert "namespace" not in public.input_schema["properties"]
    assert set(public.input_schema["properties"]) == set(tools["kb_retrieve"].input_schema["properties"]) - {
        "namespace"
    }
    data = payload(answer)
    assert data["namespace"] == "public" and {r["source"] for r in data["results"]} == {"policies/refund-v2.md"}
    assert notifications == []  # the list did not change after it was listed


def test_no_namespace_tools_without_the_option(corpus, dsn):
    describe(corpus, "public", "Customer-facing policies.")

    async def run():
        async with mcp_session(dsn) as session:
            return (await session.list_tools()).tools

    assert {t.name for t in anyio.run(run)} == {"kb_retrieve", "kb_explain", "kb_status"}


def test_namespace_tools_follow_the_descriptions_the_role_may_read(reader_role, dsn, corpus):
    describe(corpus, "public", "Customer-facing policies.")
    describe(corpus, "internal", "Engineering decision records.")

    async def run():
        async with mcp_session(dsn, PGKB_MCP_NAMESPACE_TOOLS="1", PGKB_MCP_ROLE=reader_role) as session:
            return {t.name for t in (await session.list_tools()).tools}

    assert anyio.run(run) == {"kb_retrieve", "kb_explain", "kb_status", "kb_retrieve_public"}


def test_namespace_tools_change_with_the_descriptions_and_the_client_is_told(corpus, dsn):
    describe(corpus, "public", "Customer-facing policies.")

    async def run():
        async with mcp_session(dsn, PGKB_MCP_NAMESPACE_TOOLS="1") as session:
            capabilities = session.initialized.capabilities
            first = {t.name for t in (await session.list_tools()).tools}
            describe(corpus, "internal", "Engineering decision records.")
            describe(corpus, "public", "Customer-facing policies, refunds first.")
            # any tool call notices the change and tells the client before answering
            await session.call_tool("kb_status", {})
            told = list(session.notifications)
            second = {t.name: t.description for t in (await session.list_tools()).tools}
            corpus.execute("DELETE FROM kb.namespace_descriptions WHERE namespace = 'internal'")
            gone = await session.call_tool("kb_retrieve_internal", {"query": "refunds"})
            third = {t.name for t in (await session.list_tools()).tools}
            return capabilities, first, told, second, gone, third, list(session.notifications)

    capabilities, first, told, second, gone, third, notifications = anyio.run(run)
    base = {"kb_retrieve", "kb_explain", "kb_status"}
    assert first == base | {"kb_retrieve_public"}
    assert told == ["notifications/tools/list_changed"]
    assert set(second) == base | {"kb_retrieve_public", "kb_retrieve_internal"}
    assert "refunds first" in second["kb_retrieve_public"]
    assert gone.is_error and "kb_retrieve_internal" in gone.content[0].text
    assert third == first
    assert notifications == ["notifications/tools/list_changed"] * 2
    assert capabilities.tools.list_changed


def test_streamable_http_serves_the_same_tools_behind_a_bearer_token(corpus, dsn):
    import socket
    import threading
    import urllib.error
    import urllib.request

    import uvicorn
    from helpers import wait_for
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    from harness.mcp_server import build_server, http_app

    token = "test-token-" + "x" * 16
    server = build_server(dsn, None)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    http = uvicorn.Server(uvicorn.Config(http_app(server, "127.0.0.1", token), log_level="warning"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: http.started, timeout=15)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10)
        assert refused.value.code == 401

        async def run():
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with client, streamable_http_client(url, http_client=client) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = {t.name for t in (await session.list_tools()).tools}
                    return tools, await session.call_tool("kb_retrieve", {"query": "refund deadline days"})

        tools, answer = anyio.run(run)
        assert tools == {"kb_retrieve", "kb_explain", "kb_status"}
        assert payload(answer)["results"][0]["source"] == "policies/refund-v2.md"
    finally:
        http.should_exit = True
        thread.join(timeout=15)
        sock.close()
        server.close()
