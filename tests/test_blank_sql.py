"""SQL and Python agree on blank and on the argument limits: kb.is_blank (sql/025_helpers.sql) and
pgkb_plpy.vocabulary.is_blank answer the same for every Unicode code point, and the limits
kb_retrieve checks are the ones the schema and query analysis use."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from pgkb_plpy import vocabulary

ROOT = Path(__file__).resolve().parent.parent

# The planes that hold controls, format characters and separators at all (0, 1 and 14); the
# others hold ideographs (2, 3) and private use (15, 16) only.
PLANES_WITH_BLANKS = [(0x0001, 0x1FFFF), (0xE0000, 0xEFFFF)]


def _code_points() -> list[int]:
    # every code point of those planes text can hold: no NUL, no surrogates
    return [cp for lo, hi in PLANES_WITH_BLANKS for cp in range(lo, hi + 1) if not 0xD800 <= cp <= 0xDFFF]


def test_sql_and_python_call_the_same_code_points_blank(migrated_db):
    in_sql = {
        r["cp"]
        for r in migrated_db.execute(
            "SELECT cp FROM unnest(%s::int[]) AS cp WHERE kb.is_blank(chr(cp))", (_code_points(),)
        )
    }
    in_python = {cp for cp in _code_points() if vocabulary.is_blank(chr(cp))}
    assert sorted(in_sql ^ in_python) == []
    assert len(in_sql) == len(vocabulary.BLANK_CHARACTERS) - 1  # Python's class also holds NUL


def test_sql_and_python_strip_the_same_characters(migrated_db):
    samples = [
        "\u200b\u3000 refund policy \u00a0\ufeff",
        "\u2028退款\u2029",
        "a\u200bb",
        "\u00ad\u0600x\u0600",
        "\U000e0020\U000e0041tag\U000e007f",
        " \t\r\n",
        "\u3164x\u3164",
    ]
    rows = migrated_db.execute(
        "SELECT t, kb.strip_blank(t) AS stripped, kb.is_blank(t) AS blank FROM unnest(%s::text[]) AS t", (samples,)
    ).fetchall()
    assert [(r["stripped"], r["blank"]) for r in rows] == [
        (vocabulary.strip_blank(t), vocabulary.is_blank(t)) for t in samples
    ]


def test_the_body_check_is_kb_is_blank(migrated_db):
    definition = migrated_db.execute(
        "SELECT pg_get_constraintdef(oid) AS d FROM pg_constraint WHERE conname = 'documents_body_not_blank'"
    ).fetchone()["d"]
    assert "kb.is_blank(body)" in definition


def test_kb_retrieve_limits_are_the_schema_and_analysis_limits(migrated_db):
    row = migrated_db.execute(
        """SELECT kb_pipeline.max_context_turns() AS turns, kb_pipeline.max_namespace_chars() AS chars,
                  kb_pipeline.namespace_pattern() AS pattern,
                  (SELECT pg_get_constraintdef(oid) FROM pg_constraint
                   WHERE conname = 'documents_namespace_valid') AS namespace_check"""
    ).fetchone()
    assert row["turns"] == vocabulary.MAX_CONTEXT_TURNS
    assert f"'{row['pattern']}'" in row["namespace_check"]
    assert re.search(r"\{0,(\d+)\}", row["pattern"]).group(1) == str(row["chars"] - 1)


def test_the_migration_validates_the_check_only_when_no_stored_body_is_blank(migrated_db):
    migration = next((ROOT / "migrations").glob("0011_*.sql")).read_text(encoding="utf-8")
    notices: list[str] = []
    migrated_db.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    # a database from before the migration: its check (0001) let a body of no-break spaces in
    migrated_db.execute("ALTER TABLE kb.documents DROP CONSTRAINT documents_body_not_blank")
    migrated_db.execute(
        "ALTER TABLE kb.documents ADD CONSTRAINT documents_body_not_blank CHECK (btrim(body, E' \\t\\r\\n') <> '')"
    )
    migrated_db.execute("INSERT INTO kb.documents (source, body) VALUES ('old.md', %s)", ("\u00a0\u3000",))

    migrated_db.execute(migration)
    assert not _validated(migrated_db) and any("1 stored bodies are blank" in n for n in notices), notices
    with pytest.raises(psycopg.errors.CheckViolation, match="documents_body_not_blank"):
        migrated_db.execute("INSERT INTO kb.documents (source, body) VALUES ('new.md', %s)", ("\u200b",))

    migrated_db.execute("DELETE FROM kb.documents WHERE source = 'old.md'")
    migrated_db.execute(migration)
    assert _validated(migrated_db)


def _validated(conn) -> bool:
    return conn.execute(
        "SELECT convalidated AS v FROM pg_constraint WHERE conname = 'documents_body_not_blank'"
    ).fetchone()["v"]
