"""Whole documents and namespace descriptions for readers (sql/047_documents_for_readers.sql,
sql/095_namespace_descriptions.sql, migration 0029): what `pgkb mcp` serves as resources and per-namespace
tools, under the documents' namespace security."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

SUFFIX = uuid.uuid4().hex[:8]


@pytest.fixture
def tenants(rolled_back_db):
    """Two namespaces with documents and descriptions, tenant isolation on, and roles: a reader and an
    admin granted `acme`, a reader granted `globex`."""
    conn = rolled_back_db
    insert_document(conn, "refund-v1.md", "# Refund\n\nWithin 7 days.", namespace="acme", effective_from="2023-01-01")
    insert_document(
        conn,
        "refund-v2.md",
        "# Refund\n\nWithin 14 days.",
        namespace="acme",
        version="2",
        effective_from="2024-03-01",
        supersedes="refund-v1.md",
    )
    insert_document(conn, "draft.md", "# Draft\n\nNot yet.", namespace="acme", status="draft")
    insert_document(conn, "merger.md", "# Merger\n\nSecret plans.", namespace="globex")
    conn.execute(
        "INSERT INTO kb.namespace_descriptions (namespace, description) VALUES "
        "('acme', 'Acme customer policies.'), ('globex', 'Globex board papers.')"
    )
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    names = {}
    with (
        temporary_role(conn, f"acme_reader_{SUFFIX}", "NOLOGIN IN ROLE pgkb_reader") as acme_reader,
        temporary_role(conn, f"acme_admin_{SUFFIX}", "NOLOGIN IN ROLE pgkb_admin") as acme_admin,
        temporary_role(conn, f"globex_reader_{SUFFIX}", "NOLOGIN IN ROLE pgkb_reader") as globex_reader,
    ):
        for role, namespace in ((acme_reader, "acme"), (acme_admin, "acme"), (globex_reader, "globex")):
            conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role, namespace))
        names.update(acme_reader=acme_reader, acme_admin=acme_admin, globex_reader=globex_reader)
        yield conn, names


def test_a_role_reads_only_the_descriptions_of_namespaces_it_may_read(tenants):
    conn, roles = tenants
    query = "SELECT namespace, description FROM kb.namespace_descriptions ORDER BY namespace"
    with acting_as(conn, roles["acme_reader"]):
        assert conn.execute(query).fetchall() == [{"namespace": "acme", "description": "Acme customer policies."}]
    with acting_as(conn, roles["globex_reader"]):
        assert [r["namespace"] for r in conn.execute(query)] == ["globex"]
    conn.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'")
    with acting_as(conn, roles["acme_reader"]):
        assert [r["namespace"] for r in conn.execute(query)] == ["acme", "globex"]


def test_only_admins_write_descriptions_and_only_of_namespaces_they_may_read(tenants):
    conn, roles = tenants
    with acting_as(conn, roles["acme_reader"]):
        conn.execute("SAVEPOINT reader")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE kb.namespace_descriptions SET description = 'x' WHERE namespace = 'acme'")
        conn.execute("ROLLBACK TO SAVEPOINT reader")
    with acting_as(conn, roles["acme_admin"]):
        conn.execute("UPDATE kb.namespace_descriptions SET description = 'Acme policies, current.'")
        conn.execute("SAVEPOINT admin")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute("INSERT INTO kb.namespace_descriptions VALUES ('initech', 'Not ours.')")
        conn.execute("ROLLBACK TO SAVEPOINT admin")
        # another tenant's row is not there to change: nothing happens, no error tells it exists
        assert conn.execute("DELETE FROM kb.namespace_descriptions WHERE namespace = 'globex'").rowcount == 0
    rows = conn.execute("SELECT namespace, description FROM kb.namespace_descriptions ORDER BY 1").fetchall()
    assert rows == [
        {"namespace": "acme", "description": "Acme policies, current."},
        {"namespace": "globex", "description": "Globex board papers."},
    ]


@pytest.mark.parametrize(
    "namespace,description",
    [("bad namespace", "ok"), ("acme2", ""), ("acme2", " padded "), ("acme2", "x" * 1001)],
    ids=["namespace", "blank", "padded", "too long"],
)
def test_a_description_must_be_trimmed_text_of_at_most_1000_characters_for_a_valid_namespace(
    rolled_back_db, namespace, description
):
    with pytest.raises(psycopg.errors.CheckViolation):
        rolled_back_db.execute("INSERT INTO kb.namespace_descriptions VALUES (%s, %s)", (namespace, description))


def test_current_documents_lists_only_the_current_documents_the_role_may_read(tenants):
    conn, roles = tenants
    query = "SELECT namespace, source, version, characters FROM kb.current_documents ORDER BY namespace, source"
    with acting_as(conn, roles["acme_reader"]):
        assert conn.execute(query).fetchall() == [
            {"namespace": "acme", "source": "refund-v2.md", "version": "2", "characters": 25}
        ]
    assert [r["source"] for r in conn.execute(query)] == ["refund-v2.md", "merger.md"]


def test_read_document_gives_the_whole_document_with_its_lifecycle_and_provenance(tenants):
    conn, roles = tenants
    read = "SELECT * FROM kb.read_document(%s, %s, %s)"
    with acting_as(conn, roles["acme_reader"]):
        (now,) = conn.execute(read, ("acme", "refund-v2.md", "now")).fetchall()
        (old,) = conn.execute(read, ("acme", "refund-v1.md", "now")).fetchall()
        (then,) = conn.execute(read, ("acme", "refund-v1.md", "2023-06-01")).fetchall()
        (draft,) = conn.execute(read, ("acme", "draft.md", "now")).fetchall()
        foreign = conn.execute(read, ("globex", "merger.md", "now")).fetchall()
    assert now["body"] == "# Refund\n\nWithin 14 days." and now["lifecycle"] == "current"
    assert now["supersedes"] == "refund-v1.md" and now["superseded_by"] is None
    assert now["provenance"]["chunk_count"] >= 1 and now["provenance"]["ingest_status"] == "indexed"
    assert set(now["provenance"]) >= {"file_name", "parser", "chunker_version", "content_hash", "indexed_at", "origin"}
    assert (old["lifecycle"], old["superseded_by"]) == ("superseded", ["refund-v2.md"])
    assert then["lifecycle"] == "current"
    assert draft["lifecycle"] == "draft"
    assert foreign == []  # another tenant's document does not exist for the role


def test_read_document_agrees_with_kb_retrieve_on_what_is_current(tenants):
    conn, _ = tenants
    for as_of in ("2023-06-01", "2025-01-01"):
        retrieved = {
            r["source"]
            for r in conn.execute(
                "SELECT source FROM kb_retrieve('refund days', 10, 'acme', 'lexical', as_of => %s)", (as_of,)
            )
        }
        current = {
            source
            for source in ("refund-v1.md", "refund-v2.md", "draft.md")
            if conn.execute("SELECT lifecycle FROM kb.read_document('acme', %s, %s)", (source, as_of)).fetchone()[
                "lifecycle"
            ]
            == "current"
        }
        assert retrieved <= current and len(current) == 1, as_of


def test_read_document_refuses_an_oversized_source_by_name(tenants):
    conn, roles = tenants
    with acting_as(conn, roles["acme_reader"]):
        conn.execute("SAVEPOINT bounded")
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="kb.read_document: the source must be at most"):
            conn.execute("SELECT * FROM kb.read_document('acme', repeat('x', 30000))")
        conn.execute("ROLLBACK TO SAVEPOINT bounded")
