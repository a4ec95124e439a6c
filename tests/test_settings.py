"""The settings catalogue: every key in one list (sql/005_settings/01_catalogue.sql) with its type, default and
description; one accessor, kb.setting, for SQL and the in-database Python alike."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from helpers import insert_document

REPO = Path(__file__).resolve().parents[1]


def setting(conn, key: str):
    return conn.execute("SELECT kb.setting(%s) AS v", (key,)).fetchone()["v"]


def test_every_setting_has_a_type_a_default_and_a_description(module_db):
    rows = module_db.execute("SELECT * FROM kb.settings_catalogue ORDER BY key").fetchall()
    assert len(rows) >= 25
    for row in rows:
        assert row["value_type"] in ("boolean", "integer", "number", "text"), row["key"]
        assert row["description"], row["key"]
        assert row["default_value"] is not None or row["key"] == "python_path", row["key"]


def test_every_key_the_code_reads_is_in_the_catalogue(module_db):
    """A setting read anywhere (SQL or Python) is listed in the catalogue, so it has one default."""
    catalogue = {r["key"] for r in module_db.execute("SELECT key FROM kb.settings").fetchall()}
    read = set()
    for path in [*REPO.glob("sql/**/*.sql"), *REPO.glob("plpython/pgkb_plpy/**/*.py")]:
        read |= set(re.findall(r"kb\.setting\('([a-z0-9_]+)'\)", path.read_text(encoding="utf-8")))
    assert read, "the code reads settings through kb.setting"
    # a retrieval reads its settings by the fields of kb_pipeline.retrieval_settings
    read |= {
        r["attname"]
        for r in module_db.execute(
            """SELECT attname FROM pg_attribute WHERE attrelid = 'kb_pipeline.retrieval_settings'::regclass
               AND attnum > 0 AND attname <> 'answerability_model'"""
        ).fetchall()
    }
    assert {"bm25_k1", "hnsw_ef_search", "fusion"} <= read
    assert read <= catalogue, read - catalogue


def test_an_unknown_key_is_an_error_that_names_it(module_db):
    with pytest.raises(psycopg.errors.RaiseException, match='unknown setting "weight_densse"'):
        setting(module_db, "weight_densse")


def test_a_session_overrides_a_retrieval_setting_for_itself_only(rolled_back_db):
    rolled_back_db.execute("SET LOCAL pgkb.weight_dense = '0.9'")
    assert setting(rolled_back_db, "weight_dense") == 0.9
    assert (
        rolled_back_db.execute("SELECT (kb_pipeline.read_retrieval_settings()).weight_dense AS w").fetchone()["w"]
        == 0.9
    )
    row = rolled_back_db.execute("SELECT * FROM kb.settings_catalogue WHERE key = 'weight_dense'").fetchone()
    assert (row["value"], row["source"]) == (0.9, "session")
    assert (
        rolled_back_db.execute("SELECT value FROM kb.settings WHERE key = 'weight_dense'").fetchone()["value"] == 0.45
    )


def test_a_retrieval_reads_its_settings_the_legs_included_in_one_statement(rolled_back_db):
    rolled_back_db.execute("SET LOCAL pgkb.bm25_k1 = '1.5'")
    rolled_back_db.execute("SET LOCAL pgkb.hnsw_ef_search = '64'")
    read = rolled_back_db.execute("SELECT (kb_pipeline.read_retrieval_settings()).*").fetchone()
    assert (read["bm25_k1"], read["hnsw_ef_search"], read["fusion"]) == (1.5, 64, "linear")
    assert read["answerability_model"] is not None
    # a missing row is not an error (tests/test_settings_bounds.py): the shipped default is read
    rolled_back_db.execute("DELETE FROM kb.settings WHERE key = 'glossary_weight'")
    read = rolled_back_db.execute("SELECT (kb_pipeline.read_retrieval_settings()).glossary_weight AS w").fetchone()
    assert read["w"] == 1


def test_a_session_cannot_switch_off_tenant_isolation(rolled_back_db):
    rolled_back_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    rolled_back_db.execute("SET LOCAL pgkb.tenant_isolation = 'false'")
    assert setting(rolled_back_db, "tenant_isolation") is True
    rolled_back_db.execute("SET LOCAL pgkb.python_path = '/tmp/elsewhere'")
    assert setting(rolled_back_db, "python_path") != "/tmp/elsewhere"


@pytest.mark.parametrize(
    ("key", "value"), [("weight_dense", "lots"), ("snippets", "yes"), ("candidates_per_leg", "1.5"), ("fusion", "max")]
)
def test_an_invalid_session_value_is_an_error_that_names_the_setting(rolled_back_db, key, value):
    rolled_back_db.execute(f"SET LOCAL pgkb.{key} = '{value}'")
    with pytest.raises(psycopg.errors.RaiseException, match=f'pgkb.{key} = "{value}" is not'):
        setting(rolled_back_db, key)


def test_a_stored_value_of_the_wrong_type_is_refused(rolled_back_db):
    with pytest.raises(psycopg.errors.CheckViolation, match="settings_value_matches_type"):
        rolled_back_db.execute("""UPDATE kb.settings SET value = '"fast"' WHERE key = 'bm25_k1'""")


def test_ingest_reads_its_settings_through_the_accessor(rolled_back_db):
    """SET pgkb.chunk_max_tokens changes how the trigger chunks, as SET pgkb.bm25_k1 changes BM25."""
    body = "# Policy\n\n" + "\n\n".join(f"Paragraph {i} says refunds take {i} days to arrive." for i in range(40))
    wide = insert_document(rolled_back_db, "wide.md", body)
    rolled_back_db.execute("SET LOCAL pgkb.chunk_max_tokens = '40'")
    rolled_back_db.execute("SET LOCAL pgkb.chunk_overlap_tokens = '0'")
    narrow = insert_document(rolled_back_db, "narrow.md", body)
    counts = {
        r["document_id"]: r["n"]
        for r in rolled_back_db.execute(
            "SELECT document_id, count(*) AS n FROM kb.chunks WHERE document_id = ANY(%s) GROUP BY document_id",
            ([wide, narrow],),
        ).fetchall()
    }
    assert counts[narrow] > 3 * counts[wide]


# -- ranges --------------------------------------------------------------------------------------


def test_every_numeric_setting_has_a_range_holding_its_default(migrated_db):
    rows = migrated_db.execute(
        "SELECT key, default_value, min_value, max_value FROM kb.settings WHERE value_type IN ('integer', 'number')"
    ).fetchall()
    assert rows
    for r in rows:
        assert r["min_value"] is not None and r["max_value"] is not None, r["key"]
        assert r["min_value"] <= float(r["default_value"]) <= r["max_value"], r["key"]


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("candidates_per_leg", "1e308", "candidates_per_leg = 10+ is outside its range 10 to 1000"),
        ("bm25_b", "2", "bm25_b = 2 is outside its range 0 to 1"),
        ("no_evidence_probability", "2", "no_evidence_probability = 2 is outside its range 0 to 0.99"),
        ("concept_term_weight", "2000000000", "concept_term_weight = 2000000000 is outside its range 1 to 10"),
    ],
)
def test_a_value_outside_its_range_is_refused_in_kb_settings(rolled_back_db, key, value, message):
    rolled_back_db.execute("SAVEPOINT range")
    with pytest.raises(psycopg.errors.CheckViolation, match=message):
        rolled_back_db.execute("UPDATE kb.settings SET value = %s::jsonb WHERE key = %s", (value, key))
    rolled_back_db.execute("ROLLBACK TO SAVEPOINT range")


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("bm25_postings_per_term", "0", "pgkb.bm25_postings_per_term = 0 is outside its range 1 to 10000000"),
        ("chunk_max_tokens", "1", "pgkb.chunk_max_tokens = 1 is outside its range 32 to 4000"),
        ("answer_probability", "0", "pgkb.answer_probability = 0 is outside its range 0.01 to 1"),
    ],
)
def test_a_session_override_outside_its_range_is_refused_by_name(rolled_back_db, key, value, message):
    rolled_back_db.execute(f"SET LOCAL pgkb.{key} = '{value}'")
    rolled_back_db.execute("SAVEPOINT range")
    with pytest.raises(psycopg.errors.RaiseException, match=message):
        rolled_back_db.execute("SELECT kb.setting(%s)", (key,))
    rolled_back_db.execute("ROLLBACK TO SAVEPOINT range")
