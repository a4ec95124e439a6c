"""Bootstrap and migrate: the one code path used by the CLI, the tests and users.

Under a session advisory lock: create the extensions, apply each file of
migrations/ once (recorded with its SHA-256 in kb.schema_migrations; an edited
applied file is refused), then re-create every object of sql/ (idempotent),
all of it in one transaction.

On a live database: re-creating triggers and policies takes exclusive locks
on tables that readers hold shared locks on, in an order no reader follows, so
a migrate waiting for one of them while holding another could close a cycle
with a reader, and PostgreSQL would cancel one of the two ("deadlock
detected"). So each transaction waits for a lock at most half of the server's
deadlock_timeout (lock_timeout), and when one is not granted in time it rolls
back, lets the readers finish and starts again: the cycle is broken by the
migrate, before any reader's deadlock check runs."""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .config import MIGRATIONS_DIR, SQL_DIR, Settings
from .install_plpython import install_plpython_modules

MIGRATE_LOCK_KEY = 727_274_001  # arbitrary constant: the advisory lock all migrators share
LOCK_ATTEMPTS = 60  # transactions tried before a migrate gives up on a database that never lets go of a lock
EXTENSIONS = ("vector", "pg_trgm", "plpython3u")
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Taken in this order before anything else in the migrate's transaction: the retrieval door, then the
# table writers enter through (apply_everything says why)
FIRST_LOCKS = ("kb.pipeline_door", "kb.documents")


class MigrationError(RuntimeError):
    pass


@dataclass
class MigrateResult:
    applied: list[str] = field(default_factory=list)
    already_applied: list[str] = field(default_factory=list)
    sql_files: list[str] = field(default_factory=list)
    dictionary: str | None = None  # what kb.load_dictionary did (None: not asked)
    terms_rebuilt: int | None = None  # documents chunked again for new term rules (None: not asked)


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[Path]:
    """The migrations in order, after checking every file name (NNNN_name.sql, one file per version)."""
    if not directory.is_dir():
        raise MigrationError(f"{directory}: migrations directory not found")
    files = sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".md")
    )
    seen: dict[str, Path] = {}
    for p in files:
        match = MIGRATION_NAME.match(p.name)
        if not match:
            raise MigrationError(
                f"{p}: migration file names must look like 0001_some_name.sql "
                "(four digits, underscore, lower-case letters/digits/underscores, .sql)"
            )
        version = match.group(1)
        if version in seen:
            raise MigrationError(f"{p}: version {version} is also used by {seen[version].name}")
        seen[version] = p
    return files


def sync_plpython_modules(settings: Settings) -> str | None:
    """Install plpython/pgkb_plpy into the local server venv (when it is here and writable),
    so the server runs the same modules as this checkout; its site-packages, or None."""
    site = settings.server_site_packages()
    if not site or not Path(site).is_dir():
        return None
    try:
        install_plpython_modules(Path(site))
    except PermissionError:
        pass  # not ours to refresh; the installed copy is used (the version handshake tells if it is too old)
    return site


def sql_files(sql_dir: Path) -> list[Path]:
    """The files of sql/ in the order they run: ``NNN_name.sql`` and the files of ``NNN_name/`` directories
    (one concern split by seam) by path; ``sql/shards/`` is the coordinator's (harness.shards)."""
    return sorted(
        [*sql_dir.glob("[0-9]*.sql"), *sql_dir.glob("[0-9]*/*.sql")],
        key=lambda p: p.relative_to(sql_dir).as_posix(),
    )


def migrate(
    dsn: str, settings: Settings | None = None, migrations_dir: Path = MIGRATIONS_DIR, sql_dir: Path = SQL_DIR
) -> MigrateResult:
    result = MigrateResult()
    files = migration_files(migrations_dir)  # refuse a badly named folder before touching the database
    site = sync_plpython_modules(settings) if settings else None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_KEY,))
        try:
            for ext in EXTENSIONS:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
            conn.execute("CREATE SCHEMA IF NOT EXISTS kb")
            conn.execute(
                """CREATE TABLE IF NOT EXISTS kb.schema_migrations (
                       version text PRIMARY KEY,
                       filename text NOT NULL,
                       checksum text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            applied = {
                row[0]: (row[1], row[2])
                for row in conn.execute("SELECT version, filename, checksum FROM kb.schema_migrations")
            }
            pending: list[tuple[Path, str, str]] = []
            for path in files:
                version = path.name[:4]
                digest = checksum(path)
                if version in applied:
                    filename, recorded = applied[version]
                    if recorded != digest:
                        raise MigrationError(
                            f"migration {path} was edited after it was applied "
                            f"(recorded checksum {recorded[:12]}…, file now {digest[:12]}…); "
                            "applied migrations are immutable: add a new migration instead"
                        )
                    result.already_applied.append(path.name)
                else:
                    pending.append((path, version, digest))

            def apply_everything() -> None:
                # one transaction: a live reader sees the schema before or after, never a
                # migration applied without the functions that go with it
                result.applied.clear()
                result.sql_files.clear()
                # The retrieval door before any other lock: a reader waiting at the door
                # holds no lock the migrate needs, while one let in would take locks on the
                # documents that the migrate's earlier files already hold, and wait for it
                # as it waits for the door (sql/040_pipeline/00_schema.sql locks it again: a no-op).
                # Then the table writers enter through, for the same reason: an INSERT holds
                # kb.documents before its triggers read kb.settings, kb.models and the rest, which
                # the files below re-create; taken here, the migrate waits for the insert in flight
                # holding nothing it needs, instead of closing a cycle with it and starting again
                # after lock_timeout (bench/migrate_beside_writer.py: 24 s behind one writer).
                for table in FIRST_LOCKS:
                    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                for path, version, digest in pending:
                    run_file(conn, path, f"migration {path.name}")
                    conn.execute(
                        "INSERT INTO kb.schema_migrations (version, filename, checksum) VALUES (%s, %s, %s)",
                        (version, path.name, digest),
                    )
                    result.applied.append(path.name)
                # before sql/: its last file registers the default model, which PL/Python checks
                if site:
                    conn.execute(
                        """INSERT INTO kb.settings (key, value) VALUES ('python_path', to_jsonb(%s::text))
                           ON CONFLICT (key) DO UPDATE SET value = excluded.value
                           WHERE kb.settings.value IS DISTINCT FROM excluded.value""",
                        (site,),
                    )
                for path in sql_files(sql_dir):
                    run_file(conn, path, str(path.relative_to(sql_dir.parent)))
                    result.sql_files.append(str(path.relative_to(sql_dir)))
                # the bilingual dictionary from the modules just installed (once per snapshot);
                # without settings the server venv is left alone, and so is the dictionary
                if site:
                    result.dictionary = conn.execute("SELECT kb.load_dictionary()").fetchone()[0]
                    # postings of older term rules, rebuilt with the modules just installed
                    result.terms_rebuilt = conn.execute("SELECT kb.rebuild_lexical_terms()").fetchone()[0]

            in_one_transaction(conn, apply_everything)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
    return result


def run_file(conn: psycopg.Connection, path: Path, name: str) -> None:
    """Execute one SQL file; a failure names the file (a lock not granted in time is left to
    :func:`in_one_transaction`, which tries again)."""
    try:
        conn.execute(path.read_text(encoding="utf-8"))
    except psycopg.errors.LockNotAvailable:
        raise
    except psycopg.Error as exc:
        raise MigrationError(f"{name} failed: {exc}") from exc


def in_one_transaction(conn: psycopg.Connection, work: Callable[[], None]) -> None:
    """Run ``work`` in one transaction whose lock waits end at half the server's deadlock_timeout;
    when a lock is not granted in time, roll back, wait a moment and run it again (the module's
    docstring says why), at most ``LOCK_ATTEMPTS`` times."""
    wait_ms = max(
        int(conn.execute("SELECT setting FROM pg_settings WHERE name = 'deadlock_timeout'").fetchone()[0]) // 2, 50
    )
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {wait_ms}")
                work()
            return
        except psycopg.errors.LockNotAvailable as exc:
            if attempt == LOCK_ATTEMPTS:
                raise MigrationError(
                    f"migrate could not take the locks it needs in {LOCK_ATTEMPTS} attempts of {wait_ms} ms: {exc}; "
                    "a long transaction holds kb tables (pg_stat_activity shows which)"
                ) from exc
            time.sleep(random.uniform(0.05, 0.25) * attempt**0.5)
