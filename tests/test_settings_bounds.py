"""Settings that cannot be bent: pgkb_admin changes a setting's value, never its range, type, default or
key, and deletes no setting (bar tenant_isolation, whose removal means on); a stored value is checked
when read, a bad or missing one falls back to its default and kb.health reports it, and the security
settings (tenant_isolation, retrieval_log) fail closed: bad or missing means on."""

from __future__ import annotations

from contextlib import contextmanager

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

from harness.migrate import migrate
from harness.retrieval import retrieve

CATALOGUE_CHANGES = [
    "UPDATE kb.settings SET max_value = 1e308 WHERE key = 'bm25_b'",
    "UPDATE kb.settings SET min_value = NULL, max_value = NULL WHERE key = 'candidates_per_leg'",
    "UPDATE kb.settings SET default_value = '5' WHERE key = 'bm25_b'",
    "UPDATE kb.settings SET value_type = 'number' WHERE key = 'candidates_per_leg'",
    """UPDATE kb.settings SET choices = '["linear", "max"]' WHERE key = 'fusion'""",
    "UPDATE kb.settings SET session_override = true WHERE key = 'retrieval_log'",
    "UPDATE kb.settings SET key = 'bm25_k2' WHERE key = 'bm25_b'",
    "DELETE FROM kb.settings WHERE key = 'bm25_b'",
    "DELETE FROM kb.settings WHERE key = 'retrieval_log'",
    "INSERT INTO kb.settings (key, value) VALUES ('bm25_k3', '1')",
]


@contextmanager
def savepoint(conn):
    conn.execute("SAVEPOINT bounds")
    try:
        yield
    finally:
        conn.execute("ROLLBACK TO SAVEPOINT bounds")


def store_unchecked(conn, key: str, value: str) -> None:
    """What the owner can still do (or what a bent range left behind): a value the write check never saw."""
    conn.execute("ALTER TABLE kb.settings DISABLE TRIGGER settings_value_in_range")
    conn.execute("UPDATE kb.settings SET value = %s::jsonb WHERE key = %s", (value, key))
    conn.execute("ALTER TABLE kb.settings ENABLE TRIGGER settings_value_in_range")


def in_force(conn, key: str):
    return conn.execute("SELECT kb.setting(%s) AS v", (key,)).fetchone()["v"]


def settings_check(conn) -> dict:
    return conn.execute("SELECT * FROM kb.health() WHERE check_name = 'settings'").fetchone()


@pytest.fixture
def admin(rolled_back_db):
    with temporary_role(rolled_back_db, "bounds_admin", "NOLOGIN IN ROLE pgkb_admin") as name:
        yield name


@pytest.mark.parametrize("statement", CATALOGUE_CHANGES)
def test_the_admin_cannot_change_a_range_the_catalogue_or_delete_a_setting(rolled_back_db, admin, statement):
    with acting_as(rolled_back_db, admin), savepoint(rolled_back_db):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="pgkb: "):
            rolled_back_db.execute(statement)


def test_the_admin_still_sets_values_within_range_and_never_beyond(rolled_back_db, admin):
    with acting_as(rolled_back_db, admin):
        rolled_back_db.execute("UPDATE kb.settings SET value = '0.7' WHERE key = 'bm25_b'")
        rolled_back_db.execute("UPDATE kb.settings SET description = description")
        with savepoint(rolled_back_db), pytest.raises(psycopg.errors.CheckViolation, match="outside its range 0 to 1"):
            rolled_back_db.execute("UPDATE kb.settings SET value = '1e308' WHERE key = 'bm25_b'")
    assert in_force(rolled_back_db, "bm25_b") == 0.7


def test_a_removed_catalogue_row_comes_back_with_the_shipped_range_whatever_the_admin_writes(rolled_back_db, admin):
    rolled_back_db.execute("DELETE FROM kb.settings WHERE key = 'rrf_k'")
    with acting_as(rolled_back_db, admin):
        rolled_back_db.execute(
            "INSERT INTO kb.settings (key, value, value_type, min_value, max_value)"
            " VALUES ('rrf_k', '30', 'number', 0, 1e9)"
        )
    row = rolled_back_db.execute("SELECT * FROM kb.settings WHERE key = 'rrf_k'").fetchone()
    assert (row["value"], row["min_value"], row["max_value"], row["default_value"]) == (30, 1, 1000, 60)


def test_an_out_of_range_stored_value_falls_back_to_its_default_and_health_reports_it(rolled_back_db):
    insert_document(rolled_back_db, "refunds.md", "# Refunds\n\nRefunds take 14 days to arrive.")
    assert settings_check(rolled_back_db)["state"] == "ok"
    store_unchecked(rolled_back_db, "bm25_b", "1e308")
    read = rolled_back_db.execute("SELECT (kb_pipeline.read_retrieval_settings()).bm25_b AS b").fetchone()
    assert read["b"] == 0.4 and in_force(rolled_back_db, "bm25_b") == 0.4
    rows = retrieve(rolled_back_db, "refunds days", mode="lexical")
    assert [r["source"] for r in rows][:1] == ["refunds.md"]
    check = settings_check(rolled_back_db)
    assert check["state"] == "degraded"
    assert "bm25_b" in check["detail"] and "outside its range 0 to 1" in check["detail"] and "0.4" in check["detail"]
    assert "bm25_b" in check["fix"]
    row = rolled_back_db.execute("SELECT * FROM kb.settings_catalogue WHERE key = 'bm25_b'").fetchone()
    assert (row["value"], row["source"]) == (0.4, "default")
    assert "outside its range" in row["stored_problem"]


def test_a_missing_setting_falls_back_to_its_default_and_health_reports_it(rolled_back_db):
    insert_document(rolled_back_db, "refunds.md", "# Refunds\n\nRefunds take 14 days to arrive.")
    rolled_back_db.execute("DELETE FROM kb.settings WHERE key IN ('glossary_weight', 'bm25_k1')")
    read = rolled_back_db.execute("SELECT (kb_pipeline.read_retrieval_settings()).*").fetchone()
    assert (read["glossary_weight"], read["bm25_k1"]) == (1, 1.2)
    assert in_force(rolled_back_db, "bm25_k1") == 1.2
    assert [r["source"] for r in retrieve(rolled_back_db, "refunds days", mode="lexical")][:1] == ["refunds.md"]
    check = settings_check(rolled_back_db)
    assert check["state"] == "degraded" and "bm25_k1: missing" in check["detail"]
    row = rolled_back_db.execute("SELECT * FROM kb.settings_catalogue WHERE key = 'bm25_k1'").fetchone()
    assert (row["value"], row["source"]) == (1.2, "default")


@pytest.mark.parametrize("key", ["tenant_isolation", "retrieval_log"])
@pytest.mark.parametrize(
    "how", ["DELETE FROM kb.settings WHERE key = %s", "UPDATE kb.settings SET value = 'null' WHERE key = %s"]
)
def test_a_security_setting_bad_or_missing_means_on(rolled_back_db, key, how):
    rolled_back_db.execute("UPDATE kb.settings SET value = 'false' WHERE key = %s", (key,))
    rolled_back_db.execute(how, (key,))
    assert in_force(rolled_back_db, key) is True
    check = settings_check(rolled_back_db)
    assert check["state"] == "degraded" and f"{key}: " in check["detail"] and "true in force" in check["detail"]


def test_a_missing_retrieval_log_row_logs_and_does_not_break_retrieval(rolled_back_db):
    insert_document(rolled_back_db, "refunds.md", "# Refunds\n\nRefunds take 14 days to arrive.")
    rolled_back_db.execute("DELETE FROM kb.settings WHERE key = 'retrieval_log'")
    before = rolled_back_db.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"]
    assert retrieve(rolled_back_db, "refunds days", mode="lexical")
    assert rolled_back_db.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"] == before + 1


def test_migrate_keeps_an_out_of_range_value_out_of_force_and_reported(fresh_db, dsn):
    """The choice: migrate leaves an admin's stored value alone (it is not in force) and kb.health names it."""
    store_unchecked(fresh_db, "bm25_b", "1e308")
    migrate(dsn)
    stored = fresh_db.execute("SELECT value::text AS v FROM kb.settings WHERE key = 'bm25_b'").fetchone()["v"]
    assert stored == "1" + "0" * 308
    assert in_force(fresh_db, "bm25_b") == 0.4
    check = settings_check(fresh_db)
    assert check["state"] == "degraded" and "bm25_b" in check["detail"]
