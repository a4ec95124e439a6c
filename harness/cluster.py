"""The embedded default cluster: create once, start, stop. Runs initdb/pg_ctl as the
`postgres` OS user when invoked as root (they refuse to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time

import psycopg

from .config import DATABASE_NAME, Settings, postgres_bin_dir

CLUSTER_CONF = """
# pgkb embedded cluster
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
shared_buffers = 256MB
maintenance_work_mem = 256MB
work_mem = 16MB
max_connections = 100
log_min_messages = warning
"""


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _run(cmd: list[str], what: str) -> None:
    result = subprocess.run(_as_postgres(cmd), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
        )


def _prepare_home(settings: Settings) -> None:
    for path in (settings.home, settings.log_file.parent, settings.socket_dir):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755 if path == settings.home else 0o700)
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            os.chown(path, pg.pw_uid, pg.pw_gid)


def is_initialised(settings: Settings) -> bool:
    return (settings.data_dir / "PG_VERSION").exists()


def is_running(settings: Settings) -> bool:
    if not is_initialised(settings):
        return False
    pg_ctl = str(postgres_bin_dir() / "pg_ctl")
    result = subprocess.run(_as_postgres([pg_ctl, "-D", str(settings.data_dir), "status"]), capture_output=True)
    return result.returncode == 0


def init(settings: Settings) -> bool:
    """Create the cluster if it does not exist. Returns True when it was created now."""
    if is_initialised(settings):
        return False
    _prepare_home(settings)
    initdb = str(postgres_bin_dir() / "initdb")
    _run(
        [
            initdb,
            "-D",
            str(settings.data_dir),
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=trust",
        ],
        "initdb",
    )
    conf = settings.data_dir / "postgresql.conf"
    extra = CLUSTER_CONF.format(port=settings.port, socket_dir=settings.socket_dir)
    # Written through the postgres user so file ownership stays right.
    subprocess.run(_as_postgres(["sh", "-c", f"cat >> '{conf}'"]), input=extra, text=True, check=True)
    return True


def start(settings: Settings) -> bool:
    """Start the cluster if it is not running. Returns True when it was started now."""
    if is_running(settings):
        return False
    _prepare_home(settings)
    pg_ctl = str(postgres_bin_dir() / "pg_ctl")
    _run(
        [pg_ctl, "-D", str(settings.data_dir), "-l", str(settings.log_file), "-w", "-t", "60", "start"],
        "pg_ctl start",
    )
    return True


def stop(settings: Settings) -> bool:
    if not is_running(settings):
        return False
    pg_ctl = str(postgres_bin_dir() / "pg_ctl")
    _run([pg_ctl, "-D", str(settings.data_dir), "-m", "fast", "-w", "stop"], "pg_ctl stop")
    return True


def ensure_database(settings: Settings, dbname: str = DATABASE_NAME) -> None:
    admin_dsn = f"postgresql://postgres@127.0.0.1:{settings.port}/postgres"
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
                if not exists:
                    conn.execute(f'CREATE DATABASE "{dbname}"')
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def destroy(settings: Settings) -> None:
    """Stop and delete the cluster's files (used by tests on throwaway homes)."""
    stop(settings)
    if settings.home.exists():
        shutil.rmtree(settings.home)
