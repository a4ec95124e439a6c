"""The optional retrieval log and the BI views over it."""

from __future__ import annotations

from helpers import acting_as, insert_document, temporary_role

from harness.retrieval import retrieve


def _corpus(conn):
    insert_document(conn, "refund.md", "# Refunds\n\nRefunds are possible within 14 days of delivery.", namespace="ops")
    insert_document(conn, "travel.md", "# Travel\n\nHotels are reimbursed up to 600 CNY per night.", namespace="ops")


def test_log_is_off_by_default(fresh_db):
    _corpus(fresh_db)
    retrieve(fresh_db, "refund days")
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"] == 0


def test_log_and_views(fresh_db):
    _corpus(fresh_db)
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    for _ in range(3):
        retrieve(fresh_db, "refund days", namespace="ops")
    retrieve(fresh_db, "hotel reimbursement per night", mode="lexical")
    retrieve(fresh_db, "zebra migration patterns in the serengeti", mode="lexical")
    log = fresh_db.execute("SELECT * FROM kb.retrieval_log ORDER BY id").fetchall()
    assert len(log) == 5
    assert all(len(r["query_hash"]) == 64 for r in log)
    assert "refund" not in " ".join(r["query_hash"] for r in log)  # only the hash is stored
    assert log[0]["namespace"] == "ops" and log[0]["result_count"] >= 1
    assert log[-1]["result_count"] == 0 and log[-1]["no_evidence"] is True
    assert set(log[0]["timings_ms"]) >= {"embed", "lexical", "dense", "fuse", "total"}

    daily = fresh_db.execute("SELECT mode, queries, p50_ms, p95_ms FROM kb.retrieval_latency_daily").fetchall()
    assert sum(r["queries"] for r in daily) == 5 and all(r["p95_ms"] >= r["p50_ms"] for r in daily)
    zero = fresh_db.execute("SELECT times, no_evidence FROM kb.retrieval_zero_results").fetchall()
    assert zero == [{"times": 1, "no_evidence": True}]
    top = {r["source"]: r["times_returned"] for r in fresh_db.execute("SELECT * FROM kb.retrieval_top_sources")}
    assert top["ops/refund.md"] == 3
    share = fresh_db.execute("SELECT zero_result_share FROM kb.retrieval_low_confidence_daily").fetchone()
    assert abs(float(share["zero_result_share"]) - 0.2) < 1e-9


def test_reader_is_logged_without_insert_rights(fresh_db):
    _corpus(fresh_db)
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    with temporary_role(fresh_db, "obs_reader"):
        fresh_db.execute("GRANT USAGE ON SCHEMA kb TO obs_reader")
        fresh_db.execute("GRANT SELECT ON ALL TABLES IN SCHEMA kb TO obs_reader")
        fresh_db.execute("REVOKE SELECT ON kb.retrieval_log FROM obs_reader")
        with acting_as(fresh_db, "obs_reader"):
            assert retrieve(fresh_db, "refund days")
        row = fresh_db.execute("SELECT role_name, session_role FROM kb.retrieval_log").fetchone()
        # attributed to the tenant role that retrieved; the login behind SET ROLE is kept beside it
        assert (row["role_name"], row["session_role"]) == ("obs_reader", "postgres")
