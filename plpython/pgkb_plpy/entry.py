"""The PL/Python entry points: one function per PL/Python function of sql/010_plpython.sql.

Every body there has the same two lines: load the modules once per backend, then call the
function of the same job here with ``plpy``, the backend's ``GD``, the function's ``SD`` and
the SQL arguments::

    if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
    return GD["pgkb"].query_terms(plpy, GD, SD, p_text)

``kb.plpython_init()`` is the only code that touches ``sys.path``: it adds the server venv and
stores this module in ``GD["pgkb"]``.

==================================  =====================================
SQL function                        entry point
==================================  =====================================
``kb.trg_documents_sync()``         :func:`sync_document`
``kb.trg_documents_inserted()``     :func:`sync_inserted_documents` (sql/020_ingest/01_documents.sql)
``kb.embed_queue_batch(...)``       :func:`embed_queue_batch`
``kb.py_embed_query(text, text)``   :func:`embed_query`
``kb.py_query_terms(text)``         :func:`query_terms`
``kb.py_analyze_query(...)``        :func:`analyze_query`
``kb.py_snippets(...)``             :func:`snippets`
``kb.py_answer_check(...)``         :func:`answer_check`
``kb.py_parse_file(...)``           :func:`parse_file`
``kb.py_recount_language_...(...)`` :func:`recount_language_statistics`
``kb.py_language_moments(...)``     :func:`language_moments`
``kb.py_dictionary_source()``       :func:`dictionary_source`
``kb.py_dictionary_rows()``         :func:`dictionary_rows`
==================================  =====================================

Version handshake. A backend keeps the modules it imported for its whole life, while
``pgkb migrate`` replaces the installed copy and re-creates the SQL. So every entry point
first checks that the loaded :data:`pgkb_plpy.__version__` is the one the schema expects
(``kb.plpython_expected_version()``), and raises a clear error telling the session to
reconnect (or, when the installed copy is old too, to install the new one) otherwise.

The check costs one query the first time each PL/Python function runs in a backend, and
nothing per call after that: its result is kept in the function's ``SD``. PL/Python gives a
function a fresh ``SD`` whenever it recompiles it, and it recompiles a function whose
``pg_proc`` row changed -- which every migrate does, since it re-creates all of
sql/010_plpython.sql. So the first call of each function after a migrate checks again.

The BM25 term rules are checked the same way: ingest compares
``lexical.TERMS_VERSION`` with the setting ``lexical_terms_version`` (the rules the stored
postings were built with) on every document, since it reads its settings anyway; the query
side compares once per compiled function, which catches every new pgkb_plpy (a new
``TERMS_VERSION`` ships with a migrate).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__, answer_types, backend, lexical, query_analysis
from .snippets import make_snippet

# ingest_db (the chunker, the file parsers) and language_statistics (numpy) are imported by the
# entry points that use them, not here: a backend that only answers lexical queries never loads
# them, and the first query on a fresh connection does not wait for them.

__all__ = [
    "analyze_query",
    "answer_check",
    "check_version",
    "dictionary_rows",
    "dictionary_source",
    "embed_queue_batch",
    "embed_query",
    "parse_file",
    "language_moments",
    "model_error",
    "query_terms",
    "recount_language_statistics",
    "snippets",
    "sync_document",
    "sync_inserted_documents",
]

_VERSION_CHECKED = "pgkb_version_checked"  # SD key: this compiled function passed the handshake
_TERMS_CHECKED = "pgkb_terms_checked"  # SD key: the query side passed the terms version check


def check_version(plpy) -> None:
    """Raise a PostgreSQL error unless the loaded pgkb_plpy is the version the schema expects."""
    expected = plpy.execute("SELECT kb.plpython_expected_version() AS v")[0]["v"]
    if expected == __version__:
        return
    installed = _installed_version()
    if installed == expected:
        plpy.error(
            f"pgkb: this session runs pgkb_plpy {__version__} but the schema expects {expected}; "
            "reconnect (the modules were upgraded by pgkb migrate)",
            hint="Open a new connection (a pooler: reconnect its server connections); a backend "
            "keeps the Python modules it loaded first.",
        )
    plpy.error(
        f"pgkb: this session runs pgkb_plpy {__version__} but the schema expects {expected}; "
        f"the server's installed copy is {installed or 'missing'}",
        hint="Install the matching pgkb_plpy into the server venv: run pgkb migrate on the database "
        "host (or scripts/install.sh), then reconnect.",
    )


def _installed_version() -> str | None:
    """``__version__`` of the pgkb_plpy copy on disk now (the loaded one may be older)."""
    try:
        text = (Path(__file__).parent / "__init__.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else None


def _entry_point(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run the version handshake (once per compiled function) before ``fn``, and turn the
    errors that carry a hint into PostgreSQL errors with that hint."""

    @functools.wraps(fn)
    def call(plpy, GD, SD, *args):
        if _VERSION_CHECKED not in SD:
            check_version(plpy)
            SD[_VERSION_CHECKED] = True
        try:
            return fn(plpy, GD, SD, *args)
        except lexical.TermsVersionError as exc:
            plpy.error(str(exc), hint=exc.hint)

    return call


def __getattr__(name: str) -> Any:
    # A body of a newer schema may call an entry point this older module lacks: answer with
    # the handshake's error rather than an AttributeError.
    if not name.startswith("_"):
        try:
            import plpy  # exists only inside PostgreSQL
        except ImportError:
            pass
        else:
            check_version(plpy)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@_entry_point
def sync_document(plpy, GD, SD, new: dict) -> None:
    """``kb.trg_documents_sync()``: re-chunk, index and embed the document row ``new``."""
    from . import ingest_db

    ingest_db.sync_document(plpy, GD, SD, new)


@_entry_point
def sync_inserted_documents(plpy, GD, SD) -> None:
    """``kb.trg_documents_inserted()``: chunk, index and embed the rows the INSERT statement
    added (its transition table), all in one pass."""
    from . import ingest_db

    ingest_db.sync_inserted_documents(plpy, GD, SD)


@_entry_point
def embed_queue_batch(plpy, GD, SD, model: str, batch_size: int, include_exhausted: bool) -> str:
    """``kb.embed_queue_batch(...)``: one batch of the embedding queue; its counts as JSON."""
    from . import ingest_db

    return json.dumps(ingest_db.embed_queue_batch(plpy, GD, SD, model, batch_size, include_exhausted))


@_entry_point
def model_error(plpy, GD, SD, provider: str, model: str, dimensions: int, options: str | None) -> str | None:
    """``kb.py_model_error(provider, model, dimensions, options)``: why a model cannot be
    registered as given (an unknown provider or bundled model, dimensions out of range or not
    the bundled model's, an unknown or mistyped option), or None. Nothing is loaded or contacted."""
    from .embedders.errors import EmbeddingError
    from .embedders.factory import make_provider

    try:
        make_provider(provider, model, dimensions, options)
    except EmbeddingError as exc:
        return str(exc)
    return None


@_entry_point
def embed_query(plpy, GD, SD, query: str, model: str) -> str:
    """``kb.py_embed_query(query, model)``: the query's vector (pgvector text form)."""
    return backend.query_vector(plpy, GD, model, query)


def _checked_query_terms(plpy, SD, text: str) -> list[str]:
    """The BM25 terms of a text, once this backend checked that the stored postings were made by
    the same term rules."""
    if _TERMS_CHECKED not in SD:
        stored = backend.settings(plpy, SD, ("lexical_terms_version",))["lexical_terms_version"]
        lexical.check_terms_version(stored)
        SD[_TERMS_CHECKED] = True
    return lexical.query_terms(text)


@_entry_point
def query_terms(plpy, GD, SD, text: str | None) -> list[str]:
    """``kb.py_query_terms(text)``: the BM25 terms of a query."""
    return _checked_query_terms(plpy, SD, text or "")


@_entry_point
def analyze_query(plpy, GD, SD, query: str | None, context: list[str] | None) -> str:
    """``kb.py_analyze_query(query, context)``: the query analysis as JSON, with ``stage_terms``,
    the BM25 terms of each stage (in the order of ``stages``): the pipeline's one trip here."""
    analysis = query_analysis.analyze(query or "", list(context or []))
    # the type of value the question asks for (None for claims and keywords): the judge step
    # reads the top passages for a value of it only when there is one (answer_types)
    analysis["answer_type"] = answer_types.answer_type(analysis["composed"] or analysis["original"])
    analysis["stage_terms"] = [_checked_query_terms(plpy, SD, stage) for stage in analysis["stages"]]
    return json.dumps(analysis, ensure_ascii=False)


@_entry_point
def answer_check(plpy, GD, SD, answer_type: str | None, question: str | None, passages: list[str] | None) -> str:
    """``kb.py_answer_check(answer_type, question, passages)``: whether the top passages hold a
    value of the question's answer type bound to its subject, as JSON (:func:`answer_types.check`)."""
    result = answer_types.check(answer_type, question, list(passages or []))
    result["min_subject_share"] = answer_types.MIN_SUBJECT_SHARE
    return json.dumps(result, ensure_ascii=False)


@_entry_point
def snippets(plpy, GD, SD, contents: list[str] | None, query: str | None, width: int) -> list[str]:
    """``kb.py_snippets(contents, query, width)``: one snippet per passage."""
    return [make_snippet(c or "", query or "", width=width) for c in (contents or [])]


@_entry_point
def recount_language_statistics(plpy, GD, SD, model: str, drift: float, sample_size: int) -> str:
    """``kb.py_recount_language_statistics(model, drift, sample)``: refresh the model's language
    statistics (as the owner); its counts as JSON."""
    from . import language_statistics

    return json.dumps(language_statistics.recount(plpy, model, drift, sample_size))


@_entry_point
def language_moments(
    plpy, GD, SD, model: str, query_vector: str, namespaces: list[str] | None, min_vectors: int, query: str | None
) -> list[dict]:
    """``kb.py_language_moments(model, vector, namespaces, min_vectors, query)``: the query's offset
    and scale per language group (and the vector each group is searched with), over the
    statistics the caller may read."""
    from . import language_statistics

    return language_statistics.moments_for_query(plpy, GD, SD, model, query_vector, namespaces, min_vectors, query)


@_entry_point
def parse_file(
    plpy,
    GD,
    SD,
    content: bytes | None,
    file_name: str | None,
    content_type: str | None,
    limits: str | None = None,
    ocr: str | None = None,
) -> str:
    """``kb.py_parse_file(content, file_name, content_type, limits, ocr)``: the file parsed, as JSON."""
    from . import ingest_db

    parsed = ingest_db.parse_file(content, file_name, content_type, json.loads(limits) if limits else None, ocr)
    return json.dumps(parsed, ensure_ascii=False)


@_entry_point
def dictionary_source(plpy, GD, SD) -> str:
    """``kb.py_dictionary_source()``: the bundled dictionary's name, snapshot, licence, URL and
    size, with the term rules this module computes its terms with, as JSON."""
    from dataclasses import asdict

    from . import dictionary

    return json.dumps({**asdict(dictionary.source(dictionary.data_lines())), "terms_version": lexical.TERMS_VERSION})


@_entry_point
def dictionary_rows(plpy, GD, SD):
    """``kb.py_dictionary_rows()``: every kept sense of the bundled dictionary, as rows."""
    from . import dictionary

    for entry in dictionary.entries(dictionary.data_lines()):
        yield (
            entry.headword,
            entry.sense,
            entry.headword_terms,
            entry.sense_terms,
            entry.sense_rank,
            entry.senses,
        )
