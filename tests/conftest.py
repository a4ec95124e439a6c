"""Shared fixtures: a real PostgreSQL (the test cluster scripts/test.sh starts) with the
real extensions. pytest-postgresql builds a template database once with the same
bootstrap users run (harness.migrate); databases are clones of it.

| fixture | database | model | lifetime |
| --- | --- | --- | --- |
| `dsn` | the test's fresh clone (its connection string) | default | one test |
| `migrated_db` | the test's fresh clone (an autocommit connection, dict rows) | default (e5-small) | one test |
| `fresh_db` | the test's fresh clone, as `migrated_db` | `hash-64` only | one test |
| `module_db` | one clone per test module | `hash-64` only | one module |
| `rolled_back_db` | `module_db` inside a transaction rolled back after each test | `hash-64` only | one test |

Helpers (insert_document, sources, roles, waiting) are in helpers.py."""

from __future__ import annotations

import os

import pytest
from helpers import TEST_HOST, TEST_PORT, use_only_the_hash_model
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

from harness.config import load_settings
from harness.db import connect
from harness.migrate import migrate


def load_schema(host, port, user, dbname, password=None, **_):
    migrate(f"postgresql://{user}@{host}:{port}/{dbname}", load_settings())


pg_server = factories.postgresql_noproc(
    # a per-run name, so two pytest runs against the same test cluster do not collide
    host=TEST_HOST,
    port=TEST_PORT,
    user="postgres",
    dbname=f"pgkb_test_{os.getpid()}",
    load=[load_schema],
)
postgresql = factories.postgresql("pg_server")


@pytest.fixture
def dsn(postgresql) -> str:
    """The connection string of this test's freshly migrated database."""
    return f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{postgresql.info.dbname}"


@pytest.fixture
def migrated_db(postgresql, dsn):
    """An autocommit connection (dict rows) to this test's freshly migrated database, default model."""
    with connect(dsn) as conn:
        yield conn


@pytest.fixture
def fresh_db(migrated_db):
    """This test's freshly migrated database whose only model is `hash-64` (fast, deterministic)."""
    use_only_the_hash_model(migrated_db)
    return migrated_db


@pytest.fixture(scope="module")
def module_db(pg_server, request):
    """One database per test module, cloned from the migrated template; its only model is `hash-64`."""
    dbname = f"{pg_server.dbname}_{request.module.__name__.rsplit('.', 1)[-1]}_{os.getpid()}"
    janitor = DatabaseJanitor(
        user=pg_server.user,
        host=pg_server.host,
        port=pg_server.port,
        dbname=dbname,
        template_dbname=pg_server.template_dbname,
        maintenance_dbname=pg_server.maintenance_dbname,
        password=pg_server.password,
    )
    with janitor:
        with connect(f"postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/{dbname}") as conn:
            use_only_the_hash_model(conn)
            yield conn


@pytest.fixture
def rolled_back_db(module_db):
    """The module's database inside a transaction that is rolled back after the test."""
    module_db.execute("BEGIN")
    try:
        yield module_db
    finally:
        module_db.execute("ROLLBACK")
