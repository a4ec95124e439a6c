"""`pgkb` explains itself: transcripts of the real command against the test cluster (a migrated database,
an empty one, a port nothing listens on), each a rule a new user meets in the first hour."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from helpers import TEST_HOST, TEST_PORT

from harness.cli import build_parser

PGKB = "/opt/pgkb/venv/bin/pgkb"
REPO = Path(__file__).resolve().parents[1]


def pgkb(*arguments: str, **environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PGKB_DSN", "PGKB_READ_DSN")} | environment
    return subprocess.run([PGKB, *arguments], env=env, capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.fixture
def unmigrated_dsn():
    name = f"pgkb_unmigrated_{uuid.uuid4().hex[:8]}"
    admin = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # free once closed: nothing listens there


def silent_options(parser, prefix: str = "pgkb") -> list[str]:
    """The options and arguments of a parser and of every command under it that have no help."""
    silent = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                silent += silent_options(command, f"{prefix} {name}")
        if not action.help and action.dest != "help":
            silent.append(f"{prefix} {action.dest}")
    return silent


def options_without_example(parser, prefix: str = "pgkb") -> list[str]:
    """The options and arguments that take a value but show neither an example ("e.g."), their choices nor
    a default: a user reading --help cannot tell what to write there."""
    unclear = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                unclear += options_without_example(command, f"{prefix} {name}")
        elif action.nargs != 0 and action.choices is None and action.dest not in ("help", "version"):
            text = (action.help or "").lower()
            if "e.g." not in text and "default" not in text:
                unclear.append(f"{prefix} {'/'.join(action.option_strings) or action.dest}")
    return unclear


def test_every_option_of_every_command_says_what_it_does():
    assert not silent_options(build_parser())


def test_every_option_that_takes_a_value_shows_an_example_its_choices_or_its_default():
    assert not options_without_example(build_parser())


def test_version_is_the_packages():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    version = next(line.split('"')[1] for line in pyproject.splitlines() if line.startswith("version ="))
    assert pgkb("--version").stdout.strip() == f"pgkb {version}"


def test_an_unmigrated_database_is_named_with_the_next_step(unmigrated_dsn):
    for command in (["status"], ["query", "refund"], ["doctor"]):
        result = pgkb(*command, PGKB_DSN=unmigrated_dsn)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "is not migrated" in result.stderr and "run `pgkb migrate`" in result.stderr, result.stderr
        assert "(from PGKB_DSN)" in result.stderr


def test_a_connection_failure_names_the_dsn_where_it_came_from_and_the_next_step():
    port = closed_port()
    configured = pgkb("query", "refund", PGKB_DSN=f"postgresql://postgres@127.0.0.1:{port}/pgkb")
    assert configured.returncode == 2
    assert f"port={port} (from PGKB_DSN)" in configured.stderr and "next: check that the server of PGKB_DSN" in (
        configured.stderr
    )
    embedded = pgkb("status", PGKB_PORT=str(port))
    assert embedded.returncode == 2
    assert "(from the embedded cluster (PGKB_HOME=" in embedded.stderr and "next: start the embedded cluster" in (
        embedded.stderr
    )


def test_an_empty_folder_is_warned_about_even_when_quiet(dsn, tmp_path):
    result = pgkb("ingest", str(tmp_path), "--quiet", PGKB_DSN=dsn)
    assert result.returncode == 0
    assert f"pgkb ingest: warning: {tmp_path}: no file here to load" in result.stderr


def test_progress_is_not_drawn_into_a_pipe(fresh_db, dsn, tmp_path):
    (tmp_path / "a.md").write_text("# A\n\nRefunds take 14 days.\n", encoding="utf-8")
    result = pgkb("ingest", str(tmp_path), PGKB_DSN=dsn)
    assert result.returncode == 0 and '"synced": 1' in result.stdout
    assert "\r" not in result.stderr


def test_query_explains_and_filters(fresh_db, dsn, tmp_path):
    (tmp_path / "a.md").write_text("---\ndoc_type: policy\n---\n# A\n\nRefunds take 14 days.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("---\ndoc_type: faq\n---\n# B\n\nRefunds are quick.\n", encoding="utf-8")
    assert pgkb("ingest", str(tmp_path), "--quiet", PGKB_DSN=dsn).returncode == 0
    explained = pgkb("query", "refunds", "--explain", PGKB_DSN=dsn)
    assert explained.returncode == 0 and '"stages"' in explained.stdout and '"answerability"' in explained.stdout
    filtered = pgkb("query", "refunds", "--filters", '{"doc_type": "faq"}', "--json", PGKB_DSN=dsn)
    assert '"b.md"' in filtered.stdout and '"a.md"' not in filtered.stdout
