"""The benchmark's queries, drawn from the chunks stored in the database being measured (the
real corpus's queries are the datasets' questions: ``realcorpus.real_queries``).

``make_queries`` picks ``2 * n`` chunk ids uniformly at random (seeded) and alternates the kind:

* **short**: English: 2-4 content words (not stop words) picked in order from an 8-word window of
  the chunk's content words, lowercased, and in 30% of the queries one of them replaced by a
  random vocabulary word; Chinese: 2-6 consecutive Han characters;
* **long**: English: a 15-30 word window of the chunk, lowercased, each word replaced by a random
  vocabulary word with probability 0.25; Chinese: 20-45 consecutive Han characters.

So not every query is a verbatim quote, and copies of one corpus give the same queries.
"""

from __future__ import annotations

import random
import re

import numpy as np
from pgkb_plpy import embedders, lexical

from .corpus import Corpus

WORD_RE = re.compile(r"\w+(?:[-.:/_]\w+)*")


def make_queries(conn, corpus: Corpus, seed: int, n_each: int) -> dict[str, list[str]]:
    """``{"short": [...], "long": [...]}``, ``n_each`` queries of each kind."""
    rng = random.Random(seed + 3)
    n_chunks = conn.execute("SELECT max(id) FROM kb.chunks").fetchone()[0]
    ids = [rng.randint(1, n_chunks) for _ in range(2 * n_each)]
    texts = dict(conn.execute("SELECT id, content FROM kb.chunks WHERE id = ANY(%s)", [ids]).fetchall())
    # ids are contiguous in a database as built; where documents were deleted or added since
    # (bench.query_path's chain), a missing id is replaced by another drawn the same way
    while missing := [i for i, cid in enumerate(ids) if cid not in texts]:
        for i in missing:
            ids[i] = rng.randint(1, n_chunks)
        texts.update(conn.execute("SELECT id, content FROM kb.chunks WHERE id = ANY(%s)", [ids]).fetchall())
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
            words = WORD_RE.findall(text)
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


def query_vector(text: str, dims: int) -> np.ndarray:
    """The query's vector as the ``hash`` provider embeds it (float32, as pgvector stores it); a
    ``vector`` parameter on a connection that ran ``pgvector.psycopg.register_vector``."""
    return np.asarray(embedders.hash_embed(text, dims), dtype=np.float32)


def query_vectors(conn, texts: list[str], model) -> list[np.ndarray]:
    """The queries' vectors as retrieval gets them: the ``hash`` provider's here, any other model's
    from the database itself (``kb.embed_query``, the call ``kb_retrieve`` makes), float32."""
    if model.provider == "hash":
        return [query_vector(t, model.dims) for t in texts]
    out = []
    for t in texts:
        text = conn.execute("SELECT kb.embed_query(%s, %s)::text", [t, model.name]).fetchone()[0]
        out.append(np.asarray([float(x) for x in text.strip("[]").split(",")], dtype=np.float32))
    return out
