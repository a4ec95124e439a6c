"""pgkb as a LangChain vector store (harness.frameworks.langchain.PgkbVectorStore) against a real database:
writes go through kb.documents, so the database chunks and embeds, lifecycle and tenant isolation hold."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import psycopg
import pytest
from helpers import temporary_role

pytest.importorskip("langchain_core")
from langchain_core.documents import Document  # noqa: E402

from harness.frameworks.langchain import PgkbVectorStore  # noqa: E402


def test_texts_added_are_chunked_embedded_and_found_by_their_ids(fresh_db, dsn):
    store = PgkbVectorStore(dsn, namespace="handbook")
    ids = store.add_texts(
        ["# Refunds\n\nRefunds are accepted within 14 days of delivery.", "# Parking\n\nParking is free on level 2."],
        metadatas=[{"doc_type": "policy", "owner": "finance"}, {"doc_type": "faq"}],
        ids=["refunds.md", "parking.md"],
    )
    assert ids == ["refunds.md", "parking.md"]
    stored = fresh_db.execute(
        "SELECT source, doc_type, metadata, ingest_status, chunk_count FROM kb.documents WHERE namespace = 'handbook'"
        " ORDER BY source"
    ).fetchall()
    assert [(r["source"], r["doc_type"], r["ingest_status"]) for r in stored] == [
        ("parking.md", "faq", "indexed"),
        ("refunds.md", "policy", "indexed"),
    ]
    assert stored[1]["metadata"] == {"doc_type": "policy", "owner": "finance"}  # kept whole, as written
    assert all(r["chunk_count"] >= 1 for r in stored)
    [top, *_] = store.similarity_search("how many days for a refund", k=2)
    assert top.id == "refunds.md" and "14 days" in top.page_content
    assert top.metadata["citation"].startswith("refunds.md") and top.metadata["answerability"]
    assert top.metadata["owner"] == "finance"  # the metadata it was written with comes back with the passage
    [(doc, score), *_] = store.similarity_search_with_score("how many days for a refund", k=2)
    assert doc.id == "refunds.md" and isinstance(score, float)
    assert [(d.id, d.metadata) for d in store.get_by_ids(["parking.md"])] == [("parking.md", {"doc_type": "faq"})]


def test_a_new_version_supersedes_the_old_and_only_the_current_one_is_found(fresh_db, dsn):
    store = PgkbVectorStore(dsn, namespace="handbook")
    store.add_documents([Document(page_content="# Refunds\n\nRefunds within 30 days.", id="refunds-v1.md")])
    store.add_documents(
        [
            Document(
                page_content="# Refunds\n\nRefunds within 14 days.",
                id="refunds-v2.md",
                metadata={"supersedes": "refunds-v1.md", "version": "2"},
            )
        ]
    )
    found = [d.id for d in store.similarity_search("refunds within days", k=4)]
    assert found[0] == "refunds-v2.md" and "refunds-v1.md" not in found


def test_delete_removes_documents_and_their_passages(fresh_db, dsn):
    store = PgkbVectorStore.from_texts(["# Parking\n\nParking is free."], ids=["parking.md"], dsn=dsn, namespace="x")
    assert store.similarity_search("parking", k=1)
    assert store.delete(["parking.md"]) is True
    assert store.similarity_search("parking", k=1) == []
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.chunks WHERE namespace = 'x'").fetchone()["n"] == 0


def test_as_retriever_passes_k_and_filter(fresh_db, dsn):
    store = PgkbVectorStore(dsn, namespace="handbook")
    store.add_texts(
        ["# Refunds\n\nRefund policy: 14 days.", "# Refund FAQ\n\nRefunds are quick."],
        metadatas=[{"doc_type": "policy"}, {"doc_type": "faq"}],
        ids=["policy.md", "faq.md"],
    )
    retriever = store.as_retriever(search_kwargs={"k": 1, "filter": {"doc_type": "faq"}})
    assert [d.id for d in retriever.invoke("refunds")] == ["faq.md"]


def test_scores_are_each_passages_relevance_with_the_fused_score_and_the_decision_beside_it(fresh_db, dsn):
    store = PgkbVectorStore(dsn, namespace="handbook")
    store.add_texts(["# Refunds\n\nRefund policy: 14 days.", "# Parking\n\nParking is free."], ids=["r.md", "p.md"])
    rows = store.similarity_search_with_score("refund policy", k=2)
    scored = store.similarity_search_with_relevance_scores("refund policy", k=2)
    assert rows and [(d.id, s) for d, s in rows] == [(d.id, s) for d, s in scored]
    for document, relevance in rows:
        assert 0 <= relevance <= 1
        assert {"score", "evidence", "answerability", "relevance"} <= set(
            document.metadata
        )  # the call's, beside the passage's


def test_a_tenant_writer_writes_only_its_namespace(fresh_db, dsn):
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    name = f"store_writer_{uuid.uuid4().hex[:8]}"
    with temporary_role(fresh_db, name, "LOGIN IN ROLE pgkb_writer"):
        fresh_db.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (name,))
        as_writer = f"{dsn}?options={quote(f'-c role={name}')}"
        PgkbVectorStore(as_writer, namespace="acme").add_texts(["# A\n\nAcme text."], ids=["a.md"])
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            PgkbVectorStore(as_writer, namespace="globex").add_texts(["# B\n\nGlobex text."], ids=["b.md"])
        sources = fresh_db.execute("SELECT namespace, source FROM kb.documents ORDER BY 1").fetchall()
        assert [(r["namespace"], r["source"]) for r in sources] == [("acme", "a.md")]


def test_llamaindex_vector_store_adds_queries_filters_and_deletes_by_ref_doc(fresh_db, dsn):
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.types import (
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
        VectorStoreQueryMode,
    )

    from pgkb.llamaindex import PgkbVectorStore as LlamaIndexStore

    def node(node_id: str, text: str, ref: str, **metadata) -> TextNode:
        return TextNode(
            id_=node_id,
            text=text,
            metadata=metadata,
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=ref)},
        )

    store = LlamaIndexStore(dsn=dsn, namespace="li")
    ids = store.add(
        [
            node("refunds.md", "# Refunds\n\nRefunds within 14 days.", "handbook", doc_type="policy"),
            node("parking.md", "# Parking\n\nParking is free on level 2.", "handbook", doc_type="faq"),
            node("faq.md", "# Refund FAQ\n\nRefunds are quick.", "faq-book", doc_type="faq"),
        ]
    )
    assert ids == ["refunds.md", "parking.md", "faq.md"]
    found = store.query(VectorStoreQuery(query_str="how many days for a refund", similarity_top_k=2))
    assert found.ids[0] == "refunds.md" and len(found.nodes) == len(found.similarities) == 2
    faq = MetadataFilters(filters=[MetadataFilter(key="doc_type", value="faq")])
    lexical = store.query(
        VectorStoreQuery(query_str="refunds", similarity_top_k=3, filters=faq, mode=VectorStoreQueryMode.TEXT_SEARCH)
    )
    assert lexical.ids == ["faq.md"]
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=8))
    assert index.as_retriever(similarity_top_k=1).retrieve("refund days")[0].node.node_id == "refunds.md"
    store.delete("handbook")
    left = fresh_db.execute("SELECT source FROM kb.documents WHERE namespace = 'li' ORDER BY source").fetchall()
    assert [r["source"] for r in left] == ["faq.md"]
    with pytest.raises(ValueError, match="query_str"):
        store.query(VectorStoreQuery(query_embedding=[0.1] * 8, similarity_top_k=1))
