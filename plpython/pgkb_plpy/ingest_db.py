"""Ingest and embedding as they run inside PostgreSQL (called through :mod:`pgkb_plpy.entry`
with the ``plpy`` module, the backend's ``GD`` and the calling function's ``SD``).

A provider failure never rolls back a document: its chunks and postings are
stored, and the chunks wait in kb.embed_queue with the error until retried."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from . import chunker, embedders, lexical, parsers
from .backend import _plan, as_embedding_error, model_rows, provider_for, settings, vector_literal
from .front_matter import RetrievalKeyError
from .ingest import (
    ChunkPlan,
    ChunkRow,
    DocumentTerms,
    batches,
    chunk_rows,
    document_options,
    document_terms,
    page_span,
    plan_chunk_changes,
)

#: The settings one document sync reads.
SYNC_SETTINGS = (
    "chunk_max_tokens",
    "chunk_overlap_tokens",
    "embed_mode",
    "embed_batch_size",
    "lexical_terms_version",
    "concept_term_weight",
)
#: The settings one batch of the embedding queue reads.
QUEUE_SETTINGS = ("embed_batch_size", "embed_max_attempts")


def _store_vectors(plpy, SD, model: dict, chunk_ids: list[int], vectors: list[list[float]]) -> None:
    plan = _plan(
        plpy,
        SD,
        "store_vectors",
        """INSERT INTO kb.embeddings (chunk_id, model, dimensions, embedding)
           SELECT c, $2, $3, v::vector FROM unnest($1::bigint[], $4::text[]) AS t(c, v)
           ON CONFLICT (chunk_id, model) DO UPDATE
               SET embedding = excluded.embedding, dimensions = excluded.dimensions, embedded_at = now()""",
        ["bigint[]", "text", "int", "text[]"],
    )
    plpy.execute(plan, [chunk_ids, model["name"], model["dimensions"], [vector_literal(v) for v in vectors]])


def _enqueue(plpy, SD, model_name: str, chunk_ids: list[int], error: embedders.EmbeddingError | None) -> None:
    plan = _plan(
        plpy,
        SD,
        "enqueue",
        """INSERT INTO kb.embed_queue (chunk_id, model, attempts, error_kind, last_error, last_attempt_at)
           SELECT c, $2, $3, $4, $5, CASE WHEN $3 > 0 THEN now() END FROM unnest($1::bigint[]) AS c
           ON CONFLICT (chunk_id, model) DO UPDATE
               SET attempts = kb.embed_queue.attempts + excluded.attempts,
                   error_kind = excluded.error_kind, last_error = excluded.last_error,
                   last_attempt_at = excluded.last_attempt_at""",
        ["bigint[]", "text", "int", "text", "text"],
    )
    kind = error.kind if error else None
    plpy.execute(plan, [chunk_ids, model_name, 1 if error else 0, kind, str(error) if error else None])


def embed_texts(GD, model: dict, texts: list[str], batch_size: int) -> list[list[float]]:
    provider = provider_for(GD, model)
    vectors: list[list[float]] = []
    for batch in batches(texts, batch_size):
        vectors.extend(provider.embed_passages(batch))
    return embedders.check_vectors(vectors, len(texts), model["dimensions"], f"{model['provider']}:{model['model']}")


@dataclass
class _DocumentWork:
    """One document of :func:`sync_documents` on its way: its row, whether its retrieval keys
    exclude it, the terms it adds to each chunk, its chunks, and (once planned and inserted) what
    becomes of its existing chunks and the ids of its new ones."""

    row: dict
    excluded: bool
    extra: DocumentTerms
    chunks: list
    page_starts: list[int] | None
    plan: ChunkPlan | None = None
    new_ids: list[int] = field(default_factory=list)


def awaits_ocr(row: dict) -> bool:
    """Whether a document's body is the stand-in of a PDF whose every page waits for OCR (the parse
    trigger leaves such a body without ``page_starts``)."""
    return row.get("ocr_status") == "pending" and not row.get("page_starts")


def sync_document(plpy, GD, SD, new: dict) -> None:
    """:func:`sync_documents` of the one row ``new`` (the row trigger after an UPDATE)."""
    sync_documents(plpy, GD, SD, [new])


def sync_inserted_documents(plpy, GD, SD) -> None:
    """:func:`sync_documents` of the rows of the statement's transition table
    ``inserted_documents`` (the statement trigger after an INSERT), in id order."""
    rows = plpy.execute(
        """SELECT id, namespace, source, title, body, metadata::text AS metadata, parse_error, page_starts,
                  ocr_status
           FROM inserted_documents ORDER BY id"""
    )
    sync_documents(plpy, GD, SD, list(rows))


def sync_documents(plpy, GD, SD, documents: list[dict]) -> None:
    """Re-chunk documents after INSERT or a change of title/body (or of the retrieval keys of
    their metadata); embed only the chunks whose text is new; rewrite the postings of every chunk
    (a document's concept keys and aliases are terms of each of its chunks); record the outcome
    on the document rows. A document with ``rag_include`` false keeps no chunks and is
    ``excluded``; a retrieval key with a value it may not hold is an error (the statement fails).

    ``documents`` are rows of kb.documents (``id, namespace, source, title, body, metadata``,
    optionally ``parse_error, page_starts``), each at most once. What is stored is what
    processing them one at a time in this order stores (chunk ids are assigned in document
    order, then chunk order); the work is done in one statement per kind of row for all of them,
    so a statement inserting many documents pays the fixed costs (settings, models, status and
    statistics refreshes) once. Embedding stays per document, so a provider failure marks only
    that document's chunks as failed."""
    if not documents:
        return
    conf = settings(plpy, SD, SYNC_SETTINGS)
    lexical.check_terms_version(conf["lexical_terms_version"])
    weight = conf["concept_term_weight"] or 1
    max_tokens, overlap = int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
    docs: list[_DocumentWork] = []
    for new in documents:
        try:
            options = document_options(new.get("metadata"), new["body"])
        except RetrievalKeyError as exc:
            plpy.error(
                f"pgkb: document {new['namespace']}/{new['source']}: {exc}",
                hint="rag_include is true or false; concept_keys, aliases and synonyms are lists of words "
                "(docs/INGEST.md)",
                sqlstate="23514",
            )
        if new.get("parse_error") or awaits_ocr(new) or not options.rag_include:
            # a file that could not be parsed or is all scans awaiting OCR (its body is a stand-in),
            # or excluded from retrieval
            chunks = []
        else:
            chunks = chunker.chunk_document(new["body"], new["title"], max_tokens, overlap)
        docs.append(
            _DocumentWork(
                row=new,
                excluded=not options.rag_include and not new.get("parse_error"),
                extra=document_terms(options, weight),
                chunks=chunks,
                page_starts=new.get("page_starts") or None,
            )
        )
    doc_ids = [d.row["id"] for d in docs]
    existing_by_doc: dict[int, list[tuple[int, str]]] = {}
    for r in plpy.execute(
        _plan(
            plpy,
            SD,
            "existing_chunks",
            "SELECT document_id, id, content_hash FROM kb.chunks WHERE document_id = ANY($1)",
            ["bigint[]"],
        ),
        [doc_ids],
    ):
        existing_by_doc.setdefault(r["document_id"], []).append((r["id"], r["content_hash"]))
    for d in docs:
        d.plan = plan_chunk_changes(existing_by_doc.get(d.row["id"], []), [c.content_hash for c in d.chunks])

    deleted = [cid for d in docs for cid in d.plan.delete]
    if deleted:
        plpy.execute(
            _plan(plpy, SD, "delete_chunks", "DELETE FROM kb.chunks WHERE id = ANY($1)", ["bigint[]"]), [deleted]
        )
    # kept chunks: new offsets and ordinals, and their postings rewritten (the text is unchanged,
    # but the document's extra terms or the weights may not be)
    kept = [(d, cid, d.chunks[i]) for d in docs for cid, i in d.plan.keep]
    kept_rows = [row for d in docs for row in chunk_rows([d.chunks[i] for _, i in d.plan.keep], d.page_starts, d.extra)]
    if kept:
        spans = [page_span(d.page_starts, c.char_start, c.char_end) for d, _, c in kept]
        plpy.execute(
            _plan(
                plpy,
                SD,
                "renumber_chunks",
                """UPDATE kb.chunks c SET ordinal = t.o, char_start = t.s, char_end = t.e,
                          page_start = t.ps, page_end = t.pe, lexical_length = t.l
                   FROM unnest($1::bigint[], $2::int[], $3::int[], $4::int[], $5::int[], $6::int[], $7::int[])
                        AS t(id, o, s, e, ps, pe, l)
                   WHERE c.id = t.id""",
                ["bigint[]", "int[]", "int[]", "int[]", "int[]", "int[]", "int[]"],
            ),
            [
                [cid for _, cid, _ in kept],
                [c.ordinal for _, _, c in kept],
                [c.char_start for _, _, c in kept],
                [c.char_end for _, _, c in kept],
                [s[0] for s in spans],
                [s[1] for s in spans],
                [r.lexical_length for r in kept_rows],
            ],
        )
        plpy.execute(
            _plan(
                plpy, SD, "delete_postings", "DELETE FROM kb.lexical_postings WHERE chunk_id = ANY($1)", ["bigint[]"]
            ),
            [[cid for _, cid, _ in kept]],
        )
    new_rows = [
        (d, row) for d in docs for row in chunk_rows([d.chunks[i] for i in d.plan.insert], d.page_starts, d.extra)
    ]
    new_ids = _insert_chunks(plpy, SD, new_rows)
    position = 0
    for d in docs:
        d.new_ids = new_ids[position : position + len(d.plan.insert)]
        position += len(d.plan.insert)
    postings = [(d, cid, row) for (d, cid, _), row in zip(kept, kept_rows, strict=True)]
    postings += [(d, cid, row) for (d, row), cid in zip(new_rows, new_ids, strict=True)]
    _insert_postings(plpy, SD, [(d.row["id"], d.row["namespace"], cid, row) for d, cid, row in postings])

    if new_ids:
        _embed_new_chunks(plpy, GD, SD, docs, conf)
    # status, error and chunk count derive from the parse error, the queue and the chunks, one
    # rule for all paths (an excluded document stays so while it has no chunks); the chunker
    # version is recorded with the exclusion, in one update of the rows
    plpy.execute(
        _plan(
            plpy,
            SD,
            "exclude_and_version",
            """UPDATE kb.documents
               SET chunker_version = $2,
                   ingest_status = CASE WHEN id = ANY($3) THEN 'excluded' ELSE ingest_status END
               WHERE id = ANY($1) AND (chunker_version IS DISTINCT FROM $2 OR id = ANY($3))""",
            ["bigint[]", "text", "bigint[]"],
        ),
        [doc_ids, chunker.CHUNKER_VERSION, [d.row["id"] for d in docs if d.excluded]],
    )
    _refresh_document_status(plpy, SD, sorted(doc_ids))
    plpy.execute("SELECT kb.maybe_refresh_lexical_stats()")


def _embed_new_chunks(plpy, GD, SD, docs: list[_DocumentWork], conf: dict) -> None:
    """Vectors of the active model for the new chunks of ``docs`` (in ``sync`` mode), one
    document at a time so that a provider failure queues only that document's chunks with its
    error; every other model's (and in ``deferred`` mode the active one's) queued without one."""
    active_is_sync = conf["embed_mode"] == "sync"
    all_new = [cid for d in docs for cid in d.new_ids]
    for model in model_rows(plpy):
        if not (model["active"] and active_is_sync):
            _enqueue(plpy, SD, model["name"], all_new, None)
            continue
        stored_ids: list[int] = []
        vectors: list[list[float]] = []
        for d in docs:
            if not d.new_ids:
                continue
            texts = [d.chunks[i].embed_text for i in d.plan.insert]
            try:
                document_vectors = embed_texts(GD, model, texts, int(conf["embed_batch_size"]))
            except Exception as exc:  # noqa: BLE001 - any provider failure must keep the document
                _enqueue(plpy, SD, model["name"], d.new_ids, as_embedding_error(exc, model))
                continue
            stored_ids.extend(d.new_ids)
            vectors.extend(document_vectors)
        if stored_ids:
            _store_vectors(plpy, SD, model, stored_ids, vectors)


def _insert_chunks(plpy, SD, rows: list[tuple[_DocumentWork, ChunkRow]]) -> list[int]:
    """Insert the chunk rows (each with its document) in one statement, ids assigned in the
    order given; their ids in that order."""
    if not rows:
        return []
    inserted = plpy.execute(
        _plan(
            plpy,
            SD,
            "insert_chunks",
            """INSERT INTO kb.chunks (document_id, namespace, ordinal, section_path, section_text, content,
                                      embed_text, content_hash, token_count, lexical_length, char_start, char_end,
                                      language, han_share, page_start, page_end)
               SELECT t.d, t.ns, t.o, ARRAY(SELECT jsonb_array_elements_text(t.sp::jsonb)), t.st,
                      t.c, t.et, t.h, t.tc, t.ll, t.s, t.e, t.lang, t.hs, t.ps, t.pe
               FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[],
                           $8::text[], $9::int[], $10::int[], $11::int[], $12::int[], $13::text[], $14::float8[],
                           $15::int[], $16::int[])
                    WITH ORDINALITY AS t(d, ns, o, sp, st, c, et, h, tc, ll, s, e, lang, hs, ps, pe, n)
               ORDER BY t.n
               RETURNING id, document_id, ordinal""",
            ["bigint[]", "text[]", "int[]"] + ["text[]"] * 5 + ["int[]"] * 4 + ["text[]", "float8[]", "int[]", "int[]"],
        ),
        [
            [d.row["id"] for d, _ in rows],
            [d.row["namespace"] for d, _ in rows],
            [r.ordinal for _, r in rows],
            [json.dumps(r.section_path, ensure_ascii=False) for _, r in rows],
            [r.section_text for _, r in rows],
            [r.content for _, r in rows],
            [r.embed_text for _, r in rows],
            [r.content_hash for _, r in rows],
            [r.token_count for _, r in rows],
            [r.lexical_length for _, r in rows],
            [r.char_start for _, r in rows],
            [r.char_end for _, r in rows],
            [r.language for _, r in rows],
            [r.han_share for _, r in rows],
            [r.page_start for _, r in rows],
            [r.page_end for _, r in rows],
        ],
    )
    id_by_key = {(r["document_id"], r["ordinal"]): r["id"] for r in inserted}
    return [id_by_key[(d.row["id"], r.ordinal)] for d, r in rows]


def _insert_postings(plpy, SD, chunks: list[tuple[int, str, int, ChunkRow]]) -> None:
    """Insert the postings (``ChunkRow.terms``) of chunks given as (document id, namespace,
    chunk id, row), all in one statement. Only term, tf and the chunk's position are passed per
    posting; the chunk's columns are passed once per chunk and joined on (every array element
    costs a conversion, and a chunk has tens of postings)."""
    terms, tfs, positions = [], [], []
    for position, (_, _, _, row) in enumerate(chunks, start=1):
        terms.extend(row.terms)
        tfs.extend(row.terms.values())
        positions.extend([position] * len(row.terms))
    if terms:
        plpy.execute(
            _plan(
                plpy,
                SD,
                "insert_postings",
                """INSERT INTO kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length)
                   SELECT p.t, c.id, c.d, c.ns, p.f, c.l
                   FROM unnest($1::text[], $2::int[], $3::int[]) AS p(t, f, n)
                   INNER JOIN unnest($4::bigint[], $5::bigint[], $6::text[], $7::int[]) WITH ORDINALITY
                       AS c(id, d, ns, l, n) ON p.n = c.n""",
                ["text[]", "int[]", "int[]", "bigint[]", "bigint[]", "text[]", "int[]"],
            ),
            [
                terms,
                tfs,
                positions,
                [chunk_id for _, _, chunk_id, _ in chunks],
                [doc_id for doc_id, _, _, _ in chunks],
                [namespace for _, namespace, _, _ in chunks],
                [row.lexical_length for _, _, _, row in chunks],
            ],
        )


def embed_queue_batch(plpy, GD, SD, model_name: str, batch_size: int, include_exhausted: bool) -> dict:
    """Claim up to batch_size queued chunks of one model (FOR UPDATE SKIP LOCKED,
    so concurrent workers never take the same chunk), embed them, store the
    vectors and delete the claims; on failure keep the claims with the error.

    Only chunks of the namespaces in ``pgkb_call.embed_namespaces`` (a text[] literal set by
    kb.embed_queue_batch_as for this call; empty or unset: all) are claimed.

    The claim also locks the chunks' documents (SKIP LOCKED): a writer changing a
    document waits for the worker embedding it, and a worker skips documents a
    writer holds. Without that, a writer deleting chunks (waiting for the queue
    rows) and the worker storing their vectors (waiting for the chunk and
    document rows) deadlock."""
    conf = settings(plpy, SD, QUEUE_SETTINGS)
    model = next((m for m in model_rows(plpy) if m["name"] == model_name), None)
    if model is None:
        plpy.error(f"kb.embed_pending: unknown model {model_name!r}; see kb.models")
    max_attempts = 2**31 - 1 if include_exhausted else int(conf["embed_max_attempts"])
    claimed = plpy.execute(
        _plan(
            plpy,
            SD,
            "claim",
            """SELECT q.chunk_id, c.embed_text, c.document_id FROM kb.embed_queue q
               JOIN kb.chunks c ON c.id = q.chunk_id
               JOIN kb.documents d ON d.id = c.document_id
               WHERE q.model = $1 AND q.attempts < $2
                 AND CASE WHEN coalesce(current_setting('pgkb_call.embed_namespaces', true), '') = '' THEN true
                     ELSE c.namespace = ANY(current_setting('pgkb_call.embed_namespaces', true)::text[]) END
               ORDER BY q.attempts, q.chunk_id LIMIT $3
               FOR UPDATE OF q SKIP LOCKED
               FOR NO KEY UPDATE OF d SKIP LOCKED""",
            ["text", "int", "int"],
        ),
        [model_name, max_attempts, batch_size],
    )
    if not claimed:
        return {"claimed": 0, "embedded": 0, "failed": 0, "error": None}
    chunk_ids = [r["chunk_id"] for r in claimed]
    started = time.monotonic()
    try:
        vectors = embed_texts(GD, model, [r["embed_text"] for r in claimed], int(conf["embed_batch_size"]))
    except Exception as exc:  # noqa: BLE001 - failures are recorded, never raised into the caller's transaction
        error = as_embedding_error(exc, model)
        _enqueue(plpy, SD, model_name, chunk_ids, error)
        _refresh_document_status(plpy, SD, sorted({r["document_id"] for r in claimed}))
        return {"claimed": len(claimed), "embedded": 0, "failed": len(claimed), "error": str(error)}
    _store_vectors(plpy, SD, model, chunk_ids, vectors)
    plpy.execute(
        _plan(
            plpy,
            SD,
            "unqueue",
            "DELETE FROM kb.embed_queue WHERE model = $1 AND chunk_id = ANY($2)",
            ["text", "bigint[]"],
        ),
        [model_name, chunk_ids],
    )
    _refresh_document_status(plpy, SD, sorted({r["document_id"] for r in claimed}))
    return {
        "claimed": len(claimed),
        "embedded": len(claimed),
        "failed": 0,
        "error": None,
        "seconds": round(time.monotonic() - started, 3),
    }


def _refresh_document_status(plpy, SD, doc_ids: list[int]) -> None:
    plpy.execute(_plan(plpy, SD, "refresh_status", "SELECT kb.refresh_ingest_status($1)", ["bigint[]"]), [doc_ids])


def parse_file(
    content: bytes | None,
    file_name: str | None,
    content_type: str | None,
    limits: dict | None = None,
    ocr: str | None = None,
) -> dict:
    """``kb.py_parse_file``: a file's bytes parsed in a child process (:func:`parsers.parse_file`)
    under ``limits`` (kb.file_limits()), with OCR ``defer``/``run``/``off``; never raises for a
    bad file (the outcome says what went wrong)."""
    return parsers.parse_file(bytes(content or b""), file_name or "", content_type or None, limits, ocr or "defer")
