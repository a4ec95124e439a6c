"""Helpers shared by the tests; fixtures live in conftest.py.

Retrieval itself is called through harness.retrieval (`retrieve`, `explain`), the same code the
CLI, the MCP server and the evaluator use."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg.types.json import Jsonb

from harness.db import connect

# the test cluster scripts/test.sh starts (its own home and port)
TEST_HOST = "127.0.0.1"
TEST_PORT = int(os.environ.get("PGKB_TEST_PORT", "5498"))
HASH_MODEL = "hash-64"


def use_only_the_hash_model(conn: psycopg.Connection) -> None:
    """Make `hash-64` (the fast deterministic provider, 64 dimensions) the database's only model, active."""
    conn.execute("DELETE FROM kb.models")
    conn.execute("SELECT kb.register_model(%s, 'hash', 'hash', 64, '{}', true)", (HASH_MODEL,))


def insert_document(conn: psycopg.Connection, source: str, body: str, **fields) -> int:
    """INSERT one row into kb.documents (namespace `default` unless given; dicts go in as jsonb); its id."""
    columns = {"source": source, "body": body, "namespace": "default", **fields}
    names = ", ".join(columns)
    placeholders = ", ".join(f"%({k})s" for k in columns)
    row = conn.execute(
        f"INSERT INTO kb.documents ({names}) VALUES ({placeholders}) RETURNING id",
        {k: (Jsonb(v) if isinstance(v, dict) else v) for k, v in columns.items()},
    ).fetchone()
    return row["id"] if isinstance(row, dict) else row[0]


def sources(rows: list[dict]) -> list[str]:
    """The `source` of each result row, in rank order."""
    return [r["source"] for r in rows]


def count_rows(conn: psycopg.Connection, relation: str, *params) -> int:
    """`SELECT count(*) FROM <relation>`, where relation may carry joins and a WHERE clause with %s."""
    with conn.cursor() as cur:
        row = cur.execute(f"SELECT count(*) AS n FROM {relation}", params).fetchone()
    return row["n"] if isinstance(row, dict) else row[0]


@contextmanager
def temporary_role(conn: psycopg.Connection, name: str, options: str = "NOLOGIN") -> Iterator[str]:
    """CREATE ROLE name options; on exit RESET ROLE, DROP OWNED BY and DROP ROLE (roles are
    cluster-wide, so they outlive a test's database unless dropped)."""
    conn.execute(f"CREATE ROLE {name} {options}")
    try:
        yield name
    finally:
        conn.execute("RESET ROLE")
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


@contextmanager
def acting_as(conn: psycopg.Connection, role: str) -> Iterator[None]:
    """SET ROLE role for the block, RESET ROLE after it."""
    conn.execute(f"SET ROLE {role}")
    try:
        yield
    finally:
        conn.execute("RESET ROLE")


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> None:
    """Poll condition() until it is true; TimeoutError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


BIG_BODY = "\n\n".join(f"## Part {i}\n\n" + "Sentence about refunds and returns. " * 60 for i in range(200))


def start_slow_ingest(dsn: str) -> tuple[threading.Thread, dict]:
    """Start, in a thread, one INSERT of 50 large documents (seconds of trigger work).
    The dict gets the backend's "pid" at once and the psycopg "error" if the statement fails."""
    holder: dict = {}

    def ingest() -> None:
        try:
            with connect(dsn) as conn:
                holder["pid"] = conn.info.backend_pid
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) "
                    "SELECT 'crash', 'big-' || g || '.md', %s FROM generate_series(1, 50) AS g",
                    (BIG_BODY,),
                )
        except psycopg.Error as exc:
            holder["error"] = exc

    thread = threading.Thread(target=ingest)
    thread.start()
    wait_for(lambda: "pid" in holder, timeout=10)
    return thread, holder


def register_fake_ollama(conn: psycopg.Connection, url: str, dimensions: int, name: str = "fake") -> None:
    """Make an `ollama` model served by a tests/fake_ollama.py server at url the database's only
    model, active (one quick retry, short timeouts)."""
    options = {"base_url": url, "max_retries": 1, "timeout_s": 5, "backoff_s": 0.01, "backoff_max_s": 0.02}
    conn.execute("DELETE FROM kb.models")
    conn.execute(
        "SELECT kb.register_model(%s, 'ollama', 'nomic-embed-text', %s, %s, true)",
        (name, dimensions, Jsonb(options)),
    )


def deferred_corpus(conn: psycopg.Connection, documents: int, namespace: str = "default") -> list[str]:
    """Switch to deferred embedding and insert `documents` documents of two chunks each; the
    chunks' embed_text (what a provider receives), all of them queued."""
    conn.execute("UPDATE kb.settings SET value = '\"deferred\"' WHERE key = 'embed_mode'")
    for i in range(documents):
        insert_document(
            conn,
            f"doc{i}.md",
            f"## Part one {i}\n\nFirst part of document {i}.\n\n## Part two {i}\n\nSecond part {i}.",
            namespace=namespace,
        )
    return [r["embed_text"] if isinstance(r, dict) else r[0] for r in conn.execute("SELECT embed_text FROM kb.chunks")]


def insert_refund_corpus(conn: psycopg.Connection) -> None:
    """Three documents the MCP and framework tests ask about: a refund policy in two versions (v2
    supersedes v1 from 2024-03-01) in namespace `public`, and a decision record in `internal`."""
    insert_document(
        conn,
        "policies/refund-v1.md",
        "# Refund policy\n\n## Deadline\n\nRefunds are accepted within 7 days of delivery.",
        title="Refund policy",
        doc_type="policy",
        version="1",
        effective_from="2023-01-01",
        namespace="public",
    )
    insert_document(
        conn,
        "policies/refund-v2.md",
        "# Refund policy\n\n## Deadline\n\nRefunds are accepted within 14 days of delivery. 退款期限为收货后 14 天。",
        title="Refund policy",
        doc_type="policy",
        version="2",
        effective_from="2024-03-01",
        supersedes="policies/refund-v1.md",
        namespace="public",
    )
    insert_document(
        conn,
        "decisions/adr-007-refund-automation.md",
        "# ADR 7: automate refunds\n\n## Decision\n\nRefunds under 50 EUR are approved automatically.",
        title="ADR 7: automate refunds",
        doc_type="decision",
        version="1",
        effective_from="2024-01-15",
        namespace="internal",
    )
