"""Checks of what goes into a provider (texts) and what comes out (vectors)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .errors import EmbeddingError

__all__ = ["check_text", "check_texts", "check_vectors"]


def _to_list(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)  # numpy arrays and scalars
    return tolist() if callable(tolist) else obj


def check_vectors(vectors: Any, expected_count: int, dimensions: int, provider_label: str) -> list[list[float]]:
    """Validate embedding output and return it as plain ``list[list[float]]``.

    Raises ``EmbeddingError(kind="bad_response")`` when the output is not a list of
    numeric vectors, has the wrong number of vectors or holds NaN/infinity, and
    ``EmbeddingError(kind="dimension_mismatch")`` when a vector's length differs from
    ``dimensions`` (the message names expected and actual dimensions).
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
        row: list[float] = []
        for x in vec:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise EmbeddingError(
                    "bad_response",
                    f"{provider_label}: vector {i} holds a non-number ({type(x).__name__})",
                )
            fx = float(x)
            if not math.isfinite(fx):
                raise EmbeddingError("bad_response", f"{provider_label}: vector {i} holds NaN or infinity")
            row.append(fx)
        out.append(row)
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
