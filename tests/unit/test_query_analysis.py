"""Unit tests for query analysis (pgkb_plpy.query_analysis); no database needed."""

from __future__ import annotations

import json
import time

import pytest
from pgkb_plpy.query_analysis import analyze
from pgkb_plpy.vocabulary import MAX_QUERY_CHARS

KEYS = {
    "notes",
    "original",
    "language",
    "is_short",
    "identifiers",
    "looks_exact",
    "normalized",
    "core_terms",
    "followup",
    "composed",
    "stages",
}


def test_result_shape_is_json_serialisable():
    result = analyze("  退款期限是几天？ ", ["What is the session TTL?"])
    assert set(result) == KEYS
    assert json.loads(json.dumps(result, ensure_ascii=False)) == result
    assert result["original"] == "退款期限是几天？"


@pytest.mark.parametrize(
    ("query", "normalized"),
    [
        ("E-4031是什么", "E-4031"),
        ("E-4031是什么？", "E-4031"),
        ("什么是退款政策", "退款政策"),
        ("退款政策是什么意思", "退款政策"),
        ("退款政策是啥", "退款政策"),
        ("如何打断别人说话", "打断别人说话"),
        ("怎么申请退款", "申请退款"),
        ("怎样申请退款", "申请退款"),
        ("为什么退款被拒绝", "退款被拒绝"),
        ("数字商品可以退款吗？", "数字商品可以退款"),
        ("请问什么是退款政策？", "退款政策"),
        ("退款政策。", "退款政策"),
        ("refund policy?", "refund policy"),
        ("What is the session TTL?", "session TTL"),
        ("what are refund windows", "refund windows"),
        ("How do I reset the API_KEY?", "reset the API_KEY"),
        ("how to rotate keys", "rotate keys"),
        ("Why does E-4031 happen?", "E-4031 happen"),
        ("Can I get a refund?", "get a refund"),
        ("Is there a limit on refunds?", "limit on refunds"),
        ("What does E-4031 mean?", "E-4031"),
    ],
)
def test_question_forms_are_normalised(query, normalized):
    assert analyze(query)["normalized"] == normalized


def test_normalized_equals_original_when_nothing_changes():
    for query in ["退款政策", "session TTL", "E-4031", "Refunds are not allowed after 30 days"]:
        assert analyze(query)["normalized"] == query


def test_normalisation_never_empties_the_query():
    assert analyze("是什么")["normalized"] == "是什么"
    assert analyze("吗")["normalized"] == "吗"
    assert analyze("what is")["normalized"] == "what is"


def test_negated_english_question_keeps_its_negation():
    assert "doesn't" in analyze("Why doesn't the refund work?")["normalized"]


@pytest.mark.parametrize(
    ("query", "language"),
    [
        ("退款期限是几天？", "zh"),
        ("E-4031是什么？", "zh"),
        ("What is the session TTL?", "en"),
        ("退款policy在30天内", "mixed"),
        ("如何设置session timeout", "mixed"),
        ("東京タワーはどこですか", "other"),
        ("Как вернуть деньги", "other"),
        ("12345 ???", "other"),
        ("", "other"),
    ],
)
def test_language(query, language):
    assert analyze(query)["language"] == language


def test_core_terms_drop_function_words_and_keep_identifiers():
    assert analyze("退款的期限是几天")["core_terms"] == "退款 期限 几天"
    assert analyze("How do I reset the API_KEY for session.ttl_seconds?")["core_terms"] == (
        "reset API_KEY session.ttl_seconds"
    )
    assert analyze("E-4031是什么？")["core_terms"] == "E-4031"


def test_core_terms_protect_words_that_contain_function_characters():
    core = analyze("现在的目的是申请退款")["core_terms"]
    assert core.split() == ["现在", "目的", "申请退款"]
    assert "是否" in analyze("数字商品是否可以退款")["core_terms"]


def test_core_terms_keep_negation():
    assert "not" in analyze("Refunds are not allowed for digital goods").get("core_terms").split()


def test_identifiers_reported_verbatim():
    assert analyze("How do I fix E-4031 after upgrading to v2.3.1?")["identifiers"] == ["E-4031", "v2.3.1"]


@pytest.mark.parametrize("query", ["E-4031", "打断", "退款期限", "session TTL", "什么是API_KEY？", "refund"])
def test_short_queries(query):
    result = analyze(query)
    assert result["is_short"] is True
    assert result["looks_exact"] is True


@pytest.mark.parametrize(
    "query",
    [
        "How do refunds of digital goods work for customers in the EU?",
        "在会议中如何礼貌地打断别人说话",
        "refund, policy",
        "退款，期限",
    ],
)
def test_long_or_structured_queries_are_not_short(query):
    assert analyze(query)["is_short"] is False


def test_quoted_phrase_looks_exact():
    result = analyze('"refunds for digital goods purchased before the policy change"')
    assert result["is_short"] is False
    assert result["looks_exact"] is True
    assert analyze("「数字商品的退款期限与实体商品的期限不同」")["looks_exact"] is True


def test_followup_zh_composes_subject_and_question():
    result = analyze("它适用于数字商品吗？", ["退款期限是几天？"])
    assert result["followup"] is True
    assert result["composed"] == "退款期限 适用于数字商品"
    assert result["stages"][0] == "退款期限 适用于数字商品"


def test_followup_en_composes_subject_and_question():
    result = analyze("How do I change it?", ["What is the session TTL?"])
    assert result["followup"] is True
    assert result["composed"] == "session TTL How do I change"
    assert result["stages"] == ["session TTL How do I change", "session TTL change"]


def test_followup_uses_the_last_turn_and_inherits_through_followups():
    assert analyze("How do I change it?", ["What is E-4031?", "What is the session TTL?"])["composed"] == (
        "session TTL How do I change"
    )
    chained = analyze("它适用于数字商品吗？", ["退款期限是几天？", "它可以延长吗？"])
    assert chained["composed"] == "退款期限 适用于数字商品"


def test_no_followup_without_context():
    for context in (None, [], ["", "   "]):
        result = analyze("How do I change it?", context)
        assert result["followup"] is False
        assert result["composed"] is None
        assert result["stages"][0] == "How do I change it?"


def test_no_followup_when_query_has_its_own_subject():
    context = ["What is the session TTL?"]
    assert analyze("How do I reset the API_KEY?", context)["followup"] is False
    assert (
        analyze("Is it possible to refund digital goods bought with gift cards last year?", context)["followup"]
        is False
    )
    assert analyze("E-4031是什么？", ["退款期限是几天？"])["followup"] is False


def test_words_containing_pronoun_characters_are_not_references():
    assert analyze("因此应该怎么办", ["退款期限是几天？"])["followup"] is False
    assert analyze("其他商品怎么申请退货流程", ["退款期限是几天？"])["followup"] is False


def test_stages_are_distinct_ordered_and_non_empty():
    result = analyze("请问退款的期限是几天？")
    assert result["stages"] == ["请问退款的期限是几天？", "退款的期限是几天", "退款 期限 几天"]
    assert analyze("退款")["stages"] == ["退款"]
    assert analyze("")["stages"] == []
    for stages in (analyze(q)["stages"] for q in ["What is it?", "the", "？？"]):
        assert len(stages) == len(set(stages)) and all(s.strip() for s in stages)


def test_deterministic():
    args = ("它适用于数字商品吗？", ["退款期限是几天？"])
    assert analyze(*args) == analyze(*args)


@pytest.mark.parametrize(
    "query", ["'; DROP TABLE kb.documents; --", "%_\\", ".*+?[](){}|^$", "a\x00b", "😀🔥", "\u202eabc", "e\u0301"]
)
def test_hostile_inputs_do_not_crash(query):
    result = analyze(query, [query, "What is the session TTL?"])
    json.dumps(result)


def test_huge_query_is_cut_and_fast():
    query = " ".join(f"a{i}" for i in range(150_000))
    start = time.perf_counter()
    result = analyze(query, [query])
    assert time.perf_counter() - start < 10.0
    assert len(result["original"]) <= MAX_QUERY_CHARS


def test_context_given_as_a_single_string():
    assert analyze("How do I change it?", "What is the session TTL?")["composed"] == "session TTL How do I change"


def test_elliptical_short_question_leans_on_the_earlier_turn():
    got = analyze("when is the handover?", ["How does the engineering on-call rotation work?"])
    assert got["followup"] is True
    assert got["composed"].startswith("engineering on-call rotation")
    assert analyze("退货呢？", ["退款期限是几天？"])["composed"] == "退款期限 退货"
    assert analyze("when is the handover?", None)["followup"] is False


@pytest.mark.parametrize("blank", ["\u00a0", "\u3000", "\u2003", "\u200b", "\u200d", "\ufeff", "\u2060", "\u00ad"])
def test_blank_characters_around_a_query_are_not_part_of_it(blank):
    result = analyze(f"{blank}{blank}退款期限是几天？{blank} ")
    assert result["original"] == "退款期限是几天？"
    assert result["stages"][0] == "退款期限是几天？"


def test_a_blank_query_has_no_stages():
    result = analyze("\u200b\u3000\u00a0\ufeff")
    assert (result["original"], result["stages"]) == ("", [])


def test_a_blank_context_turn_is_no_turn():
    assert analyze("它适用于数字商品吗？", ["退款期限是几天？", "\u200b\u3000"])["followup"] is True
    assert analyze("它适用于数字商品吗？", ["\u200b\u3000"])["followup"] is False


def test_only_the_last_context_turns_are_read():
    from pgkb_plpy.vocabulary import MAX_CONTEXT_TURNS

    old = ["What is the session TTL?"]
    recent = ["退款期限是几天？"] * MAX_CONTEXT_TURNS
    assert analyze("它适用于数字商品吗？", old + recent)["composed"] == "退款期限 适用于数字商品"
    started = time.perf_counter()
    analyze("How do I change it?", ["What is the session TTL?"] * 100_000)
    assert time.perf_counter() - started < 0.5
