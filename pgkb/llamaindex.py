"""pgkb for LlamaIndex: a retriever and a vector store over kb_retrieve and kb.documents
(harness.frameworks.llamaindex)."""

from harness.frameworks.llamaindex import PgkbRetriever, PgkbVectorStore, pgkb_filters

__all__ = ["PgkbRetriever", "PgkbVectorStore", "pgkb_filters"]
