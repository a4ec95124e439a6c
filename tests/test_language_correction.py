"""The dense leg's language correction (docs/RETRIEVAL.md, sql/032_language_statistics.sql):
chunks know their language group, the database keeps per-model, per-namespace, per-language
statistics of the stored vectors fresh, the dense leg z-scores similarities within each group
(one HNSW scan per group), a one-language corpus ranks exactly as without it, and a tenant's
correction depends only on the namespaces it may see. The cross-lingual rule itself is checked
with the bundled multilingual model (migrated_db): with the correction a Chinese question finds
the English passage that answers it, and the other way round."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers import acting_as, insert_document, temporary_role

from harness.retrieval import explain

SUFFIX = uuid.uuid4().hex[:8]
REPO = Path(__file__).resolve().parent.parent

ENGLISH = [
    "The cafeteria serves lunch from noon until two in the afternoon on weekdays.",
    "Employees must submit travel expense reports within thirty days of the trip.",
    "The parking garage closes at midnight and reopens at six in the morning.",
    "Laptops are replaced every four years by the IT department.",
    "Visitors sign in at the front desk and wear a badge at all times.",
    "The gym in the basement is open to staff and their families on weekends.",
]
CHINESE = [
    "公司年会通常在每年十二月的最后一个星期五举行。",
    "新员工入职第一周需要完成信息安全培训课程。",
    "会议室需要提前一天在内部系统中预订。",
    "办公楼的空调在夏季每天早上八点开启。",
    "员工生日当月可以领取一张购物卡。",
    "图书角的书籍借阅期限为两周，可以续借一次。",
]


def correct_the_hash_provider(conn) -> None:
    """The hash provider's vectors have no language component, so the correction is off for it
    (kb.embedding_providers.language_correction); these tests switch it on to check the rule's
    mechanics fast."""
    conn.execute("UPDATE kb.embedding_providers SET language_correction = true WHERE provider = 'hash'")


def an_english_corpus_corrected(conn) -> None:
    """24 English passages, one language group, with the correction on for the hash provider."""
    correct_the_hash_provider(conn)
    for i, text in enumerate(ENGLISH * 4):
        insert_document(conn, f"en{i}.md", f"{text} Note {i}.")
    conn.execute("SET pgkb.language_min_vectors = 5")


def moments_of(conn, namespace=None) -> list[dict]:
    ex = explain(conn, "deploy checklist", k=5, namespace=namespace, mode="dense")
    return ex["language_correction"]["groups"]


def statistics(conn) -> dict[tuple[str, str], dict]:
    rows = conn.execute("SELECT * FROM kb.language_statistics_status").fetchall()
    return {(r["namespace"], r["language"]): r for r in rows}


def test_ingest_labels_each_chunk_with_the_language_group_of_its_embedded_text(fresh_db):
    insert_document(fresh_db, "en.md", "# Refunds\n\nRefunds are accepted within fourteen days.")
    insert_document(fresh_db, "zh.md", "# 退款\n\n客户自签收之日起十四天内可以申请退款。")
    rows = fresh_db.execute(
        "SELECT d.source, c.language FROM kb.chunks AS c JOIN kb.documents AS d ON d.id = c.document_id"
    ).fetchall()
    assert {(r["source"], r["language"]) for r in rows} == {("en.md", "en"), ("zh.md", "zh")}


def test_statistics_follow_the_vectors_per_namespace_and_language(fresh_db):
    for i, text in enumerate(ENGLISH):
        insert_document(fresh_db, f"en{i}.md", text, namespace="a")
    for i, text in enumerate(CHINESE):
        insert_document(fresh_db, f"zh{i}.md", text, namespace="b")
    stats = statistics(fresh_db)
    assert set(stats) == {("a", "en"), ("b", "zh")}
    assert stats[("a", "en")]["vectors_now"] == len(ENGLISH) and stats[("a", "en")]["drift"] == 0
    # deleting a namespace's vectors drops its group
    fresh_db.execute("DELETE FROM kb.documents WHERE namespace = 'b'")
    assert set(statistics(fresh_db)) == {("a", "en")}


def test_recount_classifies_chunks_stored_without_a_language(fresh_db):
    insert_document(fresh_db, "zh.md", CHINESE[0])
    fresh_db.execute("UPDATE kb.chunks SET language = NULL")
    fresh_db.execute("DELETE FROM kb.language_statistics")
    fresh_db.execute("SELECT kb.refresh_language_statistics()")
    assert fresh_db.execute("SELECT language FROM kb.chunks").fetchone()["language"] == "zh"
    assert set(statistics(fresh_db)) == {("default", "zh")}


def test_one_language_corpus_ranks_exactly_as_raw_similarity(fresh_db):
    an_english_corpus_corrected(fresh_db)
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")  # the order is the rule here, not answerability
    fresh_db.execute("SET pgkb.freshness_margin = 0")  # nor the newer-of-near-equals preference
    query = "when can I eat lunch"
    on = fresh_db.execute("SELECT chunk_id FROM kb_retrieve(%s, 10, NULL, 'dense')", (query,)).fetchall()
    ex = explain(fresh_db, query, k=10, mode="dense")
    assert ex["language_correction"]["applied"] is True
    fresh_db.execute("SET pgkb.language_correction = false")
    off = fresh_db.execute("SELECT chunk_id FROM kb_retrieve(%s, 10, NULL, 'dense')", (query,)).fetchall()
    assert [r["chunk_id"] for r in on] == [r["chunk_id"] for r in off]
    assert explain(fresh_db, query, k=10, mode="dense")["language_correction"]["applied"] is False


def test_one_language_corpus_fuses_exactly_as_without_the_correction(fresh_db):
    an_english_corpus_corrected(fresh_db)
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")
    fresh_db.execute("SET pgkb.freshness_margin = 0")
    query = "visitors wear a badge at the front desk on weekends"
    sql = "SELECT chunk_id, round(score::numeric, 9) AS score FROM kb_retrieve(%s, 10, NULL, 'hybrid')"
    on = fresh_db.execute(sql, (query,)).fetchall()
    ex = explain(fresh_db, query, k=10, mode="hybrid")
    assert ex["language_correction"]["applied"] is True
    assert ex["fusion"]["weighs_hits_by_evidence"] is False
    assert "evidence" not in ex["fusion"]["rule"]
    fresh_db.execute("SET pgkb.language_correction = false")
    off = fresh_db.execute(sql, (query,)).fetchall()
    assert on == off, "no per-hit evidence weighting without a second language in the scope"
    fresh_db.execute("RESET pgkb.language_correction")
    for i, text in enumerate(CHINESE * 2):
        insert_document(fresh_db, f"zh{i}.md", f"{text} 备注 {i}。")
    ex = explain(fresh_db, query, k=10, mode="hybrid")
    assert ex["fusion"]["weighs_hits_by_evidence"] is True, "a scope of both languages"
    assert "own evidence" in ex["fusion"]["rule"]


def test_the_raw_cosine_is_a_signal_of_its_own_beside_the_z_score(fresh_db):
    an_english_corpus_corrected(fresh_db)
    # no hit stands above the noise level by the z-score; the raw cosine still says what it sees
    fresh_db.execute("SET pgkb.min_dense_z = 9")
    fresh_db.execute("SET pgkb.strong_dense_z = 10")
    query = "cafeteria lunch"

    def signals() -> dict:
        a = explain(fresh_db, query, k=5, mode="dense")["answerability"]
        return {k: v["value"] for k, v in a["signals"].items()}

    fresh_db.execute(
        "UPDATE kb.embedding_providers SET min_similarity = -1, strong_similarity = 1 WHERE provider = 'hash'"
    )
    wide = signals()
    fresh_db.execute(
        "UPDATE kb.embedding_providers SET min_similarity = 0.999, strong_similarity = 1 WHERE provider = 'hash'"
    )
    narrow = signals()
    assert wide["dense_z"] == narrow["dense_z"], "the z-score does not read the provider's similarity thresholds"
    assert wide["dense_cosine"] > 0 > narrow["dense_cosine"]


def test_too_few_vectors_means_no_correction_and_the_similarity_thresholds(fresh_db):
    correct_the_hash_provider(fresh_db)
    insert_document(fresh_db, "en.md", ENGLISH[0])
    ex = explain(fresh_db, "lunch", k=3, mode="dense")
    assert ex["language_correction"]["applied"] is False and ex["language_correction"]["groups"] == []
    # without moments the dense z is the raw cosine mapped through the provider's thresholds
    a = ex["answerability"]["signals"]
    provider = fresh_db.execute("SELECT * FROM kb.embedding_providers WHERE provider = 'hash'").fetchone()
    cosine = a["dense_cosine"]["value"]
    assert cosine == pytest.approx(
        (ex["stages"][0]["dense_top_similarity"] - provider["min_similarity"])
        / (provider["strong_similarity"] - provider["min_similarity"]),
        abs=1e-3,
    )
    assert a["dense_z"]["value"] == pytest.approx(-0.8 + cosine * 2.8, abs=1e-3)


def test_explain_shows_each_groups_offset_and_scale_and_the_z_score(fresh_db):
    correct_the_hash_provider(fresh_db)
    for i, text in enumerate(ENGLISH + CHINESE):
        insert_document(fresh_db, f"d{i}.md", text)
    fresh_db.execute("SET pgkb.language_min_vectors = 3")
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")
    ex = explain(fresh_db, "parking hours", k=3, mode="dense")
    groups = {g["language"]: g for g in ex["language_correction"]["groups"]}
    assert set(groups) == {"en", "zh"}
    assert all(g["scale"] > 0 and g["vectors"] == 6 for g in groups.values())
    top = ex["results"][0]
    stage = ex["stages"][0]
    assert stage["dense_evidence_z"] == pytest.approx(top["dense_score"], abs=1e-5)


def test_a_tenants_correction_depends_only_on_the_namespaces_it_may_see(fresh_db):
    correct_the_hash_provider(fresh_db)
    for i, text in enumerate(ENGLISH + CHINESE):
        insert_document(fresh_db, f"acme{i}.md", text, namespace="acme")
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    fresh_db.execute("SET pgkb.language_min_vectors = 3")
    reader = f"acme_reader_{SUFFIX}"
    with ExitStack() as stack:
        stack.enter_context(temporary_role(fresh_db, reader, "NOLOGIN IN ROLE pgkb_reader"))
        fresh_db.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (reader,))
        with acting_as(fresh_db, reader):
            before = moments_of(fresh_db)
            seen = fresh_db.execute("SELECT DISTINCT namespace FROM kb.language_statistics").fetchall()
        # another tenant's corpus in both languages changes nothing the reader can observe
        for i, text in enumerate(CHINESE * 3 + ENGLISH):
            insert_document(fresh_db, f"globex{i}.md", f"{text} 机密 {i}", namespace="globex")
        assert ("globex", "zh") in statistics(fresh_db)
        with acting_as(fresh_db, reader):
            after = moments_of(fresh_db)
            assert fresh_db.execute("SELECT count(*) AS n FROM kb.language_statistics_status").fetchone()["n"] == 2
    assert [r["namespace"] for r in seen] == ["acme"]
    assert before == after


def test_readers_cannot_recount_the_statistics(fresh_db):
    reader = f"plain_reader_{SUFFIX}"
    with temporary_role(fresh_db, reader, "NOLOGIN IN ROLE pgkb_reader"):
        with acting_as(fresh_db, reader):
            with pytest.raises(Exception, match="permission denied"):
                fresh_db.execute("SELECT kb.recount_language_statistics()")


CROSS_EN = [
    ("refund", "Customers may request a refund within fourteen days after the goods are delivered."),
    ("oncall", "The on-call engineer must acknowledge a production alert within fifteen minutes."),
    ("password", "Passwords must be rotated every ninety days and may not reuse the last five."),
    ("leave", "Annual leave requests must be approved by the manager two weeks in advance."),
    ("backup", "Database backups run every night at two o'clock and are kept for thirty days."),
]
CROSS_ZH = [
    ("printer", "打印机墨盒用完后请联系行政部门更换。"),
    ("wifi", "访客无线网络的密码每周一更新一次。"),
    ("fire", "消防演习每个季度举行一次，所有员工都必须参加。"),
    ("parcel", "快递包裹统一存放在一楼收发室，凭工号领取。"),
    ("plants", "办公室的绿植由保洁公司每周浇水两次。"),
]


CROSS_QUESTIONS = [
    ("多少天内可以申请退款？", "refund"),
    ("值班工程师需要在多长时间内确认告警？", "oncall"),
    ("数据库备份保留多久？", "backup"),
    ("年假需要提前多久申请？", "leave"),
    ("How often is the fire drill held?", "fire"),
    ("Where can I pick up my parcels?", "parcel"),
]


def test_a_group_of_another_language_is_searched_without_the_questions_language_mean(fresh_db):
    correct_the_hash_provider(fresh_db)
    for i, text in enumerate(ENGLISH + CHINESE):
        insert_document(fresh_db, f"d{i}.md", text)
    fresh_db.execute("SET pgkb.language_min_vectors = 3")
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")
    for question, own in (("parking hours", "en"), ("停车场几点关门", "zh")):
        ex = explain(fresh_db, question, k=12, mode="dense")
        centred = {g["language"]: g["query_centred"] for g in ex["language_correction"]["groups"]}
        assert centred == {"en": own != "en", "zh": own != "zh"}, question
        # every hit's score is its similarity z-scored for the vector its group was searched with
        moments = {
            m["language"]: m
            for m in fresh_db.execute(
                "SELECT (m).* FROM unnest(kb.language_moments('hash-64', kb.embed_query(%s, 'hash-64'), NULL, 3, %s))"
                " AS m",
                (question, question),
            ).fetchall()
        }
        other = "zh" if own == "en" else "en"
        row = fresh_db.execute(
            """SELECT 1 - (e.embedding <=> %s::vector) AS similarity FROM kb.embeddings AS e
               INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
               WHERE e.model = 'hash-64' AND c.language = %s ORDER BY e.embedding <=> %s::vector LIMIT 1""",
            (moments[other]["query_vector"], other, moments[other]["query_vector"]),
        ).fetchone()
        best_other = max(r["dense_score"] for r in ex["results"] if r["source"] in other_sources(fresh_db, other))
        m = moments[other]
        expected = (row["similarity"] - m["offset"]) / m["scale"]
        assert best_other == pytest.approx(expected, abs=1e-3), question


def test_dense_mode_ranks_both_languages_by_the_corrected_score_alone(fresh_db):
    # the other-language rule of fusion is about the lexical leg's silence: without that leg
    # (dense mode) no language is preferred
    correct_the_hash_provider(fresh_db)
    for i, text in enumerate(ENGLISH + CHINESE):
        insert_document(fresh_db, f"d{i}.md", text)
    fresh_db.execute("SET pgkb.language_min_vectors = 3")
    fresh_db.execute("SET pgkb.no_evidence_cutoff = false")
    ex = explain(fresh_db, "parking hours", k=12, mode="dense")
    assert ex["stages"][0]["dense_other_language"] == 0
    scores = [r["dense_score"] for r in ex["results"]]
    assert scores == sorted(scores, reverse=True)


def other_sources(conn, language: str) -> set[str]:
    rows = conn.execute(
        "SELECT DISTINCT d.source FROM kb.chunks AS c JOIN kb.documents AS d ON d.id = c.document_id"
        " WHERE c.language = %s",
        (language,),
    ).fetchall()
    return {r["source"] for r in rows}


def test_a_question_in_one_language_finds_the_answer_written_in_the_other(migrated_db):
    for name, text in CROSS_EN + CROSS_ZH:
        insert_document(migrated_db, f"{name}.md", text)
    for i, text in enumerate(ENGLISH + CHINESE):  # distractors in both languages
        insert_document(migrated_db, f"other{i}.md", text)
    migrated_db.execute("SET pgkb.language_min_vectors = 5")  # 11 passages per language here
    migrated_db.execute("SET pgkb.no_evidence_cutoff = false")  # ranks are the rule here

    def rank(question: str, expected: str) -> int:
        rows = migrated_db.execute("SELECT source FROM kb_retrieve(%s, 22, NULL, 'dense')", (question,)).fetchall()
        return [r["source"] for r in rows].index(f"{expected}.md") + 1

    corrected = [rank(q, e) for q, e in CROSS_QUESTIONS]
    migrated_db.execute("SET pgkb.language_correction = false")
    raw = [rank(q, e) for q, e in CROSS_QUESTIONS]
    assert all(r <= 2 for r in corrected), corrected
    # without it, a Chinese question ranks the Chinese passages above the English answer
    assert sum(raw[:4]) / 4 > 5, raw


ENGLISH_DOCUMENTS = [
    "policies/remote-work-policy-2025.md",
    "support/support-oncall.md",
    "support/escalation-runbook.md",
    "engineering/adr-0007-postgres-job-queue.md",
    "engineering/adr-0012-nats-jetstream-queue.md",
    "engineering/runbook-postgres-failover.md",
]


def test_a_small_group_of_one_document_is_not_scored_against_itself(migrated_db):
    # a Chinese travel policy of a few passages beside English documents (and a short English
    # job ad): every passage of the small Chinese group is on the topic of a question about it,
    # so z-scored against its own mean alone the answer stood below chance English passages
    policy = (REPO / "examples/corpus/policies/travel-expense-policy.md").read_text(encoding="utf-8")
    insert_document(migrated_db, "travel.md", policy.split("---", 2)[2], title="差旅费用管理办法")
    for name in ENGLISH_DOCUMENTS:  # about other things: none answers
        text = (REPO / "examples/corpus" / name).read_text(encoding="utf-8")
        insert_document(migrated_db, name, text.split("---", 2)[2])
    insert_document(migrated_db, "barista.md", "We are hiring a part-time barista for the weekend shift.")
    migrated_db.execute("SET pgkb.no_evidence_cutoff = false")  # ranks are the rule here
    groups = {
        g["language"]: g for g in explain(migrated_db, "出差报销", k=5, mode="dense")["language_correction"]["groups"]
    }
    assert groups["zh"]["pooled"] and groups["zh"]["vectors"] < 30 <= groups["en"]["vectors"]

    def first(question: str) -> str:
        return migrated_db.execute("SELECT snippet FROM kb_retrieve(%s, 3, NULL, 'dense')", (question,)).fetchone()[
            "snippet"
        ]

    assert "30 个自然日" in first("出差回来后多少天内必须提交报销单？")
    assert "30 个自然日" in first("出差的费用怎么报销？")


def test_the_sql_language_groups_are_those_the_python_rule_gives(module_db):
    from pgkb_plpy.query_analysis import passage_language

    groups = module_db.execute("SELECT kb.passage_languages() AS g").fetchone()["g"]
    assert sorted({passage_language(s) for s in (None, 0.0, 0.49, 0.5, 1.0)}) == groups


def test_each_language_group_has_its_own_partial_hnsw_index(module_db):
    rows = module_db.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'kb' AND tablename = 'embeddings'"
    ).fetchall()
    for language in ("en", "other", "zh"):
        name = module_db.execute("SELECT kb.hnsw_language_index_name('hash-64', %s) AS n", (language,)).fetchone()["n"]
        (definition,) = [r["indexdef"] for r in rows if r["indexname"] == name]
        assert "USING hnsw" in definition and f"language = '{language}'" in definition


def test_a_provider_without_a_language_component_is_not_corrected(fresh_db):
    for i, text in enumerate(ENGLISH * 6):
        insert_document(fresh_db, f"en{i}.md", f"{text} Note {i}.")
    ex = explain(fresh_db, "lunch", k=3, mode="dense")
    assert ex["language_correction"]["enabled"] is False and ex["language_correction"]["applied"] is False


def test_a_role_that_may_not_read_the_statistics_gets_uncorrected_results(fresh_db):
    correct_the_hash_provider(fresh_db)
    for i, text in enumerate(ENGLISH * 6):
        insert_document(fresh_db, f"en{i}.md", f"{text} Note {i}.")
    plain = f"plain_{SUFFIX}"
    with temporary_role(fresh_db, plain):
        fresh_db.execute(f"GRANT USAGE ON SCHEMA kb TO {plain}")
        fresh_db.execute(f"GRANT SELECT ON kb.documents, kb.chunks, kb.embeddings TO {plain}")
        with acting_as(fresh_db, plain):
            moments = fresh_db.execute(
                "SELECT cardinality(kb.language_moments("
                "'hash-64', kb.embed_query('lunch', 'hash-64'), NULL, 5, 'lunch')) AS n"
            ).fetchone()["n"]
    assert moments == 0
