"""`pgkb ingest`: folders of Markdown/text with YAML front matter loaded through
plain SQL into a real server (the trigger does the chunking and embedding)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest

from harness import loader
from harness.retrieval import retrieve

PGKB = os.environ.get("PGKB_BIN", "/opt/pgkb/venv/bin/pgkb")

POLICY = """---
title: Refund policy
namespace: policies
doc_type: policy
status: active
version: 3
effective_from: 2024-01-01
effective_to: 2030-12-31
supersedes: refund-v2.md
tags: [finance, customers]
owner: Finance team
reviewed: 2024-02-03
---
# Refund policy

Customers may request a refund within 14 days of delivery.
"""


def write(root: Path, relative: str, content: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def ingest(dsn: str, *paths: Path, **kwargs) -> loader.Summary:
    return loader.ingest(dsn, [str(p) for p in paths], progress=False, **kwargs)


def docs(conn) -> dict[str, dict]:
    return {r["source"]: r for r in conn.execute("SELECT * FROM kb.documents ORDER BY id")}


def test_front_matter_keys_are_mapped(fresh_db, dsn, tmp_path):
    write(tmp_path, "finance/refunds.md", POLICY)
    write(tmp_path, "notes.txt", "Plain text without front matter.\n")
    summary = ingest(dsn, tmp_path)
    assert (len(summary.synced), summary.skipped, summary.failed, summary.removed) == (2, [], [], [])

    stored = docs(fresh_db)
    assert set(stored) == {"finance/refunds.md", "notes.txt"}  # relative to the folder, POSIX separators
    d = stored["finance/refunds.md"]
    assert (d["namespace"], d["title"], d["doc_type"], d["status"], d["version"]) == (
        "policies",
        "Refund policy",
        "policy",
        "active",
        "3",
    )
    assert (d["effective_from"], d["effective_to"], d["supersedes"]) == (
        dt.date(2024, 1, 1),
        dt.date(2030, 12, 31),
        "refund-v2.md",
    )
    assert d["metadata"] == {"owner": "Finance team", "reviewed": "2024-02-03", "tags": ["finance", "customers"]}
    assert d["body"].startswith("# Refund policy") and "---" not in d["body"]
    assert d["ingest_status"] == "indexed" and d["chunk_count"] >= 1

    n = stored["notes.txt"]
    assert (n["namespace"], n["title"], n["status"], n["metadata"]) == ("default", None, "active", {})

    rows = retrieve(fresh_db, "refund within 14 days", k=3, namespace="policies")
    assert rows and rows[0]["source"] == "finance/refunds.md"


def test_namespace_override_and_single_file(fresh_db, dsn, tmp_path):
    path = write(tmp_path, "deep/dir/refunds.md", POLICY)
    summary = ingest(dsn, path, namespace="other")
    assert len(summary.synced) == 1
    assert [(d["namespace"], d["source"]) for d in docs(fresh_db).values()] == [("other", "refunds.md")]


def test_second_run_skips_unchanged_and_syncs_edited(fresh_db, dsn, tmp_path):
    write(tmp_path, "a.md", "# A\n\nAlpha policy text.\n")
    write(tmp_path, "b.md", "# B\n\nBeta policy text.\n")
    write(tmp_path, "c.md", "---\ntags: [x]\n---\n# C\n\nGamma policy text.\n")
    first = ingest(dsn, tmp_path)
    assert sorted(first.synced) == ["a.md", "b.md", "c.md"]
    before = docs(fresh_db)

    second = ingest(dsn, tmp_path)
    assert (second.synced, sorted(second.skipped), second.failed, second.removed) == (
        [],
        ["a.md", "b.md", "c.md"],
        [],
        [],
    )
    after = docs(fresh_db)
    assert all(after[s]["updated_at"] == before[s]["updated_at"] for s in before)

    write(tmp_path, "b.md", "# B\n\nBeta policy text, now revised.\n")
    write(tmp_path, "c.md", "---\ntags: [x, y]\n---\n# C\n\nGamma policy text.\n")  # front matter only
    chunk_ids_c = [
        r["id"] for r in fresh_db.execute("SELECT id FROM kb.chunks WHERE document_id = %s", (after["c.md"]["id"],))
    ]
    third = ingest(dsn, tmp_path)
    assert (sorted(third.synced), third.skipped) == (["b.md", "c.md"], ["a.md"])
    now = docs(fresh_db)
    assert "revised" in now["b.md"]["body"] and now["b.md"]["id"] == before["b.md"]["id"]
    assert now["c.md"]["metadata"] == {"tags": ["x", "y"]}
    assert [
        r["id"] for r in fresh_db.execute("SELECT id FROM kb.chunks WHERE document_id = %s", (now["c.md"]["id"],))
    ] == (chunk_ids_c)
    assert retrieve(fresh_db, "revised beta", k=1, mode="lexical")[0]["source"] == "b.md"


def test_deleted_file_is_marked_removed_and_not_retrieved(fresh_db, dsn, tmp_path):
    write(tmp_path, "keep.md", "# Keep\n\nThe VPN requires a hardware token.\n")
    gone = write(tmp_path, "gone.md", "# Gone\n\nThe cafeteria closes at seven in the evening.\n")
    ingest(dsn, tmp_path)
    assert retrieve(fresh_db, "cafeteria closes", k=3)[0]["source"] == "gone.md"

    gone.unlink()
    summary = ingest(dsn, tmp_path)
    assert summary.removed == ["default/gone.md"]
    assert summary.skipped == ["keep.md"]
    stored = docs(fresh_db)
    assert stored["gone.md"]["removed_at"] is not None and stored["keep.md"]["removed_at"] is None
    assert all(r["source"] != "gone.md" for r in retrieve(fresh_db, "cafeteria closes at seven", k=5))
    assert fresh_db.execute("SELECT removed FROM kb.ingest_status").fetchone()["removed"] == 1

    # running again does not report it twice; bringing the file back makes it current again
    assert ingest(dsn, tmp_path).removed == []
    write(tmp_path, "gone.md", "# Gone\n\nThe cafeteria closes at seven in the evening.\n")
    back = ingest(dsn, tmp_path)
    assert back.synced == ["gone.md"]
    assert docs(fresh_db)["gone.md"]["removed_at"] is None
    assert retrieve(fresh_db, "cafeteria closes", k=3)[0]["source"] == "gone.md"


def test_bad_front_matter_names_file_and_line_and_others_load(fresh_db, dsn, tmp_path):
    write(tmp_path, "good.md", "# Good\n\nFine document.\n")
    bad = write(tmp_path, "bad.md", "---\ntitle: Bad\ntags: [unclosed\nowner: x\n---\n# Bad\n\nBody.\n")
    unclosed = write(tmp_path, "unclosed.md", "---\ntitle: Never closed\n\n# Body\n")
    bad_date = write(tmp_path, "date.md", "---\neffective_from: next tuesday\n---\nBody.\n")
    bad_status = write(tmp_path, "status.md", "---\nstatus: archived\n---\nBody.\n")
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["good.md"]
    errors = {Path(f["file"]).name: f["error"] for f in summary.failed}
    assert set(errors) == {"bad.md", "unclosed.md", "date.md", "status.md"}
    assert errors["bad.md"].startswith(f"{bad}:")
    line = int(errors["bad.md"].split(":")[1])
    assert line in (3, 4, 5)  # the YAML error is at or just after the unclosed list on line 3
    assert "front matter" in errors["bad.md"]
    assert errors["unclosed.md"].startswith(f"{unclosed}:1:") and "closing" in errors["unclosed.md"]
    assert str(bad_date) in errors["date.md"] and "effective_from" in errors["date.md"]
    assert str(bad_status) in errors["status.md"] and "archived" in errors["status.md"]
    assert list(docs(fresh_db)) == ["good.md"]


def test_a_loaded_file_that_turns_bad_is_not_marked_removed(fresh_db, dsn, tmp_path):
    write(tmp_path, "doc.md", "---\ntitle: Doc\n---\nThe original text.\n")
    ingest(dsn, tmp_path)
    write(tmp_path, "doc.md", "---\ntitle: [broken\n---\nThe original text.\n")
    summary = ingest(dsn, tmp_path)
    assert len(summary.failed) == 1 and summary.removed == []
    d = docs(fresh_db)["doc.md"]
    assert d["removed_at"] is None and d["body"] == "The original text.\n"  # the last good version stays


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("program.md", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00", "NUL byte"),  # no format read here
        ("latin1.md", "# Café\n\nsecond line\nprix: 5 €\n".encode("cp1252"), "not valid UTF-8"),
        ("nul.txt", b"text with a \x00 NUL byte", "NUL byte"),
        ("empty.md", b"---\ntitle: Only front matter\n---\n\n", "empty"),
    ],
)
def test_unreadable_files_get_clear_errors(fresh_db, dsn, tmp_path, name, content, expected):
    write(tmp_path, "ok.md", "# Fine\n\nA readable document.\n")
    path = write(tmp_path, name, content)
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["ok.md"]
    assert len(summary.failed) == 1
    error = summary.failed[0]["error"]
    assert error.startswith(str(path)) and expected in error
    if name == "latin1.md":
        assert error.startswith(f"{path}:1:")  # the first bad byte (é) is on line 1


def test_bom_and_crlf_front_matter(fresh_db, dsn, tmp_path):
    write(
        tmp_path, "win.md", b"\xef\xbb\xbf---\r\ntitle: Windows\r\nowner: it\r\n---\r\n# Windows\r\n\r\nCRLF body.\r\n"
    )
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["win.md"], summary.failed
    d = docs(fresh_db)["win.md"]
    assert (d["title"], d["metadata"]) == ("Windows", {"owner": "it"})


def test_database_rejection_is_reported_per_file(fresh_db, dsn, tmp_path):
    write(tmp_path, "ok.md", "Fine.\n")
    bad = write(tmp_path, "window.md", "---\neffective_from: 2025-01-01\neffective_to: 2024-01-01\n---\nBackwards.\n")
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["ok.md"]
    assert len(summary.failed) == 1 and summary.failed[0]["error"].startswith(f"{bad}: rejected by the database")


def test_cli_ingest_prints_json_summary(fresh_db, dsn, tmp_path):
    write(tmp_path, "a.md", "# A\n\nAlpha.\n")
    write(tmp_path, "b.md", "---\nbad: [\n---\nBeta.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGKB_")}
    env["PGKB_DSN"] = dsn
    run = subprocess.run([PGKB, "ingest", str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr  # a file failed
    out = json.loads(run.stdout)
    assert (out["synced"], out["skipped"], out["failed"], out["removed"]) == (1, 0, 1, 0)
    assert "b.md:" in out["errors"][0]["error"]

    (tmp_path / "b.md").unlink()
    run = subprocess.run(
        [PGKB, "ingest", str(tmp_path), "--namespace", "default"], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["synced"], out["skipped"], out["failed"], out["removed"]) == (0, 1, 0, 0)


NOT_A_MAPPING = [
    ("a sentence", "---\nRefunds take fourteen days.\n---\n# Refunds\n\nBody.\n", (2,), "mapping"),
    ("a list", "---\n- refunds\n- returns\n---\nBody.\n", (2,), "mapping"),
    # YAML notices the missing ':' at the end of the block
    ("a key then prose", "---\nNote: refunds take fourteen days.\nAsk finance.\n---\nBody.\n", (3, 4), "front matter"),
]


@pytest.mark.parametrize("case,content,lines,text", NOT_A_MAPPING, ids=[c[0] for c in NOT_A_MAPPING])
def test_text_between_two_rules_that_is_not_a_mapping_is_refused_with_its_line(
    fresh_db, dsn, tmp_path, case, content, lines, text
):
    path = write(tmp_path, "doc.md", content)
    summary = ingest(dsn, tmp_path)
    assert summary.synced == [] and len(summary.failed) == 1
    error = summary.failed[0]["error"]
    assert error.startswith(f"{path}:") and int(error[len(f"{path}:") :].split(":")[0]) in lines, error
    assert text in error and docs(fresh_db) == {}


@pytest.mark.parametrize("inner", ["", "# only a comment\n", "\n  \n"], ids=["empty", "comments only", "blank lines"])
def test_front_matter_with_no_keys_is_empty_and_the_body_is_kept(fresh_db, dsn, tmp_path, inner):
    write(tmp_path, "doc.md", f"---\n{inner}---\n# Refunds\n\nRefunds take fourteen days.\n")
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["doc.md"], summary.failed
    d = docs(fresh_db)["doc.md"]
    assert d["body"] == "# Refunds\n\nRefunds take fourteen days.\n" and d["metadata"] == {}
    assert (d["ingest_status"], d["chunk_count"]) == ("indexed", 1)


def test_front_matter_lines_with_trailing_spaces_are_front_matter(fresh_db, dsn, tmp_path):
    # the in-database chunker takes "--- " as a rule of front matter too: the loader must not store it as text
    write(tmp_path, "doc.md", "--- \ntitle: Spaced\nowner: it\n---  \nBody text.\n")
    summary = ingest(dsn, tmp_path)
    assert summary.synced == ["doc.md"], summary.failed
    d = docs(fresh_db)["doc.md"]
    assert (d["title"], d["metadata"], d["body"]) == ("Spaced", {"owner": "it"}, "Body text.\n")


@pytest.mark.parametrize(
    "body", ["\u00a0\u3000\u2003\n", "\u200b\u200d\ufeff\n", "\n\u2028\u00ad \n"], ids=["spaces", "zero-width", "mixed"]
)
def test_a_body_blank_by_the_one_definition_is_refused_by_the_loader(fresh_db, dsn, tmp_path, body):
    path = write(tmp_path, "blank.md", "---\ntitle: Blank\n---\n" + body)
    summary = ingest(dsn, tmp_path)
    assert summary.synced == [] and len(summary.failed) == 1
    error = summary.failed[0]["error"]
    assert error.startswith(str(path)) and "the document body is empty" in error, error


# --------------------------------------------------------------------------- bulk path (--workers)


def _corpus(root: Path, n: int) -> None:
    for i in range(n):
        write(root, f"dir{i % 3}/doc{i:02d}.md", f"---\ntitle: Doc {i}\n---\n# Doc {i}\n\nTopic {i} covers item{i}.\n")
    write(root, "bad.md", "---\nbad: [\n---\nBroken.\n")
    write(root, "window.md", "---\neffective_from: 2025-01-01\neffective_to: 2024-01-01\n---\nBackwards.\n")


def _derived(conn) -> list[tuple]:
    return [
        tuple(r.values())
        for r in conn.execute(
            """SELECT d.source, d.title, d.ingest_status, d.chunk_count, c.ordinal, c.content_hash, c.lexical_length,
                      (SELECT count(*) FROM kb.lexical_postings p WHERE p.chunk_id = c.id) AS postings,
                      (SELECT e.embedding::text FROM kb.embeddings e WHERE e.chunk_id = c.id) AS vector
               FROM kb.documents d JOIN kb.chunks c ON c.document_id = d.id ORDER BY 1, 5"""
        )
    ]


def test_bulk_load_with_workers_stores_and_embeds_what_the_file_by_file_load_does(fresh_db, dsn, tmp_path):
    # more files than one statement's batch, so that each connection stores several batches
    _corpus(tmp_path, 2 * loader.BULK_BATCH_FILES + 7)
    serial = ingest(dsn, tmp_path)
    expected = _derived(fresh_db)
    fresh_db.execute("DELETE FROM kb.documents")

    bulk = ingest(dsn, tmp_path, workers=2)
    assert sorted(bulk.synced) == sorted(serial.synced) and len(bulk.synced) == 2 * loader.BULK_BATCH_FILES + 7
    assert sorted(f["file"] for f in bulk.failed) == sorted(f["file"] for f in serial.failed)
    assert {f["error"] for f in bulk.failed} == {f["error"] for f in serial.failed}
    assert _derived(fresh_db) == expected
    assert {r[2] for r in expected} == {"indexed"} and all(r[-1] for r in expected)
    assert count_rows_in(fresh_db, "kb.embed_queue") == 0
    assert bulk.embedding["embedded"] == len(expected) and bulk.embedding["remaining"] == 0
    assert bulk.embedding["concurrency"] == 2

    # a second run skips every file, and a file gone is marked removed, as without workers
    (tmp_path / "dir0" / "doc00.md").unlink()
    again = ingest(dsn, tmp_path, workers=2)
    assert again.synced == [] and len(again.skipped) == len(bulk.synced) - 1
    assert again.removed == ["default/dir0/doc00.md"]


def test_bulk_load_reports_documents_whose_embedding_failed_as_stored(fresh_db, dsn, tmp_path):
    from fake_ollama import FakeOllama

    write(tmp_path, "a.md", "# A\n\nAlpha.\n")
    write(tmp_path, "b.md", "# B\n\nBeta.\n")
    with FakeOllama(dimensions=8, mode="always_500") as srv:
        fresh_db.execute("DELETE FROM kb.models")
        options = {"base_url": srv.url, "max_retries": 0, "timeout_s": 2, "backoff_s": 0.01}
        fresh_db.execute(
            "SELECT kb.register_model('fake', 'ollama', 'nomic-embed-text', 8, %s, true)", (json.dumps(options),)
        )
        summary = ingest(dsn, tmp_path, workers=2)
    assert sorted(summary.synced) == ["a.md", "b.md"]
    assert summary.embedding["failed_batches"] >= 1 and summary.embedding["remaining"] == 2
    assert sorted(Path(f["file"]).name for f in summary.failed) == ["a.md", "b.md"]
    assert all(f["stored"] and "not embedded" in f["error"] for f in summary.failed)
    assert count_rows_in(fresh_db, "kb.chunks") == 2  # nothing lost: chunks stored, queued with the error


def test_the_loader_stores_what_kb_upsert_document_stores(fresh_db, dsn, tmp_path):
    # two writes of the same rule (the loader's statement batches documents, which the one-document
    # function cannot): each finds the other's row unchanged, front matter, dates and metadata too
    from psycopg.types.json import Jsonb

    def upsert(path: Path) -> list:
        doc = loader.read_document(path, path.name, None)
        document = json.loads(json.dumps(dict(doc.__dict__, origin=str(tmp_path.resolve())), default=str))
        return fresh_db.execute("SELECT * FROM kb.upsert_document(%s)", (Jsonb(document),)).fetchall()

    loaded = write(tmp_path, "refunds.md", POLICY)
    ingest(dsn, tmp_path)
    assert upsert(loaded) == []

    travel = POLICY.replace("Refund policy", "Travel policy").replace("supersedes: refund-v2.md\n", "")
    assert len(upsert(write(tmp_path, "travel.md", travel))) == 1
    again = ingest(dsn, tmp_path)
    assert (again.synced, sorted(again.skipped)) == ([], ["refunds.md", "travel.md"])


def test_workers_out_of_range_is_a_clear_error(dsn, tmp_path):
    with pytest.raises(ValueError, match="--workers must be between 1 and 64"):
        ingest(dsn, tmp_path, workers=0)


def count_rows_in(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
