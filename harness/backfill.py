"""`pgkb backfill`: embed every queued chunk of a model (pending, and failed ones
again), batch by batch, each batch its own transaction."""

from __future__ import annotations

import sys

from tqdm import tqdm

from .db import connect


def run(dsn: str, model: str | None = None, batch_size: int = 32, progress: bool = True) -> dict:
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
        total = conn.execute("SELECT count(*) AS n FROM kb.embed_queue WHERE model = %s", (model,)).fetchone()["n"]
        embedded, error = 0, None
        with tqdm(total=total, desc=f"backfill {model}", unit="chunk", disable=not progress, file=sys.stderr) as bar:
            while True:
                outcome = conn.execute(
                    "SELECT kb.embed_queue_batch(%s, %s, true) AS o", (model, batch_size)
                ).fetchone()["o"]
                if outcome["claimed"] == 0:
                    break
                if outcome["failed"]:
                    error = outcome["error"]
                    break
                embedded += outcome["embedded"]
                bar.update(outcome["embedded"])
        conn.execute("SELECT kb.refresh_lexical_stats()")
        remaining = conn.execute("SELECT count(*) AS n FROM kb.embed_queue WHERE model = %s", (model,)).fetchone()["n"]
    return {"model": model, "embedded": embedded, "remaining": remaining, "error": error}
