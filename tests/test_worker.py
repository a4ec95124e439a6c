"""`pgkb worker` (harness/worker.py) against a real database: several worker processes drain one
queue with every chunk embedded exactly once; a worker killed with SIGKILL mid-batch loses nothing;
SIGTERM stops a worker between batches; bad settings and a broken provider give clear outcomes.

The provider is tests/fake_ollama.py in its `slow` mode, so batches take real time and overlap;
the fake server records every text it is asked to embed, which is how "exactly once" is counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fake_ollama import FakeOllama
from helpers import count_rows, deferred_corpus, register_fake_ollama, wait_for

from harness import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def queue(migrated_db):
    """(connection, fake server, queued texts): 30 documents (60 chunks) queued for a slow fake Ollama."""
    with FakeOllama(dimensions=8, mode="slow", delay_s=0.05) as srv:
        register_fake_ollama(migrated_db, srv.url, 8)
        texts = deferred_corpus(migrated_db, 30)
        assert len(texts) == 60 and srv.inputs == []
        yield migrated_db, srv, texts


def start_worker(dsn: str, *args: str) -> subprocess.Popen:
    """`pgkb worker ARGS` as its own process (so it can be killed), against dsn."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "worker", "--quiet", *args],
        cwd=REPO,
        env={**os.environ, "PGKB_DSN": dsn},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out)


def batches_running(conn) -> int:
    """Statements of kb.embed_queue_batch running in the server now (other sessions)."""
    return count_rows(
        conn,
        "pg_stat_activity WHERE state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()",
        "%embed_queue_batch%",
    )


def assert_every_chunk_embedded_once(db, srv: FakeOllama | None, texts: list[str]) -> None:
    if srv is not None:
        assert Counter(srv.inputs) == Counter(texts)  # asked of the provider exactly once each
    assert count_rows(db, "kb.embeddings WHERE model = 'fake'") == count_rows(db, "kb.chunks") == len(texts)
    assert count_rows(db, "kb.embed_queue") == 0
    assert {r["ingest_status"] for r in db.execute("SELECT ingest_status FROM kb.documents")} == {"indexed"}


def test_several_workers_drain_one_queue_embedding_every_chunk_exactly_once(queue, dsn):
    db, srv, texts = queue
    # two processes of two connections each: four claimers on one queue
    procs = [start_worker(dsn, "--once", "--concurrency", "2", "--batch-size", "4") for _ in range(2)]
    outcomes = [finish(p) for p in procs]
    assert all(o["stopped_by"] == "drained" and o["failed_batches"] == 0 for o in outcomes), outcomes
    assert sum(o["embedded"] for o in outcomes) == 60
    # every connection took part: the claims really ran side by side
    assert all(n > 0 for o in outcomes for n in o["per_connection"]), outcomes
    assert_every_chunk_embedded_once(db, srv, texts)


def test_a_worker_killed_mid_batch_loses_no_chunk(queue, dsn):
    db, srv, texts = queue
    srv.delay_s = 1.0  # a batch in flight for a second: time to kill its worker in the middle
    killed = start_worker(dsn, "--batch-size", "5", "--poll-interval", "0.2")
    wait_for(lambda: srv.request_count >= 2, timeout=30)
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    srv.delay_s = 0.02
    # the orphaned backend still holds its claims (SKIP LOCKED hides them) until its statement
    # ends and commits or rolls back; a running worker must then pick up whatever is left
    survivor = start_worker(dsn, "--batch-size", "5", "--poll-interval", "0.2")
    wait_for(lambda: count_rows(db, "kb.embed_queue") == 0 and batches_running(db) == 0, timeout=60)
    survivor.send_signal(signal.SIGTERM)
    outcome = finish(survivor)
    assert outcome["embedded"] > 0
    # stored exactly once each; the killed batch may have been asked of the provider twice
    # (once by the dead worker's rolled-back transaction), which is allowed, but none is missing
    assert set(srv.inputs) == set(texts)
    assert_every_chunk_embedded_once(db, None, texts)


def test_sigterm_stops_a_worker_between_batches(queue, dsn):
    db, srv, texts = queue
    srv.delay_s = 0.5
    proc = start_worker(dsn, "--batch-size", "3", "--poll-interval", "0.2")
    wait_for(lambda: srv.request_count >= 2, timeout=30)  # the second batch is in flight
    proc.send_signal(signal.SIGTERM)
    outcome = finish(proc, timeout=20)
    assert outcome["stopped_by"] == "signal"
    # the batch in flight was finished and committed, none was cut: every provider request became
    # a stored batch of 3, and no further batch was started
    assert outcome["batches"] == srv.request_count >= 2
    assert outcome["embedded"] == 3 * outcome["batches"] == count_rows(db, "kb.embeddings")
    assert outcome["remaining"] == 60 - outcome["embedded"] > 0
    assert batches_running(db) == 0  # its connection is gone, nothing left running in the server


def test_once_stops_at_the_first_failing_batch_and_the_queue_keeps_the_error(migrated_db, dsn):
    with FakeOllama(dimensions=8, mode="always_500") as srv:
        register_fake_ollama(migrated_db, srv.url, 8)
        deferred_corpus(migrated_db, 5)
        proc = start_worker(dsn, "--once", "--batch-size", "4", "--concurrency", "2")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    outcome = json.loads(out)
    assert outcome["stopped_by"] == "error" and "500" in outcome["error"]
    assert outcome["remaining"] == 10 and count_rows(migrated_db, "kb.embeddings") == 0
    assert count_rows(migrated_db, "kb.embed_queue WHERE last_error IS NOT NULL AND attempts = 1") >= 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be between 1 and 64 (got 0)"),
        (["--batch-size", "0"], "--batch-size must be between 1 and 10000 (got 0)"),
        (["--poll-interval", "-1"], "--poll-interval must be more than 0"),
        (["--model", "nope"], "unknown model 'nope'; registered: hash-64"),
    ],
)
def test_a_worker_refuses_bad_settings_with_a_clear_error(fresh_db, dsn, monkeypatch, capsys, args, message):
    monkeypatch.setenv("PGKB_DSN", dsn)
    assert cli.main(["worker", "--once", "--quiet", *args]) == 2
    assert message in capsys.readouterr().err
