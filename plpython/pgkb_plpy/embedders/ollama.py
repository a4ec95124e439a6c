"""The ``ollama`` provider: ``POST {base_url}/api/embed`` of an Ollama server.

Batching, timeouts, retry with backoff on 429/5xx/timeouts (honouring ``Retry-After``) and
errors classified into :data:`~pgkb_plpy.embedders.errors.ERROR_KINDS`. urllib only."""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from .errors import EmbeddingError, label
from .options import opt_float, opt_int, opt_str, parse_options
from .validation import check_text, check_texts, check_vectors

__all__ = ["RETRY_AFTER_CAP_S", "OllamaProvider"]

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
        if self.keep_alive is not None and not isinstance(self.keep_alive, (str, int, float)):
            raise EmbeddingError("bad_input", f"{lbl}: option keep_alive must be a string or number")
        self.api_key = opts["api_key"]
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise EmbeddingError("bad_input", f"{lbl}: option api_key must be a string")
        self.options = opts
        self.url = self.base_url + "/api/embed"
        self.label = label(self.name, model, self.base_url)
        self.sleep = sleep if sleep is not None else time.sleep
        handlers = [] if opts["use_env_proxy"] else [urllib.request.ProxyHandler({})]
        self._opener = urllib.request.build_opener(*handlers)
        self.request_count = 0  # HTTP requests sent (including retries)

    # -- public API
    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        texts = check_texts(texts, self.label)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.passage_prefix + t for t in texts[start : start + self.batch_size]]
            out.extend(self._embed_batch(batch))
        return out

    def embed_query(self, text: str) -> list[float]:
        text = check_text(text, self.label)
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
