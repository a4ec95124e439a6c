"""`pgkb worker`: embed the queued chunks of a model, from any machine that reaches the primary.

A worker is a *client*: each of its N connections calls `kb.embed_queue_batch(model, n)` — the
same primitive `kb.embed_pending` and `pgkb backfill` loop over — once per batch, in autocommit.
That one statement claims up to n queue rows with `FOR UPDATE SKIP LOCKED` (so concurrent workers,
here or on other machines, never take the same chunk), embeds them, stores the vectors and deletes
the claims, all in one transaction. Before each batch it calls `kb.ocr_pending(1)`: one document whose
scanned PDF pages wait for OCR is read (tesseract, in the primary's backend, a child process),
re-chunked and queued, so an INSERT never waits on OCR. Hence:

* a worker killed mid-batch (SIGKILL, a lost network) loses nothing: its transaction either commits
  (the batch is done) or rolls back (the claims and their row locks vanish, another worker takes
  the rows);
* a failed batch stays on the queue with its error and attempt count (kb.embed_queue), exactly as
  with `pgkb backfill`; chunks past `embed_max_attempts` are left alone unless
  `--include-exhausted`;
* stopping between batches is the only clean stop: SIGTERM/SIGINT set a flag that each connection
  reads after its statement returns.

Where the embedding runs: inside the *primary's backend* (PL/Python), with the provider of the
model — the bundled models use the primary's CPUs, the `ollama` provider calls its server from the
primary. So a worker on another machine moves no compute; what `--concurrency N` buys is N backends
embedding at once (N cores of the primary, or N concurrent requests to a GPU Ollama server). See
docs/SCALING.md for when that helps and what a client-side embedding mode would need."""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .db import connect

log = logging.getLogger("pgkb.worker")

#: longest pause after failures (provider down, connection lost) in a long-running worker
MAX_BACKOFF_S = 60.0


@dataclass
class Options:
    dsn: str
    model: str | None = None
    concurrency: int = 1
    batch_size: int = 32
    poll_interval: float = 2.0
    once: bool = False
    include_exhausted: bool = False

    def check(self) -> None:
        """Clear errors for bad settings, before any connection is made."""
        if not 1 <= self.concurrency <= 64:
            raise ValueError(f"--concurrency must be between 1 and 64 (got {self.concurrency})")
        if not 1 <= self.batch_size <= 10000:
            raise ValueError(f"--batch-size must be between 1 and 10000 (got {self.batch_size})")
        if not 0 < self.poll_interval <= 3600:
            raise ValueError(f"--poll-interval must be more than 0 and at most 3600 seconds (got {self.poll_interval})")


@dataclass
class Tally:
    """What the connections did, summed under a lock (they run in threads)."""

    batches: int = 0
    embedded: int = 0
    failed_batches: int = 0
    last_error: str | None = None
    per_connection: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def resolve_model(conn: psycopg.Connection, model: str | None) -> str:
    """The model to embed for: the given one (must be registered) or the active one."""
    if model is None:
        row = conn.execute("SELECT name FROM kb.models WHERE active").fetchone()
        if row is None:
            raise RuntimeError("no active model; give --model NAME (see kb.models)")
        return row["name"]
    if conn.execute("SELECT 1 FROM kb.models WHERE name = %s", (model,)).fetchone() is None:
        raise RuntimeError(
            f"unknown model {model!r}; registered: "
            + ", ".join(r["name"] for r in conn.execute("SELECT name FROM kb.models ORDER BY name"))
        )
    return model


def _one_batch(conn: psycopg.Connection, opts: Options, model: str) -> dict:
    # scanned pages first (OCR, one document a statement): their text then joins the queue
    ocr = conn.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"]
    if ocr:
        log.info("worker: OCR of %d document(s) done", ocr)
    outcome = conn.execute(
        "SELECT kb.embed_queue_batch(%s, %s, %s) AS outcome", (model, opts.batch_size, opts.include_exhausted)
    ).fetchone()["outcome"]
    return {**outcome, "ocr": ocr}


def _connection_loop(n: int, opts: Options, model: str, stop: threading.Event, tally: Tally) -> None:
    """One worker connection: batches until stopped (or, with --once, until nothing is claimable).

    With --once the first failing batch stops every connection (as kb.embed_pending stops), so a
    broken provider ends the run with its error instead of burning the retry budget of every
    chunk. A long-running worker instead backs off (doubling up to MAX_BACKOFF_S) and goes on:
    the queue rows keep the error, and their attempt counts stop retries of hopeless chunks."""
    conn: psycopg.Connection | None = None
    backoff = opts.poll_interval
    try:
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = connect(opts.dsn)
                    # a worker's batches are long statements by design; a server default must not cut them
                    conn.execute("SET statement_timeout = 0")
                outcome = _one_batch(conn, opts, model)
            except psycopg.OperationalError as exc:
                # connection refused or lost (primary restarting, network): the open batch, if
                # any, rolled back on the server; reconnect after a pause unless draining once
                if opts.once:
                    raise
                log.warning("worker %d: connection problem, retrying in %.1f s: %s", n, backoff, exc)
                conn = None
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            with tally.lock:
                if outcome["claimed"]:
                    tally.batches += 1
                tally.embedded += outcome["embedded"]
                tally.per_connection[n] += outcome["embedded"]
                if outcome["failed"]:
                    tally.failed_batches += 1
                    tally.last_error = outcome["error"]
            if outcome["failed"]:
                log.warning("worker %d: batch of %d failed: %s", n, outcome["failed"], outcome["error"])
                if opts.once:
                    stop.set()
                    return
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = opts.poll_interval
            if outcome["claimed"] == 0 and not outcome["ocr"]:
                if opts.once:
                    return
                if n == 0:
                    # documents that entered or left force by their dates alone: statistics follow
                    conn.execute("SELECT kb.refresh_statistics_if_due()")
                stop.wait(opts.poll_interval)
            else:
                log.info("worker %d: embedded %d in %s s", n, outcome["embedded"], outcome.get("seconds"))
    finally:
        if conn is not None:
            conn.close()


def _remaining(dsn: str, model: str) -> int:
    with connect(dsn) as conn:
        return conn.execute("SELECT count(*) AS n FROM kb.embed_queue WHERE model = %s", (model,)).fetchone()["n"]


def _recount_statistics(dsn: str, model: str) -> None:
    """The dense leg's language statistics after new vectors, as kb.embed_pending does at its end
    (the statement trigger refreshes them at most once a minute on a large corpus)."""
    with connect(dsn) as conn:
        conn.execute("SELECT kb.recount_language_statistics(%s)", (model,))


def run(opts: Options, stop: threading.Event | None = None) -> dict[str, Any]:
    """Run the worker until stopped (or drained, with --once). Returns {"model", "concurrency",
    "batches", "embedded", "per_connection", "failed_batches", "error", "remaining", "stopped_by"}."""
    opts.check()
    stop = stop or threading.Event()
    with connect(opts.dsn) as conn:
        model = resolve_model(conn, opts.model)
    tally = Tally(per_connection=[0] * opts.concurrency)
    errors: list[BaseException] = []

    def target(n: int) -> None:
        try:
            _connection_loop(n, opts, model, stop, tally)
        except BaseException as exc:  # noqa: BLE001 - reported by run(), which stops the others
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=target, args=(n,), name=f"pgkb-worker-{n}") for n in range(opts.concurrency)]
    for t in threads:
        t.start()
    # join with a timeout so the main thread keeps receiving signals
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    if errors:
        raise errors[0]
    if tally.embedded:
        _recount_statistics(opts.dsn, model)
    if tally.failed_batches and opts.once:
        stopped_by = "error"
    elif opts.once and not stop.is_set():
        stopped_by = "drained"
    else:
        stopped_by = "signal"
    return {
        "model": model,
        "concurrency": opts.concurrency,
        "batches": tally.batches,
        "embedded": tally.embedded,
        "per_connection": tally.per_connection,
        "failed_batches": tally.failed_batches,
        "error": tally.last_error,
        "remaining": _remaining(opts.dsn, model),
        "stopped_by": stopped_by,
    }


def run_until_signalled(opts: Options) -> dict[str, Any]:
    """run() with SIGTERM and SIGINT turned into a stop between batches (the CLI's entry point)."""
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.warning("pgkb worker: %s received, stopping after the batches in flight", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        started = time.monotonic()
        outcome = run(opts, stop)
        outcome["seconds"] = round(time.monotonic() - started, 3)
        return outcome
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
