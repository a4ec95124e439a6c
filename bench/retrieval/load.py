"""A benchmark database: the synthetic corpus stored as ingest would store it, bulk-loaded by COPY.

``build_database`` drops and re-creates the database, migrates it (this checkout's ``migrations/``
and ``sql/`` unless other folders are given), registers the ``hash`` model ``bench-hash`` as the
active model, and loads the corpus:

* **What is stored is computed by ingest's own code**, read from the database it fills:
  ``pgkb_plpy.ingest_db.settings`` (the keys of ``SYNC_SETTINGS``) and ``model_rows``, through a
  minimal ``plpy`` over the connection, give the chunk budget, the batch size and the model;
  ``pgkb_plpy.chunker.chunk_document(body, title, chunk_max_tokens, chunk_overlap_tokens)`` cuts
  every document as the ingest trigger does; ``chunk_rows`` gives the ``kb.chunks`` columns and
  BM25 terms of the chunks; ``pgkb_plpy.ingest_db.embed_texts`` embeds their ``embed_text``
  through the model's provider in batches of ``embed_batch_size``, and COPY writes them as numpy
  arrays through pgvector-python's adapter (``register_vector``). Chunk ids are assigned in document and
  ordinal order, as one-document-at-a-time ingest assigns them.
* **The database computes what it computes at ingest**: ``kb.documents`` is loaded with its BEFORE
  triggers (the content hash, ``kb.trg_documents_before``) and without its AFTER INSERT row
  triggers (the chunk-and-embed step, done here instead); ``kb.refresh_ingest_status`` sets every
  document's ``ingest_status``, ``chunk_count`` and ``indexed_at`` after the load, then
  ``VACUUM FULL`` compacts the table as if it had been loaded once.
* ``kb.chunks``, ``kb.embeddings`` and ``kb.lexical_postings`` are loaded with
  ``session_replication_role = replica`` (no foreign-key checks) after dropping their secondary
  indexes and the postings key, which are re-created after the load; then
  ``kb.refresh_lexical_stats()``, ``kb.refresh_language_statistics()`` of the active model and
  ``VACUUM (ANALYZE)`` of every ``kb`` table.
* **Checked against the trigger**: before those statistics, ``verify_against_trigger`` re-ingests
  a sample of the loaded documents through the real ingest trigger in a transaction that is
  rolled back, and the build fails unless every stored row agrees with the loaded one.

Left out on purpose: the ``kb.embed_queue`` rows ingest adds for registered models that are not
active (retrieval never reads them).

The chunk count is exact: documents are taken from the corpus stream while their chunks fit;
the remainder is made up with one-sentence documents (one chunk each).

The database's comment records its build parameters (``build_meta``) and facts of the build; a
database is reused only when those parameters match.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import random
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import psycopg
from pgkb_plpy import chunker, ingest_db
from pgkb_plpy.ingest import chunk_rows
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import dict_row

from .config import GENERATOR_VERSION, REAL_CORPUS_VERSION, BenchModel, database_dsn, hash_model, log
from .corpus import Corpus, Document, lifecycle_plan
from .realcorpus import PerturbedCorpus, perturbed_vector

NAMESPACE = "default"
CHUNK_BATCH = 512  # documents chunked per round while filling up to the chunk count
STATUS_BATCH = 1000  # documents per kb.refresh_ingest_status call

CHUNK_COLUMNS = (
    "id, document_id, namespace, ordinal, section_path, section_text, content, "
    "embed_text, content_hash, token_count, lexical_length, char_start, char_end, language, han_share"
)
DOCUMENT_COLUMNS = (
    "id, namespace, source, title, body, doc_type, metadata, status, version, effective_from, effective_to, supersedes"
)


class Plpy:
    """The part of PL/Python's ``plpy`` that ingest's settings and model readers use, over a
    psycopg connection: ``prepare(query, types)`` and ``execute(query or plan, args)`` with
    PostgreSQL's own ``$n`` placeholders, rows as dicts."""

    class Plan:
        def __init__(self, query: str):
            self.query = query

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def prepare(self, query: str, types: list[str] | None = None) -> Plan:
        return self.Plan(query)

    def execute(self, query: str | Plan, args: list | None = None) -> list[dict]:
        text = query.query if isinstance(query, self.Plan) else query
        with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
            return cur.execute(text, args).fetchall()


def build_meta(size: int, dims: int, seed: int, model: BenchModel | None = None, corpus: str = "synthetic") -> dict:
    """The parameters a reusable database must have been built with."""
    meta = {"bench": "retrieval_latency", "generator": GENERATOR_VERSION, "chunks": size, "dims": dims, "seed": seed}
    if corpus != "synthetic":
        meta |= {"corpus": corpus, "real_corpus": REAL_CORPUS_VERSION, "model": model.name if model else None}
    return meta


def existing_meta(server_dsn: str, name: str) -> dict | None:
    """The build comment of database ``name`` (``{}`` if unreadable), None if it does not exist."""
    with psycopg.connect(database_dsn(server_dsn, "postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row[0] or "null") or {}
    except ValueError:
        return {}


# --------------------------------------------------------------------------- ingest's steps (worker processes)

_GD: dict = {}  # the provider cache of a worker process, as PL/Python's GD is per backend
#: precomputed vectors by md5 of the embed_text (a real model's bulk job), set before the fork
_VECTORS: dict[str, np.ndarray] | None = None


def text_key(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def embed_texts_of(job: tuple) -> list[str]:
    """The ``embed_text`` of one document's chunks (what its provider would embed)."""
    return [r.embed_text for r in chunk_rows(job[2])]


class VectorStore:
    """A real model's vectors of the corpus's chunk texts, kept in a folder between runs:
    ``texts.jsonl`` (one JSON string a line), ``model.json`` (the registered model row) and
    ``vectors.npy`` (float32, one row per text), written by ``bench.retrieval.embed_job``."""

    def __init__(self, folder: Path):
        self.folder = folder

    def lookup(self, model: dict) -> dict[str, np.ndarray] | None:
        """md5(text) -> vector, or None when the folder has no finished vectors of ``model``."""
        f = self.folder
        if not (f / "vectors.npy").is_file() or not (f / "model.json").is_file():
            return None
        stored = json.loads((f / "model.json").read_text())
        if any(stored.get(k) != model[k] for k in ("provider", "model", "dimensions")):
            return None
        vectors = np.load(f / "vectors.npy")
        with (f / "texts.jsonl").open(encoding="utf-8") as fh:
            keys = [text_key(json.loads(line)) for line in fh]
        if len(keys) != len(vectors):
            return None
        return dict(zip(keys, vectors, strict=True))

    def write_texts(self, texts: list[str], model: dict) -> int:
        """Write the unique texts (in first-seen order) and the model row; returns how many."""
        self.folder.mkdir(parents=True, exist_ok=True)
        unique = list(dict.fromkeys(texts))
        with (self.folder / "texts.jsonl").open("w", encoding="utf-8") as fh:
            for t in unique:
                fh.write(json.dumps(t, ensure_ascii=False) + "\n")
        row = {k: model[k] for k in ("name", "provider", "model", "dimensions")} | {"options": model["options"]}
        (self.folder / "model.json").write_text(json.dumps(row))
        for stale in self.folder.glob("*.npy"):
            stale.unlink()
        return len(unique)


def copy_vectors(corpus: PerturbedCorpus, docs: list[Document], doc_texts: list[list[str]], vectors: dict, conf: dict):
    """``vectors`` (md5 of a passage's text -> its real vector) with the vectors of the perturbed
    copies among ``docs`` (whose chunk texts are ``doc_texts``) added: each its passage's vector
    perturbed (``realcorpus.perturbed_vector``)."""
    out = dict(vectors)
    max_tokens, overlap = int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
    passage_key: dict[int, str] = {}
    for doc, texts in zip(docs, doc_texts, strict=True):
        copy = corpus.copy_of.get((doc.title, doc.body))
        if copy is None:
            continue
        i = copy[0]
        if i not in passage_key:
            b = corpus.base.docs[i]
            passage_key[i] = text_key(chunk_rows(chunk((b.title, b.body, max_tokens, overlap)))[0].embed_text)
        for t in texts:
            out[text_key(t)] = perturbed_vector(vectors[passage_key[i]], copy, corpus.seed, corpus.sigma)
    return out


def chunk(job: tuple[str, str, int, int]) -> list[chunker.Chunk]:
    """The chunks of one document, as ``ingest_db.sync_document`` cuts them."""
    title, body, max_tokens, overlap_tokens = job
    return chunker.chunk_document(body, title, max_tokens, overlap_tokens)


def document_rows(job: tuple[int, int, list[chunker.Chunk], dict, int]) -> tuple[list[tuple], str, list[tuple]]:
    """COPY rows of one document's chunks, its postings (COPY text) and its embeddings."""
    doc_id, first_chunk_id, chunks, model, batch_size = job
    rows = chunk_rows(chunks)
    ids = list(range(first_chunk_id, first_chunk_id + len(rows)))
    chunk_copy = [
        (
            cid,
            doc_id,
            NAMESPACE,
            r.ordinal,
            r.section_path,
            r.section_text,
            r.content,
            r.embed_text,
            r.content_hash,
            r.token_count,
            r.lexical_length,
            r.char_start,
            r.char_end,
            r.language,
            r.han_share,
        )
        for cid, r in zip(ids, rows, strict=True)
    ]
    postings = "".join(
        f"{_escape_copy(term)}\t{cid}\t{doc_id}\t{NAMESPACE}\t{tf}\t{r.lexical_length}\n"
        for cid, r in zip(ids, rows, strict=True)
        for term, tf in r.terms.items()
    )
    if _VECTORS is not None:  # a real model's vectors, embedded in bulk by the same provider
        vectors = [_VECTORS[text_key(r.embed_text)] for r in rows]
    else:
        vectors = ingest_db.embed_texts(_GD, model, [r.embed_text for r in rows], batch_size)
    # a vector carries its chunk's language group, as the ingest trigger writes it: the
    # language-corrected dense leg scans one partial index per group
    embeddings = [
        (cid, model["name"], model["dimensions"], np.asarray(v, dtype=np.float32), r.language)
        for cid, v, r in zip(ids, vectors, rows, strict=True)
    ]
    return chunk_copy, postings, embeddings


def _escape_copy(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


# --------------------------------------------------------------------------- corpus -> documents and chunks


def fill(corpus: Corpus, seed: int, size: int, conf: dict, pool) -> tuple[list[Document], list[list], int]:
    """Documents and their chunks, exactly ``size`` chunks in all; and how many are fillers."""
    max_tokens, overlap = int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
    stream = corpus.documents(seed)
    docs: list[Document] = []
    chunks: list[list] = []
    made, full = 0, False
    while made < size and not full:
        batch = [next(stream) for _ in range(CHUNK_BATCH)]
        jobs = [(d.title, d.body, max_tokens, overlap) for d in batch]
        for doc, doc_chunks in zip(batch, pool.map(chunk, jobs), strict=True):
            if made + len(doc_chunks) > size:
                full = True
                break
            docs.append(doc)
            chunks.append(doc_chunks)
            made += len(doc_chunks)
    fillers = 0
    stream = corpus.fillers(seed + 5)
    while made < size:
        doc = next(stream)
        doc_chunks = chunk((doc.title, doc.body, max_tokens, overlap))
        if len(doc_chunks) != 1:
            raise RuntimeError(
                f"a one-sentence document gave {len(doc_chunks)} chunks at chunk_max_tokens {max_tokens}"
            )
        docs.append(doc)
        chunks.append(doc_chunks)
        made += 1
        fillers += 1
    return docs, chunks, fillers


def document_rows_of(docs: list[Document], rng: random.Random, today: date) -> list[tuple]:
    """COPY rows of ``kb.documents`` (``DOCUMENT_COLUMNS``): sources ``docs/<id>.md``, one third
    ``policy``, the rest ``guide``, metadata ``{"lang": "zh"|"en"}``, the lifecycle plan as status
    and effective dates (a fifth of the current documents have a past ``effective_from``), and a
    later current document naming each superseded one (a document for which none is left stays
    current)."""
    plan = lifecycle_plan(rng, len(docs))
    superseders: dict[int, str] = {}  # doc index -> source it supersedes
    for i, state in enumerate(plan):
        if state == "superseded":
            j = next((k for k in range(i + 1, len(plan)) if plan[k] == "current" and k not in superseders), None)
            if j is None:  # no later current document left to supersede it (tiny corpora)
                plan[i] = "current"
            else:
                superseders[j] = f"docs/{i + 1:07d}.md"
    rows = []
    for i, (doc, state) in enumerate(zip(docs, plan, strict=True)):
        status, eff_from, eff_to = "active", None, None
        if state == "draft":
            status = "draft"
        elif state == "expired":
            status, eff_from, eff_to = "deprecated", today - timedelta(days=400), today - timedelta(days=30)
        elif state == "future":
            eff_from = today + timedelta(days=60)
        elif rng.random() < 0.2:
            eff_from = today - timedelta(days=rng.randint(1, 900))
        rows.append(
            (
                i + 1,
                NAMESPACE,
                f"docs/{i + 1:07d}.md",
                doc.title,
                doc.body,
                "policy" if i % 3 == 0 else "guide",
                json.dumps({"lang": "zh" if doc.is_cjk else "en"}),
                status,
                "v1",
                eff_from,
                eff_to,
                superseders.get(i),
            )
        )
    return rows


# --------------------------------------------------------------------------- the build


def build_database(
    server_dsn: str,
    name: str,
    size: int,
    dims: int,
    seed: int,
    workers: int,
    corpus: Corpus,
    migrations_dir: Path | None = None,
    sql_dir: Path | None = None,
    verify_sample: int = 20,
    verify_warn: bool = False,
    model_spec: BenchModel | None = None,
    vectors_dir: Path | None = None,
    corpus_kind: str = "synthetic",
    maintenance_work_mem: str = "1GB",
) -> dict:
    """Drop, create, migrate and load database ``name`` with ``size`` chunks, then check
    ``verify_sample`` of its documents against the trigger; returns its build facts.

    ``model_spec``: the model registered as active (default: the ``hash`` model ``bench-hash`` of
    ``dims``). For a real model the vectors come from ``vectors_dir`` (``VectorStore``); when it has
    none for these texts, the texts are written there and ``{"prepared": ...}`` is returned (run
    ``bench.retrieval.embed_job``, then build again)."""
    global _VECTORS
    from harness.config import load_settings
    from harness.migrate import migrate

    spec = model_spec or hash_model(dims)

    started = time.perf_counter()
    timings: dict[str, float] = {}
    with psycopg.connect(database_dsn(server_dsn, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = database_dsn(server_dsn, name)
    folders = {k: v for k, v in (("migrations_dir", migrations_dir), ("sql_dir", sql_dir)) if v is not None}
    migrate(dsn, load_settings(), **folders)
    timings["migrate_s"] = time.perf_counter() - started

    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)  # the embeddings' COPY rows carry numpy arrays
        conn.execute(
            "SELECT kb.register_model(%s, %s, %s, %s, %s, true)",
            [spec.name, spec.provider, spec.model, spec.dims, json.dumps(spec.options)],
        )
        plpy = Plpy(conn)
        conf = ingest_db.settings(plpy, {}, ingest_db.SYNC_SETTINGS)
        model = next(m for m in ingest_db.model_rows(plpy) if m["name"] == spec.name)
        batch_size = int(conf["embed_batch_size"])

        with multiprocessing.get_context("fork").Pool(workers) as pool:
            t = time.perf_counter()
            docs, chunks, fillers = fill(corpus, seed + 1, size, conf, pool)
            doc_rows = document_rows_of(docs, random.Random(seed + 2), date.today())
            jobs, next_id = [], 1
            for doc_id, doc_chunks in enumerate(chunks, start=1):
                jobs.append((doc_id, next_id, doc_chunks, model, batch_size))
                next_id += len(doc_chunks)
            timings["generate_s"] = time.perf_counter() - t
            vector_source = "provider, in this process"
            if spec.provider != "hash":
                doc_texts = pool.map(embed_texts_of, jobs, chunksize=256)
                texts = [t for ts in doc_texts for t in ts]
                store = VectorStore(vectors_dir)
                _VECTORS = store.lookup(model)
                if _VECTORS is not None and isinstance(corpus, PerturbedCorpus):
                    _VECTORS = copy_vectors(corpus, docs, doc_texts, _VECTORS, conf)
                missing = len(texts) if _VECTORS is None else sum(text_key(t) not in _VECTORS for t in texts)
                if missing and (vectors_dir / "partial").is_file():
                    raise RuntimeError(
                        f"{name}: {missing} chunk texts have no vector in the partial store {vectors_dir}"
                    )
                if missing:
                    _VECTORS = None
                    n_texts = store.write_texts(texts, model)
                    log(f"{name}: {missing} chunk texts have no vectors; wrote {n_texts} texts to {vectors_dir}")
                    return {"prepared": str(vectors_dir), "texts": n_texts, "chunks": len(texts)}
                vector_source = f"{vectors_dir}/vectors.npy (bench.retrieval.embed_job, {spec.provider} provider)"

        # fork again so that the workers see the vectors
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            t = time.perf_counter()
            results = pool.map(document_rows, jobs, chunksize=64)
            timings["terms_and_vectors_s"] = time.perf_counter() - t
        _VECTORS = None
        del jobs, chunks
        n_postings = sum(p.count("\n") for _, p, _ in results)

        saved = _drop_secondary_indexes(conn)
        t = time.perf_counter()
        bypassed = _copy_documents(conn, doc_rows)
        conn.execute("SET session_replication_role = replica")  # no foreign-key checks
        with conn.transaction():
            with conn.cursor().copy(f"COPY kb.chunks ({CHUNK_COLUMNS}) FROM STDIN") as copy:
                for chunk_copy, _, _ in results:
                    for row in chunk_copy:
                        copy.write_row(row)
            with conn.cursor().copy(
                "COPY kb.embeddings (chunk_id, model, dimensions, embedding, language) FROM STDIN"
            ) as copy:
                for _, _, embeddings in results:
                    for row in embeddings:
                        copy.write_row(row)
            with conn.cursor().copy(
                "COPY kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length) FROM STDIN"
            ) as copy:
                buf: list[str] = []
                for _, postings, _ in results:
                    buf.append(postings)
                    if len(buf) >= 2000:
                        copy.write("".join(buf))
                        buf = []
                copy.write("".join(buf))
            for table in ("kb.documents", "kb.chunks"):
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.execute("RESET session_replication_role")
        timings["copy_s"] = time.perf_counter() - t
        del results

        # an HNSW graph that outgrows it is built on disk, many times slower
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", [maintenance_work_mem])
        for index, indexdef, conname, condef, table in saved:
            t = time.perf_counter()
            if conname:
                conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {conname} {condef}")
            else:
                conn.execute(indexdef)
            timings[f"index_{index.split('.')[-1]}_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for first in range(1, len(doc_rows) + 1, STATUS_BATCH):
            last = min(first + STATUS_BATCH - 1, len(doc_rows))
            conn.execute(
                "SELECT kb.refresh_ingest_status(ARRAY(SELECT generate_series(%s::bigint, %s)))", [first, last]
            )
        conn.execute("VACUUM (FULL) kb.documents")
        timings["ingest_status_s"] = time.perf_counter() - t
        not_indexed = conn.execute("SELECT count(*) FROM kb.documents WHERE ingest_status <> 'indexed'").fetchone()[0]
        if not_indexed:
            raise RuntimeError(f"{name}: {not_indexed} documents are not 'indexed' after the load")
        t = time.perf_counter()
        try:
            verified = verify_against_trigger(conn, verify_sample, seed + 6, spec)
        except RuntimeError as exc:
            if not verify_warn:
                raise
            # kept, and said: e.g. the server runs another pgkb_plpy than the one this build used
            verified = {"failed": str(exc)[:2000]}
            log(f"{name}: the check against the trigger FAILED (kept: --verify-warn): {str(exc)[:500]}")
        timings["verify_s"] = time.perf_counter() - t
        conn.execute("SELECT kb.refresh_lexical_stats()")
        # the language statistics, which the embeddings' statement trigger keeps at ingest
        conn.execute("SELECT kb.refresh_language_statistics(m.name) FROM kb.models AS m WHERE m.active")
        t = time.perf_counter()
        # every kb table, as autovacuum would leave them (kb.lexical_stats unanalysed -> JIT, see README)
        for (table,) in conn.execute(
            "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables WHERE schemaname = 'kb'"
        ).fetchall():
            conn.execute(f"VACUUM (ANALYZE) {table}")
        timings["vacuum_analyze_s"] = time.perf_counter() - t
        index_sizes = dict(
            conn.execute(
                """SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
                   FROM pg_index AS i WHERE i.indrelid IN ('kb.chunks'::regclass, 'kb.embeddings'::regclass,
                                                           'kb.lexical_postings'::regclass)"""
            ).fetchall()
        )
        meta = build_meta(size, dims, seed, spec, corpus_kind) | {
            "model_registered": spec.row(),
            "vectors": vector_source,
            "index_bytes": index_sizes,
            "documents": len(doc_rows),
            "filler_documents": fillers,
            "postings": n_postings,
            "chunker": {
                "max_tokens": int(conf["chunk_max_tokens"]),
                "overlap_tokens": int(conf["chunk_overlap_tokens"]),
            },
            "triggers_bypassed": bypassed,
            "verified_against_trigger": verified,
            "vocabulary": {"words": corpus.vocab_source, "han": corpus.han_source},
            "origins": getattr(corpus, "origins", None),
            "build_s": round(time.perf_counter() - started, 1),
        }
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(json.dumps(meta)))
        )
    log(f"{name}: {len(doc_rows)} documents ({fillers} fillers), {size} chunks, {n_postings} postings")
    meta["timings"] = {k: round(v, 1) for k, v in timings.items()}
    return meta


def _drop_secondary_indexes(conn) -> list[tuple]:
    """Drop the indexes (and the postings key) of the chunk-side tables, except their primary
    keys; returns what re-creates them (name, definition, constraint, constraint definition, table)."""
    saved = conn.execute(
        """SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), c.conname,
                  pg_get_constraintdef(c.oid), i.indrelid::regclass::text
           FROM pg_index AS i LEFT JOIN pg_constraint AS c ON c.conindid = i.indexrelid
           WHERE i.indrelid IN ('kb.chunks'::regclass, 'kb.embeddings'::regclass,
                                'kb.lexical_postings'::regclass)
             AND i.indexrelid NOT IN ('kb.chunks_pkey'::regclass, 'kb.embeddings_pkey'::regclass)"""
    ).fetchall()
    for index, _, conname, _, table in saved:
        if conname:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {conname}")
        else:
            conn.execute(f"DROP INDEX {index}")
    return saved


def _copy_documents(conn, doc_rows: list[tuple]) -> list[str]:
    """COPY ``kb.documents`` with its BEFORE triggers and without its AFTER INSERT triggers, row
    or statement (disabled inside the transaction, so no other session ever sees them off);
    returns the names of the triggers bypassed."""
    with conn.transaction():
        bypassed = [
            r[0]
            for r in conn.execute(
                """SELECT tgname FROM pg_trigger
                   WHERE tgrelid = 'kb.documents'::regclass AND NOT tgisinternal
                     AND tgtype & 2 = 0 AND tgtype & 4 = 4 AND tgtype & 64 = 0
                   ORDER BY tgname"""
            ).fetchall()
        ]
        for trigger in bypassed:
            conn.execute(sql.SQL("ALTER TABLE kb.documents DISABLE TRIGGER {}").format(sql.Identifier(trigger)))
        with conn.cursor().copy(f"COPY kb.documents ({DOCUMENT_COLUMNS}) FROM STDIN") as copy:
            for row in doc_rows:
                copy.write_row(row)
        for trigger in bypassed:
            conn.execute(sql.SQL("ALTER TABLE kb.documents ENABLE TRIGGER {}").format(sql.Identifier(trigger)))
    return bypassed


# --------------------------------------------------------------------------- the check against the trigger

VECTOR_TOLERANCE = 1e-5  # a real model's vector of one text embedded alone vs in a batch of 32: ~1e-7

VERIFY_QUERIES = {
    "document": "SELECT content_hash, ingest_status, chunk_count FROM kb.documents WHERE id = %s",
    "chunks": """SELECT ordinal, section_path, section_text, content, embed_text, content_hash, token_count,
                        lexical_length, char_start, char_end
                 FROM kb.chunks WHERE document_id = %s ORDER BY ordinal""",
    "postings": """SELECT c.ordinal, p.term, p.tf, p.chunk_length, p.namespace
                   FROM kb.lexical_postings AS p JOIN kb.chunks AS c ON c.id = p.chunk_id
                   WHERE p.document_id = %s ORDER BY 1, 2""",
    "embeddings": """SELECT c.ordinal, e.model, e.dimensions, e.embedding::text, e.language
                     FROM kb.embeddings AS e JOIN kb.chunks AS c ON c.id = e.chunk_id
                     WHERE c.document_id = %s AND e.model = {model} ORDER BY 1""",
}


def _same(what: str, loaded: list, ingested: list, spec: BenchModel) -> bool:
    """Rows equal; a real model's vectors within VECTOR_TOLERANCE (batching changes the last bits)."""
    if what != "embeddings" or spec.provider == "hash" or len(loaded) != len(ingested):
        return loaded == ingested
    for a, b in zip(loaded, ingested, strict=True):
        if a[:3] != b[:3] or a[4] != b[4]:
            return False
        va, vb = (np.array(json.loads(x[3]), dtype=np.float64) for x in (a, b))
        if va.shape != vb.shape or np.abs(va - vb).max() > VECTOR_TOLERANCE:
            return False
    return True


def verify_against_trigger(conn, sample: int, seed: int, spec: BenchModel | None = None) -> dict:
    """Re-ingest ``sample`` loaded documents (a seeded random choice, and the last one) through the
    real ingest trigger, inside a transaction that is rolled back, and compare what it stores with
    what was loaded: the document's content hash, ingest status and chunk count; every chunk
    column but ids; the postings (term, tf, chunk length, namespace per chunk ordinal); the
    vectors of the benchmark model. Raises on any difference; returns what was compared.

    Not compared, because the load leaves it out on purpose: the ``kb.embed_queue`` rows the
    trigger adds for inactive models (retrieval never reads them)."""
    spec = spec or hash_model(384)
    literal = "'" + spec.name.replace("'", "''") + "'"
    queries = {k: q.replace("{model}", literal) for k, q in VERIFY_QUERIES.items()}
    if sample <= 0:
        return {"documents": 0}
    n_docs = conn.execute("SELECT max(id) FROM kb.documents").fetchone()[0]
    ids = sorted(set(random.Random(seed).sample(range(1, n_docs + 1), min(sample, n_docs)) + [n_docs]))
    mismatches: list[str] = []
    chunks = 0
    with conn.transaction(force_rollback=True):
        for doc_id in ids:
            copy_id = conn.execute(
                """INSERT INTO kb.documents (namespace, source, title, body, doc_type, metadata, status, version,
                                             effective_from, effective_to)
                   SELECT namespace, 'bench-verify/' || source, title, body, doc_type, metadata, status, version,
                          effective_from, effective_to
                   FROM kb.documents WHERE id = %s RETURNING id""",
                [doc_id],
            ).fetchone()[0]
            for what, query in queries.items():
                loaded = conn.execute(query, [doc_id]).fetchall()
                ingested = conn.execute(query, [copy_id]).fetchall()
                if not _same(what, loaded, ingested, spec):
                    mismatches.append(
                        f"document {doc_id}, {what}: loaded {loaded[:2]!r}... ingested {ingested[:2]!r}..."
                    )
            chunks += conn.execute("SELECT count(*) FROM kb.chunks WHERE document_id = %s", [doc_id]).fetchone()[0]
    if mismatches:
        raise RuntimeError("the load differs from what the ingest trigger stores:\n" + "\n".join(mismatches[:5]))
    out = {"documents": len(ids), "chunks": chunks, "compared": list(VERIFY_QUERIES)}
    if spec.provider != "hash":
        out["vector_tolerance"] = VECTOR_TOLERANCE
    return out
