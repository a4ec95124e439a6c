"""Unit tests for answer types (pgkb_plpy.answer_types); no database needed."""

from __future__ import annotations

import time

import pytest
from pgkb_plpy.answer_types import MAX_PASSAGES, answer_type, bound_value, check, subject_terms, values


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How much does the annual licence cost?", "price"),
        ("What do we pay each month for the CDN?", "price"),
        ("What is the price of the enterprise plan?", "price"),
        ("How long is the warranty on laptops?", "duration"),
        ("How often are backups tested?", "duration"),
        ("How many days of notice does a resignation need?", "duration"),
        ("What is the retention period for audit logs?", "duration"),
        ("When does the contract with the cleaning company end?", "date"),
        ("How many servers are in the cluster?", "count"),
        ("After how many failed logins is an account locked?", "count"),
        ("Who approves a purchase above the budget?", "person"),
        ("What is the name of the office manager?", "name"),
        ("Where are the backups stored?", "place"),
        ("Which city hosts the disaster recovery site?", "place"),
        ("What phone number do customers call at night?", "phone"),
        ("会议室每小时的租金是多少钱？", "price"),
        ("员工每个月的餐补是多少？", "price"),
        ("发票要在多久之内提交？", "duration"),
        ("合同什么时候到期？", "date"),
        ("一个集群有几台服务器？", "count"),
        ("超过预算由谁审批？", "person"),
        ("备份存放在哪个城市？", "place"),
        ("值班室在几楼？", "place"),
    ],
)
def test_a_question_asking_for_a_value_has_its_type(question, expected):
    assert answer_type(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "Vitamin D supplementation reduces the risk of fractures in older adults.",  # a claim
        "refund policy",  # keywords
        "What does a phone agent have to check to be sure who is calling?",  # "who" is embedded
        "Can we ship a release on Friday afternoon?",  # yes/no
        "员工年度体检的费用能报销吗？",  # yes/no: 费用 is the subject, not what is asked
        "如何把工单升级给技术团队？",
        "",
        None,
    ],
)
def test_claims_keywords_and_yes_no_questions_have_no_type(question):
    assert answer_type(question) is None


def test_the_subject_is_the_question_without_its_cue():
    assert subject_terms("How much does the Premium Support add-on cost per year?")[:2] == ["premium", "support"]
    assert "cost" not in subject_terms("How much does the Premium Support add-on cost per year?")
    assert "多少" not in subject_terms("员工每个月的交通补贴是多少？")


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        ("price", "The plan costs CNY 250 per shift.", "CNY 250"),
        ("price", "每晚上限 600 元。", "600 元"),
        ("duration", "Tickets auto-close after 5 days.", "5 days"),
        ("duration", "on-call runs in 12-hour shifts", "12-hour"),
        ("duration", "收到商品后 14 天内可以退款", "14 天"),
        ("date", "The contract ends on 2027-04-30.", "2027-04-30"),
        ("date", "每周四统一付款", "周四"),
        ("count", "at most 5 attempts", "5"),
        ("person", "需财务经理复核", "财务经理"),
        ("place", "备份存放在上海机房", "上海"),
        ("phone", "Call 400-820-1234 at night.", "400-820-1234"),
    ],
)
def test_values_of_each_type_are_found(kind, text, value):
    assert any(value in found for found in values(kind, text)), values(kind, text)


def test_identifiers_are_not_counts():
    assert values("count", "error E-5030 on contract HT-2023-0412") == []


def test_a_value_in_the_sentence_of_the_subject_is_bound():
    passage = (
        "# Pricing\nThe Basic plan is free. The Premium Support add-on costs CNY 12,000 per year.\n"
        "Travel is reimbursed at cost."
    )
    found = bound_value("price", "How much does the Premium Support add-on cost per year?", passage)
    assert found is not None and found["value"] == "CNY 12,000" and found["binding"] == "clause"


def test_a_value_of_the_type_about_something_else_is_not_bound():
    # the decoy: a price stands next to the subject, but it is another product's
    passage = (
        "# Support plans\nEnterprise customers with the Premium Support add-on get a first response in 1 hour.\n"
        "The Basic plan costs CNY 300 per month."
    )
    assert bound_value("price", "How much does the Premium Support add-on cost per year?", passage) is None


def test_a_table_row_binds_through_its_header():
    passage = "| 数据类别 | 保留期限 |\n| --- | --- |\n| 应用访问日志 | 90 天 |\n| 客服通话录音 | 1 年 |"
    found = bound_value("duration", "应用访问日志要保留多久？", passage)
    assert found is not None and found["value"] == "90 天"


def test_a_value_next_to_another_identifier_is_not_bound():
    passage = "| 合同编号 | 金额 |\n| --- | --- |\n| HT-2024-0173 | 年度 180 万元 |"
    assert bound_value("price", "HT-2023-0412 这份合同每年要付多少钱？", passage) is None
    assert bound_value("price", "HT-2024-0173 这份合同每年要付多少钱？", passage) is not None


def test_another_language_counts_only_in_first_place():
    zh = "客户自签收之日起 14 天内可以申请无理由退款。"
    en_question = "How many days do customers have to ask for a refund?"
    assert bound_value("duration", en_question, zh)["binding"] == "not checked (other language)"
    assert check("duration", en_question, [zh])["bound"]["passage"] == 1
    # in first place a number reads the same in both languages; a name does not, and is not checked
    assert check("duration", en_question, ["客户可以申请退款。"])["bound"] is None
    assert check("person", "Who approves a refund?", ["退款由客服审批。"])["bound"]["binding"].startswith("not checked")
    assert check("duration", en_question, ["Refund requests are handled by support.", zh])["bound"] is None


def test_anchors_bind_across_languages_at_any_place():
    en = "| P1 | Customer cannot log in | 30 min, 24x7 |"
    question = "P1 级别的工单，首次响应时限是多少分钟？"
    assert check("duration", question, ["值班交接在每周一上午。", en])["bound"]["passage"] == 2
    assert check("duration", question, ["值班交接在每周一上午。", en.replace("P1", "P3")])["bound"] is None


def test_no_type_reads_nothing():
    result = check(None, "refund policy", ["anything 14 days"])
    assert result["bound"] is None and result["passages_read"] == 0


def test_reading_is_bounded_and_fast():
    passage = ("The add-on costs CNY 100 per year, and the basic plan 20 days. " * 300)[:20000]
    start = time.perf_counter()
    result = check("price", "How much does the add-on cost per year?", [passage] * (MAX_PASSAGES + 5))
    assert time.perf_counter() - start < 2.0
    assert result["passages_read"] <= MAX_PASSAGES
