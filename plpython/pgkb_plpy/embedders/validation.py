"""Checks of what goes into a provider (texts) and what comes out (vectors)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .errors import EmbeddingError

__all__ = ["MAX_VECTOR_NORM", "MIN_VECTOR_NORM", "check_text", "check_texts", "check_vectors"]


#: Smallest and largest Euclidean norm a stored or query vector may have. pgvector's cosine
#: distance sums squares in single precision: a zero vector (or one whose squares underflow
#: below ~1e-38) gives NaN for every comparison, and one whose squares overflow (~3e38) gives
#: infinity or NaN; NaN sorts above every number, so such a vector would rank first everywhere.
#: The same bounds are the CHECK ``embeddings_norm_usable`` on ``kb.embeddings``.
MIN_VECTOR_NORM = 1e-19
MAX_VECTOR_NORM = 1e19

_ONLY_FLOATS = {float}


def _to_list(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)  # numpy arrays and scalars
    return tolist() if callable(tolist) else obj


def _checked_row(vec: list | tuple, i: int, provider_label: str) -> list[float]:
    """``vec`` as a list of finite floats; ``bad_response`` naming the first bad element."""
    if {*map(type, vec)} <= _ONLY_FLOATS:  # what JSON and numpy give: no per-element conversion
        row = vec if type(vec) is list else list(vec)
    else:
        row = []
        for x in vec:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise EmbeddingError(
                    "bad_response",
                    f"{provider_label}: vector {i} holds a non-number ({type(x).__name__})",
                )
            row.append(float(x))
    norm = math.hypot(*row)  # NaN or infinity in, NaN or infinity out
    if not MIN_VECTOR_NORM <= norm <= MAX_VECTOR_NORM:
        if not all(map(math.isfinite, row)):
            raise EmbeddingError("bad_response", f"{provider_label}: vector {i} holds NaN or infinity")
        if norm == 0.0:
            raise EmbeddingError(
                "bad_response",
                f"{provider_label}: vector {i} is a zero vector; it has no direction, so its cosine "
                f"similarity to anything is undefined (NaN)",
            )
        raise EmbeddingError(
            "bad_response",
            f"{provider_label}: vector {i} has norm {norm:.3g}, outside [{MIN_VECTOR_NORM:g}, {MAX_VECTOR_NORM:g}] "
            f"where pgvector's single-precision cosine distance is defined",
        )
    return row


def check_vectors(vectors: Any, expected_count: int, dimensions: int, provider_label: str) -> list[list[float]]:
    """Validate embedding output and return it as plain ``list[list[float]]``.

    Raises ``EmbeddingError(kind="bad_response")`` when the output is not a list of
    numeric vectors, has the wrong number of vectors, holds NaN/infinity, or holds a vector
    whose norm is outside [:data:`MIN_VECTOR_NORM`, :data:`MAX_VECTOR_NORM`] (a zero vector
    above all), and ``EmbeddingError(kind="dimension_mismatch")`` when a vector's length
    differs from ``dimensions`` (the message names expected and actual dimensions).
    """
    vectors = _to_list(vectors)
    if not isinstance(vectors, (list, tuple)):
        raise EmbeddingError(
            "bad_response",
            f"{provider_label}: expected a list of vectors, got {type(vectors).__name__}",
        )
    if len(vectors) != expected_count:
        raise EmbeddingError(
            "bad_response",
            f"{provider_label}: returned {len(vectors)} vectors for {expected_count} input texts",
        )
    out: list[list[float]] = []
    for i, vec in enumerate(vectors):
        vec = _to_list(vec)
        if not isinstance(vec, (list, tuple)):
            raise EmbeddingError(
                "bad_response",
                f"{provider_label}: vector {i} is a {type(vec).__name__}, not a list of numbers",
            )
        if len(vec) != dimensions:
            raise EmbeddingError(
                "dimension_mismatch",
                f"{provider_label}: dimension mismatch: the model is registered with {dimensions} "
                f"dimensions but returned a {len(vec)}-dimensional vector (vector {i}); "
                f"register the model with dimensions={len(vec)} or use the right model",
            )
        out.append(_checked_row(vec, i, provider_label))
    return out


def check_texts(texts: Any, label: str) -> list[str]:
    """``texts`` as a list of strings; ``EmbeddingError(kind="bad_input")`` for anything else."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise EmbeddingError("bad_input", f"{label}: texts must be a list of strings")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise EmbeddingError("bad_input", f"{label}: text {i} is {type(t).__name__}, not a string (NULL text?)")
    return out


def check_text(text: Any, label: str) -> str:
    """``text`` when it is a string; ``EmbeddingError(kind="bad_input")`` otherwise."""
    if not isinstance(text, str):
        raise EmbeddingError("bad_input", f"{label}: query text is {type(text).__name__}, not a string")
    return text
