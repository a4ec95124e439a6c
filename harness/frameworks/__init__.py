"""pgkb for RAG frameworks: a LangChain retriever (`harness.frameworks.langchain`, extra `pgkb[langchain]`)
and a LlamaIndex retriever (`harness.frameworks.llamaindex`, extra `pgkb[llamaindex]`) over `kb_retrieve`.

Both are thin: they call `kb_retrieve` through harness.retrieval with the arguments they were given
(None: the database's default) and turn each row into the framework's own type. What this module
shares between them, importing neither framework:

* `ARGUMENTS`, `arguments_of`, `keyword_parameters`: kb_retrieve's optional arguments as
  harness.retrieval.RetrievalRequest describes them, from which each retriever builds its fields;
* `KnowledgeBase`: where the calls go (a DSN; default PGKB_READ_DSN, else PGKB_DSN, else the
  embedded cluster of `pgkb up`), one kept connection for sync calls and one connection per async call;
* `passage_metadata`: a row's columns as the metadata of a document or node;
* `Decision`: what kb_retrieve decided for a call ("answer", "low confidence" or "no evidence"), which
  a retriever keeps as ``last_decision``: "no evidence" is an empty list, never padding.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .. import retrieval
from ..config import load_settings
from ..db import connect, connection_lost

# The arguments of kb_retrieve besides the query, in signature order (harness.retrieval.RetrievalRequest).
ARGUMENTS = tuple(retrieval.OPTIONAL_ARGUMENTS)

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


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def passage_metadata(row: dict[str, Any], as_of: Any = None) -> dict[str, Any]:
    """Every column of a kb_retrieve row but the passage text (dates as ISO strings, provenance as the
    database gives it), plus ``citation`` (harness.retrieval.citation) and the ``as_of`` asked for
    (None: now). Lifecycle: status, version, effective_from, effective_to; decision: answerability,
    evidence."""
    metadata = {name: _plain(value) for name, value in row.items() if name != "content"}
    metadata["citation"] = retrieval.citation(row)
    metadata["as_of"] = _plain(as_of)
    return metadata


class KnowledgeBase:
    """Where a retriever's calls go. ``dsn`` None: PGKB_READ_DSN, else PGKB_DSN, else the embedded
    cluster (read when the first call is made). Sync calls share one connection, opened at the first
    call (so the backend keeps its embedding model loaded) and reopened once when it was lost; each
    async call opens its own (an async connection belongs to one event loop)."""

    def __init__(self, dsn: str | None = None):
        self._dsn = dsn
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    @property
    def dsn(self) -> str:
        return self._dsn or load_settings().read_dsn

    def retrieve(self, query: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.dsn)
                try:
                    return retrieval.retrieve(self._conn, query, **arguments)
                except psycopg.Error as exc:
                    if not connection_lost(exc, self._conn):
                        raise
                    self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    async def aretrieve(self, query: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            return await retrieval.aretrieve(conn, query, **arguments)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
