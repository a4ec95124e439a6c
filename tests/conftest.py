"""Shared fixtures: a real PostgreSQL (the test cluster scripts/test.sh starts) with the
real extensions. pytest-postgresql builds a template database once with the same
bootstrap users run (harness.migrate), and every test gets a fresh clone of it."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg.rows import dict_row
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

from harness.config import load_settings
from harness.migrate import migrate

TEST_HOST = "127.0.0.1"
TEST_PORT = int(os.environ.get("PGKB_TEST_PORT", "5498"))


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
    return f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{postgresql.info.dbname}"


@pytest.fixture
def db(postgresql, dsn):
    """An autocommit connection (dict rows) to a freshly migrated database."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def kb(db):
    """A fresh database whose only model is the fast deterministic `hash` provider."""
    db.execute("DELETE FROM kb.models")
    db.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 64, '{}', true)")
    return db


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
        with psycopg.connect(
            host=pg_server.host,
            port=pg_server.port,
            user=pg_server.user,
            dbname=dbname,
            autocommit=True,
            row_factory=dict_row,
        ) as conn:
            conn.execute("DELETE FROM kb.models")
            conn.execute("SELECT kb.register_model('hash-64', 'hash', 'hash', 64, '{}', true)")
            yield conn


@pytest.fixture
def module_kb(module_db):
    """The module's database inside a transaction that is rolled back after the test."""
    module_db.execute("BEGIN")
    try:
        yield module_db
    finally:
        module_db.execute("ROLLBACK")


def insert_document(conn, source: str, body: str, **fields) -> int:
    columns = {"source": source, "body": body, "namespace": "default", **fields}
    names = ", ".join(columns)
    placeholders = ", ".join(f"%({k})s" for k in columns)
    row = conn.execute(
        f"INSERT INTO kb.documents ({names}) VALUES ({placeholders}) RETURNING id",
        {k: (psycopg.types.json.Jsonb(v) if isinstance(v, dict) else v) for k, v in columns.items()},
    ).fetchone()
    return row["id"] if isinstance(row, dict) else row[0]


def retrieve(conn, query: str, **kwargs) -> list[dict]:
    args = ", ".join(f"{k} => %({k})s" for k in kwargs)
    sql = f"SELECT * FROM kb_retrieve(%(query)s{', ' + args if args else ''})"
    params = {"query": query, **kwargs}
    for k, v in params.items():
        if isinstance(v, dict):
            params[k] = psycopg.types.json.Jsonb(v)
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()
