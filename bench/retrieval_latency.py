"""Retrieval latency and HNSW recall of pgkb at 10k and 100k chunks (issue 4, "Benchmark").

Not a timed test: a script that builds synthetic corpora in their own databases, then measures in
one run, on the same data and a warm cache:

* ``hybrid``: ``kb_retrieve(q, 10, NULL, 'hybrid')`` (the query is embedded in the database by the
  ``hash`` provider; ``kb_retrieve_explain`` gives the embed time, reported separately, and the
  hybrid time without it);
* ``bare_dense``: ``ORDER BY embedding::vector(D) <=> $1 LIMIT 10`` through the model's partial HNSW
  index with a precomputed query vector (``hnsw.ef_search`` = the ``hnsw_ef_search`` setting);
* ``bare_trigram``: ``WHERE $1 <% content ORDER BY word_similarity($1, content) DESC LIMIT 10``;
* ``bare_bm25``: ``kb.lexical_candidates(terms, now(), NULL, '{}', 100)`` with precomputed terms;

for short (2-4 words) and long (15-30 words) queries separately, and the HNSW recall@10 of
``kb.dense_candidates`` against exact search over the visible documents (about 20% of the chunks
belong to documents that are not current: drafts, expired, not yet in force, superseded), with its
latency, per ef_search of ``--ef-search-sweep`` (see ``recall``): limit 10, limit 100 (what
kb_retrieve asks for) and bare HNSW without filter, the plan each one got (pgvector's cost estimate
grows with ef_search: a small corpus switches to an exact sequential scan), and vector statistics
that say how far the exact neighbours stand out. ``--recall-only`` skips the latency legs.

The corpus is bulk-loaded with COPY (the ingest triggers are bypassed with
``session_replication_role = replica``): English-like text from a Zipf vocabulary, some CJK,
documents of 1-3 chunks, BM25 postings from ``pgkb_plpy.lexical.document_terms`` and vectors from
``pgkb_plpy.embedders.hash_embed`` of a registered ``hash`` model, exactly what ingest would store.

    /opt/pgkb/venv/bin/python bench/retrieval_latency.py --sizes 10000,100000 [--reuse]
    /opt/pgkb/venv/bin/python bench/retrieval_latency.py --sizes 10000,100000 --reuse --no-migrate \
        --recall-only --queries 40 --recall-queries 30 --ef-search-sweep 40,100,200,400,800,1000

Databases are named ``<prefix>_<size>`` (default ``pgkb_bench_latency_100000``); ``--reuse`` keeps a
database whose recorded build parameters match (and re-runs migrate unless ``--no-migrate``). The
JSON report goes to stdout and to ``bench/results/retrieval_latency.json`` (``--recall-only``:
``bench/results/hnsw_recall.json``); the table goes to stderr.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import hashlib
import itertools
import json
import multiprocessing
import os
import platform
import random
import re
import sys
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plpython"))

from pgkb_plpy import embedders, lexical  # noqa: E402

GENERATOR_VERSION = 2
MODEL_NAME = "bench-hash"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5499"
RESULTS = ROOT / "bench" / "results" / "retrieval_latency.json"
HNSW_RESULTS = ROOT / "bench" / "results" / "hnsw_recall.json"  # --recall-only
TODAY = date.today()

# --------------------------------------------------------------------------- synthetic text

STOP = (
    "the of and to a in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will can more "
    "about up out do into than other"
).split()
ONSETS = "b c d f g h j k l m n p r s t v w st tr pl ch sh br gr cl fr sp".split()
VOWELS = "a e i o u ai ea ou io ie".split()
CODAS = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "rk", "m"]


WORD_SOURCE = Path("/work/shared/datasets/scifact/corpus.jsonl.gz")  # English word frequencies, if present
HAN_SOURCE = Path("/work/shared/datasets/cmrc2018/corpus.jsonl.gz")  # Chinese character frequencies, if present


def _frequencies(path: Path, pattern: str, top: int) -> list[tuple[str, int]] | None:
    if not path.is_file():
        return None
    counts: Counter = Counter()
    rx = re.compile(pattern)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            counts.update(m.lower() for m in rx.findall(doc.get("title", "") + " " + doc.get("text", "")))
    return counts.most_common(top)


class Corpus:
    """Deterministic generator of documents (lists of chunk texts) and query material.

    Words are drawn by unigram frequency: the real English word frequencies of the local SciFact
    corpus and the Chinese character frequencies of CMRC 2018 when those files exist (so trigram
    and BM25 selectivity resemble real text), else a synthetic Zipf vocabulary of pseudo-words."""

    def __init__(self, seed: int, vocab_size: int = 30000):
        rng = random.Random(seed)
        real = _frequencies(WORD_SOURCE, r"[A-Za-z]+(?:'[a-z]+)?", vocab_size)
        self.vocab_source = str(WORD_SOURCE) if real else "synthetic"
        if real:
            self.words = [w for w, _ in real]
            self.word_cum = list(itertools.accumulate(float(c) for _, c in real))
            self.stop_rate = 0.0  # function words come with the real frequencies
        else:
            words: list[str] = []
            seen = set(STOP)
            while len(words) < vocab_size:
                w = "".join(
                    rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(rng.randint(1, 3))
                )
                if 3 <= len(w) <= 14 and w not in seen:
                    seen.add(w)
                    words.append(w)
            self.words = words
            # Zipf-Mandelbrot rank frequencies (s = 1.07, q = 2.7), like English content words
            self.word_cum = list(itertools.accumulate(1.0 / (r + 2.7) ** 1.07 for r in range(len(words))))
            self.stop_rate = 0.42
        self.stop_cum = list(itertools.accumulate(1.0 / (r + 1.0) for r in range(len(STOP))))
        content = [w for w in self.words[:5000] if w not in STOP and len(w) > 2]
        idents = []
        for i in range(400):
            kind = i % 4
            if kind == 0:
                idents.append(f"{rng.choice('EKQX')}-{rng.randint(1000, 9999)}")
            elif kind == 1:
                idents.append(f"{rng.choice(content)}.{rng.choice(content)}_{rng.choice(['ms', 'max', 'ttl'])}")
            elif kind == 2:
                idents.append(f"v{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}")
            else:
                idents.append(f"get{rng.choice(content).capitalize()}{rng.choice(content).capitalize()}")
        self.identifiers = idents
        han = _frequencies(HAN_SOURCE, r"[\u4e00-\u9fff]", 3500)
        if han:
            self.han = [c for c, _ in han]
            self.han_cum = list(itertools.accumulate(float(n) for _, n in han))
        else:
            codes = list(range(0x4E00, 0x9FA6))
            rng.shuffle(codes)
            self.han = [chr(c) for c in codes[:3500]]
            self.han_cum = list(itertools.accumulate(1.0 / (r + 1.5) for r in range(len(self.han))))

    def word(self, rng: random.Random) -> str:
        return self.words[bisect.bisect(self.word_cum, rng.random() * self.word_cum[-1])]

    def english(self, rng: random.Random, n_words: int) -> str:
        out: list[str] = []
        sentence_left = 0
        for _ in range(n_words):
            if sentence_left == 0:
                sentence_left = rng.randint(6, 20)
                capital = True
            r = rng.random()
            if r < self.stop_rate:
                w = STOP[bisect.bisect(self.stop_cum, rng.random() * self.stop_cum[-1])]
            elif r < self.stop_rate + 0.003:
                w = rng.choice(self.identifiers)
            else:
                w = self.word(rng)
            if capital:
                w = w[:1].upper() + w[1:]
                capital = False
            sentence_left -= 1
            if sentence_left == 0:
                w += "."
            elif rng.random() < 0.06:
                w += ","
            out.append(w)
        text = " ".join(out)
        return text if text.endswith(".") else text + "."

    def cjk(self, rng: random.Random, n_chars: int) -> str:
        out: list[str] = []
        for i in range(n_chars):
            out.append(self.han[bisect.bisect(self.han_cum, rng.random() * self.han_cum[-1])])
            if rng.random() < 0.03:
                out.append(" " + self.word(rng) + " ")
            if i % 17 == 16:
                out.append("。" if rng.random() < 0.5 else "，")
        return "".join(out) + "。"

    def documents(self, seed: int, n_chunks: int):
        """Yield (title, [chunk texts], is_cjk) until n_chunks chunks in total."""
        rng = random.Random(seed)
        made = 0
        while made < n_chunks:
            n = min(rng.randint(1, 3), n_chunks - made)
            is_cjk = rng.random() < 0.08
            if is_cjk:
                title = self.cjk(rng, rng.randint(4, 10)).rstrip("。")
                chunks = [self.cjk(rng, rng.randint(120, 400)) for _ in range(n)]
            else:
                title = " ".join(self.word(rng) for _ in range(rng.randint(3, 6))).title()
                chunks = [self.english(rng, rng.randint(40, 220)) for _ in range(n)]
            made += n
            yield title, chunks, is_cjk


# --------------------------------------------------------------------------- chunk features (worker processes)


def _escape_copy(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def chunk_features(args: tuple[int, int, str, int]) -> tuple[int, int, str, str]:
    """(chunk_id, lexical_length, postings COPY lines, vector literal) of one chunk."""
    chunk_id, document_id, text, dims = args
    terms = lexical.document_terms(text)
    length = sum(terms.values())
    lines = "".join(
        f"{_escape_copy(t)}\t{chunk_id}\t{document_id}\tdefault\t{tf}\t{length}\n" for t, tf in terms.items()
    )
    vector = "[" + ",".join(f"{x:.7g}" for x in embedders.hash_embed(text, dims)) + "]"
    return chunk_id, length, lines, vector


# --------------------------------------------------------------------------- database build


def db_dsn(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def build_meta(size: int, dims: int, seed: int) -> dict:
    return {"bench": "retrieval_latency", "generator": GENERATOR_VERSION, "chunks": size, "dims": dims, "seed": seed}


def existing_meta(base: str, name: str) -> dict | None:
    with psycopg.connect(db_dsn(base, "postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row[0] or "null")
    except ValueError:
        return {}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def lifecycle_plan(rng: random.Random, n_docs: int) -> list[str]:
    """Per document: current | draft | expired | future | superseded (about 20% not current)."""
    plan = []
    for _ in range(n_docs):
        r = rng.random()
        plan.append(
            "draft"
            if r < 0.07
            else "expired"
            if r < 0.14
            else "future"
            if r < 0.17
            else "superseded"
            if r < 0.20
            else "current"
        )
    plan[-1] = "current"  # a superseded document needs a later current one
    return plan


def build_database(base: str, name: str, size: int, dims: int, seed: int, workers: int) -> dict:
    started = time.perf_counter()
    timings: dict[str, float] = {}
    with psycopg.connect(db_dsn(base, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    from harness.config import load_settings
    from harness.migrate import migrate

    dsn = db_dsn(base, name)
    migrate(dsn, load_settings())
    timings["migrate_s"] = time.perf_counter() - started

    t = time.perf_counter()
    corpus = Corpus(seed)
    docs = list(corpus.documents(seed + 1, size))
    rng = random.Random(seed + 2)
    plan = lifecycle_plan(rng, len(docs))
    doc_rows, chunk_rows, jobs = [], [], []
    chunk_id = 0
    superseders: dict[int, str] = {}  # doc index -> source it supersedes
    for i, status in enumerate(plan):
        if status == "superseded":
            j = next(k for k in range(i + 1, len(plan)) if plan[k] == "current" and k not in superseders)
            superseders[j] = f"docs/{i + 1:07d}.md"
    for i, ((title, chunks, is_cjk), state) in enumerate(zip(docs, plan, strict=True)):
        doc_id = i + 1
        body = "\n\n".join(chunks)
        status, eff_from, eff_to = "active", None, None
        if state == "draft":
            status = "draft"
        elif state == "expired":
            status, eff_from, eff_to = "deprecated", TODAY - timedelta(days=400), TODAY - timedelta(days=30)
        elif state == "future":
            eff_from = TODAY + timedelta(days=60)
        elif rng.random() < 0.2:
            eff_from = TODAY - timedelta(days=rng.randint(1, 900))
        content_hash = hashlib.sha256((title + chr(31) + body).encode()).hexdigest()
        doc_rows.append(
            (
                doc_id,
                "default",
                f"docs/{doc_id:07d}.md",
                title,
                body,
                "policy" if i % 3 == 0 else "guide",
                json.dumps({"lang": "zh" if is_cjk else "en"}),
                status,
                "v1",
                eff_from,
                eff_to,
                superseders.get(i),
                content_hash,
                "indexed",
                len(chunks),
            )
        )
        pos = 0
        for ordinal, text in enumerate(chunks):
            chunk_id += 1
            chunk_rows.append(
                [
                    chunk_id,
                    doc_id,
                    "default",
                    ordinal,
                    [title],
                    title,
                    text,
                    text,
                    hashlib.sha256(text.encode()).hexdigest(),
                    max(1, len(text) // 4),
                    0,
                    pos,
                    pos + len(text),
                ]
            )
            jobs.append((chunk_id, doc_id, text, dims))
            pos += len(text) + 2
    timings["generate_s"] = time.perf_counter() - t

    t = time.perf_counter()
    postings: list[str] = []
    vectors: dict[int, str] = {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for cid, length, lines, vector in pool.imap(chunk_features, jobs, chunksize=256):
            chunk_rows[cid - 1][10] = length
            postings.append(lines)
            vectors[cid] = vector
    timings["terms_and_vectors_s"] = time.perf_counter() - t
    n_postings = sum(p.count("\n") for p in postings)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT kb.register_model(%s, 'hash', 'hash', %s, '{}', true)", [MODEL_NAME, dims])
        # drop secondary indexes (and the postings key) to rebuild them once after the load
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

        t = time.perf_counter()
        conn.execute("SET session_replication_role = replica")  # no ingest trigger, no FK checks
        with conn.transaction():
            with conn.cursor().copy(
                "COPY kb.documents (id, namespace, source, title, body, doc_type, metadata, status, version, "
                "effective_from, effective_to, supersedes, content_hash, ingest_status, chunk_count) FROM STDIN"
            ) as copy:
                for row in doc_rows:
                    copy.write_row(row)
            conn.execute("UPDATE kb.documents SET indexed_at = now()")
            with conn.cursor().copy(
                "COPY kb.chunks (id, document_id, namespace, ordinal, section_path, section_text, content, "
                "embed_text, content_hash, token_count, lexical_length, char_start, char_end) FROM STDIN"
            ) as copy:
                for row in chunk_rows:
                    copy.write_row(row)
            with conn.cursor().copy("COPY kb.embeddings (chunk_id, model, dimensions, embedding) FROM STDIN") as copy:
                for cid in range(1, chunk_id + 1):
                    copy.write_row((cid, MODEL_NAME, dims, vectors[cid]))
            with conn.cursor().copy(
                "COPY kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length) FROM STDIN"
            ) as copy:
                buf: list[str] = []
                for lines in postings:
                    buf.append(lines)
                    if len(buf) >= 2000:
                        copy.write("".join(buf))
                        buf = []
                copy.write("".join(buf))
            for table in ("kb.documents", "kb.chunks"):
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.execute("RESET session_replication_role")
        timings["copy_s"] = time.perf_counter() - t
        del postings, vectors, jobs

        conn.execute("SET maintenance_work_mem = '1GB'")
        for index, indexdef, conname, condef, table in saved:
            t = time.perf_counter()
            if conname:
                conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {conname} {condef}")
            else:
                conn.execute(indexdef)
            timings[f"index_{index.split('.')[-1]}_s"] = time.perf_counter() - t
        conn.execute("SELECT kb.refresh_lexical_stats()")
        t = time.perf_counter()
        # every kb table, as autovacuum would leave them (kb.lexical_stats unanalysed -> JIT, see README)
        for (table,) in conn.execute(
            "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables WHERE schemaname = 'kb'"
        ).fetchall():
            conn.execute(f"VACUUM (ANALYZE) {table}")
        timings["vacuum_analyze_s"] = time.perf_counter() - t
        meta = build_meta(size, dims, seed) | {
            "documents": len(doc_rows),
            "postings": n_postings,
            "build_s": round(time.perf_counter() - started, 1),
        }
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(json.dumps(meta)))
        )
    meta["timings"] = {k: round(v, 1) for k, v in timings.items()}
    return meta


# --------------------------------------------------------------------------- queries

WORD_RE = re.compile(r"\w+(?:[-.:/_]\w+)*")


def make_queries(conn, corpus: Corpus, seed: int, n_each: int) -> dict[str, list[str]]:
    """Short (2-4 words) and long (15-30 words) queries taken from random chunks; a share of their
    words is replaced by random vocabulary words so that not every query is a verbatim quote."""
    rng = random.Random(seed + 3)
    n_chunks = conn.execute("SELECT max(id) FROM kb.chunks").fetchone()[0]
    ids = [rng.randint(1, n_chunks) for _ in range(2 * n_each)]
    texts = dict(conn.execute("SELECT id, content FROM kb.chunks WHERE id = ANY(%s)", [ids]).fetchall())
    short, long_ = [], []
    for i, cid in enumerate(ids):
        text = texts[cid]
        want_short = i % 2 == 0
        if re.search(r"[\u4e00-\u9fff]", text):
            han = re.sub(r"[^\u4e00-\u9fff]", "", text)
            n = rng.randint(2, 6) if want_short else rng.randint(20, 45)
            start = rng.randint(0, max(0, len(han) - n))
            q = han[start : start + n]
        else:
            words = [w for w in WORD_RE.findall(text)]
            if want_short:
                content = [w for w in words if w.lower() not in lexical.STOP_WORDS]
                n = rng.randint(2, 4)
                start = rng.randint(0, max(0, len(content) - 8))
                window = content[start : start + 8]
                picked = sorted(rng.sample(range(len(window)), min(n, len(window))))
                q_words = [window[j].lower() for j in picked]
                if rng.random() < 0.3:
                    q_words[rng.randrange(len(q_words))] = corpus.word(rng)
            else:
                n = rng.randint(15, 30)
                start = rng.randint(0, max(0, len(words) - n))
                q_words = [w.lower() for w in words[start : start + n]]
                for j in range(len(q_words)):
                    if rng.random() < 0.25:
                        q_words[j] = corpus.word(rng)
            q = " ".join(q_words)
        (short if want_short else long_).append(q)
    return {"short": short, "long": long_}


# --------------------------------------------------------------------------- measurement


def pct(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "mean": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "mean": round(float(a.mean()), 2),
        "max": round(float(a.max()), 2),
    }


def timed(conn, query, params) -> tuple[float, list]:
    t = time.perf_counter()
    rows = conn.execute(query, params).fetchall()
    return (time.perf_counter() - t) * 1000.0, rows


def run(conn, series: dict, timeouts: dict, leg: str, query: str, params: list) -> list | None:
    """Time one statement into series[leg]; one cut off by statement_timeout counts as TIMEOUT_MS.
    After SKIP_AFTER_TIMEOUTS timeouts, or once the leg has used LEG_BUDGET_MS for this kind of
    query, it is not run again (its figures then rest on fewer queries: see "n")."""
    if timeouts.get(leg, 0) >= SKIP_AFTER_TIMEOUTS or sum(series[leg]) > LEG_BUDGET_MS:
        return None
    try:
        ms, rows = timed(conn, query, params)
    except psycopg.errors.QueryCanceled:
        ms, rows = TIMEOUT_MS, None
        timeouts[leg] = timeouts.get(leg, 0) + 1
    series[leg].append(ms)
    return rows


Q_HYBRID = "SELECT chunk_id, score FROM kb_retrieve(%s, 10, NULL, 'hybrid')"
Q_EXPLAIN = "SELECT kb_retrieve_explain(%s, 10, NULL, 'hybrid')"
SKIP_AFTER_TIMEOUTS = 3
LEG_BUDGET_MS = 60_000.0  # per leg and kind of query; keeps a run on a slow build bounded
TIMEOUT_MS = 10000.0  # statement_timeout of the measuring session; a cut-off query counts as this
Q_TRIGRAM = "SELECT id FROM kb.chunks WHERE %s <%% content ORDER BY word_similarity(%s, content) DESC LIMIT 10"
Q_BM25 = "SELECT chunk_id FROM kb.lexical_candidates(%s::text[], now(), NULL, '{}', 100)"


def q_dense(dims: int) -> str:
    return (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{MODEL_NAME}' "
        f"ORDER BY embedding::vector({dims}) <=> %s::vector({dims}) LIMIT 10"
    )


def vec_literal(text: str, dims: int) -> str:
    return "[" + ",".join(repr(x) for x in embedders.hash_embed(text, dims)) + "]"


def prewarm(conn, tables: list[str] | None = None) -> None:
    """pg_prewarm every kb relation, or only ``tables`` with their btree and HNSW indexes."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    if tables is None:
        conn.execute(
            """SELECT pg_prewarm(c.oid) FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
               WHERE n.nspname = 'kb' AND c.relkind IN ('r', 'i') AND c.relpersistence = 'p'"""
        )
        return
    conn.execute(
        """SELECT pg_prewarm(r) FROM (
               SELECT t::regclass AS r FROM unnest(%s::text[]) AS t
               UNION ALL
               SELECT i.indexrelid::regclass FROM pg_index AS i
               JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS am ON am.oid = c.relam
               WHERE i.indrelid IN (SELECT t::regclass FROM unnest(%s::text[]) AS t)
                 AND am.amname IN ('btree', 'hnsw')) AS x""",
        [tables, tables],
    )


def current_ef_search(conn) -> int:
    """The ef_search kb.dense_candidates uses: kb.setting('hnsw_ef_search', '100')."""
    return int(conn.execute("SELECT kb.setting('hnsw_ef_search', '100') #>> '{}'").fetchone()[0])


def measure(
    conn, queries: dict[str, list[str]], dims: int, warmup: int, trigram_queries: int, ef_search: int
) -> tuple[dict, dict]:
    dense = q_dense(dims)
    conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")  # the hnsw_ef_search setting
    conn.execute(f"SET statement_timeout = {int(TIMEOUT_MS)}")
    prepared = {kind: [(q, vec_literal(q, dims), lexical.query_terms(q)) for q in qs] for kind, qs in queries.items()}
    # warm-up: every leg, a few queries of each kind (PL/Python imports, plan caches)
    warm_timeouts: dict[str, int] = {}
    scratch: dict[str, list[float]] = {k: [] for k in ("hybrid", "explain", "dense", "bm25")}
    for kind in prepared:
        for q, vec, terms in prepared[kind][:warmup]:
            run(conn, scratch, warm_timeouts, "hybrid", Q_HYBRID, [q])
            run(conn, scratch, warm_timeouts, "explain", Q_EXPLAIN, [q])
            run(conn, scratch, warm_timeouts, "dense", dense, [vec])
            run(conn, scratch, warm_timeouts, "bm25", Q_BM25, [terms])
    latency: dict = {}
    diagnostics: dict = {}
    for kind, items in prepared.items():
        series: dict[str, list[float]] = {
            k: []
            for k in (
                "hybrid",
                "explain_total",
                "embed",
                "hybrid_excl_embed",
                "explain_total_excl_embed",
                "stage_lexical",
                "stage_dense",
                "stage_fuse",
                "bare_dense",
                "bare_trigram",
                "bare_bm25",
            )
        }
        stages_run, trigram_hits, empty = [], 0, 0
        timeouts: dict[str, int] = {}

        for n, (q, vec, terms) in enumerate(items):
            # interleaved, so background load hits every leg alike
            rows = run(conn, series, timeouts, "hybrid", Q_HYBRID, [q])
            empty += rows is not None and not rows
            ex = run(conn, series, timeouts, "explain_total", Q_EXPLAIN, [q])
            if ex is not None:
                ex = ex[0][0]
                tm = ex["timings_ms"]
                embed = float(tm["embed"])
                series["explain_total"][-1] = float(tm["total"])
                series["embed"].append(embed)
                series["hybrid_excl_embed"].append(series["hybrid"][-1] - embed)
                series["explain_total_excl_embed"].append(float(tm["total"]) - embed)
                series["stage_lexical"].append(float(tm["lexical"]))
                series["stage_dense"].append(float(tm["dense"]))
                series["stage_fuse"].append(float(tm["fuse"]))
                stages_run.append(len(ex.get("stages") or []))
                trigram_hits += any(r.get("match_type", "").startswith("trigram") for r in ex.get("results") or [])
            run(conn, series, timeouts, "bare_dense", dense, [vec])
            if n < trigram_queries:
                run(conn, series, timeouts, "bare_trigram", Q_TRIGRAM, [q, q])
            run(conn, series, timeouts, "bare_bm25", Q_BM25, [terms])
        latency[kind] = {k: pct(v) for k, v in series.items()}
        diagnostics[kind] = {
            "stages_run_mean": round(float(np.mean(stages_run)), 2) if stages_run else None,
            "queries_with_more_than_one_stage": int(sum(s > 1 for s in stages_run)),
            "queries_with_trigram_results": trigram_hits,
            "queries_with_no_rows": empty,
            "timeouts": timeouts,
            "example": items[0][0],
        }
    return latency, diagnostics


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _sum(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else round(sum(values), 2)


def ratios(lat: dict) -> dict:
    out = {}
    for kind, s in lat.items():
        bare3 = _sum(s["bare_dense"]["p95"], s["bare_trigram"]["p95"], s["bare_bm25"]["p95"])
        bare2 = _sum(s["bare_dense"]["p95"], s["bare_bm25"]["p95"])
        out[kind] = {
            "sum_bare_p95_ms": bare3,
            "hybrid_p95_over_sum_bare_p95": _div(s["hybrid"]["p95"], bare3),
            "hybrid_excl_embed_p95_over_sum_bare_p95": _div(s["hybrid_excl_embed"]["p95"], bare3),
            "sum_bare_dense_bm25_p95_ms": bare2,
            "hybrid_excl_embed_p95_over_dense_plus_bm25_p95": _div(s["hybrid_excl_embed"]["p95"], bare2),
        }
    return out


# --------------------------------------------------------------------------- HNSW recall

RECALL_WARMUP = 3  # queries run once at every ef_search, untimed, before the measured pass
NN_SAMPLE = 20  # chunks whose exact nearest neighbours give the chunk-to-chunk similarities
RANDOM_SAMPLE = 1000  # chunks whose vectors give the query-to-random and random-pair similarities
FUNCTIONS_CHECKED = ["dense_candidates", "setting", "filters_restrict", "visible_documents", "document_is_current"]
RAISED_BOUNDS = {"hnsw.max_scan_tuples": "1000000", "hnsw.scan_mem_multiplier": "8"}


def function_sources(conn) -> dict[str, str]:
    """md5 of source and SET clauses of the installed kb functions the recall figures rest on."""
    rows = conn.execute(
        """SELECT format('kb.%%s/%%s', p.proname, p.pronargs),
                  md5(p.prosrc || coalesce(array_to_string(p.proconfig, ','), ''))
           FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname = 'kb' AND p.proname = ANY(%s) ORDER BY 1""",
        [FUNCTIONS_CHECKED],
    ).fetchall()
    return dict(rows)


def embeddings_scan(plan: str) -> str:
    """How a plan reads kb.embeddings: "hnsw", "seq scan (exact)" or "other"."""
    if "Index Scan using embeddings_hnsw" in plan:
        return "hnsw"
    if re.search(r"Seq Scan on embeddings", plan):
        return "seq scan (exact)"
    return "other"


def parse_vector(text: str) -> np.ndarray:
    return np.asarray(text.strip("[]").split(","), dtype=float)


def _recall_point(got: list, truth: set, kth: float) -> tuple[float, float]:
    """(strict, tie-aware) recall@10 of the 10 nearest rows of ``got`` (chunk_id, distance).
    Tie-aware: a returned row at or within the 10th exact distance counts as a hit."""
    top = sorted(got, key=lambda r: (r[1], r[0]))[:10]
    n = max(len(truth), 1)
    return len(truth & {r[0] for r in top}) / n, min(sum(1 for r in top if r[1] <= kth + 1e-6), 10) / n


def _summary(points: list[dict]) -> dict:
    strict = [p["strict"] for p in points]
    by_kind = {}
    for kind in sorted({p["kind"] for p in points}):
        by_kind[kind] = round(float(np.mean([p["strict"] for p in points if p["kind"] == kind])), 4)
    return {
        "recall_at_10": round(float(np.mean(strict)), 4),
        "recall_at_10_tie_aware": round(float(np.mean([p["tie"] for p in points])), 4),
        "recall_at_10_min": round(float(np.min(strict)), 2),
        "recall_at_10_by_kind": by_kind,
        "queries_with_fewer_than_10": sum(p["rows"] < 10 for p in points),
        "latency_ms": pct([p["ms"] for p in points]),
    }


def vector_stats(
    conn, dims: int, query_vecs: list[tuple[str, np.ndarray]], exact: list[list[float]], bare, plans: dict[int, str]
) -> dict:
    """Why the hash vectors are hard for HNSW: how far the exact neighbours stand out from the bulk.

    Cosine similarities of each query to its exact (visible) neighbours at rank 1, 10 and 100 and to
    RANDOM_SAMPLE random chunks; the 10th neighbour's z-score against that random distribution; the
    relative contrast (mean random distance / 10th-neighbour distance; near 1 = hard); the local
    intrinsic dimensionality (MLE over the 100 nearest distances; high = hard); the same for chunks
    (their exact 10th neighbour among all chunks) and random chunk pairs; non-zero coordinates. And
    the unfiltered HNSW recall@10 per ef_search when stored chunk vectors are the queries (queries
    from the data's own distribution), against their exact 10 nearest (themselves included)."""
    rows = conn.execute(
        "SELECT embedding::text FROM kb.embeddings WHERE model = %s ORDER BY md5(chunk_id::text) LIMIT %s",
        [MODEL_NAME, RANDOM_SAMPLE],
    ).fetchall()
    sample = np.stack([parse_vector(r[0]) for r in rows])
    sample /= np.linalg.norm(sample, axis=1, keepdims=True)
    mean_vec = parse_vector(
        conn.execute(
            f"SELECT avg(embedding::vector({dims}))::text FROM kb.embeddings WHERE model = %s", [MODEL_NAME]
        ).fetchone()[0]
    )
    gram = sample @ sample.T
    pairs = gram[np.triu_indices(len(sample), k=1)]

    per_kind: dict[str, list[dict]] = {}
    for (kind, qv), dists in zip(query_vecs, exact, strict=True):
        qv = qv / np.linalg.norm(qv)
        rand = sample @ qv
        d = np.asarray(dists, dtype=float)
        d = d[d > 1e-9]  # a distance of 0 (the query's own text) has no log
        lid = float(-1.0 / np.mean(np.log(d[:-1] / d[-1]))) if len(d) > 2 and d[-1] > d[0] else None
        per_kind.setdefault(kind, []).append(
            {
                "nonzero": int(np.count_nonzero(qv)),
                "sim_1": 1 - dists[0],
                "sim_10": 1 - dists[min(9, len(dists) - 1)],
                "sim_100": 1 - dists[-1],
                "rand_mean": float(rand.mean()),
                "rand_p99": float(np.percentile(rand, 99)),
                "rand_max": float(rand.max()),
                "z_10": float((1 - dists[min(9, len(dists) - 1)] - rand.mean()) / (rand.std() or 1.0)),
                "contrast_10": float((1 - rand.mean()) / max(dists[min(9, len(dists) - 1)], 1e-9)),
                "lid_100": lid,
                "mean_dir": float(qv @ mean_vec / (np.linalg.norm(mean_vec) or 1.0)),
            }
        )

    def avg(items: list[dict], key: str) -> float | None:
        vals = [x[key] for x in items if x[key] is not None]
        return round(float(np.mean(vals)), 3) if vals else None

    queries = {kind: {k: avg(items, k) for k in items[0]} | {"n": len(items)} for kind, items in per_kind.items()}

    nn: list[tuple[float, float]] = []
    chunk_recall: dict[int, list[float]] = {ef: [] for ef in plans}
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT chunk_id FROM kb.embeddings WHERE model = %s ORDER BY md5(chunk_id::text) LIMIT %s",
            [MODEL_NAME, NN_SAMPLE],
        ).fetchall()
    ]
    for cid in ids:
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            vec = conn.execute(
                "SELECT embedding::text FROM kb.embeddings WHERE model = %s AND chunk_id = %s", [MODEL_NAME, cid]
            ).fetchone()[0]
            rows = conn.execute(
                """SELECT chunk_id, (embedding <=> %s::vector)::float8 AS d FROM kb.embeddings
                   WHERE model = %s ORDER BY d, chunk_id <> %s, chunk_id LIMIT 11""",
                [vec, MODEL_NAME, cid],
            ).fetchall()
        others = [r[1] for r in rows if r[0] != cid][:10]
        nn.append((1 - others[0], 1 - others[-1]))
        truth = {r[0] for r in rows[:10]}
        for ef in plans:
            chunk_recall[ef].append(len(truth & {r[0] for r in bare(vec, ef)[1]}) / len(truth))
    return {
        "random_sample": len(sample),
        "mean_vector_norm": round(float(np.linalg.norm(mean_vec)), 3),
        "chunks": {
            "nonzero_coordinates_mean": round(float(np.count_nonzero(sample, axis=1).mean()), 1),
            "random_pair_sim_mean": round(float(pairs.mean()), 3),
            "random_pair_sim_p99": round(float(np.percentile(pairs, 99)), 3),
            "nn_sample": len(nn),
            "sim_1_mean": round(float(np.mean([a for a, _ in nn])), 3),
            "sim_10_mean": round(float(np.mean([b for _, b in nn])), 3),
            "as_queries_unfiltered_recall_at_10": {
                str(ef): round(float(np.mean(v)), 4) for ef, v in chunk_recall.items()
            },
            "as_queries_not_hnsw": {str(ef): plan for ef, plan in plans.items() if plan != "hnsw"},
        },
        "queries": queries,
        "legend": (
            "sim_k: cosine similarity to the exact k-th nearest visible chunk; rand_*: to random chunks; "
            "z_10: (sim_10 - rand_mean) / rand_sd; contrast_10: mean random distance / 10th-neighbour "
            "distance; lid_100: MLE local intrinsic dimensionality over the 100 nearest; mean_dir: cosine "
            "to the mean chunk vector; nonzero: non-zero coordinates of the query vector"
        ),
    }


def recall(conn, queries: list[tuple[str, str]], dims: int, ef_values: list[int], current_ef: int) -> dict:
    """HNSW recall@10 and latency of kb.dense_candidates per ef_search, against exact search.

    Per query vector: the exact 100 nearest chunks of the visible documents and the exact 10 nearest
    of all chunks (no index); then, for every ef_search of the sweep, interleaved so that background
    load hits every value alike:

    * ``filtered``: kb.dense_candidates (7 arguments, visibility judged per candidate inside the HNSW
      scan) as kb.retrieve_core calls it, limit 10;
    * ``filtered_limit100``: the same with limit 100 (what kb_retrieve asks the dense leg for at
      k = 10: candidates_per_leg), recall of its 10 nearest rows;
    * ``unfiltered``: bare HNSW without any filter against the exact top 10 of all chunks.

    ef_search is set per value by ``SET LOCAL pgkb.hnsw_ef_search`` (kb.setting's session override,
    which kb.dense_candidates reads) inside a transaction: kb.settings is not written. The function
    raises hnsw.ef_search to 1.5 x its limit (at most 1000), so the limit-100 leg runs at ef_search
    150 or more whatever the sweep sets.

    psycopg's automatic server-side prepare is off here: a prepared statement keeps the plan made
    at its first executions, whatever ef_search is set later, whereas kb.dense_candidates plans its
    EXECUTE afresh on every call (and pgvector's cost estimate depends on ef_search)."""
    prepare_threshold, conn.prepare_threshold = conn.prepare_threshold, None
    conn.execute("SET statement_timeout = 0")
    conn.execute("DROP TABLE IF EXISTS pg_temp.bench_visible")
    t = time.perf_counter()
    conn.execute("CREATE TEMP TABLE bench_visible AS SELECT kb.visible_documents(now(), NULL, '{}') AS id")
    visible_ms = (time.perf_counter() - t) * 1000.0
    conn.execute("ANALYZE bench_visible")
    hidden = conn.execute("SELECT count(*) - (SELECT count(*) FROM bench_visible) FROM kb.documents").fetchone()

    exact_visible_sql = f"""
        SELECT e.chunk_id, (e.embedding <=> %s::vector)::float8 AS d
        FROM kb.embeddings AS e JOIN kb.chunks AS c ON c.id = e.chunk_id JOIN bench_visible AS v ON v.id = c.document_id
        WHERE e.model = '{MODEL_NAME}'
        ORDER BY d, e.chunk_id LIMIT 100"""
    exact_all_sql = f"""
        SELECT chunk_id, (embedding <=> %s::vector)::float8 AS d FROM kb.embeddings
        WHERE model = '{MODEL_NAME}' ORDER BY d, chunk_id LIMIT 10"""
    function_sql = "SELECT chunk_id, (1 - score)::float8 FROM kb.dense_candidates(%s, %s, %s, now(), NULL, '{}', %s)"
    bare_sql = f"""
        SELECT chunk_id, (embedding::vector({dims}) <=> %s::vector({dims}))::float8 AS d FROM kb.embeddings
        WHERE model = '{MODEL_NAME}' ORDER BY embedding::vector({dims}) <=> %s::vector({dims}) LIMIT 10"""

    def local(query: str, params: list, settings: dict[str, str]) -> tuple[float, list]:
        with conn.transaction():
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, true)", [name, value])
            return timed(conn, query, params)

    def filtered(vec: str, ef: int, limit: int, extra: dict | None = None) -> tuple[float, list]:
        return local(function_sql, [vec, MODEL_NAME, dims, limit], {"pgkb.hnsw_ef_search": str(ef)} | (extra or {}))

    def bare(vec: str, ef: int) -> tuple[float, list]:
        return local(bare_sql, [vec, vec], {"hnsw.ef_search": str(ef), "hnsw.iterative_scan": "off"})

    def explained(query: str, params: list, settings: dict[str, str]) -> str:
        _, plan = local("EXPLAIN " + query, params, settings)
        return embeddings_scan("\n".join(line[0] for line in plan))

    def function_plan(vec: str, ef: int, limit: int) -> str | None:
        """The plan of the query kb.dense_candidates EXECUTEs, from auto_explain (nested statements,
        sent to this client as notices); None if auto_explain cannot be loaded."""
        notes: list[str] = []

        def handler(diag) -> None:
            notes.append(diag.message_primary or "")

        conn.add_notice_handler(handler)
        try:
            conn.execute("LOAD 'auto_explain'")
            settings = {
                "auto_explain.log_min_duration": "0",
                "auto_explain.log_nested_statements": "on",
                "auto_explain.log_level": "notice",
            }
            filtered(vec, ef, limit, settings)
        except psycopg.Error:
            return None
        finally:
            conn.remove_notice_handler(handler)
        return embeddings_scan("\n".join(notes))

    scan_bounds = dict(  # hnsw.* exist once the library is loaded
        conn.execute(
            """SELECT name, setting FROM pg_settings
               WHERE name IN ('hnsw.max_scan_tuples', 'hnsw.scan_mem_multiplier', 'work_mem')"""
        ).fetchall()
    )
    for _, q in queries[:RECALL_WARMUP]:  # plan caches, the function's first EXECUTE, buffers
        vec = vec_literal(q, dims)
        for ef in ef_values:
            filtered(vec, ef, 10)
            filtered(vec, ef, 100)
            bare(vec, ef)

    legs = ("filtered", "filtered_limit100", "unfiltered")
    points: dict[tuple[int, str], list[dict]] = {(ef, leg): [] for ef in ef_values for leg in legs}
    min_ef = min(ef_values)
    bounds_same, bounds_points = 0, []
    exact_dists: list[list[float]] = []
    exact_ms: list[float] = []
    vec0 = vec_literal(queries[0][1], dims)
    plans = {
        ef: {
            "filtered": function_plan(vec0, ef, 10),
            "filtered_limit100": function_plan(vec0, ef, 100),
            "unfiltered": explained(bare_sql, [vec0, vec0], {"hnsw.ef_search": str(ef)}),
        }
        for ef in ef_values
    }
    for kind, q in queries:
        vec = vec_literal(q, dims)
        with conn.transaction():
            conn.execute("SET LOCAL enable_indexscan = off")
            conn.execute("SET LOCAL enable_bitmapscan = off")
            ms, exact = timed(conn, exact_visible_sql, [vec])
            exact_ms.append(ms)
            exact_all = conn.execute(exact_all_sql, [vec]).fetchall()
        exact_dists.append([r[1] for r in exact])
        truth, kth = {r[0] for r in exact[:10]}, exact[:10][-1][1] if exact else 0.0
        truth_all, kth_all = {r[0] for r in exact_all}, exact_all[-1][1] if exact_all else 0.0
        for ef in ef_values:
            for leg, limit in (("filtered", 10), ("filtered_limit100", 100)):
                ms, rows = filtered(vec, ef, limit)
                strict, tie = _recall_point(rows, truth, kth)
                points[(ef, leg)].append({"kind": kind, "strict": strict, "tie": tie, "ms": ms, "rows": len(rows)})
                if leg == "filtered_limit100" and ef == min_ef:
                    raised = filtered(vec, ef, 100, RAISED_BOUNDS)[1]
                    bounds_same += [r[0] for r in raised] == [r[0] for r in rows]
                    bounds_points.append(_recall_point(raised, truth, kth)[0])
            ms, rows = bare(vec, ef)
            strict, tie = _recall_point(rows, truth_all, kth_all)
            points[(ef, "unfiltered")].append({"kind": kind, "strict": strict, "tie": tie, "ms": ms, "rows": len(rows)})

    sweep = []
    for ef in ef_values:
        entry: dict = {"ef_search": ef}
        for leg in legs:
            entry[leg] = _summary(points[(ef, leg)])
        entry["plans"] = plans[ef]
        sweep.append(entry)
    cur = next(e for e in sweep if e["ef_search"] == current_ef)

    def first_reaching(leg: str, key: str = "recall_at_10") -> int | None:
        """Smallest ef_search at which the leg reaches 0.95 through the HNSW index (not a seq scan)."""
        return next((e["ef_search"] for e in sweep if e[leg][key] >= 0.95 and e["plans"][leg] == "hnsw"), None)

    query_vecs = [(kind, np.asarray(embedders.hash_embed(q, dims))) for kind, q in queries]
    stats = vector_stats(conn, dims, query_vecs, exact_dists, bare, {ef: plans[ef]["unfiltered"] for ef in ef_values})
    conn.prepare_threshold = prepare_threshold
    return {
        "queries": len(queries),
        "queries_by_kind": dict(Counter(kind for kind, _ in queries)),
        "ef_search": current_ef,
        "hnsw_query": "kb.dense_candidates(vector, model, dims, now(), NULL, '{}', limit)",
        "ef_search_set_by": "SET LOCAL pgkb.hnsw_ef_search = <n> per statement's transaction "
        "(kb.setting's session override, read by kb.dense_candidates); kb.settings untouched; "
        "kb.dense_candidates raises hnsw.ef_search to 1.5 x its limit (max 1000): limit 100 runs at >= 150",
        "plan_note": "sweep[].plans: how each leg scans kb.embeddings at that ef_search (pgvector's cost "
        "estimate grows with ef_search, so the planner may choose an exact sequential scan instead of HNSW)",
        "hidden_documents": hidden[0],
        "visible_documents_ms_once": round(visible_ms, 1),
        "recall_at_10": cur["filtered"]["recall_at_10"],
        "recall_at_10_tie_aware": cur["filtered"]["recall_at_10_tie_aware"],
        "recall_at_10_min": cur["filtered"]["recall_at_10_min"],
        "recall_at_10_of_top100_call": cur["filtered_limit100"]["recall_at_10"],
        "queries_with_fewer_than_10": cur["filtered"]["queries_with_fewer_than_10"],
        "sweep": sweep,
        "exact_latency_ms": pct(exact_ms) | {"query": "visible chunks' 100 nearest, sequential scan (no index)"},
        "min_ef_search_for_recall_0.95": {
            leg: {"strict": first_reaching(leg), "tie_aware": first_reaching(leg, "recall_at_10_tie_aware")}
            for leg in legs
        },
        "scan_bounds": scan_bounds
        | {
            "check": f"filtered limit 100 at ef_search {max(min_ef, 150)} with {RAISED_BOUNDS}: identical rows in "
            f"{bounds_same}/{len(queries)} queries, recall@10 {np.mean(bounds_points):.4f} "
            f"(default bounds {_summary(points[(min_ef, 'filtered_limit100')])['recall_at_10']:.4f})",
            "note": "pgvector 0.8: max_scan_tuples and scan_mem_multiplier * work_mem are checked only when "
            "the initial ef_search candidate list is used up (iterative continuation), not in the initial scan",
        },
        "vector_stats": stats,
    }


def data_stats(conn) -> dict:
    row = conn.execute(
        """SELECT (SELECT count(*) FROM kb.documents),
                  (SELECT count(*) FROM kb.chunks),
                  (SELECT count(*) FROM kb.lexical_postings),
                  (SELECT count(*) FROM kb.chunks WHERE document_id IN
                      (SELECT kb.visible_documents(now(), NULL, '{}'))),
                  pg_size_pretty(pg_database_size(current_database()))"""
    ).fetchone()
    return {
        "documents": row[0],
        "chunks": row[1],
        "postings": row[2],
        "visible_chunks": row[3],
        "visible_fraction": round(row[3] / max(row[1], 1), 3),
        "database_size": row[4],
    }


def run_size(args, size: int) -> dict:
    name = f"{args.db_prefix}_{size}"
    want = build_meta(size, args.dims, args.seed)
    have = existing_meta(args.dsn, name) if args.reuse else None
    if have and all(have.get(k) == v for k, v in want.items()):
        if args.no_migrate:
            log(f"{name}: reusing ({have.get('documents')} documents); not re-migrating: measuring its functions")
        else:
            log(f"{name}: reusing ({have.get('documents')} documents, built in {have.get('build_s')} s); re-migrating")
            from harness.config import load_settings
            from harness.migrate import migrate

            migrate(db_dsn(args.dsn, name), load_settings())  # the current sql/ functions and any new migration
        build = {"reused": True, "migrated": not args.no_migrate} | have
    elif args.no_migrate:
        raise SystemExit(f"{name}: --no-migrate needs --reuse and a database built with {want}; found {have}")
    else:
        log(f"{name}: building {size} chunks, {args.dims} dimensions")
        build = {"reused": False} | build_database(args.dsn, name, size, args.dims, args.seed, args.workers)
        log(f"{name}: built in {build['build_s']} s {build['timings']}")
    corpus = Corpus(args.seed)
    with psycopg.connect(db_dsn(args.dsn, name), autocommit=True) as conn:
        functions = function_sources(conn)
        current_ef = current_ef_search(conn)
        ef_values = sorted(set(args.ef_search_sweep) | {current_ef})
        stats = data_stats(conn)
        queries = make_queries(conn, corpus, args.seed, args.queries)
        t = time.perf_counter()
        latency = diagnostics = None
        if args.recall_only:
            prewarm(conn, ["kb.embeddings", "kb.chunks", "kb.documents"])
        else:
            prewarm(conn)
            log(f"{name}: measuring {args.queries} short + {args.queries} long queries")
            latency, diagnostics = measure(conn, queries, args.dims, args.warmup, args.trigram_queries, current_ef)
        measure_s = time.perf_counter() - t
        log(f"{name}: recall over {args.recall_queries} queries, ef_search {ef_values}")
        t = time.perf_counter()
        half = args.recall_queries // 2
        recall_queries = [("short", q) for q in queries["short"][:half]] + [
            ("long", q) for q in queries["long"][: args.recall_queries - half]
        ]
        rec = recall(conn, recall_queries, args.dims, ef_values, current_ef)
        recall_s = time.perf_counter() - t
        functions_after = function_sources(conn)
    rec["functions_md5"] = functions
    if functions_after != functions:
        rec["functions_changed_during_run"] = functions_after
    targets: dict = {"recall_at_10_ge_0.95": rec["recall_at_10"] >= 0.95}
    out = {"database": name, "build": build, "data": stats}
    if latency is not None:
        rat = ratios(latency)
        targets = {
            kind: {
                "hybrid_p95_le_1.3x_sum_bare_p95": (rat[kind]["hybrid_p95_over_sum_bare_p95"] or 99) <= 1.3
                and not diagnostics[kind]["timeouts"],
                "hybrid_excl_embed_p95_le_40ms": (latency[kind]["hybrid_excl_embed"]["p95"] or 1e9) <= 40.0
                and not diagnostics[kind]["timeouts"].get("hybrid"),
            }
            for kind in latency
        } | targets
        out |= {"latency_ms": latency, "ratios": rat}
    out |= {"recall": rec, "targets": targets}
    if diagnostics is not None:
        out["diagnostics"] = diagnostics
    out["run_s"] = {"measure": round(measure_s, 1), "recall": round(recall_s, 1)}
    return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def sweep_table(size: str, rc: dict) -> list[str]:
    """recall@10 and p50/p95 ms per ef_search: filtered limit 10, filtered limit 100, no filter."""
    lines = [
        f"{'size':>7} {'ef':>4} | {'filtered, limit 10: R@10 tie p50 p95':38} | "
        f"{'limit 100, ef >= 150: R@10 p50 p95':38} | {'no filter: R@10 p50 p95':28}"
    ]
    for e in rc["sweep"]:
        f, h, u = e["filtered"], e["filtered_limit100"], e["unfiltered"]
        lines.append(
            f"{size:>7} {e['ef_search']:>4} | {f['recall_at_10']:>6.3f} {f['recall_at_10_tie_aware']:>6.3f} "
            f"{_fmt(f['latency_ms']['p50']):>8} {_fmt(f['latency_ms']['p95']):>8}       | "
            f"{h['recall_at_10']:>6.3f} {_fmt(h['latency_ms']['p50']):>8} {_fmt(h['latency_ms']['p95']):>8}"
            f"{'':14} | {u['recall_at_10']:>6.3f} {_fmt(u['latency_ms']['p50']):>8} "
            f"{_fmt(u['latency_ms']['p95']):>8}"
            + "".join(f"  [{leg}: {plan}]" for leg, plan in e["plans"].items() if plan != "hnsw")
        )
    reach = {leg: v["strict"] or "none" for leg, v in rc["min_ef_search_for_recall_0.95"].items()}
    lines.append(
        f"{size:>7} smallest ef_search with recall@10 >= 0.95: filtered {reach['filtered']}, "
        f"limit 100 {reach['filtered_limit100']}, no filter {reach['unfiltered']}"
    )
    lines.append(f"{size:>7} {rc['scan_bounds']['check']}")
    ex = rc["exact_latency_ms"]
    lines.append(
        f"{size:>7} exact search (sequential scan, recall 1): p50 {_fmt(ex['p50'])} ms, p95 {_fmt(ex['p95'])} ms"
    )
    vs = rc["vector_stats"]
    for kind, s in vs["queries"].items():
        lines.append(
            f"{size:>7} {kind} queries (n {s['n']}): cos sim to exact #1 {s['sim_1']:.3f}, #10 {s['sim_10']:.3f}, "
            f"#100 {s['sim_100']:.3f}; random chunks mean {s['rand_mean']:.3f} p99 {s['rand_p99']:.3f} "
            f"max {s['rand_max']:.3f}; contrast {s['contrast_10']:.3f}, LID {s['lid_100']}, "
            f"{s['nonzero']:.0f} non-zero coordinates, cos to mean chunk vector {s['mean_dir']:.3f}"
        )
    c = vs["chunks"]
    lines.append(
        f"{size:>7} chunks: random pairs cos sim mean {c['random_pair_sim_mean']:.3f} p99 "
        f"{c['random_pair_sim_p99']:.3f}; own nearest #1 {c['sim_1_mean']:.3f}, #10 {c['sim_10_mean']:.3f}; "
        f"mean vector norm {vs['mean_vector_norm']:.3f}; {c['nonzero_coordinates_mean']:.0f} non-zero coordinates"
    )
    lines.append(
        f"{size:>7} chunk vectors as queries ({c['nn_sample']}), no filter, recall@10 per ef_search: "
        + ", ".join(
            f"{ef} {r:.3f}{'' if ef not in c['as_queries_not_hnsw'] else ' (seq scan)'}"
            for ef, r in c["as_queries_unfiltered_recall_at_10"].items()
        )
    )
    return lines


def table(report: dict) -> str:
    lines = []
    head = f"{'size':>7} {'kind':5} {'leg':26} {'p50 ms':>8} {'p95 ms':>8}"
    legs = [
        ("hybrid", "kb_retrieve hybrid"),
        ("embed", "  embed (+analysis)"),
        ("hybrid_excl_embed", "  hybrid excl. embed"),
        ("stage_lexical", "  lexical stage"),
        ("stage_dense", "  dense stage"),
        ("stage_fuse", "  fuse+snippets"),
        ("bare_dense", "bare pgvector HNSW"),
        ("bare_trigram", "bare trigram"),
        ("bare_bm25", "bare BM25"),
    ]
    for size, r in report["sizes"].items():
        if "latency_ms" in r:
            lines.append(head)
        for kind, s in r.get("latency_ms", {}).items():
            for key, label in legs:
                lines.append(f"{size:>7} {kind:5} {label:26} {_fmt(s[key]['p50']):>8} {_fmt(s[key]['p95']):>8}")
            ra = r["ratios"][kind]
            lines.append(
                f"{size:>7} {kind:5} {'ratio hybrid/sum bare p95':26} {'':>8} "
                f"{_fmt(ra['hybrid_p95_over_sum_bare_p95']):>8}  (excl. embed "
                f"{_fmt(ra['hybrid_excl_embed_p95_over_sum_bare_p95'])}; vs dense+bm25 only "
                f"{_fmt(ra['hybrid_excl_embed_p95_over_dense_plus_bm25_p95'])}; timeouts "
                f"{r['diagnostics'][kind]['timeouts'] or 'none'})"
            )
        rc = r["recall"]
        lines.append(
            f"{size:>7} recall@10 with lifecycle filter at ef_search {rc['ef_search']}: {rc['recall_at_10']:.3f} "
            f"(tie-aware {rc['recall_at_10_tie_aware']:.3f}, limit-100 call {rc['recall_at_10_of_top100_call']:.3f}); "
            f"visible {r['data']['visible_fraction']:.0%} of {r['data']['chunks']} chunks"
        )
        lines.extend(sweep_table(size, rc))
        lines.append("")
    return "\n".join(lines)


def ef_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(not 1 <= v <= 1000 for v in values):
        raise argparse.ArgumentTypeError("comma-separated ef_search values in 1..1000 (pgvector's range)")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dsn", default=os.environ.get("PGKB_BENCH_DSN", DEFAULT_DSN), help="server DSN, no database")
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated chunk counts")
    ap.add_argument("--dims", type=int, default=384, help="hash model dimensions (default 384)")
    ap.add_argument(
        "--queries", type=int, default=200, help="queries of each kind (short, long); the recall queries are the first"
    )
    ap.add_argument("--recall-queries", type=int, default=100, help="half short, half long")
    ap.add_argument(
        "--ef-search-sweep",
        type=ef_list,
        default=[],
        help="ef_search values for the recall measurement, e.g. 40,100,200,400,800\n"
        "(always with the database's own hnsw_ef_search setting; default: only that)",
    )
    ap.add_argument(
        "--recall-only",
        action="store_true",
        help=f"skip the latency legs; the report goes to {HNSW_RESULTS.relative_to(ROOT)} unless --out",
    )
    ap.add_argument(
        "--no-migrate",
        action="store_true",
        help="with --reuse: do not re-run migrate, measure the functions installed in the database\n"
        "(never builds: a database that is missing or has other build parameters is an error)",
    )
    ap.add_argument(
        "--trigram-queries", type=int, default=40, help="queries of each kind for the (slow) bare trigram leg"
    )
    ap.add_argument("--warmup", type=int, default=8, help="warm-up queries of each kind")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2, help="processes computing postings and vectors")
    ap.add_argument("--db-prefix", default="pgkb_bench_latency")
    ap.add_argument("--reuse", action="store_true", help="keep a database built with the same parameters")
    ap.add_argument("--out", default=None, help=f"default {RESULTS.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if not args.db_prefix.startswith("pgkb_bench"):
        ap.error("--db-prefix must start with pgkb_bench (the databases are dropped and re-created)")
    if args.no_migrate and not args.reuse:
        ap.error("--no-migrate needs --reuse")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    started = time.perf_counter()
    with psycopg.connect(db_dsn(args.dsn, "postgres"), autocommit=True) as conn:
        server = conn.execute("SELECT version()").fetchone()[0]
        vector = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    report = {
        "benchmark": "hnsw_recall" if args.recall_only else "retrieval_latency",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "host": {
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "server": server,
            "pgvector": vector[0] if vector else None,
        },
        "config": {
            "dims": args.dims,
            "model": f"{MODEL_NAME} (hash provider)",
            "queries_per_kind": args.queries,
            "recall_queries": args.recall_queries,
            "ef_search_sweep": args.ef_search_sweep,
            "k": 10,
            "seed": args.seed,
            "hnsw": "m=16, ef_construction=64; ef_search = kb.setting('hnsw_ef_search', '100') (recall.ef_search)",
            "bm25_limit": 100,
            "timing": "client wall time over local TCP, psycopg, warm cache (pg_prewarm + warm-up queries)",
        },
        "targets": {
            "at_chunks": 100000,
            "hybrid_p95_over_sum_bare_p95": 1.3,
            "hybrid_excl_embed_p95_ms": 40,
            "recall_at_10": 0.95,
        },
        "sizes": {},
    }
    if args.recall_only:
        for key in ("queries_per_kind", "bm25_limit"):
            del report["config"][key]
        report["targets"] = {"at_chunks": 100000, "recall_at_10": 0.95}
    for size in sizes:
        report["sizes"][str(size)] = run_size(args, size)
    report["host"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["total_s"] = round(time.perf_counter() - started, 1)
    out = Path(args.out) if args.out else (HNSW_RESULTS if args.recall_only else RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
