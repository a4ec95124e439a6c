"""kb_retrieve writes nothing a read-only transaction would refuse but its log row: with the
retrieval log off, BEGIN READ ONLY sessions (and hot standbys, tests/test_standby.py) retrieve;
with it on, a read-only transaction on a primary is refused by name, so no retrieval escapes the
log there."""

from __future__ import annotations

import psycopg
import pytest
from helpers import count_rows, insert_document


def test_retrieval_works_in_a_read_only_transaction_while_the_log_is_off(fresh_db):
    insert_document(fresh_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    fresh_db.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'retrieval_log'")
    with fresh_db.transaction():
        fresh_db.execute("SET TRANSACTION READ ONLY")
        for mode in ("lexical", "dense", "hybrid", "auto"):
            rows = fresh_db.execute("SELECT source FROM kb_retrieve('refunds', mode => %s)", (mode,)).fetchall()
            assert [r["source"] for r in rows] == ["a.md"], mode
        assert fresh_db.execute("SELECT kb_retrieve_explain('refunds') -> 'returned' AS n").fetchone()["n"] == 1
    assert count_rows(fresh_db, "kb.retrieval_log") == 0


@pytest.mark.parametrize("call", ["SELECT * FROM kb_retrieve('refunds')", "SELECT kb_retrieve_explain('refunds')"])
def test_a_read_only_transaction_on_a_primary_is_refused_while_the_log_is_on(fresh_db, call):
    insert_document(fresh_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction, match=r"retrieval log is on \(setting retrieval_log\)"):
        with fresh_db.transaction():
            fresh_db.execute("SET TRANSACTION READ ONLY")
            fresh_db.execute(call).fetchall()
    assert count_rows(fresh_db, "kb.retrieval_log") == 0
    fresh_db.execute(call).fetchall()
    assert count_rows(fresh_db, "kb.retrieval_log") == 1
