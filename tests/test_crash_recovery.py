"""Crashes on a throwaway cluster of its own: a backend killed with SIGKILL mid-ingest
(the postmaster restarts every backend) and a server restart in the middle of a backfill."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from fake_ollama import FakeOllama
from helpers import sources, start_slow_ingest, use_only_the_hash_model, wait_for
from psycopg.types.json import Jsonb

from harness import backfill, cluster
from harness.config import Settings, load_settings, postgres_bin_dir
from harness.db import connect
from harness.migrate import migrate
from harness.retrieval import retrieve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def crash_cluster():
    home = Path(tempfile.mkdtemp(prefix="pgkb-crash-", dir="/var/tmp"))
    home.chmod(0o755)
    settings = Settings(home=home, port=_free_port(), dsn_override=None, server_venv=load_settings().server_venv)
    try:
        cluster.init(settings)
        cluster.start(settings)
        cluster.ensure_database(settings)
        migrate(settings.embedded_dsn, settings)
        yield settings
    finally:
        cluster.destroy(settings)
        shutil.rmtree(home, ignore_errors=True)


def _wait_until_accepting(settings: Settings, timeout: float = 60) -> None:
    def ok() -> bool:
        try:
            with connect(settings.embedded_dsn) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    wait_for(ok, timeout=timeout, interval=0.2)


def _checkpointer_pid(settings: Settings) -> int | None:
    try:
        with connect(settings.embedded_dsn) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").fetchone()
            return row["pid"]
    except psycopg.OperationalError:
        return None


def test_sigkill_of_a_backend_mid_ingest_leaves_no_partial_document(crash_cluster):
    settings = crash_cluster
    with connect(settings.embedded_dsn) as conn:
        use_only_the_hash_model(conn)
    checkpointer = _checkpointer_pid(settings)
    t, holder = start_slow_ingest(settings.embedded_dsn)
    time.sleep(1.0)
    os.kill(holder["pid"], signal.SIGKILL)
    t.join(timeout=60)
    assert isinstance(holder.get("error"), psycopg.Error)
    # the server accepts connections for a moment before the postmaster notices the killed
    # backend and restarts every process; after the restart the checkpointer is a new one
    wait_for(lambda: _checkpointer_pid(settings) not in (None, checkpointer), timeout=60, interval=0.2)
    with connect(settings.embedded_dsn) as conn:
        for table in ("kb.documents", "kb.chunks", "kb.lexical_postings", "kb.embeddings", "kb.embed_queue"):
            assert conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"] == 0, table
        conn.execute("INSERT INTO kb.documents (source, body) VALUES ('after.md', '# After\n\nRefunds take 14 days.')")
        assert sources(retrieve(conn, "refunds days", k=3)) == ["after.md"]


def test_server_restart_mid_backfill_then_backfill_finishes(crash_cluster):
    settings = crash_cluster
    with FakeOllama(dimensions=8, mode="slow", delay_s=0.15) as srv:
        with connect(settings.embedded_dsn) as conn:
            conn.execute("DELETE FROM kb.models")
            options = {"base_url": srv.url, "timeout_s": 5, "max_retries": 1, "backoff_s": 0.01}
            conn.execute(
                "SELECT kb.register_model('fake', 'ollama', 'nomic-embed-text', 8, %s, true)", (Jsonb(options),)
            )
            conn.execute("""UPDATE kb.settings SET value = '"deferred"' WHERE key = 'embed_mode'""")
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO kb.documents (source, body) VALUES (%s, %s)",
                    [(f"d{i:03d}.md", f"# Doc {i}\n\nTopic {i} about refunds number {i}.") for i in range(120)],
                )
            chunks = conn.execute("SELECT count(*) AS n FROM kb.chunks").fetchone()["n"]
            assert conn.execute("SELECT count(*) AS n FROM kb.embed_queue").fetchone()["n"] == chunks

        worker = subprocess.Popen(
            ["/opt/pgkb/venv/bin/pgkb", "backfill", "--batch-size", "4", "--quiet"],
            env=dict(os.environ, PGKB_DSN=settings.embedded_dsn),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def some_embedded() -> bool:
            with connect(settings.embedded_dsn) as c:
                return c.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"] > 0

        wait_for(some_embedded, timeout=60, interval=0.1)
        pg_ctl = str(postgres_bin_dir() / "pg_ctl")
        cmd = [pg_ctl, "-D", str(settings.data_dir), "-m", "immediate", "-w", "restart", "-l", str(settings.log_file)]
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd, check=True, capture_output=True
        )
        worker.wait(timeout=60)
        assert worker.returncode != 0, "the backfill should have lost its connection"
        _wait_until_accepting(settings)
        with connect(settings.embedded_dsn) as conn:
            done_before = conn.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"]
            assert 0 < done_before < chunks
        outcome = backfill.run(settings.embedded_dsn, progress=False)
        assert outcome["error"] is None and outcome["remaining"] == 0
        with connect(settings.embedded_dsn) as conn:
            assert conn.execute("SELECT count(*) AS n FROM kb.embeddings").fetchone()["n"] == chunks
            assert conn.execute("SELECT count(*) AS n FROM kb.embed_queue").fetchone()["n"] == 0
            statuses = conn.execute("SELECT DISTINCT ingest_status FROM kb.documents").fetchall()
            assert statuses == [{"ingest_status": "indexed"}]
