"""The LangChain and LlamaIndex retrievers (harness/frameworks) against a real database: each returns
exactly kb_retrieve's rows for the same arguments, as the framework's own type, with the row's columns
in metadata; "no evidence" is an empty list and a decision the caller can read; sync and async agree;
and they run as the role of their connection, under row-level security."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from helpers import insert_document, insert_refund_corpus, temporary_role

from harness.retrieval import retrieve

langchain_core = pytest.importorskip("langchain_core")
llama_index = pytest.importorskip("llama_index.core")
from langchain_core.documents import Document  # noqa: E402
from llama_index.core.schema import NodeRelationship, NodeWithScore, TextNode  # noqa: E402

from harness.frameworks.langchain import PgkbRetriever as LangChainRetriever  # noqa: E402
from harness.frameworks.llamaindex import PgkbRetriever as LlamaIndexRetriever  # noqa: E402

# every argument kb_retrieve takes, with values that change what it returns
ARGUMENT_CASES = {
    "defaults": ("refunds", {}),
    "k": ("refunds", {"k": 1}),
    "namespace": ("refunds", {"namespace": "internal"}),
    "mode": ("refund deadline", {"mode": "lexical"}),
    "filters": ("refunds", {"filters": {"doc_type": "decision"}}),
    "as_of": ("refund deadline days", {"as_of": "2023-06-01", "namespace": "public"}),
    "context": ("how many days?", {"context": ["What is the refund deadline?"], "mode": "lexical"}),
    "max_per_document": ("refund rule", {"max_per_document": 1, "mode": "lexical", "k": 3}),
    "merge_adjacent": ("refund rule", {"merge_adjacent": True, "max_per_document": 5, "mode": "lexical"}),
}


@pytest.fixture
def corpus(fresh_db):
    insert_refund_corpus(fresh_db)
    guide = "# Guide\n\n" + "\n\n".join(f"## Part {i}\n\nRefund rule {i} of the refund desk." for i in range(4))
    insert_document(fresh_db, "guide.md", guide, namespace="public")
    return fresh_db


def expected_rows(conn, query: str, arguments: dict) -> list[dict]:
    return retrieve(conn, query, **arguments)


@pytest.mark.parametrize("case", ARGUMENT_CASES, ids=list(ARGUMENT_CASES))
def test_langchain_retriever_returns_kb_retrieve_rows_for_every_argument(corpus, dsn, case):
    query, arguments = ARGUMENT_CASES[case]
    rows = expected_rows(corpus, query, arguments)
    assert rows, case
    by_field = LangChainRetriever(dsn=dsn, **arguments).invoke(query)
    per_call = LangChainRetriever(dsn=dsn).invoke(query, **arguments)
    for docs in (by_field, per_call):
        assert all(isinstance(d, Document) for d in docs)
        assert [(d.page_content, d.metadata["source"], d.metadata["rank"]) for d in docs] == [
            (r["content"], r["source"], r["rank"]) for r in rows
        ]
        assert [d.id for d in docs] == [str(r["chunk_id"]) for r in rows]


@pytest.mark.parametrize("case", ARGUMENT_CASES, ids=list(ARGUMENT_CASES))
def test_llamaindex_retriever_returns_kb_retrieve_rows_for_every_argument(corpus, dsn, case):
    query, arguments = ARGUMENT_CASES[case]
    rows = expected_rows(corpus, query, arguments)
    assert rows, case
    nodes = LlamaIndexRetriever(dsn, **arguments).retrieve(query)
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert [(n.node.get_content(), n.node.metadata["source"], n.score) for n in nodes] == [
        (r["content"], r["source"], r["relevance"]) for r in rows
    ]


def test_passages_carry_source_section_scores_provenance_and_lifecycle_in_metadata(corpus, dsn):
    (row,) = retrieve(corpus, "refund deadline days", k=1, namespace="public")
    (doc,) = LangChainRetriever(dsn=dsn, k=1, namespace="public").invoke("refund deadline days")
    (hit,) = LlamaIndexRetriever(dsn, k=1, namespace="public").retrieve("refund deadline days")
    for metadata in (doc.metadata, hit.node.metadata):
        assert set(metadata) == set(row) - {"content"} | {"citation", "as_of"}
        assert metadata["source"] == "policies/refund-v2.md" and "Deadline" in metadata["section_path"]
        assert metadata["score"] == row["score"] and metadata["match_type"] == row["match_type"]
        assert (metadata["dense_rank"], metadata["lexical_rank"]) == (row["dense_rank"], row["lexical_rank"])
        assert (metadata["status"], metadata["version"]) == ("active", "2")
        assert (metadata["effective_from"], metadata["effective_to"]) == ("2024-03-01", None)
        assert metadata["provenance"]["chunker_version"] and metadata["provenance"]["content_hash"]
        assert metadata["answerability"] == row["answerability"] and metadata["evidence"] == row["evidence"]
        assert metadata["citation"].startswith("policies/refund-v2.md § Refund policy > Deadline (version 2")
        assert metadata["as_of"] is None
    # a language model reads the text and the citation, not the scores and provenance
    assert hit.node.get_content(metadata_mode="llm") == f"citation: {doc.metadata['citation']}\n\n{doc.page_content}"
    assert hit.node.relationships[NodeRelationship.SOURCE].node_id == f"pgkb-document-{row['document_id']}"


def test_langchain_retriever_returns_no_documents_when_the_database_finds_no_evidence(corpus, dsn):
    retriever = LangChainRetriever(dsn=dsn, mode="lexical")
    assert retriever.last_decision is None
    assert retriever.invoke("quantum chromodynamics lattice") == []
    assert retriever.last_decision.answerability == "no evidence" and retriever.last_decision.no_evidence
    assert retriever.last_decision.passages == 0 and retriever.last_decision.evidence == 0
    docs = retriever.invoke("refund deadline")
    assert docs and retriever.last_decision.answerability == docs[0].metadata["answerability"] != "no evidence"
    assert retriever.last_decision.passages == len(docs)


def test_llamaindex_retriever_returns_no_nodes_when_the_database_finds_no_evidence(corpus, dsn):
    retriever = LlamaIndexRetriever(dsn, mode="lexical")
    assert retriever.retrieve("quantum chromodynamics lattice") == []
    assert retriever.last_decision.no_evidence
    assert asyncio.run(retriever.aretrieve("quantum chromodynamics lattice")) == []
    assert retriever.last_decision.no_evidence


def test_async_retrieval_returns_what_sync_retrieval_returns(corpus, dsn):
    langchain = LangChainRetriever(dsn=dsn, k=5)
    assert asyncio.run(langchain.ainvoke("refunds")) == langchain.invoke("refunds")
    assert asyncio.run(langchain.ainvoke("refunds", as_of="2023-06-01")) == langchain.invoke(
        "refunds", as_of="2023-06-01"
    )
    llama = LlamaIndexRetriever(dsn, k=5)

    def plain(nodes):
        return [(n.node.node_id, n.node.get_content(), n.node.metadata, n.score) for n in nodes]

    assert plain(asyncio.run(llama.aretrieve("refunds"))) == plain(llama.retrieve("refunds"))


def test_an_unknown_argument_is_refused_by_name(corpus, dsn):
    with pytest.raises(TypeError, match="kb_retrieve has no argument top_k"):
        LangChainRetriever(dsn=dsn).invoke("refunds", top_k=3)


def test_database_errors_reach_the_caller(corpus, dsn):
    import psycopg

    with pytest.raises(psycopg.errors.InvalidDatetimeFormat):
        LangChainRetriever(dsn=dsn, as_of="not a date").invoke("refunds")
    with pytest.raises(psycopg.Error, match="max_per_document"):
        LlamaIndexRetriever(dsn, max_per_document=-1).retrieve("refunds")


def test_retrievers_run_as_the_role_of_their_connection_under_row_level_security(corpus, dsn):
    with temporary_role(corpus, f"fw_reader_{uuid.uuid4().hex[:8]}", "NOLOGIN IN ROLE pgkb_reader") as role:
        corpus.execute(f"GRANT {role} TO current_user")
        corpus.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
        corpus.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'internal')", (role,))
        try:
            role_dsn = f"{dsn}?options=-c%20role%3D{role}"
            langchain = LangChainRetriever(dsn=role_dsn, k=10).invoke("refunds")
            llama = LlamaIndexRetriever(role_dsn, k=10).retrieve("refunds")
            assert {d.metadata["namespace"] for d in langchain} == {"internal"}
            assert {n.node.metadata["namespace"] for n in llama} == {"internal"}
        finally:
            corpus.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'")
            corpus.execute("DELETE FROM kb.namespace_grants WHERE role_name = %s", (role,))


def test_a_pooled_connection_the_server_dropped_is_replaced(corpus, dsn):
    retriever = LangChainRetriever(dsn=dsn, k=2, pool_size=1)
    assert retriever.invoke("refunds")
    pids = [
        r["pid"]
        for r in corpus.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    ]
    for pid in pids:
        corpus.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert retriever.invoke("refunds")  # the pool's check finds the dead connection and opens another
    retriever.close()


def test_llamaindex_retriever_takes_similarity_top_k_and_metadata_filters(corpus, dsn):
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    policies = MetadataFilters(filters=[MetadataFilter(key="doc_type", value="policy")])
    retriever = LlamaIndexRetriever(dsn=dsn, similarity_top_k=1, filters=policies)
    nodes = retriever.retrieve("refunds")
    assert len(nodes) == 1 and nodes[0].node.metadata["doc_type"] == "policy"
    assert retriever.arguments["filters"] == {"doc_type": "policy"}
    unsupported = MetadataFilters(filters=[MetadataFilter(key="version", value="2", operator=FilterOperator.GT)])
    with pytest.raises(ValueError, match="filter version > is not supported"):
        LlamaIndexRetriever(dsn=dsn, filters=unsupported)
    with pytest.raises(TypeError, match="k or similarity_top_k"):
        LlamaIndexRetriever(dsn=dsn, k=2, similarity_top_k=1)


def test_each_call_gets_its_own_decision_even_when_calls_overlap(corpus, dsn):
    retriever = LangChainRetriever(dsn=dsn, mode="lexical")
    nodes_retriever = LlamaIndexRetriever(dsn=dsn, mode="lexical")

    async def both():
        return await asyncio.gather(
            retriever.ainvoke_with_decision("refund"),
            retriever.ainvoke_with_decision("zygomorphic xylophone quokka"),
            nodes_retriever.aretrieve_with_decision("refund"),
        )

    (found, found_decision), (none, none_decision), (nodes, nodes_decision) = asyncio.run(both())
    assert found and found_decision.answerability != "no evidence" and found_decision.passages == len(found)
    assert none == [] and none_decision.no_evidence
    assert nodes and nodes_decision.passages == len(nodes)
    docs, decision = retriever.invoke_with_decision("refund", k=1)
    assert len(docs) == 1 and decision.passages == 1
