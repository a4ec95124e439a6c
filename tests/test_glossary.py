"""The team glossary (kb.glossary, kb.glossary_expansion, `pgkb glossary`): a query that contains
one term of a concept gets the BM25 terms of its equivalents, in either direction; a tenant's
glossary reaches no other tenant, in rows or in expansion output; global rows apply to all;
writers write their namespaces, only admins the global rows; a file with problems names them
with file and line and loads nothing; --replace makes the namespace exactly the file; and a
fresh install ships no glossary.

Roles are cluster-wide, so every role name carries this run's suffix (``role("acme_reader")``)."""

from __future__ import annotations

import argparse
import uuid
from contextlib import ExitStack

import psycopg
import pytest
from helpers import acting_as, count_rows, insert_document, temporary_role

from harness import glossary
from harness.retrieval import explain, retrieve

SUFFIX = uuid.uuid4().hex[:8]


def role(name: str) -> str:
    return f"{name}_{SUFFIX}"


ROLES = {
    "acme_reader": ("pgkb_reader", "acme"),
    "globex_reader": ("pgkb_reader", "globex"),
    "acme_writer": ("pgkb_writer", "acme"),
    "acme_admin": ("pgkb_admin", "acme"),
}


def add(conn, namespace: str | None, concept: str, *terms: str) -> None:
    for term in terms:
        conn.execute(
            "INSERT INTO kb.glossary (namespace, concept, term) VALUES (%s, %s, %s)", (namespace, concept, term)
        )


def expansion(conn, query: str, namespace: str | None = None) -> dict:
    row = conn.execute("SELECT explain, added_terms FROM kb.glossary_expansion(%s, %s)", (query, namespace)).fetchone()
    return {
        "matched": [m["term"] for m in row["explain"]["matches"]],
        "equivalents": [e for m in row["explain"]["matches"] for e in m["equivalents"]],
        "added": row["added_terms"],
        "explain": row["explain"],
    }


@pytest.fixture
def tenants(fresh_db):
    """Global Session/会话; acme's on-call/值班; globex's secret concept; tenant isolation on."""
    add(fresh_db, None, "session", "Session", "会话")
    add(fresh_db, "acme", "on-call", "on-call", "值班")
    add(fresh_db, "globex", "project", "Project Glxsecret", "格罗秘密")
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with ExitStack() as stack:
        for name, (group, namespace) in ROLES.items():
            stack.enter_context(temporary_role(fresh_db, role(name), f"NOLOGIN IN ROLE {group}"))
            fresh_db.execute(
                "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role(name), namespace)
            )
        yield fresh_db


# -- nothing by default ---------------------------------------------------------------------------


def test_a_fresh_install_ships_no_glossary_and_expands_nothing(rolled_back_db):
    assert count_rows(rolled_back_db, "kb.glossary") == 0
    assert expansion(rolled_back_db, "How long does a session last? 会话多久过期") == {
        "matched": [],
        "equivalents": [],
        "added": [],
        "explain": {"matches": [], "added_terms": [], "dropped_terms": 0},
    }


# -- matching on BM25 terms -----------------------------------------------------------------------


def test_expansion_matches_both_ways_on_bm25_terms(rolled_back_db):
    add(rolled_back_db, None, "session", "Session", "会话")
    english = expansion(rolled_back_db, "How long do sessions last?")  # stemmed: sessions -> session
    assert (english["matched"], english["equivalents"], english["added"]) == (["Session"], ["会话"], ["会话"])
    chinese = expansion(rolled_back_db, "如何延长会话时间")  # the bigram 会话 is among the query's
    assert (chinese["matched"], chinese["equivalents"], chinese["added"]) == (["会话"], ["Session"], ["session"])


def test_a_term_matches_only_when_all_its_bm25_terms_occur_in_the_query(rolled_back_db):
    add(rolled_back_db, None, "timeout", "session timeout", "会话超时")
    assert expansion(rolled_back_db, "session length")["matched"] == []
    assert expansion(rolled_back_db, "会话长度")["matched"] == []
    assert expansion(rolled_back_db, "what is the timeout of a session")["added"] == ["会话", "话超", "超时"]
    assert expansion(rolled_back_db, "会话超时是多少")["added"] == ["session", "timeout"]


def test_only_terms_the_query_lacks_are_added(rolled_back_db):
    add(rolled_back_db, None, "session", "Session", "会话", "login session")
    found = expansion(rolled_back_db, "session 会话")
    assert found["matched"] == ["Session", "会话"]
    assert found["added"] == ["login"]
    assert found["explain"]["added_terms"] == ["login"]


def test_added_terms_are_capped_and_the_rest_counted(rolled_back_db):
    add(rolled_back_db, None, "session", "Session", "会话", "登录会话状态")
    row = rolled_back_db.execute("SELECT * FROM kb.glossary_expansion('session', NULL, 2)").fetchone()
    assert row["added_terms"] == ["会话", "登录"]
    assert row["explain"]["dropped_terms"] == 3  # 录会 话状 状态 (会话 is not counted twice)


def test_the_stored_terms_are_computed_whatever_a_writer_supplies(rolled_back_db):
    rolled_back_db.execute(
        "INSERT INTO kb.glossary (concept, term, terms) VALUES ('session', 'Sessions', '{anything}'), "
        "('session', '会话', '{}')"
    )
    stored = rolled_back_db.execute("SELECT term, terms FROM kb.glossary ORDER BY id").fetchall()
    assert [(r["term"], r["terms"]) for r in stored] == [("Sessions", ["session"]), ("会话", ["会话"])]
    rolled_back_db.execute("UPDATE kb.glossary SET terms = '{poison}'")
    assert count_rows(rolled_back_db, "kb.glossary WHERE 'poison' = any(terms)") == 0


def test_a_term_no_query_could_match_is_refused(rolled_back_db):
    with pytest.raises(psycopg.errors.CheckViolation, match="has no BM25 terms"):
        add(rolled_back_db, None, "x", "the")


def test_a_namespace_extends_a_global_concept_of_the_same_name(rolled_back_db):
    add(rolled_back_db, None, "session", "Session", "会话")
    add(rolled_back_db, "acme", "session", "login session")
    assert expansion(rolled_back_db, "会话", "acme")["added"] == ["session", "login"]
    assert expansion(rolled_back_db, "会话", "globex")["added"] == ["session"]


# -- tenants --------------------------------------------------------------------------------------


def test_a_tenants_glossary_is_invisible_to_another_tenant(tenants):
    with acting_as(tenants, role("acme_reader")):
        assert {r["namespace"] for r in tenants.execute("SELECT namespace FROM kb.glossary")} == {None, "acme"}
        for namespace in (None, "globex", "acme"):
            found = expansion(tenants, "Project Glxsecret 格罗秘密", namespace)
            assert found["matched"] == [] and found["added"] == []
            assert "glxsecret" not in str(found["explain"]).lower()
    with acting_as(tenants, role("globex_reader")):
        assert {r["namespace"] for r in tenants.execute("SELECT namespace FROM kb.glossary")} == {None, "globex"}
        assert expansion(tenants, "who is on-call tonight", "acme")["added"] == []
        assert expansion(tenants, "Project Glxsecret", "globex")["added"] == ["格罗", "罗秘", "秘密"]


def test_global_rows_apply_to_every_tenant(tenants):
    for name, namespace in (("acme_reader", "acme"), ("globex_reader", "globex")):
        with acting_as(tenants, role(name)):
            for scope in (None, namespace):
                assert expansion(tenants, "session length", scope)["added"] == ["会话"]


def test_with_a_namespace_only_the_global_rows_and_that_namespaces_apply(tenants):
    # the owner sees every row; p_namespace still limits the expansion to global + that namespace
    assert expansion(tenants, "on-call 格罗秘密", "acme")["matched"] == ["on-call"]
    assert expansion(tenants, "on-call 格罗秘密", "globex")["matched"] == ["格罗秘密"]
    assert expansion(tenants, "on-call 格罗秘密")["matched"] == ["on-call", "格罗秘密"]


def test_writers_write_their_namespaces_and_only_admins_the_global_rows(tenants):
    with acting_as(tenants, role("acme_writer")):
        add(tenants, "acme", "refund", "refund", "退款")
        tenants.execute("UPDATE kb.glossary SET term = '退款申请' WHERE term = '退款'")
        for statement in (
            "INSERT INTO kb.glossary (namespace, concept, term) VALUES ('globex', 'x', 'planted')",
            "INSERT INTO kb.glossary (namespace, concept, term) VALUES (NULL, 'x', 'planted')",
            "UPDATE kb.glossary SET namespace = NULL WHERE namespace = 'acme'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                tenants.execute(statement)
        # rows it may not write are not there for its UPDATE and DELETE
        assert tenants.execute("DELETE FROM kb.glossary WHERE namespace IS NULL").rowcount == 0
        assert tenants.execute("UPDATE kb.glossary SET term = 'x' WHERE namespace = 'globex'").rowcount == 0
    with acting_as(tenants, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
        add(tenants, "acme", "x", "planted")
    with acting_as(tenants, role("acme_admin")):
        add(tenants, None, "refund", "refund", "退款")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            add(tenants, "globex", "x", "planted")
    assert count_rows(tenants, "kb.glossary WHERE term = 'planted'") == 0
    assert count_rows(tenants, "kb.glossary WHERE namespace IS NULL") == 4
    assert count_rows(tenants, "kb.glossary WHERE term = 'Session'") == 1


# -- loading files --------------------------------------------------------------------------------


def load(dsn, path, namespace, **kwargs):
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return glossary.load(conn, path, namespace, **kwargs)


def terms_of(conn, namespace: str | None) -> set[tuple[str, str]]:
    rows = conn.execute(
        "SELECT concept, term FROM kb.glossary WHERE namespace IS NOT DISTINCT FROM %s::text", (namespace,)
    )
    return {(r["concept"], r["term"]) for r in rows}


def test_a_file_with_problems_names_file_and_line_and_loads_nothing(fresh_db, dsn, tmp_path):
    path = tmp_path / "team.tsv"
    path.write_text("en\tzh\nSession\t会话\nthe\t的\nrefund\t\n", encoding="utf-8")
    with pytest.raises(glossary.GlossaryError) as caught:
        load(dsn, path, "acme")
    assert caught.value.problems == [
        f"{path}:4: concept 'refund' has a single term; a glossary concept needs at least two (its equivalents)"
    ]
    path.write_text("en\tzh\nSession\t会话\nthe\t的\n", encoding="utf-8")  # parses; the database refuses 'the'
    with pytest.raises(glossary.GlossaryError) as caught:
        load(dsn, path, "acme")
    assert caught.value.problems == [
        f"{path}:3: term 'the' has no BM25 terms (only stop words, punctuation or symbols), so no query could match it"
    ]
    assert count_rows(fresh_db, "kb.glossary") == 0


def test_replace_makes_the_namespace_exactly_the_file_and_leaves_the_others(fresh_db, dsn, tmp_path):
    add(fresh_db, "acme", "old", "legacy term", "旧术语")
    add(fresh_db, "globex", "session", "Session", "会话")
    add(fresh_db, None, "session", "Session", "会话")
    path = tmp_path / "team.txt"
    path.write_text("Session | 会话\non-call | 值班\n", encoding="utf-8")
    added = load(dsn, path, "acme")  # without --replace: added, the old concept kept
    assert (added.inserted, added.deleted) == (4, 0)
    assert terms_of(fresh_db, "acme") == {
        ("old", "legacy term"),
        ("old", "旧术语"),
        ("Session", "Session"),
        ("Session", "会话"),
        ("on-call", "on-call"),
        ("on-call", "值班"),
    }
    assert load(dsn, path, "acme").inserted == 0  # loading again changes nothing
    replaced = load(dsn, path, "acme", replace=True)
    assert (replaced.inserted, replaced.deleted) == (4, 6)
    assert terms_of(fresh_db, "acme") == {
        ("Session", "Session"),
        ("Session", "会话"),
        ("on-call", "on-call"),
        ("on-call", "值班"),
    }
    assert terms_of(fresh_db, "globex") == {("session", "Session"), ("session", "会话")}
    assert terms_of(fresh_db, None) == {("session", "Session"), ("session", "会话")}
    # a replace that fails keeps what was there
    path.write_text("Session | 会话\nlonely\n", encoding="utf-8")
    with pytest.raises(glossary.GlossaryError):
        load(dsn, path, "acme", replace=True)
    assert len(terms_of(fresh_db, "acme")) == 4


def test_a_dry_run_checks_against_the_database_and_writes_nothing(fresh_db, dsn, tmp_path):
    path = tmp_path / "team.json"
    path.write_text('[{"concept": "session", "en": "Session", "zh": "会话"}]', encoding="utf-8")
    summary = load(dsn, path, None, replace=True, dry_run=True)
    assert (summary.concepts, summary.terms, summary.inserted) == (1, 2, 2)
    assert count_rows(fresh_db, "kb.glossary") == 0


def test_a_term_whose_stop_words_are_ignored_is_loaded_with_a_warning(fresh_db, dsn, tmp_path):
    path = tmp_path / "team.txt"
    path.write_text("on-call | 值班\n", encoding="utf-8")
    summary = load(dsn, path, "acme")
    assert summary.inserted == 2
    assert summary.warnings == [
        f"{path}:1: in term 'on-call' the stop words on are ignored: it matches every query with the terms call"
    ]


def test_a_writer_loading_into_a_namespace_it_may_not_write_loads_nothing(tenants, dsn, tmp_path):
    path = tmp_path / "team.txt"
    path.write_text("refund | 退款\n", encoding="utf-8")
    for namespace in ("globex", None):
        with acting_as(tenants, role("acme_writer")), pytest.raises(glossary.GlossaryError, match="may not write"):
            glossary.load(tenants, path, namespace, replace=True)
    assert count_rows(tenants, "kb.glossary WHERE term = 'refund'") == 0
    assert count_rows(tenants, "kb.glossary WHERE namespace = 'globex'") == 2


def run_cli(monkeypatch, dsn, *argv: str) -> int:
    monkeypatch.setenv("PGKB_DSN", dsn)
    parser = argparse.ArgumentParser(prog="pgkb glossary")
    glossary.add_arguments(parser)
    return glossary.main(parser.parse_args(list(argv)))


def test_the_command_loads_and_lists_and_exits_1_on_a_bad_file(fresh_db, dsn, tmp_path, monkeypatch, capsys):
    good = tmp_path / "team.csv"
    good.write_text("concept,en,zh\nsession,Session,会话\n", encoding="utf-8")
    assert run_cli(monkeypatch, dsn, "load", str(good), "--namespace", "acme", "--replace") == 0
    assert "1 concepts, 2 terms, 2 rows inserted, 0 deleted first" in capsys.readouterr().out
    assert run_cli(monkeypatch, dsn, "list", "--json") == 0
    listed = capsys.readouterr().out
    assert '"concept": "session"' in listed and '"lang": "zh"' in listed
    bad = tmp_path / "bad.csv"
    bad.write_text("concept,en,zh\nsession,Session,会话\nrefund,refund,\n", encoding="utf-8")
    assert run_cli(monkeypatch, dsn, "load", str(bad), "--global") == 1
    assert f"{bad}:3: concept 'refund' has a single term" in capsys.readouterr().err
    assert count_rows(fresh_db, "kb.glossary") == 2
    with pytest.raises(SystemExit):  # a scope is required: --namespace NS or --global
        run_cli(monkeypatch, dsn, "load", str(good))


# -- in retrieval (kb_pipeline.lexical_inputs expands each stage's terms) -----------------------------------


def lexical_scores(conn, query: str) -> dict[str, float]:
    answer = explain(conn, query, mode="lexical", k=10)
    return {r["source"]: r["lexical_score"] for r in answer["results"]}


def test_a_cross_lingual_lexical_query_finds_the_other_language_through_the_glossary(fresh_db):
    fresh_db.execute("SET pgkb.dictionary_expansion = false")  # the glossary alone (tests/test_dictionary.py)
    insert_document(fresh_db, "en/session.md", "# Session settings\n\nAn idle session expires after 30 minutes.")
    insert_document(fresh_db, "zh/refund.md", "# 退款\n\n退款在十四天内处理。")
    assert retrieve(fresh_db, "会话过期", mode="lexical") == []
    add(fresh_db, None, "session", "Session", "会话")
    rows = retrieve(fresh_db, "会话过期", mode="lexical")
    assert [r["source"] for r in rows][:1] == ["en/session.md"]
    answer = explain(fresh_db, "会话过期", mode="lexical")
    assert [m["term"] for m in answer["glossary"]["matches"]] == ["会话"]
    assert answer["glossary"]["added_terms"] == ["session"]


def test_a_role_that_may_not_read_the_glossary_retrieves_without_it(rolled_back_db):
    add(rolled_back_db, None, "session", "Session", "会话")
    plain = role("no_glossary")
    rolled_back_db.execute(f"CREATE ROLE {plain} NOLOGIN")  # rolled back with the test
    rolled_back_db.execute(f"GRANT USAGE ON SCHEMA kb TO {plain}")
    with acting_as(rolled_back_db, plain):
        for query in ("session", "会话"):
            assert expansion(rolled_back_db, query)["added"] == []
        row = rolled_back_db.execute("SELECT added_terms FROM kb.glossary_expansion_of_terms('{session}', NULL)")
        assert row.fetchone()["added_terms"] == []


def test_a_passage_answers_a_fully_translated_query_as_fully_as_one_in_its_own_language(fresh_db):
    insert_document(fresh_db, "en/session.md", "# Session settings\n\nAn idle session expires after 30 minutes.")
    insert_document(fresh_db, "zh/refund.md", "# 退款\n\n退款在十四天内处理。")
    add(fresh_db, None, "session", "Session", "会话")
    add(fresh_db, None, "expire", "expires", "过期")
    answer = explain(fresh_db, "会话过期", mode="lexical")
    assert [r["source"] for r in answer["results"]][:1] == ["en/session.md"]
    # both concepts covered in English; 话过 only straddles the two words
    assert answer["stages"][0]["lexical_top_coverage"] == pytest.approx(1.0)


def test_a_concept_counts_once_in_a_passage_that_has_it_in_both_languages(fresh_db):
    insert_document(fresh_db, "mixed.md", "# 会话\n\nThe session (会话) timeout is 30 minutes.")
    insert_document(fresh_db, "en.md", "# Session\n\nThe session timeout is 30 minutes.")
    insert_document(fresh_db, "other.md", "# Other\n\nNothing about that here.")
    before = lexical_scores(fresh_db, "session timeout")
    add(fresh_db, None, "session", "Session", "会话")
    assert lexical_scores(fresh_db, "session timeout") == pytest.approx(before)
