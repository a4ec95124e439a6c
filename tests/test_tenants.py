"""Roles and namespace isolation: with tenant_isolation on, no result, snippet, count or
explain output of one tenant reaches another, in any mode; readers cannot run
PL/Python or change settings and models; writers ingest only into their namespaces."""

from __future__ import annotations

from contextlib import ExitStack

import psycopg
import pytest
from helpers import acting_as, count_rows, insert_document, temporary_role

from harness.retrieval import MODES, explain, retrieve


@pytest.fixture
def tenants(fresh_db):
    insert_document(
        fresh_db,
        "a/refund.md",
        "# Refund policy\n\nAcme refunds are possible within 14 days. 退款期限十四天。",
        namespace="acme",
    )
    insert_document(
        fresh_db,
        "b/refund.md",
        "# Refund policy\n\nGlobex refunds are possible within 30 days. 退款期限三十天。",
        namespace="globex",
    )
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    roles = {
        "acme_reader": ("pgkb_reader", "acme"),
        "globex_reader": ("pgkb_reader", "globex"),
        "acme_writer": ("pgkb_writer", "acme"),
    }
    with ExitStack() as stack:
        for role, (group, namespace) in roles.items():
            stack.enter_context(temporary_role(fresh_db, role, f"NOLOGIN IN ROLE {group}"))
            fresh_db.execute(
                "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role, namespace)
            )
        yield fresh_db


@pytest.mark.parametrize("mode", MODES)
def test_no_result_snippet_or_explain_of_another_tenant(tenants, mode):
    with acting_as(tenants, "acme_reader"):
        rows = retrieve(tenants, "refund days 退款期限", k=10, mode=mode)
        assert rows and {r["namespace"] for r in rows} == {"acme"}
        assert all("Globex" not in (r["content"] + (r["snippet"] or "")) for r in rows)
        answer = explain(tenants, "Globex refunds 30 days", k=10, mode=mode)
        assert "globex" not in str(answer["results"]).lower()
        assert count_rows(tenants, "kb.documents") == 1
        assert count_rows(tenants, "kb.chunks WHERE namespace = 'globex'") == 0
        assert count_rows(tenants, "kb.lexical_postings WHERE namespace = 'globex'") == 0
    with acting_as(tenants, "globex_reader"):
        rows = retrieve(tenants, "refund days", k=10, mode=mode)
        assert {r["namespace"] for r in rows} == {"globex"}


def test_reader_cannot_read_other_vectors_run_plpython_or_change_settings(tenants):
    own = count_rows(tenants, "kb.embeddings")
    with acting_as(tenants, "acme_reader"):
        visible = count_rows(tenants, "kb.embeddings")
    assert 0 < visible < own
    for statement in (
        "SELECT kb.py_query_terms('x')",
        "UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'",
        "SELECT kb.activate_model('hash-64')",
        "INSERT INTO kb.namespace_grants VALUES ('acme_reader', 'globex')",
    ):
        with acting_as(tenants, "acme_reader"), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(statement)


def test_writer_ingests_into_its_namespace_only(tenants):
    with acting_as(tenants, "acme_writer"):
        insert_document(tenants, "a/new.md", "# New\n\nAcme onboarding takes three days.", namespace="acme")
        rows = retrieve(tenants, "onboarding days", k=3, mode="lexical")
        assert rows and rows[0]["source"] == "a/new.md"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            insert_document(tenants, "b/evil.md", "# Evil\n\nPlanted text.", namespace="globex")
    assert count_rows(tenants, "kb.documents WHERE source = 'b/evil.md'") == 0


def test_isolation_off_by_default_keeps_plain_readers_working(fresh_db):
    insert_document(fresh_db, "x.md", "# X\n\nRefunds take 14 days.", namespace="acme")
    with temporary_role(fresh_db, "plain_reader", "NOLOGIN IN ROLE pgkb_reader"), acting_as(fresh_db, "plain_reader"):
        assert retrieve(fresh_db, "refunds days", k=3)


def test_every_function_pins_search_path_and_ignores_a_malicious_one(fresh_db):
    """Only the functions written to be inlined into their callers go without a pinned search_path
    (a SET clause prevents inlining): plain SQL, not SECURITY DEFINER, and they say so in their comment."""
    unpinned = fresh_db.execute(
        """SELECT p.oid::regprocedure::text AS fn, l.lanname, p.prosecdef,
                  coalesce(obj_description(p.oid, 'pg_proc'), '') LIKE '%Inlined%' AS says_inlined
           FROM pg_proc AS p
           JOIN pg_namespace AS n ON n.oid = p.pronamespace
           JOIN pg_language AS l ON l.oid = p.prolang
           WHERE (n.nspname = 'kb' OR p.proname IN ('kb_retrieve', 'kb_retrieve_explain'))
             AND p.prokind = 'f'
             AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%')
           ORDER BY 1"""
    ).fetchall()
    assert [r["fn"] for r in unpinned] == [
        "kb.bm25_weight(double precision,integer,integer,double precision,double precision,double precision)",
        "kb.in_force(text,date,date,timestamp with time zone,timestamp with time zone)",
        "kb.visible_candidate(bigint,timestamp with time zone,text,jsonb,boolean)",
    ]
    assert all(r["lanname"] == "sql" and not r["prosecdef"] and r["says_inlined"] for r in unpinned)
    insert_document(fresh_db, "x.md", "# X\n\nRefunds take 14 days.")
    fresh_db.execute("CREATE SCHEMA evil")
    try:
        # shadows functions and an operator the retrieval code uses, for anyone who resolves names through evil
        fresh_db.execute("CREATE FUNCTION evil.btrim(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        fresh_db.execute("CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        fresh_db.execute("CREATE TABLE evil.documents (id int)")
        fresh_db.execute("SET search_path = evil, public")
        rows = retrieve(fresh_db, "refunds days", k=3)
        assert [r["source"] for r in rows] == ["x.md"]
    finally:
        fresh_db.execute("RESET search_path")
        fresh_db.execute("DROP SCHEMA evil CASCADE")
