"""The bad-input battery: every case gets a clear error (naming what was wrong) or safe
handling, and nothing is partially written. One table of cases, so it reads as a list."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from helpers import insert_document
from psycopg.types.json import Jsonb

from harness import loader
from harness.retrieval import retrieve

NOT_BLANK = "documents_body_not_blank"
# a document the database accepts; each case below changes one thing about it
VALID_DOCUMENT = {"source": "bad.md", "body": "# Ok\n\nSome text."}


# (id, kwargs for INSERT, expected error class, text the message must contain)
INSERT_ERRORS = [
    ("empty body", {"body": ""}, psycopg.errors.CheckViolation, NOT_BLANK),
    ("whitespace body", {"body": " \t\r\n  \n"}, psycopg.errors.CheckViolation, NOT_BLANK),
    ("NUL byte", {"body": "a\x00b"}, psycopg.DataError, "NUL"),
    ("bad namespace", {"namespace": "../etc passwd"}, psycopg.errors.CheckViolation, "documents_namespace_valid"),
    ("blank source", {"source": "   "}, psycopg.errors.CheckViolation, "documents_source_not_blank"),
    ("metadata array", {"metadata": None, "doc_type": None}, None, None),  # placeholder replaced below
    ("unknown status", {"status": "published"}, psycopg.errors.CheckViolation, "documents_status_valid"),
    (
        "window reversed",
        {"effective_from": "2026-01-02", "effective_to": "2026-01-01"},
        psycopg.errors.CheckViolation,
        "documents_effective_window",
    ),
    ("bad date", {"effective_from": "2026-13-45"}, psycopg.errors.DatetimeFieldOverflow, "date"),
]
INSERT_ERRORS[5] = (
    "metadata not an object",
    {"metadata_json": "[1, 2]"},
    psycopg.errors.CheckViolation,
    "documents_metadata_is_object",
)


@pytest.mark.parametrize("case,fields,error,text", INSERT_ERRORS, ids=[c[0] for c in INSERT_ERRORS])
def test_bad_documents_are_refused_and_nothing_is_written(fresh_db, case, fields, error, text):
    fields = dict(fields)
    with pytest.raises(error) as info:
        if "metadata_json" in fields:
            fresh_db.execute(
                "INSERT INTO kb.documents (source, body, metadata) VALUES ('m.md', 'x', %s::jsonb)",
                (fields.pop("metadata_json"),),
            )
        else:
            insert_document(fresh_db, **(VALID_DOCUMENT | fields))
    assert text.lower() in str(info.value).lower()
    for table in ("kb.documents", "kb.chunks", "kb.lexical_postings", "kb.embeddings"):
        assert fresh_db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"] == 0, table


def test_duplicate_source_is_refused_and_the_first_kept(fresh_db):
    insert_document(fresh_db, "bad.md", "# First\n\nOriginal text.")
    with pytest.raises(psycopg.errors.UniqueViolation) as info:
        insert_document(fresh_db, "bad.md", "# Second\n\nOther text.")
    assert "documents_source_unique" in str(info.value)
    assert fresh_db.execute("SELECT body FROM kb.documents").fetchone()["body"].startswith("# First")


SAFE_BODIES = [
    ("10 MB body", "# Big\n\n" + ("Refund rules for orders and returns. " * 280_000)),
    ("1 MB line without spaces", "x" * 1_000_000),
    ("emoji and combining marks", "# Émoji 🎉\n\nCafe\u0301 refunds 😀 take 14 days. Ünïcödé ẞ."),
    (
        "right-to-left and mixed scripts",
        "# سياسة الاسترداد\n\nاسترداد خلال 14 يومًا. מדיניות החזרים. 退款 14 天 refund.",
    ),
]


@pytest.mark.parametrize("case,body", SAFE_BODIES, ids=[c[0] for c in SAFE_BODIES])
def test_unusual_bodies_are_stored_chunked_and_bounded(fresh_db, case, body):
    doc_id = insert_document(fresh_db, "bad.md", body)
    row = fresh_db.execute("SELECT ingest_status, chunk_count FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()
    assert row["ingest_status"] == "indexed" and row["chunk_count"] >= 1
    limit = fresh_db.execute("SELECT value::int AS v FROM kb.settings WHERE key = 'chunk_max_tokens'").fetchone()["v"]
    too_big = fresh_db.execute("SELECT count(*) AS n FROM kb.chunks WHERE token_count > %s", (limit,)).fetchone()["n"]
    assert too_big == 0
    longest = fresh_db.execute("SELECT max(length(term)) AS n FROM kb.lexical_postings").fetchone()["n"]
    assert (longest or 0) <= 64  # a 1 MB run of one letter yields no term at all


LOADER_FILES = [
    ("hostile YAML tag", b"---\ntitle: !!python/object/apply:os.system ['echo hi']\n---\n# T\n\nBody\n", ":2"),
    ("front matter not closed", b"---\ntitle: x\n# T\n\nBody\n", "no closing"),
    ("front matter is a list", b"---\n- a\n- b\n---\nBody\n", "mapping"),
    ("invalid date", b"---\neffective_from: 2026-02-30\n---\nBody\n", "day is out of range"),
    ("tags not a list", b"---\ntags: {a: 1}\n---\nBody\n", "tags"),
    ("unknown status", b"---\nstatus: live\n---\nBody\n", "status"),
    ("binary file", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "NUL"),
    ("latin-1 text", "caf\u00e9 r\u00e9sum\u00e9".encode("latin-1"), "UTF-8"),
    ("empty body after front matter", b"---\ntitle: x\n---\n   \n", "empty"),
]


@pytest.mark.parametrize("case,content,text", LOADER_FILES, ids=[c[0] for c in LOADER_FILES])
def test_loader_names_the_file_and_problem(tmp_path, case, content, text):
    path: Path = tmp_path / "doc.md"
    path.write_bytes(content)
    with pytest.raises(loader.DocumentError) as info:
        loader.read_document(path, "doc.md", None)
    message = str(info.value)
    assert str(path) in message and text.lower() in message.lower()


RETRIEVE_ERRORS = [
    ("k zero", {"k": 0}, "k must be between 1 and 1000"),
    ("k negative", {"k": -5}, "k must be between 1 and 1000"),
    ("k too large", {"k": 1001}, "k must be between 1 and 1000"),
    ("unknown mode", {"mode": "semantic"}, 'unknown mode "semantic"'),
    ("filters not an object", {"filters": Jsonb([1])}, "filters must be a JSON object"),
    ("unknown filter key", {"filters": {"colour": "red"}}, 'unknown filter key "colour"'),
]


@pytest.mark.parametrize("case,kwargs,text", RETRIEVE_ERRORS, ids=[c[0] for c in RETRIEVE_ERRORS])
def test_bad_retrieval_arguments_get_clear_errors(fresh_db, case, kwargs, text):
    insert_document(fresh_db, **VALID_DOCUMENT)
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(fresh_db, "refund", **kwargs)
    assert text in str(info.value)


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_empty_query_is_an_error(fresh_db, query):
    with pytest.raises(psycopg.errors.RaiseException, match="query is empty"):
        retrieve(fresh_db, query)


SAFE_QUERIES = [
    "'; DROP TABLE kb.documents; --",
    '" OR 1=1 --',
    "100%",
    "a_b",
    "back\\slash",
    ".*[(?",
    "😀🎉 refunds",
    "Cafe\u0301",
    "استرداد",
    "מדיניות",
    "退款 refund 14",
    "x" * 100_000,
]


@pytest.mark.parametrize("query", SAFE_QUERIES, ids=range(len(SAFE_QUERIES)))
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_hostile_or_unusual_queries_are_safe(fresh_db, query, mode):
    insert_document(fresh_db, "bad.md", "# Refunds\n\nRefunds take 14 days. استرداد خلال 14 يومًا. 退款十四天。")
    rows = retrieve(fresh_db, query, k=5, mode=mode)
    assert len(rows) <= 5
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 1


@pytest.mark.parametrize("as_of", ["0001-01-01", "1900-01-01", "9999-12-31"])
def test_far_past_and_future_as_of(fresh_db, as_of):
    insert_document(fresh_db, "bad.md", "# Refunds\n\nRefunds take 14 days.", effective_from="2024-01-01")
    rows = retrieve(fresh_db, "refunds days", as_of=as_of, mode="lexical")
    assert (rows == []) == (as_of < "2024-01-01")


def test_unknown_namespace_is_an_empty_result(fresh_db):
    insert_document(fresh_db, **VALID_DOCUMENT)
    assert retrieve(fresh_db, "text", namespace="no-such-namespace") == []
