"""pgkb for LangChain: a retriever and a vector store over kb_retrieve and kb.documents
(harness.frameworks.langchain)."""

from harness.frameworks.langchain import PgkbRetriever, PgkbVectorStore

__all__ = ["PgkbRetriever", "PgkbVectorStore"]
