"""The database's contents are what docs/schema.sql says: every table, type, index, policy, view
and function signature of a freshly migrated database. Regenerate the file with
`/opt/pgkb/venv/bin/python -m harness.schema --dsn <fresh database>` after changing migrations/ or sql/."""

from __future__ import annotations

import psycopg

from harness.schema import SCHEMA_FILE, describe


def test_docs_schema_sql_is_the_schema_of_a_fresh_database(dsn, migrated_db):
    with psycopg.connect(dsn) as conn:
        current = describe(conn)
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    if current != committed:
        added = sorted(set(current.splitlines()) - set(committed.splitlines()))
        removed = sorted(set(committed.splitlines()) - set(current.splitlines()))
        raise AssertionError(
            f"{SCHEMA_FILE} is stale: run python -m harness.schema --dsn <fresh database>\n"
            f"in the database, not the file: {added[:20]}\nin the file, not the database: {removed[:20]}"
        )


def test_every_function_has_a_comment(migrated_db):
    missing = migrated_db.execute(
        """SELECT p.oid::regprocedure::text AS fn FROM pg_proc AS p
           JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE (n.nspname = 'kb' OR p.proname LIKE 'kb\\_%') AND obj_description(p.oid, 'pg_proc') IS NULL"""
    ).fetchall()
    assert missing == []
