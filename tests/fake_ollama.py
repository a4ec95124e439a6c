"""A small fake Ollama server speaking ``POST /api/embed`` and ``POST /api/chat`` (stdlib only).

Ollama cannot be installed or reached here, so tests point the ollama embedding
provider at this server. Embeddings are pgkb's deterministic ``hash`` embedding
of each input text exactly as received (prefixes included), so they are
reproducible and lexically meaningful. A chat (non-streaming) answers with the
passage the user's message numbers [1], quoted and cited, so a test can see
which passages reached the model; ``chats`` holds every request's messages.

In tests::

    with FakeOllama(dimensions=8, mode="normal") as srv:
        url = srv.url              # http://127.0.0.1:<random port>
        ...
        srv.request_count, srv.inputs, srv.requests

Standalone (runs until killed; prints the URL on its first line)::

    python tests/fake_ollama.py --port 0 --dimensions 8 --mode normal

Modes:

``normal``        200 with one vector per input
``always_500``    every request gets HTTP 500
``flaky_500``     the first ``fail_first`` requests get HTTP 500, then normal
``rate_limited``  the first ``fail_first`` requests get HTTP 429 with ``Retry-After: <retry_after>``
``slow``          sleeps ``delay_s`` before answering normally (use a shorter client timeout)
``wrong_dims``    vectors of ``wrong_dimensions`` (default dimensions + 1)
``wrong_count``   one vector fewer than inputs
``zero_vectors``  200 with a vector of zeros per input
``bad_json``      200 with a body that is not JSON
``model_missing`` 404 ``{"error": "model \\"x\\" not found, try pulling it first"}``
``unauthorized``  401 ``{"error": "unauthorized"}``

``models`` (optional) restricts the model names served (others get the 404 body);
``api_key`` (optional) requires ``Authorization: Bearer <api_key>`` (else 401).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:
    from pgkb_plpy.embedders import hash_embed
except ImportError:  # standalone run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpython"))
    from pgkb_plpy.embedders import hash_embed

MODES = (
    "normal",
    "always_500",
    "flaky_500",
    "rate_limited",
    "slow",
    "wrong_dims",
    "wrong_count",
    "zero_vectors",
    "bad_json",
    "model_missing",
    "unauthorized",
)


class FakeOllama:
    def __init__(
        self,
        dimensions: int = 8,
        mode: str = "normal",
        *,
        fail_first: int = 2,
        retry_after: str | int | float | None = 1,
        delay_s: float = 3.0,
        wrong_dimensions: int | None = None,
        models: list[str] | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        quiet: bool = True,
    ):
        self.dimensions = dimensions
        self.mode = mode
        self.fail_first = fail_first
        self.retry_after = retry_after
        self.delay_s = delay_s
        self.wrong_dimensions = wrong_dimensions
        self.models = set(models) if models else None
        self.api_key = api_key
        self.host = host
        self.port = port
        self.quiet = quiet
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # ------------------------------------------------------------------ bookkeeping
    def reset(self) -> None:
        """Forget recorded requests (and restart the fail_first countdown)."""
        with getattr(self, "_lock", threading.Lock()):
            self.requests: list[dict[str, Any]] = []  # every request: path, method, body, headers
            self.embed_calls = 0  # POST /api/embed requests seen
            self.chats: list[list[dict[str, Any]]] = []  # the messages of every POST /api/chat

    @property
    def request_count(self) -> int:
        """Number of POST /api/embed requests received."""
        return self.embed_calls

    @property
    def inputs(self) -> list[str]:
        """All texts received by /api/embed, in order (retries included)."""
        out: list[str] = []
        for r in self.requests:
            body = r.get("json")
            if r["path"] == "/api/embed" and isinstance(body, dict):
                inp = body.get("input")
                out.extend([inp] if isinstance(inp, str) else list(inp or []))
        return out

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOllama is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeOllama:
        if self._server is not None:
            return self
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; modes: {', '.join(MODES)}")
        self._stop.clear()
        server = ThreadingHTTPServer((self.host, self.port), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-ollama", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stop.set()  # wakes handlers sleeping in "slow" mode
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Run in the foreground until interrupted (standalone use)."""
        self.start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    # ------------------------------------------------------------------ behaviour
    def _embed_reply(self, n: int, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """Decide the reply for the n-th (1-based) /api/embed request."""
        if not isinstance(body, dict):
            return _json(400, {"error": "invalid request body"})
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _json(400, {"error": "model is required"})
        inp = body.get("input")
        texts = [inp] if isinstance(inp, str) else inp
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _json(400, {"error": "invalid input type"})

        mode = self.mode
        if mode == "unauthorized" or (
            self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            return _json(401, {"error": "unauthorized"})
        if mode == "model_missing" or (self.models is not None and model not in self.models):
            return _json(404, {"error": f'model "{model}" not found, try pulling it first'})
        if mode == "always_500" or (mode == "flaky_500" and n <= self.fail_first):
            return _json(500, {"error": "llama runner process has terminated: exit status 2"})
        if mode == "rate_limited" and n <= self.fail_first:
            extra = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
            code, hdrs, data = _json(429, {"error": "too many requests"})
            hdrs.update(extra)
            return code, hdrs, data
        if mode == "slow":
            self._stop.wait(self.delay_s)
        if mode == "bad_json":
            return 200, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>"

        dims = self.dimensions
        if mode == "wrong_dims":
            dims = self.wrong_dimensions if self.wrong_dimensions is not None else self.dimensions + 1
        vectors = [hash_embed(t, dims) for t in texts]
        if mode == "wrong_count":
            vectors = vectors[:-1]
        if mode == "zero_vectors":
            vectors = [[0.0] * dims for _ in texts]
        return _json(
            200,
            {
                "model": model,
                "embeddings": vectors,
                "total_duration": 1000,
                "load_duration": 10,
                "prompt_eval_count": sum(len(t.split()) for t in texts),
            },
        )

    def _chat_reply(self, body: Any) -> tuple[int, dict[str, str], bytes]:
        """A non-streaming /api/chat reply: the first sentence after "[1]" in the last user message, cited."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _json(400, {"error": "messages are required"})
        if body.get("stream", True):
            return _json(400, {"error": "this fake answers only stream: false"})
        with self._lock:
            self.chats.append(body["messages"])
        user = next((m.get("content", "") for m in reversed(body["messages"]) if m.get("role") == "user"), "")
        first = user.split("[1]", 1)[1].strip().splitlines()[0] if "[1]" in user else ""
        content = f"{first} [1]" if first else "I cannot answer from the given passages."
        return _json(
            200,
            {
                "model": body.get("model"),
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": content},
                "done": True,
                "done_reason": "stop",
            },
        )


def _json(code: int, doc: Any) -> tuple[int, dict[str, str], bytes]:
    return code, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(doc).encode("utf-8")


def _make_handler(fake: FakeOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "FakeOllama/0.1"
        # Ollama's Go server sets TCP_NODELAY; without it a kept-alive connection waits ~40 ms
        # per reply for the client's delayed ACK (Nagle), which no real server would add.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            if not fake.quiet:
                super().log_message(format, *args)

        def _send(self, code: int, headers: dict[str, str], data: bytes) -> None:
            try:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired in "slow" mode)

        def _record(self, body: bytes) -> dict[str, Any]:
            try:
                doc = json.loads(body.decode("utf-8")) if body else None
            except ValueError:
                doc = None
            rec = {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
                "json": doc,
            }
            with fake._lock:
                fake.requests.append(rec)
                if self.command == "POST" and self.path == "/api/embed":
                    fake.embed_calls += 1
                    rec["n"] = fake.embed_calls
            return rec

        def do_GET(self) -> None:  # noqa: N802
            self._record(b"")
            if self.path == "/":
                self._send(200, {"Content-Type": "text/plain"}, b"Ollama is running")
            elif self.path == "/api/version":
                self._send(*_json(200, {"version": "0.0.0-fake"}))
            elif self.path == "/api/tags":
                names = sorted(fake.models) if fake.models else []
                self._send(*_json(200, {"models": [{"name": m, "model": m} for m in names]}))
            else:
                self._send(404, {"Content-Type": "text/plain"}, b"404 page not found")

        def do_HEAD(self) -> None:  # noqa: N802
            self._record(b"")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            rec = self._record(body)
            if self.path == "/api/chat":
                self._send(*fake._chat_reply(rec["json"]))
                return
            if self.path != "/api/embed":
                self._send(404, {"Content-Type": "text/plain"}, b"404 page not found")
                return
            self._send(*fake._embed_reply(rec["n"], rec["json"], rec["headers"]))

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fake Ollama /api/embed server for tests")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port (printed)")
    ap.add_argument("--dimensions", type=int, default=8)
    ap.add_argument("--mode", default="normal", choices=MODES)
    ap.add_argument("--fail-first", type=int, default=2)
    ap.add_argument("--retry-after", default="1")
    ap.add_argument("--delay", type=float, default=3.0, help="seconds to stall in slow mode")
    ap.add_argument("--wrong-dimensions", type=int, default=None)
    ap.add_argument("--model", action="append", dest="models", help="serve only these models")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    srv = FakeOllama(
        dimensions=args.dimensions,
        mode=args.mode,
        fail_first=args.fail_first,
        retry_after=args.retry_after,
        delay_s=args.delay,
        wrong_dimensions=args.wrong_dimensions,
        models=args.models,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        quiet=not args.verbose,
    )
    srv.start()
    print(srv.url, flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
