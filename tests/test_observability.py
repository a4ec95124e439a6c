"""The optional retrieval log and the BI views over it."""

from __future__ import annotations

from conftest import insert_document, retrieve


def _corpus(kb):
    insert_document(kb, "refund.md", "# Refunds\n\nRefunds are possible within 14 days of delivery.", namespace="ops")
    insert_document(kb, "travel.md", "# Travel\n\nHotels are reimbursed up to 600 CNY per night.", namespace="ops")


def test_log_is_off_by_default(kb):
    _corpus(kb)
    retrieve(kb, "refund days")
    assert kb.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"] == 0


def test_log_and_views(kb):
    _corpus(kb)
    kb.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    for _ in range(3):
        retrieve(kb, "refund days", namespace="ops")
    retrieve(kb, "hotel reimbursement per night", mode="lexical")
    retrieve(kb, "zebra migration patterns in the serengeti", mode="lexical")
    log = kb.execute("SELECT * FROM kb.retrieval_log ORDER BY id").fetchall()
    assert len(log) == 5
    assert all(len(r["query_hash"]) == 64 for r in log)
    assert "refund" not in " ".join(r["query_hash"] for r in log)  # only the hash is stored
    assert log[0]["namespace"] == "ops" and log[0]["result_count"] >= 1
    assert log[-1]["result_count"] == 0 and log[-1]["no_evidence"] is True
    assert set(log[0]["timings_ms"]) >= {"embed", "lexical", "dense", "fuse", "total"}

    daily = kb.execute("SELECT mode, queries, p50_ms, p95_ms FROM kb.retrieval_latency_daily").fetchall()
    assert sum(r["queries"] for r in daily) == 5 and all(r["p95_ms"] >= r["p50_ms"] for r in daily)
    zero = kb.execute("SELECT times, no_evidence FROM kb.retrieval_zero_results").fetchall()
    assert zero == [{"times": 1, "no_evidence": True}]
    top = {r["source"]: r["times_returned"] for r in kb.execute("SELECT * FROM kb.retrieval_top_sources")}
    assert top["ops/refund.md"] == 3
    share = kb.execute("SELECT zero_result_share FROM kb.retrieval_low_confidence_daily").fetchone()
    assert abs(float(share["zero_result_share"]) - 0.2) < 1e-9


def test_reader_is_logged_without_insert_rights(kb):
    _corpus(kb)
    kb.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    kb.execute("CREATE ROLE obs_reader NOLOGIN")
    try:
        kb.execute("GRANT USAGE ON SCHEMA kb TO obs_reader")
        kb.execute("GRANT SELECT ON ALL TABLES IN SCHEMA kb TO obs_reader")
        kb.execute("REVOKE SELECT ON kb.retrieval_log FROM obs_reader")
        kb.execute("SET ROLE obs_reader")
        assert retrieve(kb, "refund days")
        kb.execute("RESET ROLE")
        row = kb.execute("SELECT role_name FROM kb.retrieval_log").fetchone()
        assert row["role_name"] == "postgres"  # session_user of the connection
    finally:
        kb.execute("RESET ROLE")
        kb.execute("DROP OWNED BY obs_reader")
        kb.execute("DROP ROLE obs_reader")
