"""BM25 corpus statistics per namespace (docs/RETRIEVAL.md, docs/RELIABILITY.md): with tenant
isolation on, a reader's N, average length and document frequencies are sums over the namespaces
it may see, so no word, count or score of another tenant reaches it. Both tenants are large
enough (over 1,000 chunks each, short bodies, the hash model) that their terms are counted into
kb.lexical_terms rather than from the postings at query time."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import pytest
from helpers import acting_as, count_rows, insert_document, temporary_role

from harness.retrieval import explain, retrieve

SUFFIX = uuid.uuid4().hex[:8]
B_WORD = "glxquasarsecret"
NOWHERE_WORD = "zqvnowherefound"
CHUNKS_PER_TENANT = 1050
ROLES = {"acme_reader": ("pgkb_reader", "acme"), "globex_reader": ("pgkb_reader", "globex")}
LEG = "SELECT chunk_id, score, coverage FROM kb_node.lexical_candidates(%s::text[], now(), %s::text[], '{}'::jsonb, 20)"


def role(name: str) -> str:
    return f"{name}_{SUFFIX}"


def bulk_insert(conn, namespace: str, text: str, count: int, prefix: str = "note") -> None:
    """`count` one-chunk documents in one statement (the ingest trigger runs per statement)."""
    conn.execute(
        "INSERT INTO kb.documents (namespace, source, body) "
        "SELECT %s, %s || i || '.md', '# Note ' || i || E'\\n\\n' || %s || ' ' || i || '.' "
        "FROM generate_series(1, %s) AS i",
        (namespace, f"{namespace}/{prefix}-", text, count),
    )


@pytest.fixture
def two_large_tenants(fresh_db):
    bulk_insert(fresh_db, "acme", "Acme deploy checklist for the release of build", CHUNKS_PER_TENANT)
    bulk_insert(fresh_db, "globex", "Globex deploy runbook for the rollout of build", CHUNKS_PER_TENANT)
    insert_document(fresh_db, "globex/secret.md", f"# Plan\n\nThe {B_WORD} acquisition deploy.", namespace="globex")
    fresh_db.execute("SELECT kb.refresh_lexical_stats()")
    fresh_db.execute("SELECT kb.refresh_term_stats()")  # every chunk counted, the last document's too
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with ExitStack() as stack:
        for name, (group, namespace) in ROLES.items():
            stack.enter_context(temporary_role(fresh_db, role(name), f"NOLOGIN IN ROLE {group}"))
            fresh_db.execute(
                "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role(name), namespace)
            )
        yield fresh_db


def stats_of(conn) -> dict[str, dict]:
    rows = conn.execute("SELECT namespace, chunk_count, terms_chunk_count, terms_max_chunk_id FROM kb.lexical_stats")
    return {r["namespace"]: r for r in rows.fetchall()}


def leg(conn, query: str, namespaces: list[str] | None = None) -> list[tuple]:
    terms = conn.execute("SELECT kb.query_terms(%s) AS t", [query]).fetchone()["t"]
    rows = conn.execute(LEG, [terms, namespaces]).fetchall()
    return [(r["chunk_id"], round(r["score"], 9), round(r["coverage"], 9)) for r in rows]


def test_each_large_namespace_has_its_own_term_counts(two_large_tenants):
    stats = stats_of(two_large_tenants)
    assert stats["acme"]["terms_chunk_count"] == CHUNKS_PER_TENANT
    assert stats["globex"]["terms_chunk_count"] == CHUNKS_PER_TENANT + 1
    assert count_rows(two_large_tenants, "kb.lexical_terms WHERE term = %s", B_WORD) == 1
    assert count_rows(two_large_tenants, "kb.lexical_terms WHERE term = 'deploy'") == 2


def test_a_reader_cannot_learn_a_word_only_another_tenants_documents_contain(two_large_tenants):
    conn = two_large_tenants
    with acting_as(conn, role("acme_reader")):
        assert count_rows(conn, "kb.lexical_terms WHERE term = %s", B_WORD) == 0
        assert count_rows(conn, "kb.lexical_terms WHERE namespace <> 'acme'") == 0
        assert set(stats_of(conn)) == {"acme"}
        answers = []
        for word in (B_WORD, NOWHERE_WORD):
            answer = explain(conn, f"acme deploy {word}", k=5, mode="lexical")
            answers.append(
                {
                    "stages": [{k: v for k, v in s.items() if k != "query"} for s in answer["stages"]],
                    "results": [(r["source"], r["score"]) for r in answer["results"]],
                }
            )
        assert answers[0]["stages"][0]["lexical_top_coverage"] is not None
        assert answers[0] == answers[1]
    with acting_as(conn, role("globex_reader")):
        assert count_rows(conn, "kb.lexical_terms WHERE term = %s", B_WORD) == 1


def test_a_reader_scores_with_the_statistics_of_the_namespaces_it_may_see(two_large_tenants):
    conn = two_large_tenants
    query = "deploy checklist build"

    def lexical_scores(**kwargs) -> list[tuple]:
        rows = retrieve(conn, query, k=20, mode="lexical", **kwargs)
        return [(r["chunk_id"], round(r["lexical_score"], 6)) for r in rows]

    with acting_as(conn, role("acme_reader")):
        as_reader = lexical_scores()
    assert as_reader == lexical_scores(namespace="acme")
    assert [(c, round(s, 6)) for c, s, _ in leg(conn, query, ["acme"])][: len(as_reader)] == as_reader
    assert leg(conn, query, ["acme"]) != leg(conn, query)  # every namespace: N and df count both tenants


def test_a_namespace_is_recounted_when_it_changed_by_a_tenth_and_the_others_are_not(two_large_tenants):
    conn = two_large_tenants
    before = stats_of(conn)
    bulk_insert(conn, "globex", "Globex more deploy notes", CHUNKS_PER_TENANT // 5, prefix="more")
    conn.execute("SELECT kb.refresh_lexical_stats()")
    after = stats_of(conn)
    assert after["acme"] == before["acme"]
    assert after["globex"]["terms_chunk_count"] == CHUNKS_PER_TENANT + 1 + CHUNKS_PER_TENANT // 5
    assert after["globex"]["terms_max_chunk_id"] > before["globex"]["terms_max_chunk_id"]


def test_a_small_namespace_next_to_large_ones_has_its_terms_counted(two_large_tenants):
    conn = two_large_tenants
    for i in range(3):
        insert_document(conn, f"c/{i}.md", f"# Small {i}\n\nInitech deploy notes {i}.", namespace="initech")
    conn.execute("SELECT kb.refresh_lexical_stats()")
    small = stats_of(conn)["initech"]
    assert small["terms_chunk_count"] == small["chunk_count"] == 3
    assert count_rows(conn, "kb.lexical_terms WHERE namespace = 'initech' AND term = 'initech'") == 1


def test_refreshing_returns_only_the_statistics_of_the_callers_namespaces(two_large_tenants):
    conn = two_large_tenants
    writer = f"acme_writer_{SUFFIX}"
    with temporary_role(conn, writer, "NOLOGIN IN ROLE pgkb_writer"):
        conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (writer,))
        with acting_as(conn, writer):
            refreshed = conn.execute("SELECT (kb.refresh_lexical_stats()).namespace").fetchall()
            terms = conn.execute("SELECT kb.refresh_term_stats() AS n").fetchone()["n"]
        assert [r["namespace"] for r in refreshed] == ["acme"]
        assert terms == count_rows(conn, "kb.lexical_terms WHERE namespace = 'acme'")
