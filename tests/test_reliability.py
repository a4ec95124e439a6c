"""Reliability under real concurrent sessions and faults: nothing lost, nothing partial."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from helpers import insert_document, sources, start_slow_ingest, temporary_role, wait_for

from harness.db import connect
from harness.migrate import migrate
from harness.retrieval import retrieve

WRITERS = 4
DOCS_PER_WRITER = 250


def _body(writer: int, n: int) -> str:
    return (
        f"# Note {writer}-{n}\n\n## Scope\n\nWriter {writer} document {n} covers topic{n % 17} and "
        f"项目{n % 13}的报销流程。\n\n## Details\n\nIdentifier W{writer}-D{n:04d} appears verbatim here."
    )


def _write(dsn: str, writer: int, errors: list) -> None:
    try:
        with connect(dsn) as conn:
            for n in range(DOCS_PER_WRITER):
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, title, body) VALUES ('load', %s, %s, %s)",
                    (f"w{writer}/d{n:04d}.md", f"Note {writer}-{n}", _body(writer, n)),
                )
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(f"writer {writer}: {exc!r}")


def _read(dsn: str, stop: threading.Event, errors: list, counter: list) -> None:
    try:
        with connect(dsn) as conn:
            while not stop.is_set():
                retrieve(conn, "报销流程 topic3", k=5)
                counter.append(1)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"reader: {exc!r}")


@pytest.mark.parametrize("embed_mode", ["sync", "deferred"])
def test_four_concurrent_writers_with_readers_lose_nothing(fresh_db, dsn, embed_mode):
    fresh_db.execute("UPDATE kb.settings SET value = %s WHERE key = 'embed_mode'", (f'"{embed_mode}"',))
    errors: list[str] = []
    reads: list[int] = []
    stop = threading.Event()
    readers = [threading.Thread(target=_read, args=(dsn, stop, errors, reads)) for _ in range(2)]
    writers = [threading.Thread(target=_write, args=(dsn, w, errors)) for w in range(WRITERS)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join(timeout=600)
    stop.set()
    for t in readers:
        t.join(timeout=60)
    assert errors == []
    assert reads, "the readers never completed a query"
    if embed_mode == "deferred":
        fresh_db.execute("CALL kb.embed_pending(64)")
    counts = fresh_db.execute(
        """SELECT
               (SELECT count(*) FROM kb.documents) AS documents,
               (SELECT count(DISTINCT source) FROM kb.documents) AS sources,
               (SELECT sum(chunk_count) FROM kb.documents) AS declared_chunks,
               (SELECT count(*) FROM kb.chunks) AS chunks,
               (SELECT count(DISTINCT (document_id, ordinal)) FROM kb.chunks) AS distinct_chunks,
               (SELECT count(*) FROM kb.embeddings WHERE model = 'hash-64') AS vectors,
               (SELECT count(*) FROM kb.embed_queue) AS queued,
               (SELECT count(*) FROM kb.documents WHERE ingest_status <> 'indexed') AS not_indexed,
               (SELECT count(*) FROM kb.lexical_postings p
                 WHERE NOT EXISTS (SELECT 1 FROM kb.chunks c WHERE c.id = p.chunk_id)) AS orphan_postings"""
    ).fetchone()
    total = WRITERS * DOCS_PER_WRITER
    assert counts["documents"] == total and counts["sources"] == total
    assert counts["chunks"] == counts["declared_chunks"] == counts["distinct_chunks"] >= total
    assert counts["vectors"] == counts["chunks"]
    assert counts["queued"] == 0 and counts["not_indexed"] == 0 and counts["orphan_postings"] == 0
    assert sources(retrieve(fresh_db, "W3-D0123", k=3, mode="lexical"))[0] == "w3/d0123.md"


def test_terminated_backend_leaves_no_partial_document(fresh_db, dsn):
    """A backend killed in the middle of a (slow) ingest transaction writes nothing."""
    t, holder = start_slow_ingest(dsn)
    wait_for(
        lambda: (
            fresh_db.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (holder["pid"],)).fetchone()["state"]
            == "active"
        ),
        timeout=10,
    )
    time.sleep(0.5)
    assert fresh_db.execute("SELECT pg_terminate_backend(%s) AS ok", (holder["pid"],)).fetchone()["ok"]
    t.join(timeout=60)
    assert isinstance(holder.get("error"), psycopg.Error)
    for table in ("kb.documents", "kb.chunks", "kb.lexical_postings", "kb.embeddings"):
        n = fresh_db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
        assert n == 0, f"{table} kept {n} rows of the killed transaction"


def test_statement_timeout_on_oversized_input_writes_nothing(fresh_db, dsn):
    body = "# Huge\n\n" + ("这是一段很长的中文文本，用来测试超时。" * 400_000)  # ~8 MB
    with connect(dsn) as conn:
        conn.execute("SET statement_timeout = '300ms'")
        with pytest.raises(psycopg.errors.QueryCanceled) as info:
            conn.execute("INSERT INTO kb.documents (source, body) VALUES ('huge.md', %s)", (body,))
        assert "statement timeout" in str(info.value)
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 0
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.chunks").fetchone()["n"] == 0


def test_two_migrates_on_a_live_database_give_its_tenant_readers_no_error(fresh_db, dsn):
    """Re-creating sql/ takes exclusive locks on tables that readers hold shared locks on, and drops
    and re-creates kb_pipeline under the retrieval doors; two tenant readers looping kb_retrieve,
    kb_retrieve_explain and a plain count through two migrates see no error."""
    insert_document(fresh_db, "refund.md", "# Refund\n\nCustomers get a refund within 14 days.", namespace="acme")
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with temporary_role(fresh_db, "live_acme_reader", "NOLOGIN IN ROLE pgkb_reader") as reader:
        fresh_db.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (reader,))
        stop, errors, calls = threading.Event(), [], [0]

        def read() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"SET ROLE {reader}")
                while not stop.is_set():
                    for statement in (
                        "SELECT count(*) FROM kb_retrieve('refund days')",
                        "SELECT kb_retrieve_explain('refund days') IS NOT NULL",
                        "SELECT count(*) FROM kb.documents",
                    ):
                        try:
                            conn.execute(statement).fetchall()
                            calls[0] += 1
                        except psycopg.Error as exc:
                            errors.append(f"{type(exc).__name__}: {exc}")

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:
            wait_for(lambda: calls[0] >= 4)
            for _ in range(2):
                migrate(dsn)
        finally:
            stop.set()
            for t in readers:
                t.join()
    assert errors == []
    assert calls[0] > 4
