"""kb_retrieve behaviour on small fixture corpora (Chinese and English), with the hash model.

Lifecycle rules have their own file (test_lifecycle.py); this one covers scope and filters,
identifiers and hostile input, short Chinese, question forms, follow-ups, "no evidence, no
padding", explain output, input validation, the reader role and de-duplication.
"""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest
from helpers import insert_document, sources
from pgkb_plpy.vocabulary import RETRIEVAL_MODES
from psycopg.types.json import Jsonb

from harness.retrieval import MODES, explain, retrieve

# -- namespace and filters ------------------------------------------------------------------------


@pytest.fixture
def scoped(rolled_back_db):
    """The same topic in two namespaces, with metadata, doc types and tags."""
    body = "# 报销\n\n差旅报销需要在出差结束后 {days} 天内提交发票。Travel expenses are claimed within {days} days."
    insert_document(
        rolled_back_db,
        "hr/expenses.md",
        body.format(days=30),
        namespace="hr",
        doc_type="policy",
        metadata={"team": "finance", "region": "cn", "tags": ["travel", "money"]},
    )
    insert_document(
        rolled_back_db,
        "eng/expenses.md",
        body.format(days=15),
        namespace="eng",
        doc_type="runbook",
        metadata={"team": "platform", "region": "us", "tags": ["travel"]},
    )
    insert_document(
        rolled_back_db,
        "eng/oncall.md",
        "# Oncall\n\nThe oncall engineer claims travel expenses like everyone.",
        namespace="eng",
        doc_type="runbook",
        metadata={"team": "platform", "tags": ["oncall"]},
    )
    return rolled_back_db


def test_namespace_scope(scoped):
    for mode in MODES:
        everywhere = set(sources(retrieve(scoped, "差旅报销 travel expenses", k=5, mode=mode)))
        assert {"hr/expenses.md", "eng/expenses.md"} <= everywhere, mode
        rows = retrieve(scoped, "差旅报销 travel expenses", k=5, namespace="hr", mode=mode)
        assert sources(rows) == ["hr/expenses.md"], mode
        assert {r["namespace"] for r in rows} == {"hr"}, mode
        assert retrieve(scoped, "差旅报销 travel expenses", namespace="no-such-namespace", mode=mode) == [], mode


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"metadata": {"team": "finance"}}, {"hr/expenses.md"}),
        ({"metadata": {"region": "us", "team": "platform"}}, {"eng/expenses.md"}),
        ({"metadata": {"team": "nobody"}}, set()),
        ({"doc_type": "runbook"}, {"eng/expenses.md", "eng/oncall.md"}),
        ({"doc_type": ["policy", "faq"]}, {"hr/expenses.md"}),
        ({"tags": ["money"]}, {"hr/expenses.md"}),
        ({"tags": "oncall"}, {"eng/oncall.md"}),
        ({"source_prefix": "eng/"}, {"eng/expenses.md", "eng/oncall.md"}),
        ({"source_prefix": "%"}, set()),
    ],
)
def test_filters_reach_both_legs(scoped, filters, expected):
    for mode in MODES:
        got = set(sources(retrieve(scoped, "travel expenses claimed", k=10, mode=mode, filters=filters)))
        assert got == expected, mode


def test_filter_applies_before_ranking(rolled_back_db):
    """Forty better-matching documents outside the filter must not crowd out the one inside it."""
    for i in range(40):
        insert_document(
            rolled_back_db,
            f"noise/{i}.md",
            f"# Refund {i}\n\nRefund refund refund policy number {i}.",
            metadata={"team": "noise"},
        )
    insert_document(
        rolled_back_db,
        "target.md",
        "# Shipping\n\nA refund is issued after the parcel returns.",
        metadata={"team": "target"},
    )
    rolled_back_db.execute("SET pgkb.candidates_per_leg = '10'")
    # a rule of ranking, not of the decision: the hash model's probability says nothing, keep every row
    rolled_back_db.execute("SET pgkb.no_evidence_probability = 0")
    for mode in MODES:
        rows = retrieve(rolled_back_db, "refund policy", k=1, mode=mode, filters={"metadata": {"team": "target"}})
        assert sources(rows) == ["target.md"], mode


def test_dense_filter_excluding_most_rows_still_returns_k(rolled_back_db):
    """300 documents, 30 pass the filter: the HNSW scan keeps going (iterative scan) until k rows pass."""
    rolled_back_db.execute(
        """
        INSERT INTO kb.documents (namespace, source, body, metadata)
        SELECT 'default', 'doc-' || i || '.md',
               'Note ' || i || ': the warehouse ' || (i % 17) || ' ships parcel batch ' || (i * 7 % 101) || '.',
               jsonb_build_object('shard', CASE WHEN i % 10 = 0 THEN 'rare' ELSE 'common' END)
        FROM generate_series(1, 300) AS i
        """
    )
    assert rolled_back_db.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"] == 300
    rolled_back_db.execute("SET enable_seqscan = off")
    rolled_back_db.execute("SET pgkb.hnsw_ef_search = '10'")  # a small beam: without iterative scans ~1 row would pass
    query = "warehouse ships parcel batch"
    rows = retrieve(rolled_back_db, query, k=20, mode="dense", filters={"metadata": {"shard": "rare"}})
    assert len(rows) == 20
    assert all(int(s.removeprefix("doc-").removesuffix(".md")) % 10 == 0 for s in sources(rows))
    assert [r["dense_rank"] for r in rows] == list(range(1, 21))

    # the query shape of kb_node.dense_candidates uses the model's partial HNSW index
    vector = rolled_back_db.execute("SELECT kb.embed_query(%s, 'hash-64') AS v", [query]).fetchone()["v"]
    plan = "\n".join(
        r["QUERY PLAN"]
        for r in rolled_back_db.execute(
            """
            EXPLAIN SELECT e.chunk_id FROM kb.embeddings AS e
            INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
            WHERE e.model = 'hash-64'
                AND c.document_id IN (SELECT kb.visible_documents(now(), NULL, '{"metadata": {"shard": "rare"}}'))
            ORDER BY e.embedding::vector(64) <=> %(v)s::vector(64)
            LIMIT 20
            """,
            {"v": vector},
        )
    )
    index = rolled_back_db.execute("SELECT kb.hnsw_index_name('hash-64') AS n").fetchone()["n"]
    assert f"Index Scan using {index}" in plan, plan


# -- identifiers and hostile input ----------------------------------------------------------------


@pytest.fixture
def identifiers(rolled_back_db):
    insert_document(
        rolled_back_db, "errors.md", "# Error codes\n\nE-4031 means the upstream payment gateway timed out."
    )
    insert_document(rolled_back_db, "errors-more.md", "# Error codes\n\nE-40310 and E-4032 mean the card was declined.")
    insert_document(
        rolled_back_db, "rooms.md", "# Rooms\n\nRoom 4031 is the server room; the e-sign desk is next door."
    )
    insert_document(
        rolled_back_db, "contract.md", "# 合同\n\n合同编号 HT-2024-0173 约定付款周期为 30 天，逾期按日计息。"
    )
    insert_document(
        rolled_back_db, "contract-2.md", "# 合同\n\n合同编号 HT-2024-0174 约定付款周期为 60 天。2024 年 173 号文。"
    )
    insert_document(
        rolled_back_db, "config.md", "# Session\n\nThe key session.ttl_seconds sets how long a login session lasts."
    )
    insert_document(
        rolled_back_db, "sessions.md", "# Sessions\n\nA session lasts until logout; ttl and seconds are logged."
    )
    insert_document(
        rolled_back_db, "percent.md", "# Discounts\n\nThe staff discount is 20% on weekdays, a_b testing aside."
    )
    return rolled_back_db


@pytest.mark.parametrize(
    ("query", "source"),
    [
        ("E-4031", "errors.md"),
        ("e-4031", "errors.md"),
        ("E-4031 是什么错误？", "errors.md"),
        ("HT-2024-0173", "contract.md"),
        ("合同 HT-2024-0173 的付款周期是多少天", "contract.md"),
        ("session.ttl_seconds", "config.md"),
        ("how do I change session.ttl_seconds?", "config.md"),
    ],
)
def test_identifier_ranks_first(identifiers, query, source):
    for mode in ("lexical", "hybrid", "auto"):
        rows = retrieve(identifiers, query, k=5, mode=mode)
        assert rows, mode
        assert rows[0]["source"] == source, (mode, sources(rows))
        assert rows[0]["match_type"] == "identifier", mode
        assert [r["source"] for r in rows if r["match_type"] == "identifier"] == [source], mode


def test_identifier_match_is_whole_token(identifiers):
    # E-40310 contains "E-4031" as a substring, but it is another identifier
    rows = retrieve(identifiers, "E-4031", k=5, mode="lexical")
    assert "errors-more.md" not in [r["source"] for r in rows if r["match_type"] == "identifier"]


def test_a_letters_only_identifier_counts_only_where_it_is_rare(rolled_back_db):
    # camelCase names a product as often as an identifier: PostgreSQL in every passage singles out
    # none of them, while a name in one passage of many still does; a digit or connector always counts
    for i in range(8):
        insert_document(rolled_back_db, f"pg{i}.md", f"# Note {i}\n\nPostgreSQL runs topic {i} here.")
    insert_document(rolled_back_db, "jetstream.md", "# Queue\n\nJetStream keeps the billing events.")
    common = explain(rolled_back_db, "PostgreSQL", k=5, mode="lexical")
    assert common["analysis"]["identifiers"] == ["PostgreSQL"] and common["candidates"]["identifier"] == 0
    rare = explain(rolled_back_db, "JetStream", k=5, mode="lexical")
    assert rare["candidates"]["identifier"] == 1
    assert retrieve(rolled_back_db, "JetStream", k=5, mode="lexical")[0]["match_type"] == "identifier"


HOSTILE = [
    "100%",
    "%",
    "%%",
    "_",
    "__",
    "\\",
    "\\%",
    "'",
    "''",
    '"',
    "'; DROP TABLE kb.chunks; --",
    ".*",
    "(x|y)[",
    "^$",
    "[[:alpha:]]",
    "\\d+",
    "&|!",
    ":*",
    "<->",
    "$1",
    "%s",
    "{}",
    "\\u0000",
]  # a lone line separator is blank: tests/test_bad_input.py holds it to the empty-query error


def test_hostile_input_is_literal(identifiers):
    """No error, and in lexical mode nothing matches: none of these share a term with the corpus."""
    for query in HOSTILE:
        for mode in MODES:
            retrieve(identifiers, query, k=10, mode=mode)
        assert retrieve(identifiers, query, k=10, mode="lexical") == [], query
    # identifiers wrapped in metacharacters still match literally, and only their own document
    for query in ("'E-4031'", "%E-4031%", "E-4031.*", "(E-4031)", "[E-4031]"):
        rows = retrieve(identifiers, query, k=10, mode="lexical")
        assert [r["source"] for r in rows if r["match_type"] == "identifier"] == ["errors.md"], query
    assert identifiers.execute("SELECT count(*) AS n FROM kb.chunks").fetchone()["n"] == 8


def test_wildcards_do_not_match_everything(identifiers):
    assert sources(retrieve(identifiers, "100%", mode="lexical")) == []
    assert retrieve(identifiers, "%", mode="lexical") == []
    assert retrieve(identifiers, "_", mode="lexical") == []
    # "E_4031" is not "E-4031": the underscore is literal, so no identifier hit
    assert not [r for r in retrieve(identifiers, "E_4031", mode="lexical") if r["match_type"] == "identifier"]
    # a literal percent sign is found where it really is
    assert identifiers.execute("SELECT kb.escape_like('a%b_c\\d') AS e").fetchone()["e"] == "a\\%b\\_c\\\\d"
    got = identifiers.execute(
        "SELECT chunk_id FROM kb_node.identifier_candidates(ARRAY['20%', 'a_b', 'x%y'], now(), NULL, '{}', 10)"
    ).fetchall()
    assert len(got) == 1


# -- short Chinese, question forms, follow-ups ------------------------------------------------------


@pytest.fixture
def chinese(rolled_back_db):
    insert_document(
        rolled_back_db, "meeting.md", "# 会议规范\n\n会议进行中如果有人需要打断发言，请先举手示意，由主持人安排顺序。"
    )
    insert_document(rolled_back_db, "shop.md", "# 售后服务\n\n我们承诺七天无理由退款，运费由商家承担，款项三日内到账。")
    insert_document(
        rolled_back_db, "gray.md", "# 灰度发布\n\n灰度发布是指先让一小部分用户使用新版本，确认稳定后再逐步扩大范围。"
    )
    insert_document(
        rolled_back_db, "bluegreen.md", "# 蓝绿部署\n\n蓝绿部署准备两套相同的环境，发布时切换流量，出问题可立即回退。"
    )
    insert_document(rolled_back_db, "refund.md", "# 退款期限\n\n退款期限为收货后 14 天，数字商品激活后不支持退款。")
    insert_document(rolled_back_db, "digital.md", "# 数字商品\n\n数字商品包括软件授权和会员卡，购买后立即发放。")
    insert_document(
        rolled_back_db, "session.md", "# Session TTL\n\nThe session TTL is one hour. Change it with the ttl setting."
    )
    insert_document(rolled_back_db, "backup.md", "# Backups\n\nBackups run nightly and are kept for thirty days.")
    return rolled_back_db


@pytest.mark.parametrize(("query", "source"), [("打断", "meeting.md"), ("退款", "shop.md"), ("扩大范围", "gray.md")])
def test_short_chinese_matches_mid_sentence(chinese, query, source):
    rows = retrieve(chinese, query, k=5, mode="lexical")
    assert source in sources(rows)
    # the Chinese passages found hold the query verbatim (its translations may add English ones)
    assert all(query in r["content"] for r in rows if re.search("[\u4e00-\u9fff]", r["content"]))
    if query != "退款":
        assert sources(rows)[0] == source
    assert "«" in rows[0]["snippet"]


@pytest.mark.parametrize(
    "query",
    [
        "灰度发布是什么",
        "什么是灰度发布",
        "灰度发布是什么意思",
        "如何灰度发布",
        "为什么要灰度发布？",
        "请问灰度发布是什么?",
        "什么是灰度发布呢",
    ],
)
def test_question_forms(chinese, query):
    for mode in ("lexical", "auto"):
        rows = retrieve(chinese, query, k=3, mode=mode)
        assert rows and rows[0]["source"] == "gray.md", (mode, sources(rows))
    ex = explain(chinese, query, mode="lexical")
    assert ex["analysis"]["normalized"] in ("灰度发布", "要灰度发布")
    assert ex["analysis"]["stages"][0] == query.strip()
    assert ex["stages"] and ex["stages"][0]["query"] == query.strip()
    assert {"stage", "query", "evidence", "lexical_candidates", "dense_candidates"} <= set(ex["stages"][0])
    assert ex["stage_used"] in ex["analysis"]["stages"]


def test_weak_first_stage_falls_back_to_normalized(chinese):
    # the question framing dilutes the first stage; a later stage carries the evidence
    ex = explain(chinese, "请问一下什么是蓝绿部署呢？", mode="lexical")
    assert len(ex["analysis"]["stages"]) >= 2
    assert ex["results"][0]["source"] == "bluegreen.md"
    # the stage used is the one with the most evidence; the call's evidence is its probability
    best = max(ex["stages"], key=lambda s: s["evidence"])
    assert ex["stage_used"] == best["query"] and best["stage"] > 1
    assert ex["evidence"] == ex["answerability"]["probability"]


@pytest.mark.parametrize(
    ("context", "query", "composed", "source"),
    [
        (["退款期限是几天？"], "它适用于数字商品吗？", "退款期限 适用于数字商品", "refund.md"),
        (["What is the session TTL?"], "How do I change it?", "session TTL How do I change", "session.md"),
        # a question with no answer type: "how long" would ask for a duration gray.md never states
        (["灰度发布是什么？", "它有什么好处？"], "那它有什么风险？", None, "gray.md"),
    ],
)
def test_followups_compose_with_context(chinese, context, query, composed, source):
    first = explain(chinese, query, context=context, mode="lexical")
    again = explain(chinese, query, context=context, mode="lexical")
    assert first["analysis"]["followup"] is True
    assert first["analysis"]["composed"] == again["analysis"]["composed"]
    if composed is not None:
        assert first["analysis"]["composed"] == composed
    assert first["stages"][0]["query"] == first["analysis"]["composed"]
    for mode in ("lexical", "auto"):
        rows = retrieve(chinese, query, k=3, mode=mode, context=context)
        assert rows and rows[0]["source"] == source, (mode, sources(rows))


def test_not_a_followup_ignores_context(chinese):
    ex = explain(chinese, "备份保留多少天？", context=["退款期限是几天？"], mode="lexical")
    assert ex["analysis"]["followup"] is False
    assert ex["analysis"]["composed"] is None
    assert (
        sources(retrieve(chinese, "backups kept how many days", context=["退款期限是几天？"], mode="lexical"))[0]
        == "backup.md"
    )


# -- no evidence, no padding ---------------------------------------------------------------------------


COMPANY_TOPICS = {
    "refund": "customers get a refund within 14 days of delivery if the parcel is unopened",
    "travel": "hotels are booked through the travel desk and capped at 600 CNY per night",
    "security": "screens are locked whenever the desk is left unattended",
    "leave": "annual leave is 15 days per year and is requested two weeks ahead",
    "hours": "the building opens at 8 and closes at 20; badges are required at the door",
    "laptop": "every new hire receives a laptop that the IT desk repairs and replaces",
    "expenses": "receipts are submitted within 30 days after the trip ends",
    "training": "each person may spend 5000 CNY a year on courses and conferences",
    "meetings": "meetings start on time and end with written action items",
    "printing": "colour printing needs approval from a team lead",
    "visitors": "guests sign in at reception and wear a visitor badge",
    "parking": "the garage has 40 spaces assigned by lottery every quarter",
}
ZH_TOPICS = {
    "年假": "年假每年 15 天，需要提前两周申请",
    "差旅": "出差住宿标准为每晚 600 元，凭发票报销",
    "考勤": "上班时间为早上九点，迟到三次扣除绩效",
    "设备": "笔记本电脑损坏需要在系统中报修",
    "培训": "每人每年培训预算为 5000 元",
    "访客": "访客需要在前台登记并佩戴访客证",
}


@pytest.fixture
def company(rolled_back_db):
    """A handbook where company, policy, employee, office, 公司, 员工 and 规定 occur in every document."""
    for topic, fact in COMPANY_TOPICS.items():
        body = f"# {topic.title()} policy\n\nThis company policy applies to all employees in the office: {fact}."
        insert_document(rolled_back_db, f"{topic}.md", body)
    for topic, fact in ZH_TOPICS.items():
        insert_document(rolled_back_db, f"zh-{topic}.md", f"# {topic}规定\n\n本规定适用于公司全体员工：{fact}。")
    return rolled_back_db


# A known defect (docs/STATUS.md): the lexical model refitted with the bilingual dictionary on
# gives these 0.09-0.76 (a word every document shares, and 年会 translated to the meetings policy's
# "meet"), above no_evidence_probability; strict, so that the fix shows.
_LEXICAL_MODEL_DEFECT = pytest.mark.xfail(
    strict=True, reason="lexical mode: shared words are above no_evidence_probability (docs/STATUS.md)"
)


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("What is the company policy on bringing pets to the office?", marks=_LEXICAL_MODEL_DEFECT),
        pytest.param("Can employees bring their bicycles into the office?", marks=_LEXICAL_MODEL_DEFECT),
        pytest.param("公司年会在哪里举办？", marks=_LEXICAL_MODEL_DEFECT),
        pytest.param("员工宠物可以带进公司吗？", marks=_LEXICAL_MODEL_DEFECT),
        "What is quantum entanglement?",
    ],
)
def test_no_evidence_returns_no_rows(company, query):
    assert retrieve(company, query, mode="lexical") == []
    ex = explain(company, query, mode="lexical")
    assert ex["no_evidence"] is True
    assert ex["low_confidence"] is True
    assert ex["returned"] == 0 and ex["results"] == []


def test_a_value_bound_through_words_every_document_shares_is_not_an_answer(company):
    # 几点 asks for a time; the answer check binds 每年 in a passage through 规定 and 员工, which every
    # document holds (docs/STATUS.md): a signal for the answer, but not enough for "answer"
    ex = explain(company, "公司规定员工几点下班？", mode="lexical")
    assert ex["answerability"]["signals"]["answer_bound"]["value"] == 1
    assert ex["answerability"]["decision"] != "answer"


@pytest.mark.parametrize(
    "query",
    [
        "refund within 14 days of delivery",  # strong: answer
        "How often must employees change their laptop password?",  # partial: low confidence
        "年假需要提前多久申请？",
    ],
)
def test_every_row_carries_the_calls_answerability_and_evidence(company, query):
    rows = retrieve(company, query, mode="lexical")
    ex = explain(company, query, mode="lexical")
    assert {(r["answerability"], r["evidence"]) for r in rows} <= {(ex["answerability"]["decision"], ex["evidence"])}
    assert {r["answerability"] for r in rows} <= ({"low confidence"} if ex["low_confidence"] else {"answer"})


def test_rows_returned_with_the_cutoff_off_say_no_evidence(company):
    # a threshold above this weak match's probability, whatever the model in force gives it
    query = "What is the company policy on bringing pets to the office?"
    company.execute("SET pgkb.no_evidence_cutoff = false")
    company.execute("SET pgkb.no_evidence_probability = '0.45'")
    try:
        rows = retrieve(company, query, mode="lexical")
        threshold = company.execute("SELECT kb.setting('no_evidence_probability') #>> '{}' AS t").fetchone()["t"]
    finally:
        company.execute("RESET pgkb.no_evidence_cutoff")
        company.execute("RESET pgkb.no_evidence_probability")
    assert rows, "without the cutoff, the weak matches come back"
    assert {r["answerability"] for r in rows} == {"no evidence"}
    assert all(r["evidence"] < float(threshold) for r in rows)


def test_partial_evidence_is_low_confidence(company):
    # "laptop" is real but "password" is not in the corpus: rows may come, flagged as weak
    ex = explain(company, "How often must employees change their laptop password?", mode="lexical")
    assert ex["low_confidence"] is True
    assert ex["evidence"] < 0.5
    assert [r["source"] for r in ex["results"]][:1] in ([], ["laptop.md"])


@pytest.mark.parametrize(
    ("query", "source"),
    [
        ("How many days of annual leave do employees get?", "leave.md"),
        ("company refund policy after delivery", "refund.md"),
        ("公司员工年假有多少天？", "zh-年假.md"),
        ("出差住宿标准", "zh-差旅.md"),
        ("Which garage spaces does the lottery assign?", "parking.md"),
        # a long SciFact-like claim that shares under half of its words with the answer
        (
            "Unopened parcels sent back by customers within two weeks of delivery qualify for a full refund "
            "of the purchase price minus shipping",
            "refund.md",
        ),
    ],
)
def test_real_evidence_still_answers(company, query, source):
    for mode in ("lexical", "auto"):
        rows = retrieve(company, query, k=3, mode=mode)
        assert rows and rows[0]["source"] == source, (mode, sources(rows))
    assert explain(company, query, mode="lexical")["no_evidence"] is False


# -- explain ----------------------------------------------------------------------------------------


def test_explain_shape(chinese):
    ex = explain(chinese, "灰度发布是什么？", k=3)
    assert {
        "analysis",
        "stages",
        "candidates",
        "timings_ms",
        "low_confidence",
        "model",
        "no_evidence",
        "mode",
        "results",
    } <= set(ex)
    assert set(ex["timings_ms"]) >= {"embed", "lexical", "dense", "fuse", "total"}
    assert all(isinstance(v, (int, float)) and v >= 0 for v in ex["timings_ms"].values())
    assert ex["timings_ms"]["total"] >= ex["timings_ms"]["lexical"]
    assert ex["model"]["name"] == "hash-64" and ex["model"]["dimensions"] == 64 and ex["model"]["ready"] is True
    assert ex["mode"] == "hybrid" and ex["mode_requested"] == "auto"
    assert ex["candidates"]["lexical"] >= 1 and ex["candidates"]["dense"] >= 1
    assert ex["analysis"]["language"] == "zh" and ex["analysis"]["normalized"] == "灰度发布"
    assert isinstance(ex["low_confidence"], bool)
    assert [r["source"] for r in ex["results"]] == sources(retrieve(chinese, "灰度发布是什么？", k=3))


def test_result_columns(chinese):
    rows = retrieve(chinese, "灰度发布", k=2, mode="hybrid")
    required = {
        "rank",
        "chunk_id",
        "document_id",
        "namespace",
        "source",
        "title",
        "section_path",
        "content",
        "snippet",
        "score",
        "dense_rank",
        "lexical_rank",
        "dense_score",
        "lexical_score",
        "match_type",
    }
    assert required <= set(rows[0])
    assert [r["rank"] for r in rows] == [1, 2]
    assert rows[0]["score"] >= rows[1]["score"]
    assert rows[0]["lexical_rank"] == 1 and rows[0]["lexical_score"] > 0
    assert "«灰度»" in rows[0]["snippet"] or "«灰度发布»" in rows[0]["snippet"]


def test_auto_without_vectors_is_lexical(rolled_back_db):
    rolled_back_db.execute("SELECT kb.register_model('hash-32', 'hash', 'hash', 32, '{}', false)")
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    rolled_back_db.execute("UPDATE kb.models SET active = (name = 'hash-32')")
    rolled_back_db.execute("DELETE FROM kb.embeddings WHERE model = 'hash-32'")
    ex = explain(rolled_back_db, "refunds")
    assert ex["mode"] == "lexical" and ex["results"][0]["source"] == "a.md"
    with pytest.raises(psycopg.errors.RaiseException, match="needs vectors"):
        retrieve(rolled_back_db, "refunds", mode="dense")


# -- input validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be between 1 and 1000"),
        ({"k": -3}, "k must be between 1 and 1000"),
        ({"k": 1001}, "k must be between 1 and 1000"),
        ({"mode": "fuzzy"}, 'unknown mode "fuzzy"'),
        ({"filters": Jsonb([1, 2])}, "filters must be a JSON object"),
        ({"filters": Jsonb("doc_type")}, "filters must be a JSON object"),
        ({"filters": {"colour": "red"}}, 'unknown filter key "colour"'),
        ({"filters": {"metadata": "finance"}}, "filters.metadata must be an object"),
        ({"filters": {"include_history": "yes"}}, "filters.include_history must be true or false"),
    ],
)
def test_invalid_arguments_are_named(rolled_back_db, kwargs, message):
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    with pytest.raises(psycopg.errors.RaiseException, match=message), rolled_back_db.transaction():
        retrieve(rolled_back_db, "refunds", **kwargs)


def test_null_as_of_is_named(rolled_back_db):
    # written out: harness.retrieval leaves a None argument to the database's default (now())
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    with pytest.raises(psycopg.errors.RaiseException, match="as_of must not be NULL"), rolled_back_db.transaction():
        rolled_back_db.execute("SELECT * FROM kb_retrieve('refunds', as_of => NULL)")


@pytest.mark.parametrize("query", ["", "   ", "\n\t", None])
def test_empty_query_is_an_error(rolled_back_db, query):
    with pytest.raises(psycopg.errors.RaiseException, match="query is empty"):
        retrieve(rolled_back_db, query)


def test_huge_query_is_truncated_and_noted(rolled_back_db):
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days after delivery.")
    query = "refunds after delivery " + "x" * 100_000 + " 退款" * 1000
    rows = retrieve(rolled_back_db, query, mode="lexical")
    assert sources(rows) == ["a.md"]
    ex = explain(rolled_back_db, query)
    assert any("truncated" in n for n in ex["notes"])
    assert len(ex["query"]) <= 4096
    assert ex["timings_ms"]["total"] < 5000


def test_k_limits_rows(rolled_back_db):
    for i in range(12):
        insert_document(rolled_back_db, f"d{i}.md", f"# Refund {i}\n\nRefund rule number {i} for parcels.")
    for mode in MODES:
        assert len(retrieve(rolled_back_db, "refund rule", k=3, mode=mode)) == 3, mode
        assert len(retrieve(rolled_back_db, "refund rule", k=1000, mode=mode)) == 12, mode


def test_omitted_arguments_take_the_database_defaults(rolled_back_db):
    for i in range(12):
        insert_document(rolled_back_db, f"d{i}.md", f"# Refund {i}\n\nRefund rule number {i} for parcels.")
    rows = retrieve(rolled_back_db, "refund rule")
    assert len(rows) == 8  # kb_retrieve's k DEFAULT 8
    assert rows == retrieve(rolled_back_db, "refund rule", k=8, mode="auto", filters={})
    assert (
        explain(rolled_back_db, "refund rule")["results"]
        == explain(rolled_back_db, "refund rule", k=8, mode="auto", filters={})["results"]
    )


# -- the modes -------------------------------------------------------------------------------------


def test_harness_modes_are_the_vocabulary_modes():
    assert MODES == RETRIEVAL_MODES


def test_harness_modes_are_the_modes_kb_retrieve_accepts(rolled_back_db):
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "refunds", mode=mode)) == ["a.md"], mode
    with pytest.raises(psycopg.errors.RaiseException) as info, rolled_back_db.transaction():
        retrieve(rolled_back_db, "refunds", mode="no-such-mode")
    hint = info.value.diag.message_hint or ""
    assert hint.startswith("modes: ") and tuple(hint.removeprefix("modes: ").split(", ")) == MODES


# -- reader role ------------------------------------------------------------------------------------


def test_plain_reader_role(rolled_back_db):
    insert_document(rolled_back_db, "a.md", "# 退款\n\n退款期限为收货后 14 天。Refunds take 14 days.")
    role = f"pgkb_reader_{uuid.uuid4().hex[:8]}"  # roles are cluster-wide; the rollback removes it
    rolled_back_db.execute(f"CREATE ROLE {role} LOGIN")
    rolled_back_db.execute(f"GRANT USAGE ON SCHEMA kb TO {role}")
    rolled_back_db.execute(
        "GRANT SELECT ON kb.documents, kb.chunks, kb.embeddings, kb.lexical_postings, kb.lexical_stats, "
        f"kb.lexical_terms, kb.models, kb.settings TO {role}"
    )
    rolled_back_db.execute(f"SET ROLE {role}")
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "退款期限", mode=mode)) == ["a.md"], mode
    assert explain(rolled_back_db, "refunds", context=["退款期限是几天？"])["results"]
    for call in (
        "kb.py_query_terms('x')",
        "kb.py_analyze_query('x', NULL)",
        "kb.py_snippets(ARRAY['x'], 'x', 10)",
        "kb.py_embed_query('x', 'hash-64')",
        "kb.embed_queue_batch('hash-64', 1)",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), rolled_back_db.transaction():
            rolled_back_db.execute(f"SELECT {call}")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), rolled_back_db.transaction():
        rolled_back_db.execute("INSERT INTO kb.documents (source, body) VALUES ('x.md', 'x')")


# -- de-duplication ---------------------------------------------------------------------------------


def test_identical_chunks_appear_once(rolled_back_db):
    body = "# 报销\n\n差旅报销需要在出差结束后 30 天内提交发票。"
    insert_document(rolled_back_db, "copy-a.md", body)
    insert_document(rolled_back_db, "copy-b.md", body)
    insert_document(rolled_back_db, "other.md", "# 报销流程\n\n报销发票交给财务部门审核。")
    for mode in MODES:
        rows = retrieve(rolled_back_db, "报销发票", k=5, mode=mode)
        contents = [r["content"] for r in rows]
        assert len(contents) == len(set(contents)), mode
        assert len({"copy-a.md", "copy-b.md"} & set(sources(rows))) == 1, mode
        assert "other.md" in sources(rows), mode
