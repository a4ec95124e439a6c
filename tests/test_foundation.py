"""The foundation against a real server: bootstrap/migrate idempotence and concurrency,
tampered and badly named migrations, extensions, `pgkb status --json`, and the embedded
cluster's lifecycle (`pgkb up` / `down` / `dsn`) in a throwaway home."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from helpers import TEST_HOST, TEST_PORT

from harness import cluster
from harness.config import MIGRATIONS_DIR, REPO_ROOT, load_settings
from harness.migrate import MigrationError, migrate, migration_files

PGKB = os.environ.get("PGKB_BIN", "/opt/pgkb/venv/bin/pgkb")
ADMIN_DSN = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/postgres"
SCHEMAS = ("kb", "public")
CLI_ENV = ("PGKB_DSN", "PGKB_HOME", "PGKB_PORT", "PGKB_MIGRATIONS_DIR")  # each test sets what it means

# Everything the bootstrap defines, as text, without OIDs or times: two databases
# with the same schema give equal fingerprints.
FINGERPRINT_QUERIES = {
    "extensions": "SELECT extname, extversion FROM pg_extension ORDER BY 1",
    "functions": """
        SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),
               CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) ELSE p.prokind::text END,
               p.prosecdef, p.proconfig, obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = ANY(%(schemas)s)
          AND NOT EXISTS (SELECT 1 FROM pg_depend d
                          WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
        ORDER BY 1, 2, 3""",
    "relations": """
        SELECT n.nspname, c.relname, c.relkind, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
          AND NOT EXISTS (SELECT 1 FROM pg_depend d
                          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
        ORDER BY 1, 2""",
    "columns": """
        SELECT n.nspname, c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid), a.attgenerated
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
        WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 2, 3""",
    "views": """
        SELECT schemaname, viewname, definition FROM pg_views WHERE schemaname = ANY(%(schemas)s) ORDER BY 1, 2""",
    "indexes": """
        SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = ANY(%(schemas)s) ORDER BY 1, 2, 3""",
    "constraints": """
        SELECT n.nspname, c.relname, k.conname, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(schemas)s) ORDER BY 1, 2, 3""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(schemas)s) AND NOT t.tgisinternal ORDER BY 1, 2""",
    "settings": "SELECT key, value::text, description FROM kb.settings ORDER BY key",
    "models": "SELECT name, provider, model, dimensions, options::text, active FROM kb.models ORDER BY name",
}


def fingerprint(dsn: str, with_times: bool = True) -> dict[str, list[tuple]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        params = {"schemas": list(SCHEMAS)}
        fp = {name: conn.execute(sql, params).fetchall() for name, sql in FINGERPRINT_QUERIES.items()}
        times = ", applied_at" if with_times else ""
        fp["schema_migrations"] = conn.execute(
            f"SELECT version, filename, checksum{times} FROM kb.schema_migrations ORDER BY version"
        ).fetchall()
    return fp


def assert_same_schema(got: dict, want: dict) -> None:
    """Equal fingerprints, with a readable account of what differs when they are not."""
    diff = {
        part: {
            # rows as text: some columns are lists (proconfig), which a set cannot hold
            "only_got": sorted(set(map(str, got[part])) - set(map(str, want[part])))[:5],
            "only_want": sorted(set(map(str, want[part])) - set(map(str, got[part])))[:5],
        }
        for part in want
        if got.get(part) != want[part]
    }
    assert not diff, f"schemas differ: {diff}"


def migration_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT version, filename, checksum FROM kb.schema_migrations ORDER BY version").fetchall()


@pytest.fixture
def make_empty_database():
    """Factory for empty databases on the test cluster (not clones of the migrated template); dropped afterwards."""
    created: list[str] = []

    def make() -> str:
        name = f"pgkb_fresh_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8')
        created.append(name)
        return f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{name}"

    yield make
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_pgkb(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in CLI_ENV}
    return subprocess.run(
        [PGKB, *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


# 1. bootstrap twice = no change


def test_bootstrap_twice_changes_nothing(dsn):
    before = fingerprint(dsn)
    assert [r[1] for r in before["schema_migrations"]] == [p.name for p in migration_files()]
    result = migrate(dsn, load_settings())
    assert result.applied == []
    assert result.already_applied == [p.name for p in migration_files()]
    assert_same_schema(fingerprint(dsn), before)


def test_bootstrap_keeps_user_data_and_settings(migrated_db, dsn):
    """Re-running the bootstrap re-creates sql/ objects but never resets what users changed."""
    migrated_db.execute("UPDATE kb.settings SET value = '0.55' WHERE key = 'bm25_b'")
    migrated_db.execute("SELECT kb.register_model('hash-8', 'hash', 'hash', 8, '{}', false)")
    before = fingerprint(dsn)
    migrate(dsn, load_settings())
    assert_same_schema(fingerprint(dsn), before)
    assert (
        migrated_db.execute("SELECT value::text AS v FROM kb.settings WHERE key = 'bm25_b'").fetchone()["v"] == "0.55"
    )


# 2. eight concurrent `pgkb migrate` on a fresh database


def test_eight_concurrent_migrates_on_fresh_database(make_empty_database):
    reference = make_empty_database()
    migrate(reference, load_settings())
    target = make_empty_database()

    def one(_):
        return run_pgkb("migrate", "--dsn", target, env={"PGKB_DSN": target})

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    for r in results:
        assert r.returncode == 0, r.stderr
    outputs = [json.loads(r.stdout) for r in results]
    files = [p.name for p in migration_files()]
    # Exactly one process applied the migrations; the other seven found them applied.
    appliers = [o for o in outputs if o["applied"]]
    assert len(appliers) == 1 and appliers[0]["applied"] == files
    assert all(o["already_applied"] == files for o in outputs if not o["applied"])
    rows = migration_rows(target)
    assert [r[1] for r in rows] == files  # one row per migration (version is the primary key)
    assert_same_schema(fingerprint(target, with_times=False), fingerprint(reference, with_times=False))


# 3. a tampered migration is refused


def test_tampered_migration_refused(make_empty_database, tmp_path):
    migrations = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, migrations)
    target = make_empty_database()
    first = migrate(target, migrations_dir=migrations)
    assert first.applied == [p.name for p in migration_files()]
    edited = sorted(migrations.glob("*.sql"))[0]
    edited.write_text(edited.read_text(encoding="utf-8") + "\n-- a harmless-looking edit\n", encoding="utf-8")
    before = migration_rows(target)

    with pytest.raises(MigrationError) as err:
        migrate(target, migrations_dir=migrations)
    assert edited.name in str(err.value)
    assert "edited" in str(err.value)
    assert migration_rows(target) == before  # nothing recorded

    # The CLI refuses too, with the same message, and a non-zero exit.
    r = run_pgkb("migrate", "--dsn", target, env={"PGKB_MIGRATIONS_DIR": str(migrations)})
    assert r.returncode != 0
    assert edited.name in r.stderr and "edited" in r.stderr
    assert migration_rows(target) == before

    # Restoring the file makes it acceptable again.
    shutil.copy(MIGRATIONS_DIR / edited.name, edited)
    assert migrate(target, migrations_dir=migrations).applied == []


# 4. extensions


def test_extensions_present(migrated_db):
    rows = migrated_db.execute("SELECT extname, extversion FROM pg_extension").fetchall()
    versions = {r["extname"]: r["extversion"] for r in rows}
    for ext in ("vector", "pg_trgm", "plpython3u"):
        assert versions.get(ext), f"{ext} missing: {versions}"
    # They work, not just exist.
    assert migrated_db.execute("SELECT '[1,2,3]'::vector <-> '[1,2,4]'::vector AS d").fetchone()["d"] == 1.0
    assert migrated_db.execute("SELECT similarity('postgres', 'postgresql') > 0.5 AS ok").fetchone()["ok"]
    migrated_db.execute(
        "CREATE FUNCTION pg_temp.py_add(a int, b int) RETURNS int LANGUAGE plpython3u AS 'return a + b'"
    )
    assert migrated_db.execute("SELECT pg_temp.py_add(2, 3) AS s").fetchone()["s"] == 5


# 5. `pgkb status --json`


def test_status_json_shape(dsn):
    r = run_pgkb("status", "--json", env={"PGKB_DSN": dsn})
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert isinstance(status["server_version"], str) and int(status["server_version"].split(".")[0]) >= 15
    for ext in ("vector", "pg_trgm", "plpython3u"):
        assert isinstance(status["extensions"][ext], str) and status["extensions"][ext]
    assert [m["filename"] for m in status["migrations"]] == [p.name for p in migration_files()]
    assert all(m["version"] and m["applied_at"] for m in status["migrations"])
    assert isinstance(status["neural_ready"], bool)
    assert status["model"] == "e5-small" and status["dimensions"] == 384  # the default on a fresh install
    for key in ("embedded", "pending", "stale", "failed"):
        assert isinstance(status[key], int) and status[key] >= 0
    assert status["neural_ready"] is False  # nothing is embedded in an empty database
    assert status["models"] and {
        "model",
        "provider",
        "dimensions",
        "active",
        "embedded",
        "pending",
        "failed",
        "stale",
        "neural_ready",
    } <= set(status["models"][0])


# 6. embedded cluster lifecycle


def _free_port() -> int:
    for port in range(5497, 5400, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@pytest.fixture
def throwaway_home(request):
    home = Path(tempfile.mkdtemp(prefix="pgkb-home-", dir="/var/tmp"))
    home.chmod(0o755)
    env = {"PGKB_HOME": str(home), "PGKB_PORT": str(_free_port())}

    def cleanup():
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            cluster.destroy(load_settings())
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(home, ignore_errors=True)

    request.addfinalizer(cleanup)
    return env


def test_embedded_cluster_lifecycle(throwaway_home):
    env = throwaway_home
    home = Path(env["PGKB_HOME"])

    up = run_pgkb("up", env=env)
    assert up.returncode == 0, up.stderr
    cluster_dsn = up.stdout.strip()
    assert cluster_dsn == f"postgresql://postgres@127.0.0.1:{env['PGKB_PORT']}/pgkb"
    assert "created" in up.stderr and "started" in up.stderr
    assert (home / "data" / "PG_VERSION").exists()
    with psycopg.connect(cluster_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW server_encoding").fetchone()[0] == "UTF8"
        collation = "SELECT datcollate, datctype FROM pg_database WHERE datname = current_database()"
        assert conn.execute(collation).fetchone() == ("C.UTF-8", "C.UTF-8")  # SHOW lc_collate is gone in 16+
        exts = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        assert {"vector", "pg_trgm", "plpython3u"} <= exts
        started_at = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
    migrated = fingerprint(cluster_dsn)

    # `pgkb up` again: same DSN, no restart, nothing re-applied.
    again = run_pgkb("up", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == cluster_dsn
    assert "already running" in again.stderr and "0 applied" in again.stderr
    assert_same_schema(fingerprint(cluster_dsn), migrated)
    with psycopg.connect(cluster_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0] == started_at
        conn.execute("CREATE TABLE public.lifecycle_probe (note text)")
        conn.execute("INSERT INTO public.lifecycle_probe VALUES ('survives a restart')")

    dsn_cmd = run_pgkb("dsn", env=env)
    assert dsn_cmd.returncode == 0 and dsn_cmd.stdout.strip() == cluster_dsn

    down = run_pgkb("down", env=env)
    assert down.returncode == 0, down.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(cluster_dsn, connect_timeout=3).close()
    down_again = run_pgkb("down", env=env)
    assert down_again.returncode == 0 and "not running" in down_again.stderr

    back = run_pgkb("up", env=env)
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == cluster_dsn
    assert "exists" in back.stderr and "started" in back.stderr and "0 applied" in back.stderr
    with psycopg.connect(cluster_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT note FROM public.lifecycle_probe").fetchall() == [("survives a restart",)]
    after = fingerprint(cluster_dsn)
    assert after["schema_migrations"] == migrated["schema_migrations"]  # same rows, same applied_at

    final = run_pgkb("down", env=env)
    assert final.returncode == 0 and "stopped" in final.stderr


# 7. migration naming rule


@pytest.mark.parametrize(
    ("bad_name", "problem"),
    [
        ("3_short_version.sql", "0001_some_name.sql"),
        ("0099-dash.sql", "0001_some_name.sql"),
        ("0099_Upper.sql", "0001_some_name.sql"),
        ("0099_forgot_extension", "0001_some_name.sql"),
        ("0001_same_version.sql", "also used by"),
    ],
)
def test_badly_named_migration_rejected(make_empty_database, tmp_path, bad_name, problem):
    migrations = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, migrations)
    (migrations / bad_name).write_text("SELECT 1;\n", encoding="utf-8")
    target = make_empty_database()
    with pytest.raises(MigrationError) as err:
        migrate(target, migrations_dir=migrations)
    assert bad_name in str(err.value) and problem in str(err.value)
    with psycopg.connect(target, autocommit=True) as conn:  # refused before touching the database
        assert conn.execute("SELECT to_regnamespace('kb')").fetchone()[0] is None
