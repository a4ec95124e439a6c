"""kb_retrieve writes nothing a read-only transaction would refuse, so hot standbys and
BEGIN READ ONLY sessions can retrieve; the retrieval log is kept only where writing is allowed."""

from __future__ import annotations

import pytest
from helpers import count_rows, insert_document


@pytest.mark.parametrize("log", ["false", "true"])
def test_retrieval_works_in_a_read_only_transaction(fresh_db, log):
    insert_document(fresh_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    fresh_db.execute("UPDATE kb.settings SET value = %s::jsonb WHERE key = 'retrieval_log'", (log,))
    with fresh_db.transaction():
        fresh_db.execute("SET TRANSACTION READ ONLY")
        for mode in ("lexical", "dense", "hybrid", "auto"):
            rows = fresh_db.execute("SELECT source FROM kb_retrieve('refunds', mode => %s)", (mode,)).fetchall()
            assert [r["source"] for r in rows] == ["a.md"], mode
        assert fresh_db.execute("SELECT kb_retrieve_explain('refunds') -> 'returned' AS n").fetchone()["n"] == 1
    assert count_rows(fresh_db, "kb.retrieval_log") == 0
    fresh_db.execute("SELECT * FROM kb_retrieve('refunds')")
    assert count_rows(fresh_db, "kb.retrieval_log") == (1 if log == "true" else 0)
