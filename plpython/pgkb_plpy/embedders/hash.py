"""The ``hash`` provider: a deterministic feature-hashed bag of tokens; no model.

For tests and as a last-resort fallback. Stored ``hash`` vectors stay valid only while
:func:`hash_features`, the character class :data:`~pgkb_plpy.vocabulary.CJK_HASH_V1` and the
hashing of :func:`_feature_slot` stay exactly as they are."""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections import Counter
from typing import Any

from ..vocabulary import CJK_HASH_V1
from .errors import label
from .options import parse_options
from .validation import check_text, check_texts, check_vectors

__all__ = ["HashProvider", "hash_embed", "hash_features"]

_TOKEN_RE = re.compile(rf"[{CJK_HASH_V1}]+|[^\W_{CJK_HASH_V1}]+")
_CJK_RUN_RE = re.compile(rf"[{CJK_HASH_V1}]+")


def hash_features(text: str) -> Counter:
    """Features of ``text`` for the hash embedder: lowercased words of letters/digits
    (``w:``), and for runs of CJK characters their unigrams (``u:``) and bigrams (``b:``)."""
    feats: Counter = Counter()
    for m in _TOKEN_RE.finditer(text.lower()):
        tok = m.group()
        if _CJK_RUN_RE.fullmatch(tok):
            feats.update("u:" + ch for ch in tok)
            feats.update("b:" + tok[i : i + 2] for i in range(len(tok) - 1))
        else:
            feats["w:" + tok] += 1
    return feats


@functools.lru_cache(maxsize=65536)
def _feature_slot(feature: str, dimensions: int) -> tuple[int, float]:
    d = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=b"pgkb-hash-v1").digest()
    index = int.from_bytes(d[:6], "little") % dimensions
    sign = 1.0 if d[7] & 1 else -1.0
    return index, sign


def hash_embed(text: str, dimensions: int) -> list[float]:
    """Deterministic, L2-normalised hashed bag of tokens (sublinear tf: 1 + ln tf).

    A text without tokens (or whose features cancel out) maps to the unit vector e_0."""
    vec = [0.0] * dimensions
    for feat, tf in hash_features(text).items():
        index, sign = _feature_slot(feat, dimensions)
        vec[index] += sign * (1.0 + math.log(tf))
    norm = math.sqrt(sum(x * x for x in vec))
    if norm < 1e-12:
        vec = [0.0] * dimensions
        vec[0] = 1.0
        return vec
    return [x / norm for x in vec]


class HashProvider:
    """Provider ``hash``: :func:`hash_embed` for passages and queries alike; accepts no options."""

    name = "hash"

    def __init__(self, model: str, dimensions: int, options: Any = None):
        self.model = model
        self.dimensions = dimensions
        self.options = parse_options(options, self.name, model, {})
        self.label = label(self.name, model)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        texts = check_texts(texts, self.label)
        vecs = [hash_embed(t, self.dimensions) for t in texts]
        return check_vectors(vecs, len(texts), self.dimensions, self.label)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_passages([check_text(text, self.label)])[0]
