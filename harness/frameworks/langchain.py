"""A LangChain retriever over `kb_retrieve` (extra `pgkb[langchain]`: langchain-core only).

    from harness.frameworks.langchain import PgkbRetriever
    docs = PgkbRetriever(k=3).invoke("退款期限是几天？")

Each passage is a `langchain_core.documents.Document`: the passage text as ``page_content``, the
chunk id as ``id``, and every other column of the row in ``metadata`` (harness.frameworks.passage_metadata:
source, title, section_path, namespace, scores and ranks per leg, match type, provenance, lifecycle,
answerability and evidence, a ready ``citation``). When the knowledge base has no evidence the list is
empty; ``retriever.invoke_with_decision(query)`` returns the documents with the call's own decision
(``retriever.last_decision`` is the latest call's).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import Field, PrivateAttr, create_model

from .. import retrieval
from . import (
    ARGUMENTS,
    DEFAULT_POOL_SIZE,
    DOCUMENT_COLUMNS,
    Decision,
    KnowledgeBase,
    arguments_of,
    decision_of,
    document_row,
    passage_metadata,
    stored_metadata,
)

# keyword arguments LangChain's invoke passes on besides a retriever's own
_LANGCHAIN_KEYWORDS = frozenset({"verbose"})


# The retriever's fields: dsn, then kb_retrieve's optional arguments as harness.retrieval.RetrievalRequest
# describes them (type, description), each None by default so that the database's default applies.
_RetrieverFields = create_model(
    "_RetrieverFields",
    __base__=BaseRetriever,
    dsn=(str | None, None),
    pool_size=(int, Field(default=DEFAULT_POOL_SIZE, description="connections this process keeps per DSN")),
    **{
        f.name: (retrieval.FIELD_TYPES[f.name], Field(default=None, description=f.metadata["description"]))
        for f in retrieval.OPTIONAL_FIELDS
    },
)


class PgkbRetriever(_RetrieverFields):
    """kb_retrieve as a LangChain retriever. Every field but ``dsn`` and LangChain's own (name, tags,
    metadata) is an argument of kb_retrieve, typed and described as harness.retrieval.RetrievalRequest's
    optional fields; None leaves it to the database (k 8, mode auto, all namespaces the role may read, no filters,
    as_of now, no context, the settings for max_per_document and merge_adjacent). ``invoke(query,
    **arguments)`` overrides them for one call, e.g. ``invoke("refund period", as_of="2025-03-01")``.
    ``dsn`` None: PGKB_READ_DSN, else PGKB_DSN, else the embedded cluster of `pgkb up`; retrievers of one
    DSN and ``pool_size`` share a pool of that many connections (sync) and one per event loop (async)."""

    _kb: KnowledgeBase = PrivateAttr()
    _last_decision: Decision | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        self._kb = KnowledgeBase.shared(self.dsn, self.pool_size)

    @property
    def last_decision(self) -> Decision | None:
        """What kb_retrieve decided for this retriever's latest call (None before the first)."""
        return self._last_decision

    def _arguments(self, overrides: dict[str, Any]) -> dict[str, Any]:
        given = {name: getattr(self, name) for name in ARGUMENTS}
        given.update({name: value for name, value in overrides.items() if name not in _LANGCHAIN_KEYWORDS})
        return arguments_of(given)

    def _documents(self, rows: list[dict[str, Any]], as_of: Any) -> list[Document]:
        self._last_decision = decision_of(rows)
        return [
            Document(page_content=row["content"], metadata=passage_metadata(row, as_of), id=str(row["chunk_id"]))
            for row in rows
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        arguments = self._arguments(overrides)
        return self._documents(self._kb.retrieve(query, arguments), arguments["as_of"])

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        arguments = self._arguments(overrides)
        return self._documents(await self._kb.aretrieve(query, arguments), arguments["as_of"])

    def invoke_with_decision(self, query: str, **arguments: Any) -> tuple[list[Document], Decision]:
        """The documents and this call's own decision (``last_decision`` is the latest call's, which a
        concurrent call may have replaced)."""
        arguments = self._arguments(arguments)
        rows = self._kb.retrieve(query, arguments)
        return self._documents(rows, arguments["as_of"]), decision_of(rows)

    async def ainvoke_with_decision(self, query: str, **arguments: Any) -> tuple[list[Document], Decision]:
        """invoke_with_decision, asynchronously."""
        arguments = self._arguments(arguments)
        rows = await self._kb.aretrieve(query, arguments)
        return self._documents(rows, arguments["as_of"]), decision_of(rows)

    def close(self) -> None:
        """Close the sync pool this retriever shares (the next sync call opens another)."""
        self._kb.close()


class PgkbVectorStore(VectorStore):
    """pgkb as a LangChain vector store. Writes go through kb.documents, so the database chunks and embeds
    each text (no ``Embeddings`` object: the model is the database's), and lifecycle, private readers and
    tenant isolation hold as for any other writer: a text is one document, its id is the document's
    ``source`` in ``namespace`` (adding the same id again replaces it, a new version supersedes one named in
    metadata["supersedes"]), and metadata keys that are kb.documents columns (title, doc_type, status,
    version, effective_from, effective_to, supersedes) set them. Searches are kb_retrieve in ``namespace``:
    current versions only, ``filter`` as its filters; each Document's metadata carries the passage's
    citation, source, scores and the call's decision (answerability, evidence). ``dsn`` None: writes go to
    PGKB_DSN (else the embedded cluster), searches to PGKB_READ_DSN (else the same)."""

    def __init__(self, dsn: str | None = None, *, namespace: str = "default", pool_size: int = DEFAULT_POOL_SIZE):
        self.namespace = namespace
        self._reads = KnowledgeBase.shared(dsn, pool_size)
        self._writes = KnowledgeBase.for_writes(dsn, pool_size)

    @property
    def embeddings(self) -> None:
        """None: the database embeds with its active model."""
        return None

    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        given = list(ids) if ids is not None else [None] * len(texts)
        if not len(texts) == len(metadatas) == len(given):
            raise ValueError(f"{len(texts)} texts, {len(metadatas)} metadatas and {len(given)} ids: give one of each")
        # a text without an id takes its metadata's source, else a new one
        ids = [i or m.get("source") or f"langchain/{uuid.uuid4()}" for i, m in zip(given, metadatas, strict=True)]
        metadatas = [{k: v for k, v in m.items() if k != "source"} for m in metadatas]  # the id is the source
        self._writes.upsert_documents(
            [
                document_row(self.namespace, source, text, metadata, "langchain")
                for text, metadata, source in zip(texts, metadatas, ids, strict=True)
            ]
        )
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete the documents with these ids (sources) in the namespace, with their chunks and vectors;
        True when the statement ran (an id that is not there, or that the role may not write, is skipped)."""
        if not ids:
            raise ValueError("give the ids (sources) of the documents to delete")
        with self._writes.connection() as conn:
            conn.execute(
                "DELETE FROM kb.documents WHERE namespace = %s AND source = ANY(%s)", (self.namespace, list(ids))
            )
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents (whole text) with these ids (sources) that the role may read, each with the
        metadata it was written with (its lifecycle keys as the columns hold them now)."""
        with self._reads.connection() as conn:
            rows = conn.execute(
                """SELECT source, body, title, doc_type, status, version, effective_from, effective_to, metadata
                   FROM kb.documents WHERE namespace = %s AND source = ANY(%s) ORDER BY source""",
                (self.namespace, list(ids)),
            ).fetchall()
        return [Document(id=r["source"], page_content=r["body"], metadata=stored_metadata(r)) for r in rows]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(Document, relevance) of kb_retrieve in its order (best fused score first). The relevance is the
        probability, in [0, 1], that the passage is one the answer is drawn from, and means the same in every
        call (higher is better); the fused score, which orders one call only, is metadata["score"], and
        metadata["evidence"] is the call's answer probability. A Document's metadata is the metadata its
        document was written with, then the passage's (citation, ranks, scores, provenance, the decision)."""
        arguments = arguments_of({"k": k, "namespace": self.namespace, "filters": filter, **kwargs})
        rows = self._reads.retrieve(query, arguments)
        written = self._written_metadata([r["document_id"] for r in rows])
        return [
            (
                Document(
                    page_content=r["content"],
                    metadata=written.get(r["document_id"], {}) | passage_metadata(r, arguments["as_of"]),
                    id=r["source"],
                ),
                r["relevance"],
            )
            for r in rows
        ]

    def _written_metadata(self, document_ids: list[int]) -> dict[int, dict[str, Any]]:
        if not document_ids:
            return {}
        with self._reads.connection() as conn:
            rows = conn.execute(
                f"""SELECT id, metadata, {", ".join(DOCUMENT_COLUMNS)} FROM kb.documents WHERE id = ANY(%s)""",
                (document_ids,),
            ).fetchall()
        return {r["id"]: stored_metadata(r) for r in rows}

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The passages' own relevance is already in [0, 1]: no score is rescaled."""
        return self.similarity_search_with_score(query, k, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Any = None,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        dsn: str | None = None,
        namespace: str = "default",
        **kwargs: Any,
    ) -> PgkbVectorStore:
        """A store of ``namespace`` holding these texts. ``embedding`` is ignored: the database embeds."""
        store = cls(dsn, namespace=namespace, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store
