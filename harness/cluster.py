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
    """Stop and delete the cluster's files (used by tests on throwaway homes). Immediate stop: the
    files are deleted next, so a shutdown checkpoint (seconds on a loaded machine) buys nothing."""
    if is_running(settings):
        pg_ctl = str(postgres_bin_dir() / "pg_ctl")
        _run([pg_ctl, "-D", str(settings.data_dir), "-m", "immediate", "-w", "stop"], "pg_ctl stop")
    if settings.home.exists():
        shutil.rmtree(settings.home)


# ---------------------------------------------------------------- throwaway clusters and standbys
# Tests and benchmarks that need clusters of their own (a primary and its hot standby, a server
# behind PgBouncer) make them here: in a temporary folder, on a free port, with the same initdb
# and configuration as the embedded cluster, so nothing touches the embedded or the test cluster.


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def throwaway_settings(prefix: str = "pgkb-cluster-") -> Settings:
    """Settings of a new cluster home in a fresh folder under /var/tmp (readable by `postgres`,
    which cannot enter /root), on a free port."""
    import tempfile
    from pathlib import Path

    from .config import load_settings

    home = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    home.chmod(0o755)
    return Settings(home=home, port=free_port(), dsn_override=None, server_venv=load_settings().server_venv)


def create_standby(primary: Settings, standby: Settings) -> None:
    """A streaming-replication hot standby of `primary` at `standby.home`, started: pg_basebackup
    with -R (standby.signal and primary_conninfo written for us) and -X stream, then the port and
    socket folder of its own. initdb's default pg_hba.conf already lets 127.0.0.1 replicate."""
    _prepare_home(standby)
    bin_dir = postgres_bin_dir()
    _run(
        [
            str(bin_dir / "pg_basebackup"),
            "-D",
            str(standby.data_dir),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ],
        "pg_basebackup",
    )
    conf = standby.data_dir / "postgresql.conf"
    # later lines win: the copied configuration still names the primary's port and sockets
    extra = (
        f"\n# pgkb standby\nport = {standby.port}\nunix_socket_directories = '{standby.socket_dir}'\nhot_standby = on\n"
    )
    subprocess.run(_as_postgres(["sh", "-c", f"cat >> '{conf}'"]), input=extra, text=True, check=True)
    start(standby)


def wait_for_replay(primary_dsn: str, standby_dsn: str, timeout: float = 60) -> float:
    """Block until the standby has replayed everything the primary had written when called;
    returns the seconds waited. TimeoutError after `timeout`."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    started = time.monotonic()
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        while True:
            caught_up = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0]
            if caught_up:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"standby did not replay up to {target} within {timeout} s")
            time.sleep(0.02)
