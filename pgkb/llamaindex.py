"""pgkb for LlamaIndex: a retriever over kb_retrieve (harness.frameworks.llamaindex)."""

from harness.frameworks.llamaindex import PgkbRetriever, pgkb_filters

__all__ = ["PgkbRetriever", "pgkb_filters"]
