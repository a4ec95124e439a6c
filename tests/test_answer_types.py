"""Answerability that reads what was asked (docs/RETRIEVAL.md, "The decision"): for a question asking
for a price, a duration, a date, a count, a person, a place or a phone number, whether one of the top
passages holds a value of that type bound to what it asks about is a signal of the answerability model
(answer_bound, answer_unbound); claims and keyword queries carry neither. Hash model, lexical mode: the
check reads passages, not vectors."""

from __future__ import annotations

import pytest
from helpers import insert_document, sources
from psycopg.types.json import Jsonb

from harness.retrieval import explain, retrieve

PLANS = (
    "# Support plans\n\n"
    "Enterprise customers with the Premium Support add-on get a first response within one hour. "
    "The Basic support plan costs CNY 300 per month.\n\n"
    "## Renewal\n\nPlans renew every year on the contract date."
)


@pytest.fixture
def plans(rolled_back_db):
    insert_document(rolled_back_db, "plans.md", PLANS)
    insert_document(
        rolled_back_db, "travel.md", "# Travel\n\nHotels in Shanghai are reimbursed up to 600 yuan a night."
    )
    return rolled_back_db


def test_a_typed_question_whose_top_passages_hold_no_bound_value_signals_it(plans):
    # the decoy: a price stands in the same passage, but it is another plan's
    query = "How much does the Premium Support add-on cost per year?"
    answerability = explain(plans, query, mode="lexical")["answerability"]
    assert answerability["answer_type"] == "price"
    check = answerability["answer_check"]
    assert check["bound_value"] is None
    assert "premium" in check["subject_terms"]
    signals = answerability["signals"]
    assert (signals["answer_unbound"]["value"], signals["answer_bound"]["value"]) == (1, 0)


def test_a_typed_question_with_a_bound_value_keeps_its_rows(plans):
    query = "How much does the Basic support plan cost per month?"
    rows = retrieve(plans, query, mode="lexical")
    assert sources(rows)[:1] == ["plans.md"]
    answerability = explain(plans, query, mode="lexical")["answerability"]
    check = answerability["answer_check"]
    assert (answerability["signals"]["answer_bound"]["value"], answerability["signals"]["answer_unbound"]["value"]) == (
        1,
        0,
    )
    assert check["bound_value"]["value"] == "CNY 300" and check["bound_value"]["passage"] == 1
    assert "Basic support plan" in check["bound_value"]["clause"]


@pytest.mark.parametrize(
    "query",
    [
        "Premium Support add-on first response",  # keywords
        "The Premium Support add-on gives enterprise customers a faster first response.",  # a claim
    ],
)
def test_claims_and_keywords_keep_the_rule_of_the_scores(plans, query):
    ex = explain(plans, query, mode="lexical")
    assert ex["analysis"]["answer_type"] is None
    assert ex["answerability"]["answer_check"] is None
    assert "answer_check" not in ex["timings_ms"] or ex["answerability"]["answer_check"] is None
    assert sources(retrieve(plans, query, mode="lexical"))[:1] == ["plans.md"]


def test_a_model_that_weighs_the_check_turns_an_unbound_question_into_no_rows(plans):
    coefficients = {
        "lexical": {"intercept": 1.0, "answer_unbound": -10.0},
        "dense": {"intercept": 0},
        "hybrid": {"intercept": 0},
    }
    plans.execute(
        "INSERT INTO kb.answerability_models (fitted_on, coefficients, active) VALUES ('{}', %s, true)",
        (Jsonb(coefficients),),
    )
    unbound = retrieve(plans, "How much does the Premium Support add-on cost per year?", mode="lexical")
    bound = retrieve(plans, "How much does the Basic support plan cost per month?", mode="lexical")
    assert unbound == []
    assert sources(bound)[:1] == ["plans.md"] and bound[0]["answerability"] == "answer"


def test_a_chinese_question_binds_in_its_table_row(rolled_back_db):
    insert_document(
        rolled_back_db,
        "retention.md",
        "# 数据保留\n\n| 数据类别 | 保留期限 |\n| --- | --- |\n| 应用访问日志 | 90 天 |\n| 客服通话录音 | 1 年 |",
    )
    answered = explain(rolled_back_db, "应用访问日志要保留多久？", mode="lexical")["answerability"]
    assert answered["answer_check"]["bound_value"]["value"] == "90 天"
    assert answered["signals"]["answer_bound"]["value"] == 1
    # the same table says nothing about chat messages, though it is all durations
    unbound = explain(rolled_back_db, "员工聊天记录要保留多久？", mode="lexical")["answerability"]
    assert unbound["answer_check"] is None or unbound["signals"]["answer_unbound"]["value"] == 1


def test_readers_reach_the_check_only_through_bounded_doors(plans):
    acl = plans.execute(
        "SELECT has_function_privilege('public', 'kb.py_answer_check(text, text, text[])', 'EXECUTE') AS ok"
    ).fetchone()["ok"]
    assert acl is False
    with pytest.raises(Exception, match="at most 10"):
        plans.execute("SELECT kb.answer_check('price', 'how much?', array_fill('x'::text, ARRAY[11]))")
