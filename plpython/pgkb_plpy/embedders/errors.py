"""The error every embedding provider raises, and its classification."""

from __future__ import annotations

__all__ = ["ERROR_KINDS", "EmbeddingError", "label"]

#: What went wrong, as ``EmbeddingError.kind`` and ``kb.embed_queue.error_kind`` spell it.
ERROR_KINDS = frozenset(
    {
        "unreachable",
        "timeout",
        "model_missing",
        "unauthorized",
        "dimension_mismatch",
        "rate_limited",
        "server_error",
        "bad_response",
        "bad_input",
    }
)


class EmbeddingError(Exception):
    """An embedding call failed. ``kind`` is one of :data:`ERROR_KINDS`.

    ``str(e)`` names the provider, the model and what went wrong.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        status: int | None = None,
        attempts: int | None = None,
    ):
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown EmbeddingError kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.provider = provider
        self.model = model
        self.status = status
        self.attempts = attempts
        self.detail = message

    def __repr__(self) -> str:
        return f"EmbeddingError(kind={self.kind!r}, message={str(self)!r})"


def label(provider: str, model: str, where: str | None = None) -> str:
    """How messages name a provider's model: ``embedding provider 'p' model 'm' [at where]``."""
    s = f"embedding provider {provider!r} model {model!r}"
    return f"{s} at {where}" if where else s
