"""Corpus statistics count what a question asked now can see (docs/RETRIEVAL.md, "Statistics over
current versions"): the shared documents current today. Drafts, superseded, expired and future
versions, and private documents, are left out of BM25's N, average length and document
frequencies and of the dense leg's language moments, so a chain of versions alone in a namespace
scores like its one current version."""

from __future__ import annotations

import pytest
from helpers import insert_document

from harness.retrieval import retrieve

POLICY = (
    "# Refund policy\n\n## Refund window\n\nCustomers may request a refund within {n} days of delivery.\n\n"
    "## Travel\n\nMeals on business trips are reimbursed up to {n} euros per day."
)


def store_chain(conn, namespace: str, versions: int) -> None:
    """`versions` versions of one policy, each superseding the one before, each in force."""
    for v in range(1, versions + 1):
        insert_document(
            conn,
            f"policy-v{v}.md",
            POLICY.format(n=10 + v),
            namespace=namespace,
            supersedes=f"policy-v{v - 1}.md" if v > 1 else None,
            effective_from="2020-01-01",
        )


def counted(conn, namespace: str) -> dict:
    return conn.execute(
        """SELECT s.chunk_count,
                  (kb_node.lexical_corpus(ARRAY['refund'], ARRAY[%(ns)s]) -> 'df' ->> 'refund')::int AS df,
                  (SELECT count(*) FROM kb.chunks AS c JOIN kb.documents AS d ON d.id = c.document_id
                   WHERE d.namespace = %(ns)s AND d.source = (
                       SELECT max(d2.source COLLATE "C") FROM kb.documents AS d2 WHERE d2.namespace = %(ns)s
                         AND NOT EXISTS (SELECT 1 FROM kb.documents AS n WHERE n.supersedes = d2.source
                                         AND n.namespace = %(ns)s))) AS current_chunks
           FROM kb.lexical_stats AS s WHERE s.namespace = %(ns)s""",
        {"ns": namespace},
    ).fetchone()


def counted_ids(conn, namespace: str) -> set[int]:
    rows = conn.execute("SELECT document_id FROM kb.statistics_documents WHERE namespace = %s", (namespace,))
    return {r["document_id"] for r in rows.fetchall()}


def test_only_the_current_version_of_a_chain_is_counted(rolled_back_db):
    store_chain(rolled_back_db, "chain10", 10)
    stats = counted(rolled_back_db, "chain10")
    assert stats["chunk_count"] == stats["current_chunks"] > 0
    # "refund" is in every chunk of every version (the title is in each section path): 20 if all counted
    assert stats["df"] == stats["current_chunks"]


def test_drafts_and_future_versions_are_not_counted_until_they_take_effect(rolled_back_db):
    insert_document(rolled_back_db, "now.md", "# Now\n\nRefund within 14 days.", namespace="sched")
    draft = insert_document(
        rolled_back_db, "draft.md", "# Draft\n\nRefund within 30 days.", namespace="sched", status="draft"
    )
    future = insert_document(
        rolled_back_db,
        "future.md",
        "# Future\n\nRefund within 60 days.",
        namespace="sched",
        effective_from="2999-01-01",
    )
    ids = counted_ids(rolled_back_db, "sched")
    assert draft not in ids and future not in ids and len(ids) == 1
    # the future version's first day is when the counted set next changes, in the calendar's zone
    schedule = rolled_back_db.execute(
        """SELECT next_change = ('2999-01-01'::timestamp AT TIME ZONE (kb.setting('calendar_time_zone') #>> '{}'))
           AS at_its_first_day FROM kb.statistics_schedule"""
    ).fetchone()
    assert schedule["at_its_first_day"]
    # publishing the draft is a write: counted at once
    rolled_back_db.execute("UPDATE kb.documents SET status = 'active' WHERE id = %s", (draft,))
    assert draft in counted_ids(rolled_back_db, "sched")


def test_a_document_leaving_force_by_its_date_alone_leaves_the_statistics_at_the_next_call(rolled_back_db):
    doc = insert_document(rolled_back_db, "ends.md", "# Ends\n\nRefund within 7 days.", namespace="sched")
    # The calendar moving past an end date writes nothing; with the trigger that follows writes
    # switched off, setting the end date in the past stands for that day having come.
    rolled_back_db.execute("ALTER TABLE kb.documents DISABLE TRIGGER documents_lifecycle")
    rolled_back_db.execute("UPDATE kb.documents SET effective_to = '2001-01-01' WHERE id = %s", (doc,))
    rolled_back_db.execute("ALTER TABLE kb.documents ENABLE TRIGGER documents_lifecycle")
    rolled_back_db.execute("UPDATE kb.statistics_schedule SET next_change = NULL")
    rolled_back_db.execute("SELECT kb.refresh_statistics_if_due()")  # nothing due: nothing recounted
    assert doc in counted_ids(rolled_back_db, "sched")
    rolled_back_db.execute("UPDATE kb.statistics_schedule SET next_change = now() - interval '1 second'")
    rolled_back_db.execute("SELECT kb.refresh_statistics_if_due()")
    assert doc not in counted_ids(rolled_back_db, "sched")
    stats = rolled_back_db.execute("SELECT chunk_count FROM kb.lexical_stats WHERE namespace = 'sched'").fetchone()
    assert stats["chunk_count"] == 0


def test_a_shared_version_replaced_by_a_private_one_still_counts_and_the_private_one_does_not(rolled_back_db):
    shared = insert_document(rolled_back_db, "plan-v1.md", "# Plan\n\nRefund within 7 days.", namespace="priv")
    private = insert_document(
        rolled_back_db,
        "plan-v2.md",
        "# Plan\n\nRefund within 9 days.",
        namespace="priv",
        supersedes="plan-v1.md",
        readers=["postgres"],
    )
    ids = counted_ids(rolled_back_db, "priv")
    # a role that may not read v2 still reads v1 as current: the statistics describe what everyone sees
    assert ids == {shared} and private not in ids


def test_language_moments_count_the_current_version_only(rolled_back_db):
    store_chain(rolled_back_db, "chainlang", 40)
    rolled_back_db.execute("SELECT kb.recount_language_statistics(NULL)")
    vectors = rolled_back_db.execute(
        "SELECT coalesce(sum(vectors), 0) AS n FROM kb.language_statistics WHERE namespace = 'chainlang'"
    ).fetchone()["n"]
    current = counted(rolled_back_db, "chainlang")["current_chunks"]
    assert 0 < vectors == current


@pytest.mark.parametrize("versions", [1, 10, 100])
def test_a_version_chain_alone_in_a_namespace_finds_its_current_version_in_every_mode(rolled_back_db, versions):
    namespace = f"alone{versions}"
    store_chain(rolled_back_db, namespace, versions)
    question = "How many days do customers have to request a refund?"
    found = {
        mode: [r["source"] for r in retrieve(rolled_back_db, question, k=3, namespace=namespace, mode=mode)][:1]
        for mode in ("lexical", "dense", "hybrid")
    }
    assert found == {mode: [f"policy-v{versions}.md"] for mode in found}


def test_a_document_moved_to_another_namespace_counts_there_only(rolled_back_db):
    doc = insert_document(rolled_back_db, "moving.md", "# Moving\n\nRefund within 5 days.", namespace="from-ns")
    rolled_back_db.execute("UPDATE kb.documents SET namespace = 'to-ns' WHERE id = %s", (doc,))
    assert doc not in counted_ids(rolled_back_db, "from-ns") and doc in counted_ids(rolled_back_db, "to-ns")
