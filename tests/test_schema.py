"""The database's contents are what docs/schema.sql says: every table, type, index, policy, view
and function signature of a freshly migrated database. Regenerate the file with
`/opt/pgkb/venv/bin/python -m harness.schema --dsn <fresh database>` after changing migrations/ or sql/."""

from __future__ import annotations

import difflib

import psycopg

from harness.schema import SCHEMA_FILE, describe


def test_docs_schema_sql_is_the_schema_of_a_fresh_database(dsn, migrated_db):
    with psycopg.connect(dsn) as conn:
        current = describe(conn)
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    if current != committed:
        diff = "".join(
            list(difflib.unified_diff(committed.splitlines(True), current.splitlines(True), "file", "db"))[:60]
        )
        raise AssertionError(f"{SCHEMA_FILE} is stale: run python -m harness.schema --dsn <fresh database>\n{diff}")


def test_every_function_has_a_comment(migrated_db):
    missing = migrated_db.execute(
        """SELECT p.oid::regprocedure::text AS fn FROM pg_proc AS p
           JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE (n.nspname IN ('kb', 'kb_pipeline', 'kb_node') OR p.proname LIKE 'kb\\_%')
             AND obj_description(p.oid, 'pg_proc') IS NULL"""
    ).fetchall()
    assert missing == []


def test_sql_and_python_agree_on_modes_and_limits(migrated_db):
    """The database and pgkb_plpy.vocabulary each define the modes and limits once; they agree."""
    from pgkb_plpy import vocabulary

    row = migrated_db.execute(
        """SELECT kb_pipeline.retrieval_modes() AS modes, kb_pipeline.max_query_chars() AS max_query_chars,
                  (SELECT pg_get_constraintdef(oid) FROM pg_constraint
                   WHERE conrelid = 'kb.models'::regclass AND conname = 'models_dimensions_check') AS dimensions"""
    ).fetchone()
    assert tuple(row["modes"]) == vocabulary.RETRIEVAL_MODES
    assert row["max_query_chars"] == vocabulary.MAX_QUERY_CHARS
    assert f"<= {vocabulary.MAX_EMBEDDING_DIMENSIONS})" in row["dimensions"]


def test_no_function_body_is_longer_than_150_lines_and_orchestrators_are_short(migrated_db):
    """One job per function: no body over 150 lines; the orchestrators (one node's pipeline, the
    coordinator's, the doors) read as a list of named steps, under 80."""
    lengths = {
        r["fn"]: r["lines"]
        for r in migrated_db.execute(
            """SELECT p.oid::regprocedure::text AS fn, array_length(string_to_array(p.prosrc, E'\\n'), 1) AS lines
               FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
               WHERE n.nspname IN ('kb', 'kb_pipeline', 'kb_node') OR p.proname LIKE 'kb\\_%'"""
        ).fetchall()
    }
    assert {fn: n for fn, n in lengths.items() if n > 150} == {}
    orchestrators = [fn for fn in lengths if fn.split("(")[0] in ORCHESTRATORS]
    assert len(orchestrators) == len(ORCHESTRATORS)
    assert {fn: lengths[fn] for fn in orchestrators if lengths[fn] >= 80} == {}


ORCHESTRATORS = {
    "kb_node.retrieve_core",
    "kb_pipeline.retrieve_over_shards",
    "kb_node.retrieve",
    "kb_retrieve",
    "kb_retrieve_explain",
}
