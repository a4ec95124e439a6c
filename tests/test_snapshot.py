"""One kb_retrieve call sees one snapshot: real concurrent sessions at READ COMMITTED.

A writer keeps replacing a document's body (each update re-chunks it: its old chunks, postings
and vectors go and new ones come, in one transaction) while readers retrieve it in every mode.
Every retrieval must find the document: a call whose legs saw the old chunks and whose
passages were read after the update committed would lose it."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from fake_ollama import FakeOllama
from helpers import insert_document, sources
from psycopg.types.json import Jsonb

from harness.db import connect
from harness.retrieval import MODES, retrieve

BODIES = [
    "# Expense policy\n\nHotel expense claims are reimbursed within {n} working days of approval.",
    "# Expense policy\n\nTaxi and hotel expense claims are reimbursed within {n} days after the manager approves.",
]
UPDATES = 60


def test_every_retrieval_sees_the_document_while_it_is_rewritten(fresh_db, dsn):
    insert_document(fresh_db, "expense.md", BODIES[0].format(n=0))
    for i in range(20):
        insert_document(fresh_db, f"other-{i}.md", f"# Note {i}\n\nThe canteen opens at {i} o'clock.")
    done = threading.Event()
    misses: list[tuple[str, list[str]]] = []
    calls = {mode: 0 for mode in MODES}
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with connect(dsn) as conn:
                for n in range(1, UPDATES + 1):
                    conn.execute(
                        "UPDATE kb.documents SET body = %s WHERE source = 'expense.md'",
                        (BODIES[n % 2].format(n=n),),
                    )
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            done.set()

    def read(offset: int) -> None:
        try:
            with connect(dsn) as conn:
                assert conn.execute("SHOW transaction_isolation").fetchone()["transaction_isolation"] == (
                    "read committed"
                )
                i = offset
                while not done.is_set():
                    mode = MODES[i % len(MODES)]
                    got = sources(retrieve(conn, "hotel expense claims reimbursed", k=3, mode=mode))
                    calls[mode] += 1
                    if "expense.md" not in got:
                        misses.append((mode, got))
                    i += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read, args=(j,)) for j in range(2)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert time.monotonic() - started < 120
    assert all(n > 0 for n in calls.values()), calls
    assert misses == [], (len(misses), calls, misses[:5])


def test_the_retrieval_log_is_written_after_the_retrieval(fresh_db):
    """The log row comes from kb_retrieve itself (kb_node.retrieve_core writes nothing, so it can be
    STABLE): one row per call of either entry point."""
    insert_document(fresh_db, "expense.md", BODIES[0].format(n=1))
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    retrieve(fresh_db, "hotel expense claims", k=3)
    fresh_db.execute("SELECT kb_retrieve_explain('hotel expense claims', 3)")
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"] == 2
    volatility = {
        r["proname"]: r["provolatile"]
        for r in fresh_db.execute(
            """SELECT p.proname, p.provolatile FROM pg_proc AS p
               WHERE p.oid IN ('kb_node.retrieve_core'::regproc, 'kb_node.gather_stage'::regproc,
                               'kb_pipeline.dense_inputs'::regproc)"""
        ).fetchall()
    }
    assert volatility == {"retrieve_core": "s", "gather_stage": "s", "dense_inputs": "s"}


def test_a_failing_query_embedding_still_falls_back_to_lexical_inside_the_stable_pipeline(fresh_db):
    """kb_pipeline.dense_inputs catches the provider's error in an EXCEPTION block (a subtransaction), which
    STABLE functions may run: hybrid answers from BM25 with a note, dense raises."""
    with FakeOllama(dimensions=8) as srv:
        options = {"base_url": srv.url, "max_retries": 0, "timeout_s": 2}
        fresh_db.execute(
            "SELECT kb.register_model('fake', 'ollama', 'nomic-embed-text', 8, %s, true)", (Jsonb(options),)
        )
        insert_document(fresh_db, "expense.md", BODIES[0].format(n=3))
        srv.mode = "always_500"  # the chunks have vectors; the query cannot get one
        explained = fresh_db.execute(
            "SELECT kb_retrieve_explain('hotel expense claims', 3, NULL, 'hybrid') AS e"
        ).fetchone()["e"]
        assert any("query embedding failed" in n for n in explained["notes"]), explained
        assert [r["source"] for r in explained["results"]] == ["expense.md"]
        assert sources(retrieve(fresh_db, "hotel expense claims", k=3, mode="hybrid")) == ["expense.md"]
        with pytest.raises(psycopg.Error):
            retrieve(fresh_db, "hotel expense claims", k=3, mode="dense")
