"""The bilingual dictionary (kb.dictionary, sql/036_dictionary.sql): migrate loads CC-CEDICT once
per snapshot with its source recorded; the lexical leg translates a query's words both ways, the
longest word first, main senses first, capped; a passage in the other language is found in lexical
mode; a passage holding the query's own words is not outranked by one holding only a translation;
it can be switched off; readers use it, nobody but the owner writes it."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

from harness.config import load_settings
from harness.migrate import migrate
from harness.retrieval import explain, retrieve


def translate(conn, text: str, max_terms: int = 32) -> dict:
    return conn.execute(
        "SELECT kb.dictionary_expansion_of_terms(kb.query_terms(%s), %s) AS e", (text, max_terms)
    ).fetchone()["e"]


def test_migrate_loads_the_bundled_dictionary_once_and_records_its_source(rolled_back_db, dsn):
    source = rolled_back_db.execute("SELECT * FROM kb.dictionary_sources").fetchone()
    assert (source["name"], source["licence"]) == ("CC-CEDICT", "CC BY-SA 4.0")
    assert str(source["snapshot"]) == "2023-11-07"
    assert source["loaded_rows"] == rolled_back_db.execute("SELECT count(*) AS n FROM kb.dictionary").fetchone()["n"]
    assert source["loaded_rows"] > 100_000
    assert (
        rolled_back_db.execute("SELECT kb.load_dictionary() AS r")
        .fetchone()["r"]
        .endswith(f"already loaded ({source['loaded_rows']} rows)")
    )


def test_english_words_add_the_bigrams_of_their_chinese_headwords(rolled_back_db):
    found = translate(rolled_back_db, "What is the refund deadline?")
    by_terms = {tuple(m["terms"]): m for m in found["matches"]}
    assert by_terms[("refund",)]["added_terms"] == ["退款"]
    assert "期限" in by_terms[("deadlin",)]["added_terms"]
    assert all(m["source"] == "dictionary" for m in found["matches"])


def test_chinese_words_add_the_terms_of_their_english_senses(rolled_back_db):
    found = translate(rolled_back_db, "会话多久过期")
    session = next(m for m in found["matches"] if m["terms"] == ["会话"])
    assert "session" in session["added_terms"] and "convers" in session["added_terms"]


def test_the_longest_word_wins(rolled_back_db):
    english = translate(rolled_back_db, "credit card limit")
    assert ["credit", "card"] in [m["terms"] for m in english["matches"]]
    assert ["credit"] not in [m["terms"] for m in english["matches"]]
    chinese = translate(rolled_back_db, "信用卡额度")
    assert ["信用", "用卡"] in [m["terms"] for m in chinese["matches"]]
    assert ["信用"] not in [m["terms"] for m in chinese["matches"]]


def test_added_terms_are_capped_and_the_rest_counted(rolled_back_db):
    whole = translate(rolled_back_db, "time deadline refund", 256)
    capped = translate(rolled_back_db, "time deadline refund", 3)
    assert len(capped["added_terms"]) == 3 and capped["added_terms"] == whole["added_terms"][:3]
    assert capped["dropped_terms"] == len(whole["added_terms"]) - 3


def test_an_english_question_finds_the_chinese_passage_in_lexical_mode(fresh_db):
    insert_document(fresh_db, "refund-zh.md", "# 退款\n\n客户自签收之日起 14 天内可申请退款。")
    insert_document(fresh_db, "lunch.md", "# Lunch\n\nThe canteen serves lunch from noon until two.")
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")
    assert [r["source"] for r in retrieve(fresh_db, "refund", mode="lexical")] == ["refund-zh.md"]
    fresh_db.execute("SET pgkb.dictionary_expansion = false")
    assert retrieve(fresh_db, "refund", mode="lexical") == []


def test_a_passage_with_the_questions_own_words_is_not_outranked_by_a_translation(fresh_db):
    insert_document(fresh_db, "refund-en.md", "# Refunds\n\nA refund is paid within 14 days.")
    insert_document(fresh_db, "refund-zh.md", "# 退款\n\n退款在 14 天内支付。")
    rows = retrieve(fresh_db, "refund", mode="lexical")
    assert [r["source"] for r in rows] == ["refund-en.md", "refund-zh.md"]
    assert rows[0]["lexical_score"] > rows[1]["lexical_score"]


def test_explain_shows_each_translation_beside_the_glossarys_matches(fresh_db):
    fresh_db.execute("INSERT INTO kb.glossary (concept, term) VALUES ('refund', 'refund'), ('refund', '退钱')")
    insert_document(fresh_db, "refund-zh.md", "# 退款\n\n客户可申请退款。")
    matches = explain(fresh_db, "refund", mode="lexical")["glossary"]["matches"]
    assert [m.get("source", "glossary") for m in matches] == ["glossary", "dictionary"]
    assert matches[1]["translations"][0] == "退款"


@pytest.mark.parametrize("statement", ["DELETE FROM kb.dictionary", "SELECT kb.load_dictionary(true)"])
def test_readers_use_the_dictionary_and_only_the_owner_writes_it(fresh_db, statement):
    with temporary_role(fresh_db, f"dict_reader_{uuid.uuid4().hex[:8]}", "NOLOGIN IN ROLE pgkb_reader") as reader:
        with acting_as(fresh_db, reader):
            assert translate(fresh_db, "refund")["added_terms"] == ["退款"]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                fresh_db.execute(statement)


def test_a_second_migrate_keeps_the_loaded_dictionary(fresh_db, dsn):
    before = fresh_db.execute("SELECT loaded_at FROM kb.dictionary_sources").fetchone()["loaded_at"]
    assert "already loaded" in migrate(dsn, load_settings()).dictionary
    assert fresh_db.execute("SELECT loaded_at FROM kb.dictionary_sources").fetchone()["loaded_at"] == before
