"""Ingest and embedding as they run inside PostgreSQL (called through :mod:`pgkb_plpy.entry`
with the ``plpy`` module, the backend's ``GD`` and the calling function's ``SD``).

A provider failure never rolls back a document: its chunks and postings are
stored, and the chunks wait in kb.embed_queue with the error until retried."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from . import chunker, embedders, lexical, parsers
from .front_matter import RetrievalKeyError
from .ingest import batches, chunk_rows, document_options, document_terms, page_span, plan_chunk_changes, vector_literal

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


def _plan(plpy, SD, key: str, sql: str, types: list[str]):
    if key not in SD:
        SD[key] = plpy.prepare(sql, types)
    return SD[key]


def settings(plpy, SD, keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` as ``kb.setting`` gives them (a session's ``pgkb.<key>`` where the
    key allows one, else kb.settings; an unknown key is an error), in one query."""
    rows = plpy.execute(
        _plan(
            plpy,
            SD,
            "settings",
            "SELECT k AS key, kb.setting(k)::text AS value FROM unnest($1::text[]) AS k",
            ["text[]"],
        ),
        [list(keys)],
    )
    return {r["key"]: None if r["value"] is None else json.loads(r["value"]) for r in rows}


def model_rows(plpy) -> list[dict]:
    """Every registered model with the options its provider needs: ``kb.models.options``
    (what readers may see) merged with the model's ``kb.model_secrets`` (an api_key...).
    Only the SECURITY DEFINER paths (ingest trigger, queue worker, query embedding) run
    this; the secrets never leave the provider object (see :func:`redact`)."""
    rows = plpy.execute(
        """SELECT m.name, m.provider, m.model, m.dimensions, m.active,
                  (m.options || coalesce(s.secrets, '{}'))::text AS options,
                  coalesce(s.secrets, '{}')::text AS secrets
           FROM kb.models AS m LEFT JOIN kb.model_secrets AS s ON s.model = m.name
           ORDER BY m.name"""
    )
    return [dict(r, options=json.loads(r["options"]), secrets=json.loads(r["secrets"])) for r in rows]


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def redact(message: str, model: dict) -> str:
    """``message`` without the model's secret values and without credentials in any URL: errors
    are stored in kb.embed_queue (readers see it) and reach clients."""
    for value in model.get("secrets", {}).values():
        for text in value.values() if isinstance(value, dict) else [value]:
            if isinstance(text, str) and text:
                message = message.replace(text, "***")
    return _URL_CREDENTIALS.sub(r"\1***@", message)


def provider_for(GD, model: dict):
    cache = GD.setdefault("pgkb_providers", {})
    return embedders.get_provider(cache, model["provider"], model["model"], model["dimensions"], model["options"])


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


def query_vector(plpy, GD, model_name: str, query: str) -> str:
    """The vector (pgvector text form) of ``query`` from the provider of the model named
    ``model_name`` (the model whose stored vectors it will be compared with)."""
    model = next((m for m in model_rows(plpy) if m["name"] == model_name), None)
    if model is None:
        plpy.error(f"pgkb: unknown model {model_name!r}")
    try:
        vector = provider_for(GD, model).embed_query(query)
    except embedders.EmbeddingError as exc:
        raise _redacted(exc, model) from None
    embedders.check_vectors([vector], 1, model["dimensions"], f"{model['provider']}:{model['model']}")
    return vector_literal(vector)


def embed_texts(GD, model: dict, texts: list[str], batch_size: int) -> list[list[float]]:
    provider = provider_for(GD, model)
    vectors: list[list[float]] = []
    for batch in batches(texts, batch_size):
        vectors.extend(provider.embed_passages(batch))
    return embedders.check_vectors(vectors, len(texts), model["dimensions"], f"{model['provider']}:{model['model']}")


def _redacted(exc: embedders.EmbeddingError, model: dict | None) -> embedders.EmbeddingError:
    """``exc`` itself, or a copy whose message has the secrets of ``model`` masked."""
    message = redact(str(exc), model or {})
    if message == str(exc):
        return exc
    return embedders.EmbeddingError(
        exc.kind, message, provider=exc.provider, model=exc.model, status=exc.status, attempts=exc.attempts
    )


def as_embedding_error(exc: Exception, model: dict | None = None) -> embedders.EmbeddingError:
    """``exc`` as the EmbeddingError recorded on the queue, without the secrets of ``model``."""
    if isinstance(exc, embedders.EmbeddingError):
        return _redacted(exc, model)
    wrapped = embedders.EmbeddingError("bad_response", f"embedding failed: unexpected {type(exc).__name__}: {exc}")
    return _redacted(wrapped, model)


def sync_document(plpy, GD, SD, new: dict) -> None:
    """Re-chunk one document after INSERT or a change of title/body (or of the retrieval keys of
    its metadata); embed only the chunks whose text is new; rewrite the postings of every chunk
    (the document's concept keys and aliases are terms of each); record the outcome on the
    document row. A document with ``rag_include`` false keeps no chunks and is ``excluded``; a
    retrieval key with a value it may not hold is an error (the statement fails)."""
    doc_id = new["id"]
    conf = settings(plpy, SD, SYNC_SETTINGS)
    lexical.check_terms_version(conf["lexical_terms_version"])
    try:
        options = document_options(new.get("metadata"), new["body"])
    except RetrievalKeyError as exc:
        plpy.error(
            f"pgkb: document {new['namespace']}/{new['source']}: {exc}",
            hint="rag_include is true or false; concept_keys, aliases and synonyms are lists of words (docs/INGEST.md)",
            sqlstate="23514",
        )
    extra = document_terms(options, conf["concept_term_weight"] or 1)
    if new.get("parse_error") or not options.rag_include:
        chunks = []  # a file that could not be parsed (its body is a stand-in), or excluded from retrieval
    else:
        chunks = chunker.chunk_document(
            new["body"], new["title"], int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
        )
    page_starts = new.get("page_starts") or None
    existing = plpy.execute(
        _plan(plpy, SD, "existing_chunks", "SELECT id, content_hash FROM kb.chunks WHERE document_id = $1", ["bigint"]),
        [doc_id],
    )
    plan = plan_chunk_changes([(r["id"], r["content_hash"]) for r in existing], [c.content_hash for c in chunks])
    if plan.delete:
        plpy.execute(
            _plan(plpy, SD, "delete_chunks", "DELETE FROM kb.chunks WHERE id = ANY($1)", ["bigint[]"]), [plan.delete]
        )
    if plan.keep:
        plpy.execute(
            _plan(
                plpy,
                SD,
                "renumber_chunks",
                """UPDATE kb.chunks c SET ordinal = t.o, char_start = t.s, char_end = t.e,
                          page_start = t.ps, page_end = t.pe
                   FROM unnest($1::bigint[], $2::int[], $3::int[], $4::int[], $5::int[], $6::int[])
                        AS t(id, o, s, e, ps, pe)
                   WHERE c.id = t.id""",
                ["bigint[]", "int[]", "int[]", "int[]", "int[]", "int[]"],
            ),
            [
                [cid for cid, _ in plan.keep],
                [chunks[i].ordinal for _, i in plan.keep],
                [chunks[i].char_start for _, i in plan.keep],
                [chunks[i].char_end for _, i in plan.keep],
                [page_span(page_starts, chunks[i].char_start, chunks[i].char_end)[0] for _, i in plan.keep],
                [page_span(page_starts, chunks[i].char_start, chunks[i].char_end)[1] for _, i in plan.keep],
            ],
        )
        kept_rows = chunk_rows([chunks[i] for _, i in plan.keep], page_starts, extra)
        _rewrite_postings(plpy, SD, doc_id, new["namespace"], [cid for cid, _ in plan.keep], kept_rows)
    new_ids: list[int] = []
    if plan.insert:
        new_ids = insert_chunks(
            plpy, SD, doc_id, new["namespace"], [chunks[i] for i in plan.insert], page_starts, extra
        )

    if new_ids:
        active_is_sync = conf["embed_mode"] == "sync"
        for model in model_rows(plpy):
            if not (model["active"] and active_is_sync):
                _enqueue(plpy, SD, model["name"], new_ids, None)
                continue
            texts = [chunks[i].embed_text for i in plan.insert]
            try:
                vectors = embed_texts(GD, model, texts, int(conf["embed_batch_size"]))
            except Exception as exc:  # noqa: BLE001 - any provider failure must keep the document
                _enqueue(plpy, SD, model["name"], new_ids, as_embedding_error(exc, model))
                continue
            _store_vectors(plpy, SD, model, new_ids, vectors)
    # status, error and chunk count derive from the parse error, the queue and the chunks, one
    # rule for all paths (an excluded document stays so while it has no chunks); the chunker
    # version is recorded with them
    if not options.rag_include and not new.get("parse_error"):
        plpy.execute(
            _plan(plpy, SD, "exclude", "UPDATE kb.documents SET ingest_status = 'excluded' WHERE id = $1", ["bigint"]),
            [doc_id],
        )
    _refresh_document_status(plpy, SD, [doc_id])
    plpy.execute(
        _plan(
            plpy,
            SD,
            "chunker_version",
            "UPDATE kb.documents SET chunker_version = $2 WHERE id = $1 AND chunker_version IS DISTINCT FROM $2",
            ["bigint", "text"],
        ),
        [doc_id, chunker.CHUNKER_VERSION],
    )
    plpy.execute("SELECT kb.maybe_refresh_lexical_stats()")


def insert_chunks(
    plpy, SD, doc_id: int, namespace: str, chunks: list, page_starts: list[int] | None = None, extra=None
) -> list[int]:
    new_rows = chunk_rows(chunks, page_starts, extra)
    rows = plpy.execute(
        _plan(
            plpy,
            SD,
            "insert_chunks",
            """INSERT INTO kb.chunks (document_id, namespace, ordinal, section_path, section_text, content,
                                      embed_text, content_hash, token_count, lexical_length, char_start, char_end,
                                      language, han_share, page_start, page_end)
               SELECT $1, $2, t.o, ARRAY(SELECT jsonb_array_elements_text(t.sp::jsonb)), t.st,
                      t.c, t.et, t.h, t.tc, t.ll, t.s, t.e, t.lang, t.hs, t.ps, t.pe
               FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[],
                           $10::int[], $11::int[], $12::int[], $13::text[], $14::float8[], $15::int[], $16::int[])
                    WITH ORDINALITY AS t(o, sp, st, c, et, h, tc, ll, s, e, lang, hs, ps, pe, n)
               ORDER BY t.n
               RETURNING id, ordinal""",
            [
                "bigint",
                "text",
                "int[]",
                "text[]",
                "text[]",
                "text[]",
                "text[]",
                "text[]",
                "int[]",
                "int[]",
                "int[]",
                "int[]",
                "text[]",
                "float8[]",
                "int[]",
                "int[]",
            ],
        ),
        [
            doc_id,
            namespace,
            [r.ordinal for r in new_rows],
            [json.dumps(r.section_path, ensure_ascii=False) for r in new_rows],
            [r.section_text for r in new_rows],
            [r.content for r in new_rows],
            [r.embed_text for r in new_rows],
            [r.content_hash for r in new_rows],
            [r.token_count for r in new_rows],
            [r.lexical_length for r in new_rows],
            [r.char_start for r in new_rows],
            [r.char_end for r in new_rows],
            [r.language for r in new_rows],
            [r.han_share for r in new_rows],
            [r.page_start for r in new_rows],
            [r.page_end for r in new_rows],
        ],
    )
    id_by_ordinal = {r["ordinal"]: r["id"] for r in rows}
    ids = [id_by_ordinal[r.ordinal] for r in new_rows]
    _insert_postings(plpy, SD, doc_id, namespace, ids, new_rows)
    return ids


def _rewrite_postings(plpy, SD, doc_id: int, namespace: str, ids: list[int], rows: list) -> None:
    """Replace the postings and lexical length of kept chunks (their text is unchanged, but the
    document's extra terms or the weights may not be)."""
    plpy.execute(
        _plan(
            plpy,
            SD,
            "rewrite_lengths",
            """UPDATE kb.chunks c SET lexical_length = t.l
               FROM unnest($1::bigint[], $2::int[]) AS t(id, l)
               WHERE c.id = t.id AND c.lexical_length IS DISTINCT FROM t.l""",
            ["bigint[]", "int[]"],
        ),
        [ids, [r.lexical_length for r in rows]],
    )
    plpy.execute(
        _plan(plpy, SD, "delete_postings", "DELETE FROM kb.lexical_postings WHERE chunk_id = ANY($1)", ["bigint[]"]),
        [ids],
    )
    _insert_postings(plpy, SD, doc_id, namespace, ids, rows)


def _insert_postings(plpy, SD, doc_id: int, namespace: str, ids: list[int], new_rows: list) -> None:
    terms, chunk_ids, tfs, lengths = [], [], [], []
    for chunk_id, row in zip(ids, new_rows, strict=True):
        for term, tf in row.terms.items():
            terms.append(term)
            chunk_ids.append(chunk_id)
            tfs.append(tf)
            lengths.append(row.lexical_length)
    if terms:
        plpy.execute(
            _plan(
                plpy,
                SD,
                "insert_postings",
                """INSERT INTO kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length)
                   SELECT t, c, $5, $6, f, l
                   FROM unnest($1::text[], $2::bigint[], $3::int[], $4::int[]) AS u(t, c, f, l)""",
                ["text[]", "bigint[]", "int[]", "int[]", "bigint", "text"],
            ),
            [terms, chunk_ids, tfs, lengths, doc_id, namespace],
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


def parse_file(content: bytes | None, file_name: str | None, content_type: str | None) -> dict:
    """``kb.py_parse_file``: a file's bytes parsed in a child process (:func:`parsers.parse_file`);
    never raises for a bad file (the outcome says what went wrong)."""
    return parsers.parse_file(bytes(content or b""), file_name or "", content_type or None)
