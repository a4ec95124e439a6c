"""pgkb for RAG frameworks: a LangChain retriever (`harness.frameworks.langchain`, extra `pgkb[langchain]`)
and a LlamaIndex retriever (`harness.frameworks.llamaindex`, extra `pgkb[llamaindex]`) over `kb_retrieve`.

Both are thin: they call `kb_retrieve` through harness.retrieval with the arguments they were given
(None: the database's default) and turn each row into the framework's own type. What this module
shares between them, importing neither framework:

* `ARGUMENTS`, `arguments_of`, `keyword_parameters`: kb_retrieve's optional arguments as
  harness.retrieval.RetrievalRequest describes them, from which each retriever builds its fields;
* `KnowledgeBase`: where the calls go (a DSN; default PGKB_READ_DSN, else PGKB_DSN, else the
  embedded cluster of `pgkb up`) through pools of connections (psycopg_pool, sync and async) shared by
  every retriever of the same DSN and pool size;
* `passage_metadata`: a row's columns as the metadata of a document or node;
* `Decision`: what kb_retrieve decided for a call ("answer", "low confidence" or "no evidence"),
  returned with the call by the retrievers' ``*_with_decision`` methods and kept as ``last_decision``
  (the latest call's): "no evidence" is an empty list, never padding.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .. import loader, retrieval
from ..config import load_settings

# The arguments of kb_retrieve besides the query, in signature order (harness.retrieval.RetrievalRequest).
ARGUMENTS = tuple(retrieval.OPTIONAL_ARGUMENTS)

# kb.documents columns a vector store's metadata may set (lifecycle, type, title); every other key is kept
# in kb.documents.metadata, where filters read it.
DOCUMENT_COLUMNS = ("title", "doc_type", "status", "version", "effective_from", "effective_to", "supersedes")

# Every pooled connection: autocommit (a retrieval is one statement), rows as dicts.
CONNECTION_OPTIONS = {"autocommit": True, "row_factory": dict_row}

# Metadata keys a framework shows a language model with the passage's text: the line to cite.
# (The rest is for the program: scores, ranks, provenance.)
LLM_METADATA_KEYS = ("citation",)


@dataclass(frozen=True)
class Decision:
    """What kb_retrieve decided for one call: ``answerability`` is "answer", "low confidence" or
    "no evidence" (then the call returned no passage), ``evidence`` in [0, 1], ``passages`` the count."""

    answerability: str
    evidence: float
    passages: int

    @property
    def no_evidence(self) -> bool:
        return self.answerability == "no evidence"


def decision_of(rows: Sequence[dict[str, Any]]) -> Decision:
    """The call's decision, which every row of it carries; no rows is "no evidence"."""
    if not rows:
        return Decision("no evidence", 0.0, 0)
    return Decision(rows[0]["answerability"], float(rows[0]["evidence"]), len(rows))


def arguments_of(given: dict[str, Any]) -> dict[str, Any]:
    """Every optional argument of kb_retrieve, in signature order: the given value or None; an array
    argument copied, so that the caller's list changing later does not change the retriever's calls.
    TypeError for a name kb_retrieve does not take."""
    retrieval.check_argument_names(given)
    arguments = {name: given.get(name) for name in ARGUMENTS}
    for name, sql_type in retrieval.OPTIONAL_ARGUMENTS.items():
        if sql_type.endswith("[]") and arguments[name] is not None:
            arguments[name] = list(arguments[name])
    return arguments


def keyword_parameters() -> list[inspect.Parameter]:
    """kb_retrieve's optional arguments as keyword-only parameters defaulting to None, with their types."""
    return [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=retrieval.FIELD_TYPES[name])
        for name in ARGUMENTS
    ]


def plain(value: Any) -> Any:
    """A date or timestamp as ISO text (JSON has no dates); any other value as it is."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def passage_metadata(row: dict[str, Any], as_of: Any = None) -> dict[str, Any]:
    """Every column of a kb_retrieve row but the passage text (dates as ISO strings, provenance as the
    database gives it), plus ``citation`` (harness.retrieval.citation) and the ``as_of`` asked for
    (None: now). Lifecycle: status, version, effective_from, effective_to; decision: answerability,
    evidence."""
    metadata = {name: plain(value) for name, value in row.items() if name != "content"}
    metadata["citation"] = retrieval.citation(row)
    metadata["as_of"] = plain(as_of)
    return metadata


def document_row(namespace: str, source: str, text: str, metadata: dict[str, Any], origin: str) -> dict[str, Any]:
    """A vector store's text as a kb.documents row for the loader's upsert: metadata keys that are
    DOCUMENT_COLUMNS set those columns (status 'active' unless given); the metadata is kept whole as the
    row's metadata, so a store gives back exactly what it was given (stored_metadata)."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"an id must be a non-empty text (the document's source), not {source!r}")
    columns = {name: metadata.get(name) for name in DOCUMENT_COLUMNS}
    return {
        **columns,
        "status": columns["status"] or "active",
        "namespace": namespace,
        "source": source,
        "body": text,
        "metadata": Jsonb(metadata),
        "origin": origin,
    }


def stored_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """The metadata a document was written with (a kb.documents row's metadata), its lifecycle keys read
    from the columns, which decide (an update in SQL changes them there)."""
    metadata = dict(row["metadata"])
    return metadata | {name: plain(row[name]) for name in DOCUMENT_COLUMNS if name in metadata and name in row}


DEFAULT_POOL_SIZE = 4


class KnowledgeBase:
    """Where a retriever's calls go. ``dsn`` None: PGKB_READ_DSN, else PGKB_DSN, else the embedded
    cluster. Calls borrow connections from pools of at most ``pool_size`` connections: one pool for
    sync calls and one per event loop for async calls (an async connection belongs to its loop), each
    opened at its first call and keeping its connections, so their backends keep the embedding model
    loaded. Retrievers of the same DSN and pool size share one KnowledgeBase (``shared``)."""

    _shared: dict[tuple[str, int], KnowledgeBase] = {}
    _shared_lock = threading.Lock()

    def __init__(self, dsn: str | None = None, pool_size: int = DEFAULT_POOL_SIZE):
        if not 1 <= pool_size <= 100:
            raise ValueError(f"pool_size must be between 1 and 100 (got {pool_size})")
        self.dsn = dsn or load_settings().read_dsn
        self.pool_size = pool_size
        self._pool: ConnectionPool | None = None
        self._async_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = (
            weakref.WeakKeyDictionary()
        )
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, dsn: str | None = None, pool_size: int = DEFAULT_POOL_SIZE) -> KnowledgeBase:
        """The one KnowledgeBase of a DSN and pool size in this process."""
        key = (dsn or load_settings().read_dsn, pool_size)
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(*key)
            return cls._shared[key]

    def _sync_pool(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.pool_size,
                    kwargs=CONNECTION_OPTIONS,
                    check=ConnectionPool.check_connection,  # a connection the server dropped is replaced
                    name="pgkb",
                    open=True,
                )
            return self._pool

    async def _async_pool(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is not None:
            return pool
        async with self._async_locks.setdefault(loop, asyncio.Lock()):  # the loop's first calls open one pool
            pool = self._async_pools.get(loop)
            if pool is None:
                pool = AsyncConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.pool_size,
                    kwargs=CONNECTION_OPTIONS,
                    check=AsyncConnectionPool.check_connection,
                    open=False,
                    name="pgkb-async",
                )
                await pool.open()
                self._async_pools[loop] = pool
        return pool

    def connection(self):
        """A pooled sync connection (a context manager), for what is not a retrieval (a vector store's writes)."""
        return self._sync_pool().connection()

    @classmethod
    def for_writes(cls, dsn: str | None = None, pool_size: int = DEFAULT_POOL_SIZE) -> KnowledgeBase:
        """Where a vector store's writes go: ``dsn``, else PGKB_DSN, else the embedded cluster (never
        PGKB_READ_DSN, which may be a standby)."""
        return cls.shared(dsn or load_settings().dsn, pool_size)

    def upsert_documents(self, rows: list[dict[str, Any]]) -> None:
        """Store document rows (document_row) in one transaction, through the loader's one upsert: the ingest
        trigger chunks and embeds them, row-level security and lifecycle hold as for any writer."""
        with self.connection() as conn, conn.transaction():
            for row in rows:
                conn.execute(loader.UPSERT, row)

    def retrieve(self, query: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        with self.connection() as conn:
            return retrieval.retrieve(conn, query, **arguments)

    async def aretrieve(self, query: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        pool = await self._async_pool()
        async with pool.connection() as conn:
            return await retrieval.aretrieve(conn, query, **arguments)

    def close(self) -> None:
        """Close the sync pool (the next call opens another); async pools close with their event loop."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
