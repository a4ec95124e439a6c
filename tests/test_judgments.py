"""Judgments as data with scope, raters and history (sql/096_judgments/): the rules that keep the golden set
the lab builds from going wrong without telling anyone. Each test is one rule, run in SQL as the roles a
team has: an admin of namespace `team`, two readers of it, and a board whose private document sits there."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

from harness import evaluate

SUFFIX = uuid.uuid4().hex[:8]
ADMIN = f"judge_admin_{SUFFIX}"
READER = f"judge_reader_{SUFFIX}"
OTHER_READER = f"judge_other_{SUFFIX}"
BOARD = f"judge_board_{SUFFIX}"
OUTSIDER = f"judge_outsider_{SUFFIX}"


@pytest.fixture
def team(fresh_db):
    conn = fresh_db
    with ExitStack() as stack:
        stack.enter_context(temporary_role(conn, ADMIN, "NOLOGIN IN ROLE pgkb_admin"))
        for name in (READER, OTHER_READER, BOARD):
            stack.enter_context(temporary_role(conn, name, "NOLOGIN IN ROLE pgkb_reader"))
        stack.enter_context(temporary_role(conn, OUTSIDER, "NOLOGIN IN ROLE pgkb_reader"))
        for name in (ADMIN, READER, OTHER_READER, BOARD):
            conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'team')", (name,))
        conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'other')", (OUTSIDER,))
        conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'other')", (ADMIN,))
        conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
        insert_document(conn, "errors.md", "# Errors\n\nE-4031 means the printer is out of paper.", namespace="team")
        insert_document(conn, "faq.md", "# FAQ\n\nPrinters are on floor two.", namespace="team")
        insert_document(conn, "leave.md", "# Leave\n\nLeave is 25 days.", namespace="other")
        insert_document(
            conn, "board-plan.md", "# Plan\n\nThe board plans a merger.", namespace="team", readers=[BOARD, ADMIN]
        )
        yield conn


def judge(conn, role: str, query: str, source: str | None, judgment: str, **extra) -> int:
    arguments = {"p_namespace": extra.pop("namespace", "team"), "p_query": query, "p_source": source}
    arguments |= {"p_judgment": judgment} | {f"p_{k}": v for k, v in extra.items()}
    names = ", ".join(f"{k} => %({k})s" for k in arguments)
    with acting_as(conn, role):
        return conn.execute(f"SELECT kb.record_judgment({names}) AS id", arguments).fetchone()["id"]


def cases(conn, role: str = ADMIN, query: str | None = None) -> list[dict]:
    with acting_as(conn, role):
        return conn.execute(
            "SELECT * FROM kb.judged_cases WHERE %(q)s::text IS NULL OR query = %(q)s ORDER BY case_id", {"q": query}
        ).fetchall()


def test_a_readers_judgment_is_a_suggestion_until_an_admin_accepts_it(team):
    suggestion = judge(team, READER, "what is E-4031", "errors.md", "relevant")
    assert cases(team, query="what is E-4031") == []
    with acting_as(team, READER), pytest.raises(psycopg.errors.InsufficientPrivilege, match="only an admin"):
        team.execute("SELECT kb.review_judgment(%s, 'accepted')", (suggestion,))
    with acting_as(team, READER), pytest.raises(psycopg.errors.InsufficientPrivilege, match="only an admin"):
        team.execute("UPDATE kb.judgments SET status = 'accepted' WHERE id = %s", (suggestion,))
    with acting_as(team, ADMIN):
        team.execute("SELECT kb.review_judgment(%s, 'accepted')", (suggestion,))
    [case] = cases(team, query="what is E-4031")
    assert case["state"] == "ready" and case["expected"] == ["errors.md"]
    assert team.execute("SELECT reviewed_by FROM kb.judgments WHERE id = %s", (suggestion,)).fetchone() == {
        "reviewed_by": ADMIN
    }


def test_a_readers_click_never_overrides_an_admins_case(team):
    judge(team, ADMIN, "what is E-4031", "errors.md", "relevant")
    judge(team, READER, "what is E-4031", "errors.md", "not relevant")
    judge(team, READER, "what is E-4031", None, "no answer", asked_in="team")
    [case] = cases(team, query="what is E-4031")
    assert case["state"] == "ready" and case["expected"] == ["errors.md"] and case["suggestions"] == 2
    assert case["golden_case"]["category"] == "judged"


def test_not_relevant_elsewhere_never_makes_a_no_answer_case(team):
    # asked across every namespace: the one passage of `other` judged not relevant says nothing of `team`
    judge(team, ADMIN, "printer paper", "leave.md", "not relevant", namespace="other")
    [case] = cases(team, query="printer paper")
    assert case["namespace"] == "other" and case["state"] == "incomplete"
    assert evaluate.judged_cases(team) == []


def test_no_answer_is_an_explicit_judgment_of_the_namespace_the_question_was_asked_in(team):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="asked_in must be team"):
        judge(team, ADMIN, "canteen menu", None, "no answer")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="names no source"):
        judge(team, ADMIN, "canteen menu", "faq.md", "no answer", asked_in="team")
    judge(team, ADMIN, "canteen menu", None, "no answer", asked_in="team")
    [case] = cases(team, query="canteen menu")
    assert case["state"] == "ready" and case["expected"] == []
    assert case["golden_case"]["category"] == "judged-no-answer"


def test_the_same_question_at_two_dates_is_two_cases_and_neither_judgment_is_lost(team):
    judge(team, ADMIN, "leave days", "errors.md", "relevant", as_of="2025-01-01")
    judge(team, ADMIN, "leave days", "faq.md", "relevant", as_of="2026-01-01")
    found = {str(c["as_of"]): c["expected"] for c in cases(team, query="leave days")}
    assert found == {"2025-01-01": ["errors.md"], "2026-01-01": ["faq.md"]}


def test_judging_again_keeps_the_earlier_judgment_as_history_and_restore_brings_it_back(team):
    first = judge(team, ADMIN, "printers", "faq.md", "relevant")
    second = judge(team, ADMIN, "printers", "faq.md", "forbidden")
    assert first != second
    history = team.execute(
        "SELECT id, judgment, retired_at IS NOT NULL AS retired, retired_by FROM kb.judgments"
        " WHERE query = 'printers' ORDER BY id"
    ).fetchall()
    assert [(h["judgment"], h["retired"], h["retired_by"]) for h in history] == [
        ("relevant", True, ADMIN),
        ("forbidden", False, None),
    ]
    assert cases(team, query="printers")[0]["state"] == "incomplete"  # only forbidden now
    with acting_as(team, ADMIN):
        team.execute("SELECT kb.restore_judgment(%s)", (first,))
    assert cases(team, query="printers")[0]["expected"] == ["faq.md"]
    with acting_as(team, ADMIN):
        team.execute("SELECT kb.retire_judgment(%s)", (first,))  # delete: kept, out of the cases
    assert cases(team, query="printers") == []
    assert team.execute("SELECT count(*) AS n FROM kb.judgments WHERE query = 'printers'").fetchone()["n"] == 2


def test_a_reader_may_delete_its_own_judgments_only(team):
    mine = judge(team, READER, "floor", "faq.md", "relevant")
    theirs = judge(team, OTHER_READER, "floor", "errors.md", "relevant")
    with acting_as(team, READER):
        team.execute("SELECT kb.retire_judgment(%s)", (mine,))
        with pytest.raises(psycopg.errors.NoDataFound, match="no live judgment"):
            team.execute("SELECT kb.retire_judgment(%s)", (theirs,))
    with acting_as(team, READER), pytest.raises(psycopg.errors.InsufficientPrivilege):
        team.execute("DELETE FROM kb.judgments WHERE id = %s", (theirs,))


def test_accepted_judgments_that_disagree_make_a_disputed_case_left_out_of_every_use(team):
    suggestion = judge(team, READER, "paper out", "errors.md", "not relevant")
    judge(team, ADMIN, "paper out", "errors.md", "relevant")
    with acting_as(team, ADMIN):
        team.execute("SELECT kb.review_judgment(%s, 'accepted')", (suggestion,))
    [case] = cases(team, query="paper out")
    assert case["state"] == "disputed" and case["disputed"] == ["errors.md"] and case["expected"] == []
    with acting_as(team, ADMIN):
        assert evaluate.judged_cases(team) == []  # the evaluation and the answerability fit read ready cases


def test_a_question_is_readable_only_by_roles_that_may_read_every_passage_shown_with_it(team):
    # a board member asks about the private plan and judges the public FAQ it was shown beside
    judge(team, BOARD, "merger timeline", "faq.md", "not relevant", shown=["team/board-plan.md", "team/faq.md"])
    for role, sees in ((BOARD, 1), (ADMIN, 1), (READER, 0)):
        with acting_as(team, role):
            count = team.execute("SELECT count(*) AS n FROM kb.judgments WHERE query = 'merger timeline'")
            assert count.fetchone()["n"] == sees, role
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="shown names a passage you may not read"):
        judge(team, READER, "merger", "faq.md", "relevant", shown=["team/board-plan.md"])


def test_a_typo_in_a_judged_source_gets_a_named_error_alike_for_a_hidden_document(team):
    messages = []
    for source in ("erors.md", "board-plan.md"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
            judge(team, READER, "E-4031", source, "relevant")
        messages.append(err.value.diag.message_primary.replace(source, "X"))
        assert f"holds no document {source} that you may read" in err.value.diag.message_primary
    assert messages[0] == messages[1]


def test_a_tenant_sees_no_judgment_or_case_of_another_namespace(team):
    judge(team, ADMIN, "leave", "leave.md", "relevant", namespace="other")
    with acting_as(team, READER):
        assert team.execute("SELECT count(*) AS n FROM kb.judgments WHERE namespace = 'other'").fetchone()["n"] == 0
    assert cases(team, READER) == []
    assert [c["namespace"] for c in cases(team, OUTSIDER)] == ["other"]  # its own namespace's case


def queue(conn, role: str) -> list[tuple[str, str]]:
    with acting_as(conn, role):
        return [(r["query"], r["reason"]) for r in conn.execute("SELECT * FROM kb.judging_queue(50)").fetchall()]


def test_the_judging_queue_offers_each_role_the_questions_waiting_for_it(team):
    judge(team, ADMIN, "printer floor", "faq.md", "not relevant")  # incomplete: anyone may add to it
    judge(team, READER, "what is E-4031", "errors.md", "relevant")  # a suggestion: an admin reviews it
    judge(team, ADMIN, "paper", "errors.md", "relevant")
    judge(team, OTHER_READER, "paper", "errors.md", "relevant")  # suggestions on a ready case
    admin = dict(queue(team, ADMIN))
    assert admin["printer floor"].startswith("incomplete")
    assert admin["what is E-4031"] == "suggested judgments wait for review"
    assert admin["paper"] == "1 suggested judgments wait for review"
    assert dict(queue(team, READER)) == {"printer floor": admin["printer floor"]}
    assert queue(team, OUTSIDER) == []  # nothing of namespace team


def test_the_judging_queue_adds_unjudged_evaluation_questions_ranked_by_the_log(team):
    team.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    with acting_as(team, ADMIN):
        run = team.execute(
            """INSERT INTO kb.eval_runs (dataset, mode, params, metrics) VALUES ('cases:q.json', 'lexical', '{}', '{}')
               RETURNING id"""
        ).fetchone()["id"]
        for n, question in enumerate(("printers", "E-4031 meaning", "judged already")):
            team.execute(
                """INSERT INTO kb.eval_results (run_id, case_id, query, expected, returned, namespace, context)
                   VALUES (%s, %s, %s, '{}', '{}', 'team', '{}')""",
                (run, f"c{n}", question),
            )
        for _ in range(2):
            team.execute("SELECT count(*) FROM kb_retrieve('E-4031 meaning', namespace => 'team')")
    judge(team, ADMIN, "judged already", "faq.md", "relevant")
    waiting = queue(team, ADMIN)
    assert [q for q, reason in waiting if reason.startswith("asked in an evaluation")] == ["E-4031 meaning", "printers"]
    with acting_as(team, ADMIN):
        logged = team.execute("SELECT query, times_logged FROM kb.judging_queue(50)").fetchall()
    assert {r["query"]: r["times_logged"] for r in logged} == {"E-4031 meaning": 2, "printers": 0}
    assert queue(team, READER) == []  # a reader reads no evaluation results: that part is left out, not refused


def test_deleting_a_case_retires_the_judgments_the_role_may_change_and_each_can_be_restored(team):
    kept = judge(team, ADMIN, "what is E-4031", "errors.md", "relevant")
    judge(team, READER, "what is E-4031", "faq.md", "relevant")
    [case] = cases(team, query="what is E-4031")
    with acting_as(team, READER):
        assert team.execute("SELECT kb.retire_case('team', %s) AS n", (case["case_id"],)).fetchone()["n"] == 1
    assert cases(team, query="what is E-4031")[0]["expected"] == ["errors.md"]  # the admin's stays
    with acting_as(team, ADMIN):
        assert team.execute("SELECT kb.retire_case('team', %s) AS n", (case["case_id"],)).fetchone()["n"] == 1
        with pytest.raises(psycopg.errors.NoDataFound, match="has no live judgment that you may change"):
            team.execute("SELECT kb.retire_case('team', %s)", (case["case_id"],))
    assert cases(team, query="what is E-4031") == []
    with acting_as(team, ADMIN):
        team.execute("SELECT kb.restore_judgment(%s)", (kept,))
    assert cases(team, query="what is E-4031")[0]["expected"] == ["errors.md"]
