"""Tenant isolation fails closed: only tenant_isolation = false turns it off. A null value or a
removed row means on for every role that does not own the tables, a migrate never turns it back
off, and every change of it is recorded in kb.tenant_isolation_changes, which no role but the
owner writes."""

from __future__ import annotations

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

from harness.migrate import migrate


@pytest.fixture
def two_tenants(fresh_db):
    insert_document(fresh_db, "acme.md", "# Refund\n\nAcme refunds within 14 days.", namespace="acme")
    insert_document(fresh_db, "globex.md", "# Refund\n\nGlobex refunds within 30 days.", namespace="globex")
    with temporary_role(fresh_db, "closed_acme_reader", "NOLOGIN IN ROLE pgkb_reader") as reader:
        fresh_db.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (reader,))
        yield fresh_db, reader


def visible_namespaces(conn, reader: str) -> set[str]:
    with acting_as(conn, reader):
        seen = {r["namespace"] for r in conn.execute("SELECT DISTINCT namespace FROM kb.documents").fetchall()}
        found = {r["namespace"] for r in conn.execute("SELECT namespace FROM kb_retrieve('refund days', 5)").fetchall()}
    return seen | found


def test_a_fresh_install_says_false_and_only_false_turns_isolation_off(two_tenants):
    conn, reader = two_tenants
    assert conn.execute("SELECT value FROM kb.settings WHERE key = 'tenant_isolation'").fetchone()["value"] is False
    assert visible_namespaces(conn, reader) == {"acme", "globex"}
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    assert visible_namespaces(conn, reader) == {"acme"}


@pytest.mark.parametrize(
    "how",
    [
        "UPDATE kb.settings SET value = 'null' WHERE key = 'tenant_isolation'",
        "DELETE FROM kb.settings WHERE key = 'tenant_isolation'",
    ],
)
def test_a_null_or_missing_setting_means_isolation_on_and_a_migrate_keeps_it_on(two_tenants, dsn, how):
    conn, reader = two_tenants
    conn.execute(how)
    assert visible_namespaces(conn, reader) == {"acme"}
    migrate(dsn)
    assert visible_namespaces(conn, reader) == {"acme"}
    with acting_as(conn, reader):
        assert conn.execute("SELECT kb.tenant_isolation_on() AS on").fetchone()["on"] is True


def test_every_change_of_tenant_isolation_is_recorded_and_only_the_owner_writes_the_record(two_tenants):
    conn, reader = two_tenants
    with temporary_role(conn, "closed_admin", "NOLOGIN IN ROLE pgkb_admin") as admin:
        with acting_as(conn, admin):
            conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
            conn.execute("UPDATE kb.settings SET description = description WHERE key = 'tenant_isolation'")
            conn.execute("DELETE FROM kb.settings WHERE key = 'tenant_isolation'")
            changes = conn.execute(
                "SELECT role_name, operation, old_value, new_value FROM kb.tenant_isolation_changes ORDER BY id"
            ).fetchall()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO kb.tenant_isolation_changes (role_name, login, operation) VALUES ('x', 'x', 'DELETE')"
                )
        assert [(c["role_name"], c["operation"], c["old_value"], c["new_value"]) for c in changes] == [
            (admin, "UPDATE", False, True),
            (admin, "DELETE", True, None),
        ]
    with acting_as(conn, reader), pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM kb.tenant_isolation_changes").fetchall()
