"""`pgkb reindex-hnsw`: rebuild the HNSW indexes whose build options differ from the settings
``hnsw_m`` and ``hnsw_ef_construction`` (or all of a model's, with ``--all``).

The database says which indexes there are and what each was built with (``kb.hnsw_indexes()``)
and what the settings give (``kb.hnsw_build_options()``, which refuses values pgvector would
refuse). Each index then gets the options (``ALTER INDEX ... SET``, a catalog change) and is
rebuilt with ``REINDEX INDEX CONCURRENTLY``: reads and writes go on meanwhile, on the old index
until the new one is ready. That statement cannot run inside a transaction, which is why this
is a command and not a database function. An index rebuilt before an interruption keeps its new
options; one interrupted mid-build leaves an invalid copy (``<name>_ccnew``) that ``pgkb
doctor`` does not count and a rerun replaces."""

from __future__ import annotations

import sys
import time

from psycopg import sql

from .db import connect


def run(dsn: str, model: str | None = None, rebuild_all: bool = False, quiet: bool = False) -> dict:
    """Rebuild the HNSW indexes that need it; returns {"options", "rebuilt": [{"index", "was",
    "seconds"}], "kept": [names]}. Raises psycopg errors as the database refuses (e.g. a setting
    out of pgvector's range, or a role that does not own the indexes)."""
    with connect(dsn) as conn:
        options = conn.execute("SELECT kb.hnsw_build_options() AS o").fetchone()["o"]
        indexes = conn.execute(
            "SELECT * FROM kb.hnsw_indexes() WHERE %(model)s::text IS NULL OR model = %(model)s", {"model": model}
        ).fetchall()
        # leftovers of an interrupted REINDEX CONCURRENTLY: invalid copies that would only slow writes
        for row in conn.execute(
            """SELECT c.relname FROM pg_class AS c JOIN pg_index AS i ON i.indexrelid = c.oid
               WHERE c.relnamespace = 'kb'::regnamespace AND NOT i.indisvalid AND c.relname LIKE %s""",
            ["embeddings_hnsw_%_ccnew%"],
        ).fetchall():
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY kb.{}").format(sql.Identifier(row["relname"])))
        out: dict = {"options": options, "rebuilt": [], "kept": []}
        for row in indexes:
            if row["built_with"] == options and not rebuild_all:
                out["kept"].append(row["index_name"])
                continue
            name = sql.Identifier(row["index_name"])
            if not quiet:
                print(f"rebuilding kb.{row['index_name']} ({row['built_with']} -> {options})", file=sys.stderr)
            started = time.perf_counter()
            # options: the database's own text of two integers (kb.hnsw_build_options)
            conn.execute(sql.SQL("ALTER INDEX kb.{} SET ({})").format(name, sql.SQL(options)))
            conn.execute(sql.SQL("REINDEX INDEX CONCURRENTLY kb.{}").format(name))
            seconds = round(time.perf_counter() - started, 1)
            out["rebuilt"].append({"index": row["index_name"], "was": row["built_with"], "seconds": seconds})
        return out
