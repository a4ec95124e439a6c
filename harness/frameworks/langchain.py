"""A LangChain retriever over `kb_retrieve` (extra `pgkb[langchain]`: langchain-core only).

    from harness.frameworks.langchain import PgkbRetriever
    docs = PgkbRetriever(k=3).invoke("退款期限是几天？")

Each passage is a `langchain_core.documents.Document`: the passage text as ``page_content``, the
chunk id as ``id``, and every other column of the row in ``metadata`` (harness.frameworks.passage_metadata:
source, title, section_path, namespace, scores and ranks per leg, match type, provenance, lifecycle,
answerability and evidence, a ready ``citation``). When the knowledge base has no evidence the list is
empty; ``retriever.last_decision`` says what kb_retrieve decided for the latest call.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr, create_model

from .. import retrieval
from . import ARGUMENTS, DEFAULT_POOL_SIZE, Decision, KnowledgeBase, arguments_of, decision_of, passage_metadata

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

    def close(self) -> None:
        """Close the sync pool this retriever shares (the next sync call opens another)."""
        self._kb.close()
