"""pgkb migrate beside a writer: the migrate takes kb.documents, the table writers enter through, right
after the retrieval door and before it re-creates anything an insert's triggers read (kb.settings,
kb.models, ...). So it waits for an insert in flight holding nothing that insert still needs, and the
two never close a cycle that only the migrate's lock_timeout breaks (by rolling back and starting
again: 24 s behind one writer, bench/migrate_beside_writer.py, which measures the time)."""

from __future__ import annotations

import threading

from helpers import insert_document, wait_for
from psycopg.conninfo import make_conninfo

from harness.db import connect
from harness.migrate import migrate

APP = "pgkb_test_migrate_beside_writer"
LOCKS = """SELECT l.relation::regclass::text AS relation, l.mode, l.granted
           FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
           WHERE a.application_name = %s AND a.datname = current_database() AND l.locktype = 'relation'"""


def test_a_migrate_waits_for_an_insert_in_flight_holding_nothing_the_insert_needs(fresh_db, dsn):
    seen: dict = {}
    outcome: dict = {}

    def run_migrate() -> None:
        try:
            outcome["result"] = migrate(make_conninfo(dsn, application_name=APP))
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    def migrate_waits() -> bool:
        if not thread.is_alive():
            return True  # it ended without waiting: its outcome is asserted below
        rows = fresh_db.execute(LOCKS, (APP,)).fetchall()
        if any(not r["granted"] for r in rows):
            seen["waiting"] = {r["relation"] for r in rows if not r["granted"]}
            seen["held"] = {r["relation"] for r in rows if r["granted"] and r["relation"].startswith("kb.")}
            return True
        return False

    with connect(dsn) as writer, writer.transaction():
        # an INSERT's first lock: kb.documents, before its triggers read settings and models
        writer.execute("LOCK TABLE kb.documents IN ROW EXCLUSIVE MODE")
        thread = threading.Thread(target=run_migrate)
        thread.start()
        wait_for(migrate_waits, timeout=60, interval=0.005)
        # the insert goes on meanwhile: its triggers read what the migrate has not taken
        insert_document(writer, "in-flight.md", "# In flight\n\nAn insert whose transaction is still open.")
    thread.join(120)
    assert "error" not in outcome, outcome.get("error")
    assert seen["waiting"] == {"kb.documents"}
    assert seen["held"] == {"kb.pipeline_door"}, "the migrate held more than the door while waiting for a writer"
    assert "result" in outcome
    status = fresh_db.execute("SELECT ingest_status FROM kb.documents WHERE source = 'in-flight.md'").fetchone()
    assert status == {"ingest_status": "indexed"}
