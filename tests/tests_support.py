"""Small helpers shared by tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


BIG_BODY = "\n\n".join(f"## Part {i}\n\n" + "Sentence about refunds and returns. " * 60 for i in range(200))


def start_slow_ingest(dsn: str) -> tuple[threading.Thread, dict]:
    """Start, in a thread, one INSERT of 50 large documents (seconds of trigger work).
    The dict gets the backend's "pid" at once and the psycopg "error" if the statement fails."""
    holder: dict = {}

    def ingest() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                holder["pid"] = conn.info.backend_pid
                conn.execute(
                    "INSERT INTO kb.documents (namespace, source, body) "
                    "SELECT 'crash', 'big-' || g || '.md', %s FROM generate_series(1, 50) AS g",
                    (BIG_BODY,),
                )
        except psycopg.Error as exc:
            holder["error"] = exc

    thread = threading.Thread(target=ingest)
    thread.start()
    wait_for(lambda: "pid" in holder, timeout=10)
    return thread, holder
