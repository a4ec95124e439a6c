"""Roles and namespace isolation: with tenant_isolation on, no result, snippet, count or
explain output of one tenant reaches another, in any mode; readers cannot run
PL/Python or change settings and models; writers ingest only into their namespaces."""

from __future__ import annotations

import psycopg
import pytest
from conftest import insert_document, retrieve

MODES = ["lexical", "dense", "hybrid", "auto"]


@pytest.fixture
def tenants(kb):
    insert_document(
        kb,
        "a/refund.md",
        "# Refund policy\n\nAcme refunds are possible within 14 days. 退款期限十四天。",
        namespace="acme",
    )
    insert_document(
        kb,
        "b/refund.md",
        "# Refund policy\n\nGlobex refunds are possible within 30 days. 退款期限三十天。",
        namespace="globex",
    )
    kb.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    roles = {
        "acme_reader": ("pgkb_reader", "acme"),
        "globex_reader": ("pgkb_reader", "globex"),
        "acme_writer": ("pgkb_writer", "acme"),
    }
    for role, (group, namespace) in roles.items():
        kb.execute(f"CREATE ROLE {role} NOLOGIN IN ROLE {group}")
        kb.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role, namespace))
    yield kb
    kb.execute("RESET ROLE")
    for role in roles:
        kb.execute(f"DROP OWNED BY {role}")
        kb.execute(f"DROP ROLE {role}")


def as_role(conn, role: str) -> None:
    conn.execute(f"SET ROLE {role}")


@pytest.mark.parametrize("mode", MODES)
def test_no_result_snippet_or_explain_of_another_tenant(tenants, mode):
    as_role(tenants, "acme_reader")
    rows = retrieve(tenants, "refund days 退款期限", k=10, mode=mode)
    assert rows and {r["namespace"] for r in rows} == {"acme"}
    assert all("Globex" not in (r["content"] + (r["snippet"] or "")) for r in rows)
    explain = tenants.execute(
        "SELECT kb_retrieve_explain('Globex refunds 30 days', 10, mode => %s) AS e", (mode,)
    ).fetchone()["e"]
    assert "globex" not in str(explain["results"]).lower()
    assert tenants.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 1
    assert tenants.execute("SELECT count(*) AS n FROM kb.chunks WHERE namespace = 'globex'").fetchone()["n"] == 0
    assert (
        tenants.execute("SELECT count(*) AS n FROM kb.lexical_postings WHERE namespace = 'globex'").fetchone()["n"] == 0
    )
    as_role(tenants, "globex_reader")
    rows = retrieve(tenants, "refund days", k=10, mode=mode)
    assert {r["namespace"] for r in rows} == {"globex"}


def test_reader_cannot_read_other_vectors_run_plpython_or_change_settings(tenants):
    own = tenants.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"]
    as_role(tenants, "acme_reader")
    visible = tenants.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"]
    assert 0 < visible < own
    tenants.execute("RESET ROLE")
    for statement in (
        "SELECT kb.py_query_terms('x')",
        "UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'",
        "SELECT kb.activate_model('hash-64')",
        "INSERT INTO kb.namespace_grants VALUES ('acme_reader', 'globex')",
    ):
        as_role(tenants, "acme_reader")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(statement)
        tenants.execute("RESET ROLE")


def test_writer_ingests_into_its_namespace_only(tenants):
    as_role(tenants, "acme_writer")
    insert_document(tenants, "a/new.md", "# New\n\nAcme onboarding takes three days.", namespace="acme")
    rows = retrieve(tenants, "onboarding days", k=3, mode="lexical")
    assert rows and rows[0]["source"] == "a/new.md"
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        insert_document(tenants, "b/evil.md", "# Evil\n\nPlanted text.", namespace="globex")
    tenants.execute("RESET ROLE")
    assert tenants.execute("SELECT count(*) AS n FROM kb.documents WHERE source = 'b/evil.md'").fetchone()["n"] == 0


def test_isolation_off_by_default_keeps_plain_readers_working(kb):
    insert_document(kb, "x.md", "# X\n\nRefunds take 14 days.", namespace="acme")
    kb.execute("CREATE ROLE plain_reader NOLOGIN IN ROLE pgkb_reader")
    try:
        as_role(kb, "plain_reader")
        assert retrieve(kb, "refunds days", k=3)
    finally:
        kb.execute("RESET ROLE")
        kb.execute("DROP OWNED BY plain_reader")
        kb.execute("DROP ROLE plain_reader")


def test_every_function_pins_search_path_and_ignores_a_malicious_one(kb):
    unpinned = kb.execute(
        """SELECT p.oid::regprocedure::text AS fn FROM pg_proc AS p
           JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE (n.nspname = 'kb' OR p.proname IN ('kb_retrieve', 'kb_retrieve_explain'))
             AND p.prokind = 'f'
             AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%')"""
    ).fetchall()
    assert unpinned == []
    insert_document(kb, "x.md", "# X\n\nRefunds take 14 days.")
    kb.execute("CREATE SCHEMA evil")
    try:
        # shadows functions and an operator the retrieval code uses, for anyone who resolves names through evil
        kb.execute("CREATE FUNCTION evil.btrim(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        kb.execute("CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        kb.execute("CREATE TABLE evil.documents (id int)")
        kb.execute("SET search_path = evil, public")
        rows = retrieve(kb, "refunds days", k=3)
        assert [r["source"] for r in rows] == ["x.md"]
    finally:
        kb.execute("RESET search_path")
        kb.execute("DROP SCHEMA evil CASCADE")
