"""`pgkb backfill`: parse failed files again, then embed every queued chunk of a model (pending,
and failed ones again).

The work is one `CALL kb.embed_pending(...)`: the database runs the batches, commits each one
and stops at the first failing batch. The procedure reports progress as a NOTICE before the
first batch and after each one ("pgkb progress: " and a JSON object, see PROGRESS_PREFIX);
this module only turns those notices into a progress bar and a summary."""

from __future__ import annotations

import json
import sys
from typing import Any

import psycopg
from tqdm import tqdm

from .db import connect

PROGRESS_PREFIX = "pgkb progress: "


def progress_report(diagnostic: psycopg.errors.Diagnostic) -> dict[str, Any] | None:
    """The JSON object of a kb.embed_pending progress notice
    ({"model", "batch", "embedded", "failed", "remaining", "error"}), or None for any other message."""
    message = diagnostic.message_primary or ""
    if diagnostic.severity_nonlocalized != "NOTICE" or not message.startswith(PROGRESS_PREFIX):
        return None
    return json.loads(message.removeprefix(PROGRESS_PREFIX))


def run(dsn: str, model: str | None = None, batch_size: int = 32, progress: bool = True) -> dict:
    """Embed the model's queued chunks (default: the active model), exhausted retries included.

    Returns {"model", "embedded" (vectors stored by this run), "remaining" (chunks of the model
    still queued), "error" (the failing batch's error, or None)}. Raises RuntimeError for an
    unknown model or when no model is active, psycopg errors when the database refuses or the
    connection is lost (batches committed until then stay done)."""
    with connect(dsn) as conn:
        if model is None:
            row = conn.execute("SELECT name FROM kb.models WHERE active").fetchone()
            if row is None:
                raise RuntimeError("no active model; give --model NAME (see kb.models)")
            model = row["name"]
        elif conn.execute("SELECT 1 FROM kb.models WHERE name = %s", (model,)).fetchone() is None:
            raise RuntimeError(
                f"unknown model {model!r}; registered: "
                + ", ".join(r["name"] for r in conn.execute("SELECT name FROM kb.models"))
            )
        # files whose parse failed are parsed again first (their chunks then join the queue)
        conn.execute("SELECT kb.reparse_files(NULL, true)")
        # the summary is built from the notices, so they must reach this session whatever its default
        conn.execute("SET client_min_messages = notice")
        last: dict[str, Any] = {}
        with tqdm(desc=f"backfill {model}", unit="chunk", disable=not progress, file=sys.stderr) as bar:

            def on_notice(diagnostic: psycopg.errors.Diagnostic) -> None:
                report = progress_report(diagnostic)
                if report is None:
                    return
                last.update(report)
                # the total follows the queue: other workers and new documents change it meanwhile
                bar.total = report["embedded"] + report["remaining"]
                bar.update(report["embedded"] - bar.n)

            conn.add_notice_handler(on_notice)
            conn.execute(
                "CALL kb.embed_pending(p_batch_size => %s, p_model => %s, p_include_exhausted => true)",
                (batch_size, model),
            )
    return {"model": model, "embedded": last["embedded"], "remaining": last["remaining"], "error": last["error"]}
