"""A LlamaIndex retriever over `kb_retrieve` (extra `pgkb[llamaindex]`: llama-index-core only).

    from harness.frameworks.llamaindex import PgkbRetriever
    nodes = PgkbRetriever(k=3).retrieve("退款期限是几天？")

Each passage is a `NodeWithScore`: the passage's relevance (a probability in [0, 1] that means the same
in every call; kb_retrieve's fused score, which orders one call only, is in the metadata), and a
`TextNode` with the passage text, the id ``pgkb-chunk-<chunk id>``, its document as the SOURCE
relationship, and every other column of the row in ``metadata`` (harness.frameworks.passage_metadata:
source, title, section_path, namespace, scores and ranks per leg, match type, provenance, lifecycle,
answerability and evidence, a ready ``citation``). Only ``citation`` is shown to a language model or an
embedding model with the text; the rest is for the program. When the knowledge base has no evidence the
list is empty; ``retriever.last_decision`` says what kb_retrieve decided for the latest call.

Nothing here needs a tokenizer or NLTK data: retrieval, ranking and snippets happen in the database,
and importing llama_index.core reads only the data its wheel ships (tests check both with the
network unavailable).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from . import (
    DEFAULT_POOL_SIZE,
    LLM_METADATA_KEYS,
    Decision,
    KnowledgeBase,
    arguments_of,
    decision_of,
    document_row,
    keyword_parameters,
    passage_metadata,
)

# kb_retrieve's filters that a LlamaIndex key names directly; any other key is matched in the document's
# metadata (kb_retrieve's "metadata" filter, JSON containment).
COLUMN_FILTERS = frozenset({"doc_type", "status"})


def pgkb_filters(filters: MetadataFilters) -> dict[str, Any]:
    """LlamaIndex MetadataFilters as kb_retrieve's filters: AND of ``==`` on doc_type, status or any metadata
    key, and ``contains`` / ``any`` on tags. ValueError naming any other operator or condition."""
    if filters.condition not in (None, FilterCondition.AND):
        raise ValueError(f"kb_retrieve's filters are all required (AND); {filters.condition.value} is not supported")
    out: dict[str, Any] = {}
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            raise ValueError("nested MetadataFilters are not supported: give one AND list")
        if f.key == "tags" and f.operator in (FilterOperator.CONTAINS, FilterOperator.ANY):
            out.setdefault("tags", []).extend(f.value if isinstance(f.value, list) else [f.value])
        elif f.operator is FilterOperator.EQ and f.key in COLUMN_FILTERS:
            out[f.key] = f.value
        elif f.operator is FilterOperator.EQ:
            out.setdefault("metadata", {})[f.key] = f.value
        else:
            raise ValueError(
                f"filter {f.key} {f.operator.value} is not supported: kb_retrieve filters by == on doc_type, status "
                "or a metadata key, and by contains/any on tags"
            )
    return out


class PgkbRetriever(BaseRetriever):
    """kb_retrieve as a LlamaIndex retriever. Every keyword but ``dsn``, ``callback_manager`` and ``verbose``
    is an argument of kb_retrieve (harness.retrieval.RetrievalRequest's optional fields);
    None leaves it to the database (k 8, mode auto, all namespaces the role may read, no filters,
    as_of now, no context, the settings for max_per_document and merge_adjacent); ``similarity_top_k`` is
    taken for k and LlamaIndex's ``MetadataFilters`` for filters (pgkb_filters). ``dsn`` None:
    PGKB_READ_DSN, else PGKB_DSN, else the embedded cluster of `pgkb up`; retrievers of one DSN and
    ``pool_size`` share a pool of that many connections (sync) and one per event loop (async)."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **arguments: Any,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if "similarity_top_k" in arguments:  # LlamaIndex's name for k
            if arguments.get("k") is not None:
                raise TypeError("give k or similarity_top_k, not both")
            arguments["k"] = arguments.pop("similarity_top_k")
        if isinstance(arguments.get("filters"), MetadataFilters):
            arguments["filters"] = pgkb_filters(arguments["filters"])
        self.arguments: dict[str, Any] = arguments_of(arguments)
        self._kb = KnowledgeBase.shared(dsn, pool_size)
        self.last_decision: Decision | None = None
        """What kb_retrieve decided for this retriever's latest call (None before the first)."""

    def _nodes(self, rows: list[dict[str, Any]]) -> list[NodeWithScore]:
        self.last_decision = decision_of(rows)
        nodes = []
        for row in rows:
            metadata = passage_metadata(row, self.arguments["as_of"])
            hidden = [key for key in metadata if key not in LLM_METADATA_KEYS]
            node = TextNode(
                id_=f"pgkb-chunk-{row['chunk_id']}",
                text=row["content"],
                metadata=metadata,
                excluded_llm_metadata_keys=hidden,
                excluded_embed_metadata_keys=hidden,
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"pgkb-document-{row['document_id']}")},
            )
            nodes.append(NodeWithScore(node=node, score=row["relevance"]))
        return nodes

    def retrieve_with_decision(self, query: str) -> tuple[list[NodeWithScore], Decision]:
        """The nodes and this call's own decision (``last_decision`` is the latest call's, which a concurrent
        call may have replaced)."""
        rows = self._kb.retrieve(query, self.arguments)
        return self._nodes(rows), decision_of(rows)

    async def aretrieve_with_decision(self, query: str) -> tuple[list[NodeWithScore], Decision]:
        """retrieve_with_decision, asynchronously."""
        rows = await self._kb.aretrieve(query, self.arguments)
        return self._nodes(rows), decision_of(rows)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self._kb.retrieve(query_bundle.query_str, self.arguments))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self._kb.aretrieve(query_bundle.query_str, self.arguments))

    def close(self) -> None:
        """Close the sync pool this retriever shares (the next sync call opens another)."""
        self._kb.close()


def _init_signature() -> inspect.Signature:
    """PgkbRetriever.__init__ as callers see it: dsn, kb_retrieve's keywords (from
    harness.retrieval.RetrievalRequest), then LlamaIndex's own keywords."""
    written = list(inspect.signature(PgkbRetriever.__init__).parameters.values())
    own = [p for p in written if p.kind is not inspect.Parameter.VAR_KEYWORD]
    keyword_only = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    return inspect.Signature([*positional, *keyword_parameters(), *keyword_only], return_annotation=None)


# help(), editors that read signatures at run time and the tests see every keyword by name, although
# __init__ takes kb_retrieve's as **arguments (checked by arguments_of).
PgkbRetriever.__init__.__signature__ = _init_signature()  # type: ignore[attr-defined]


# LlamaIndex's query modes and kb_retrieve's: the default is kb_retrieve's own choice.
QUERY_MODES = {
    VectorStoreQueryMode.DEFAULT: "auto",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.TEXT_SEARCH: "lexical",
    VectorStoreQueryMode.SPARSE: "lexical",
}


class PgkbVectorStore(BasePydanticVectorStore):
    """pgkb as a LlamaIndex vector store. A node added is a document of ``namespace`` in kb.documents (its id
    the document's source, its ref_doc_id kept in metadata), so the database chunks and embeds it with its
    own model (LlamaIndex's embeddings are not used) and lifecycle and tenant isolation hold as for any
    writer; ``delete(ref_doc_id)`` deletes the documents of that ref doc. ``query`` is kb_retrieve with the
    query's text (``query_str``; the database embeds it), ``similarity_top_k`` as k, ``filters`` mapped by
    pgkb_filters and the mode mapped by QUERY_MODES; similarities are the passages' relevance (in [0, 1],
    comparable across calls)."""

    stores_text: bool = True
    is_embedding_query: bool = False
    namespace: str = "default"
    dsn: str | None = None
    pool_size: int = DEFAULT_POOL_SIZE

    @property
    def client(self) -> KnowledgeBase:
        return KnowledgeBase.shared(self.dsn, self.pool_size)

    def _writes(self) -> KnowledgeBase:
        return KnowledgeBase.for_writes(self.dsn, self.pool_size)

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        self._writes().upsert_documents(
            [
                document_row(
                    self.namespace,
                    node.node_id,
                    node.get_content(),
                    {**node.metadata, "ref_doc_id": node.ref_doc_id},
                    "llamaindex",
                )
                for node in nodes
            ]
        )
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        with self._writes().connection() as conn:
            conn.execute(
                "DELETE FROM kb.documents WHERE namespace = %s AND metadata ->> 'ref_doc_id' = %s",
                (self.namespace, ref_doc_id),
            )

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if not query.query_str:
            raise ValueError("pgkb embeds the question itself: give query_str (a query embedding alone is not used)")
        if query.mode not in QUERY_MODES:
            raise ValueError(
                f"query mode {query.mode.value} is not supported: {', '.join(m.value for m in QUERY_MODES)}"
            )
        arguments = arguments_of(
            {
                "k": query.similarity_top_k,
                "namespace": self.namespace,
                "mode": QUERY_MODES[query.mode],
                "filters": pgkb_filters(query.filters) if query.filters else None,
            }
        )
        rows = self.client.retrieve(query.query_str, arguments)
        nodes = [TextNode(id_=row["source"], text=row["content"], metadata=passage_metadata(row)) for row in rows]
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[row["relevance"] for row in rows], ids=[row["source"] for row in rows]
        )
