"""The ``ollama`` provider: ``/api/embed`` of an Ollama server through the official ``ollama``
Python client (``ollama.Client``, over httpx).

The client builds the request, decodes and validates the reply and reports HTTP failures as
``ollama.ResponseError`` (``status_code``, ``error``); what stays here is pgkb's: batching, the
classification of every failure into :data:`~pgkb_plpy.embedders.errors.ERROR_KINDS`, retries with
exponential backoff on 429/5xx/timeouts/dropped connections honouring ``Retry-After`` (read from
the last HTTP response through an httpx response hook, since ``ResponseError`` carries no
headers), the check of every vector (:func:`~pgkb_plpy.embedders.validation.check_vectors`), no
proxy variables unless asked, and an ``api_key`` that never appears in a message.

``ollama`` (with httpx and pydantic, ~0.35 s of imports) is imported when the first provider is
made, so backends that never use an Ollama model do not pay for it."""

from __future__ import annotations

import email.utils
import math
import re
import socket
import time
from collections.abc import Callable
from typing import Any

from .errors import EmbeddingError, label
from .options import opt_float, opt_int, opt_str, parse_options
from .validation import check_text, check_texts, check_vectors

__all__ = ["RETRY_AFTER_CAP_S", "OllamaProvider"]

#: Longest wait a ``Retry-After`` header can impose on one retry, in seconds.
RETRY_AFTER_CAP_S = 60.0


def _parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent
    or unreadable, never negative."""
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


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of ``exc``'s cause/context chain. The client re-raises httpx's
    ``ConnectError`` as a bare ``ConnectionError`` (``from None``), so the OS error that tells
    "refused" from "cannot resolve" is only found down the chain."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or id(nxt) in seen:
            return exc
        seen.add(id(nxt))
        exc = nxt


class _Retry(Exception):
    """Internal: a retryable failure (carries the EmbeddingError and a Retry-After delay)."""

    def __init__(self, error: EmbeddingError, retry_after: float | None = None):
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


class OllamaProvider:
    """An Ollama embedding model, called through ``ollama.Client.embed``.

    Options (``kb.models.options``): ``base_url`` ("http://127.0.0.1:11434"), ``timeout_s`` (30,
    for connect, read and write alike), ``max_retries`` (4), ``backoff_s`` (0.5; doubles per retry,
    capped at ``backoff_max_s``, 8; a ``Retry-After`` header replaces it, capped at
    :data:`RETRY_AFTER_CAP_S`), ``batch_size`` (32 texts per request), ``query_prefix`` /
    ``passage_prefix`` (""), ``keep_alive`` (how long the server keeps the model loaded; not sent
    unless set), ``truncate`` (true: the server cuts an input longer than the model's context
    instead of failing), ``dimensions`` (not sent unless set; asks the server to shorten each
    embedding to that size, and must equal the registered dimensions), ``api_key`` (sent as
    ``Authorization: Bearer``; without it the client's own ``OLLAMA_API_KEY`` environment variable
    applies), ``use_env_proxy`` (false: httpx ignores the proxy, certificate and netrc
    environment). ``sleep`` is injectable for tests. ``request_count`` counts requests sent,
    retries included.

    Failures raise :class:`EmbeddingError`: ``unreachable`` (refused, unresolvable host, proxy),
    ``timeout``, ``model_missing``, ``unauthorized`` (401/403), ``dimension_mismatch``,
    ``rate_limited`` (429), ``server_error`` (5xx, dropped connection), ``bad_input`` (400/413/422),
    ``bad_response`` (anything else the server answers that is not embeddings); the retryable
    ones (timeout, rate_limited, server_error) only after ``max_retries`` retries.
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
        "truncate": True,
        "dimensions": None,
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
        opts = parse_options(options, self.name, model, self.DEFAULTS)
        lbl = label(self.name, model)
        self.base_url = opt_str(opts, "base_url", lbl).rstrip("/")
        if not re.match(r"^https?://[^/\s]+", self.base_url):
            raise EmbeddingError("bad_input", f"{lbl}: base_url must be an http(s) URL, got {self.base_url!r}")
        self.timeout_s = opt_float(opts, "timeout_s", lbl, 0.0, strict=True)
        self.max_retries = opt_int(opts, "max_retries", lbl, 0)
        self.backoff_s = opt_float(opts, "backoff_s", lbl, 0.0)
        self.backoff_max_s = opt_float(opts, "backoff_max_s", lbl, 0.0)
        self.batch_size = opt_int(opts, "batch_size", lbl, 1)
        self.query_prefix = opt_str(opts, "query_prefix", lbl)
        self.passage_prefix = opt_str(opts, "passage_prefix", lbl)
        self.keep_alive = opts["keep_alive"]
        if self.keep_alive is not None and (
            isinstance(self.keep_alive, bool) or not isinstance(self.keep_alive, (str, int, float))
        ):
            raise EmbeddingError("bad_input", f"{lbl}: option keep_alive must be a string or number")
        self.truncate = opts["truncate"]
        if not isinstance(self.truncate, bool):
            raise EmbeddingError("bad_input", f"{lbl}: option truncate must be true or false, got {self.truncate!r}")
        self.request_dimensions = None
        if opts["dimensions"] is not None:
            self.request_dimensions = opt_int(opts, "dimensions", lbl, 1)
            if self.request_dimensions != dimensions:
                raise EmbeddingError(
                    "dimension_mismatch",
                    f"{lbl}: option dimensions={self.request_dimensions} asks the server for vectors of another "
                    f"size than the model is registered with ({dimensions}); register the model with "
                    f"dimensions={self.request_dimensions} or drop the option",
                    provider=self.name,
                    model=model,
                )
        api_key = opts["api_key"]
        if api_key is not None and not isinstance(api_key, str):
            raise EmbeddingError("bad_input", f"{lbl}: option api_key must be a string")
        if not isinstance(opts["use_env_proxy"], bool):
            raise EmbeddingError("bad_input", f"{lbl}: option use_env_proxy must be true or false")
        # The key lives only in the client's headers (httpx masks it in their repr), never in
        # self.options, so no message or repr built from this object can show it.
        self.options = {k: ("***" if k == "api_key" and v else v) for k, v in opts.items()}
        self.url = self.base_url + "/api/embed"
        self.label = label(self.name, model, self.base_url)
        self.sleep = sleep if sleep is not None else time.sleep
        self.request_count = 0
        self._last_response_headers: Any = None

        import httpx
        import ollama
        import pydantic

        self._ollama, self._httpx, self._pydantic = ollama, httpx, pydantic
        self._client = ollama.Client(
            host=self.base_url,
            timeout=self.timeout_s,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            trust_env=opts["use_env_proxy"],
            event_hooks={"response": [self._remember_response]},
        )

    # -- public API
    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """One vector per text (``passage_prefix`` prepended), in ``batch_size`` requests."""
        texts = check_texts(texts, self.label)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.passage_prefix + t for t in texts[start : start + self.batch_size]]
            out.extend(self._embed_batch(batch))
        return out

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query (``query_prefix`` prepended)."""
        text = check_text(text, self.label)
        return self._embed_batch([self.query_prefix + text])[0]

    # -- internals
    def _remember_response(self, response: Any) -> None:
        self._last_response_headers = response.headers

    def _err(self, kind: str, what: str, status: int | None = None, attempts: int | None = None) -> EmbeddingError:
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
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._request(batch)
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

    def _request(self, batch: list[str]) -> list[list[float]]:
        """One ``embed`` call, every failure turned into an EmbeddingError (or a _Retry)."""
        httpx = self._httpx
        self.request_count += 1
        self._last_response_headers = None
        try:
            reply = self._client.embed(
                model=self.model,
                input=batch,
                truncate=self.truncate,
                keep_alive=self.keep_alive,
                dimensions=self.request_dimensions,
            )
        except self._ollama.ResponseError as e:
            self._raise_http(e.status_code, str(e.error or ""))
        except ConnectionError as e:  # the client's own, for httpx.ConnectError
            self._raise_network(_root_cause(e))
        except httpx.TimeoutException:
            raise _Retry(self._err("timeout", f"no reply within timeout_s={self.timeout_s:g} s")) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _Retry(self._err("server_error", f"connection dropped by the server ({type(e).__name__})")) from None
        except httpx.TooManyRedirects:
            raise self._err("bad_response", f"too many redirects from {self.url}") from None
        except httpx.TransportError as e:  # proxy errors, unsupported protocol, other connect failures
            self._raise_network(_root_cause(e))
        except self._pydantic.ValidationError as e:
            first = e.errors()[0] if e.error_count() else {}
            where = ".".join(str(p) for p in first.get("loc", ())) or "reply"
            what = f"the reply is not an embed response ({where}: {first.get('msg')})"
            raise self._err("bad_response", what) from None
        except (ValueError, TypeError, AttributeError):
            # ValueError: a body that is not JSON; TypeError/AttributeError: JSON that is not an object
            ctype = self._last_response_headers.get("content-type") if self._last_response_headers else None
            raise self._err("bad_response", f"the reply is not a JSON object (Content-Type {ctype})") from None
        try:
            return check_vectors(reply.embeddings, len(batch), self.dimensions, self.label)
        except EmbeddingError as e:
            e.provider, e.model = self.name, self.model
            raise

    def _raise_http(self, status: int, message: str) -> None:
        detail = f"HTTP {status}" + (f": {message[:500]}" if message else "")
        if status in (401, 403):
            raise self._err(
                "unauthorized",
                f"the server refused the request ({detail}); check the api_key option or the proxy in front",
                status=status,
            )
        lowered = message.lower()
        model_not_found = "model" in lowered and "not found" in lowered
        if status == 404:
            if model_not_found:
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
        headers = self._last_response_headers
        retry_after = _parse_retry_after(headers.get("retry-after") if headers is not None else None)
        if status == 429:
            raise _Retry(self._err("rate_limited", f"rate limited ({detail})", status=status), retry_after)
        if status >= 500:
            if model_not_found:
                raise self._err("model_missing", f"model not found on the server ({detail})", status=status)
            raise _Retry(self._err("server_error", f"server error ({detail})", status=status), retry_after)
        if status in (400, 413, 422):
            raise self._err("bad_input", f"the server rejected the input ({detail})", status=status)
        raise self._err("bad_response", f"unexpected reply ({detail})", status=status)

    def _raise_network(self, reason: BaseException) -> None:
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise _Retry(self._err("timeout", f"no reply within timeout_s={self.timeout_s:g} s"))
        if isinstance(reason, socket.gaierror):
            what = f"cannot resolve the host of base_url ({reason})"
        elif isinstance(reason, ConnectionRefusedError):
            what = "connection refused (is Ollama running and listening on that address?)"
        else:
            what = f"cannot connect ({type(reason).__name__}: {reason})"
        raise self._err("unreachable", what)
