"""The PL/Python boundary in a real server: every body is the entry-point call, a session whose
modules are older than the schema is refused with a clear error, postings of other term rules
are refused, and ingest reads its settings through kb.setting."""

from __future__ import annotations

import re
import shutil

import pgkb_plpy
import pgkb_plpy.entry
import psycopg
import pytest
from helpers import count_rows, insert_document
from pgkb_plpy import lexical, vocabulary

from harness.config import SQL_DIR
from harness.db import connect
from harness.migrate import migrate

ENTRY_CALL = re.compile(
    r'\A\nif "pgkb" not in GD: plpy\.execute\("SELECT kb\.plpython_init\(\)"\)\n'
    r'return GD\["pgkb"\]\.[a-z_]+\(plpy, GD, SD(?:, [A-Za-z_"\[\]]+)*\)\n\Z'
)


def test_every_plpython_body_calls_its_entry_point(fresh_db):
    rows = fresh_db.execute(
        """SELECT p.proname, p.prosrc FROM pg_catalog.pg_proc AS p
           JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
           WHERE p.pronamespace = 'kb'::regnamespace AND l.lanname = 'plpython3u'
             AND p.proname <> 'plpython_init'"""
    ).fetchall()
    # as many as the entry points pgkb_plpy.entry exports (each body calls one)
    assert len(rows) == len(pgkb_plpy.entry.__all__) - 1  # check_version is no SQL function's body
    for row in rows:
        assert ENTRY_CALL.match(row["prosrc"]), f"kb.{row['proname']}: {row['prosrc']!r}"


def test_the_schema_expects_the_installed_modules(fresh_db):
    assert fresh_db.execute("SELECT kb.plpython_expected_version() AS v").fetchone()["v"] == pgkb_plpy.__version__
    fresh_db.execute("SELECT kb.plpython_init()")


def test_the_provider_registry_lists_the_python_providers(fresh_db):
    rows = fresh_db.execute("SELECT provider FROM kb.embedding_providers").fetchall()
    assert sorted(r["provider"] for r in rows) == sorted(vocabulary.EMBEDDING_PROVIDERS)


def _sql_expecting(tmp_path, version: str):
    """A copy of sql/ whose kb.plpython_expected_version() returns ``version``."""
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    path = sql_dir / "010_plpython.sql"
    text, count = re.subn(
        r"AS \$\$ SELECT '[^']+'::text \$\$", f"AS $$ SELECT '{version}'::text $$", path.read_text(encoding="utf-8")
    )
    assert count == 1
    path.write_text(text, encoding="utf-8")
    return sql_dir


def test_a_session_is_refused_once_migrate_expects_other_modules(fresh_db, dsn, tmp_path):
    with connect(dsn) as session:
        session.execute("SELECT kb.py_query_terms('refund')")  # this backend has loaded the modules
        insert_document(session, "before.md", "Refunds take 30 days.")
        # another connection migrates to a schema that expects other modules (without
        # installing them: settings=None leaves the server venv alone)
        migrate(dsn, None, sql_dir=_sql_expecting(tmp_path, "999.0.0"))
        expected = f"this session runs pgkb_plpy {pgkb_plpy.__version__} but the schema expects 999.0.0"
        for statement in (
            "SELECT kb.py_query_terms('refund')",
            "SELECT kb.query_terms('refund')",
            "INSERT INTO kb.documents (source, body) VALUES ('after.md', 'Returns take 14 days.')",
        ):
            with pytest.raises(psycopg.Error) as ei:
                session.execute(statement)
            assert expected in str(ei.value), statement
            assert "install" in ei.value.diag.message_hint
        # a new backend imports the installed copy, which is not what the schema expects either
        with connect(dsn) as other, pytest.raises(psycopg.Error) as ei:
            other.execute("SELECT kb.plpython_init()")
        assert expected in str(ei.value)
        # back to the schema of these modules: the same session works again, nothing was left half-done
        migrate(dsn, None)
        assert session.execute("SELECT kb.py_query_terms('refund') AS t").fetchone()["t"] == ["refund"]
        assert count_rows(session, "kb.documents") == 1


def test_postings_of_other_term_rules_are_refused(fresh_db, dsn):
    stored = lexical.TERMS_VERSION + 1
    fresh_db.execute(
        "UPDATE kb.settings SET value = to_jsonb(%s::integer) WHERE key = 'lexical_terms_version'", (stored,)
    )
    with connect(dsn) as session:  # a backend whose functions have not checked the terms version yet
        for statement in (
            "SELECT kb.query_terms('refund')",
            "INSERT INTO kb.documents (source, body) VALUES ('a.md', 'Refunds take 30 days.')",
        ):
            with pytest.raises(psycopg.Error) as ei:
                session.execute(statement)
            assert f"built with terms version {stored}" in str(ei.value), statement
            assert f"produces terms version {lexical.TERMS_VERSION}" in str(ei.value)
            assert "pgkb migrate" in ei.value.diag.message_hint
    assert count_rows(fresh_db, "kb.documents") == 0


def test_a_session_setting_reaches_ingest(fresh_db):
    body = "\n\n".join(f"Paragraph {i} says that refunds are processed within thirty days." for i in range(20))
    insert_document(fresh_db, "default.md", body)
    fresh_db.execute("SET pgkb.chunk_max_tokens = 40")
    insert_document(fresh_db, "small.md", body)
    fresh_db.execute("RESET pgkb.chunk_max_tokens")
    counts = {r["source"]: r["chunk_count"] for r in fresh_db.execute("SELECT source, chunk_count FROM kb.documents")}
    assert counts["small.md"] > counts["default.md"] >= 1
