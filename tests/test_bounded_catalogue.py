"""Every function a reader or a writer may execute, in every schema pgkb creates, bounds its work.
The functions come from the catalogue, so one added tomorrow is called here the day it exists.
Each is called with plain arguments, then with one argument at a time made oversized (a megabyte
of text, 200,000-element arrays, jsonb nested 5,000 deep or 200,000 wide, the largest integers,
infinite dates, composites whose every field is oversized): a reader's call answers or fails with
a named error within a second; a writer's within WRITER_SECONDS (the file limits of
docs/INGEST.md bound a writer's parse; nothing here parses for long). And no PL/Python function is
executable by a reader or by PUBLIC: readers reach PL/Python only through bounded doors."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

SCHEMAS = ["kb", "kb_pipeline", "public", "kb_shard"]
READER_SECONDS = 1.0
WRITER_SECONDS = 5.0
SUFFIX = uuid.uuid4().hex[:8]
READER = f"walk_reader_{SUFFIX}"
WRITER = f"walk_writer_{SUFFIX}"

LONG_TEXT = "repeat('refund 退款 ', 110000)"  # about a megabyte
PLAIN = {
    "text": "'refund days'",
    "name": "current_user",
    "text[]": "ARRAY['refund', 'day']",
    "jsonb": "'{}'::jsonb",
    "jsonb[]": "ARRAY['{}'::jsonb]",
    "integer": "5",
    "smallint": "5",
    "bigint": "1",
    "real": "0.5",
    "double precision": "0.5",
    "numeric": "0.5",
    "boolean": "false",
    "date": "current_date",
    "timestamp with time zone": "now()",
    "bytea": "'\\x00'::bytea",
    "bigint[]": "'{}'::bigint[]",
    "integer[]": "'{}'::integer[]",
    "oid[]": "NULL::oid[]",
}
OVERSIZED = {
    "text": [LONG_TEXT],
    "text[]": [f"array_fill({LONG_TEXT}::text, ARRAY[2])", "array_fill('refund'::text, ARRAY[200000])"],
    "jsonb": [
        "(repeat('[', 5000) || repeat(']', 5000))::jsonb",
        "(SELECT jsonb_agg(g) FROM generate_series(1, 200000) AS g)",
        "(SELECT jsonb_object_agg('k' || g, g) FROM generate_series(1, 200000) AS g)",
        f"jsonb_build_object('query', {LONG_TEXT}, 'terms', "
        "(SELECT jsonb_agg('t' || g) FROM generate_series(1, 200000) AS g))",
    ],
    "jsonb[]": [
        "array_fill((repeat('[', 5000) || repeat(']', 5000))::jsonb, ARRAY[2])",
        "array_fill('{}'::jsonb, ARRAY[200000])",
    ],
    "integer": ["2147483647", "-2147483648"],
    "smallint": ["32767"],
    "bigint": ["9223372036854775807"],
    "real": ["'Infinity'::real"],
    "double precision": ["1e308", "'NaN'::float8"],
    "numeric": ["1e300"],
    "date": ["'infinity'::date"],
    "timestamp with time zone": ["'infinity'::timestamptz", "'-infinity'::timestamptz"],
    "bytea": ["convert_to(repeat('x', 10000000), 'UTF8')"],
    "bigint[]": ["ARRAY(SELECT generate_series(1, 200000)::bigint)"],
    "integer[]": ["ARRAY(SELECT generate_series(1, 200000))"],
    "oid[]": ["array_fill(0::oid, ARRAY[200000])"],
}
# what no call may end with: a lost connection (no SQLSTATE), a timeout, an internal error
NOT_NAMED = {None, "57014", "XX000", "XX001", "XX002"}


def composite_fields(conn, type_name: str) -> list[tuple[str, str]]:
    return [
        (r["attname"], r["t"])
        for r in conn.execute(
            """SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS t FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = (SELECT typrelid FROM pg_catalog.pg_type WHERE oid = %s::regtype)
                 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum""",
            (type_name,),
        )
    ]


def is_composite(conn, type_name: str) -> bool:
    return conn.execute(
        """SELECT typtype = 'c'
                  OR (typcategory = 'A' AND (SELECT e.typtype = 'c' FROM pg_type AS e WHERE e.oid = typelem)) AS c
           FROM pg_catalog.pg_type WHERE oid = %s::regtype""",
        (type_name,),
    ).fetchone()["c"]


def plain_value(type_name: str) -> str:
    return PLAIN.get(type_name, f"NULL::{type_name}")


def oversized_values(conn, type_name: str) -> list[str]:
    """SQL expressions of oversized values of a type; for a composite (or an array of them) one
    whose every field is at its largest, and for an array of composites 200,000 of those."""
    if type_name in OVERSIZED:
        return OVERSIZED[type_name]
    if not is_composite(conn, type_name):
        return []
    element = type_name[:-2] if type_name.endswith("[]") else type_name
    fields = [OVERSIZED.get(t, [PLAIN.get(t, f"NULL::{t}")])[0] for _, t in composite_fields(conn, element)]
    big = f"ROW({', '.join(fields)})::{element}"
    if type_name.endswith("[]"):
        small = [PLAIN.get(t, f"NULL::{t}") for _, t in composite_fields(conn, element)]
        return [f"ARRAY[{big}]", f"array_fill(ROW({', '.join(small)})::{element}, ARRAY[200000])"]
    return [big]


def executable(conn, grantee: str) -> list[dict]:
    return conn.execute(
        """SELECT p.oid::regprocedure::text AS signature, p.oid::regproc::text AS name, p.prokind,
                  ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t) AS types
           FROM pg_catalog.pg_proc AS p
           INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname = ANY(%s) AND p.prokind IN ('f', 'p')
             AND p.prorettype NOT IN ('trigger'::regtype, 'internal'::regtype)
             AND has_function_privilege(%s, p.oid, 'EXECUTE')
             -- pgvector's and pg_trgm's functions are their extensions' to bound
             AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                             WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
           ORDER BY 1""",
        (SCHEMAS, grantee),
    ).fetchall()


def stored(conn, expression: str, type_name: str, cache: dict[str, str]) -> str:
    """An oversized value built once, as the owner, into a temporary table every role may read:
    the call then costs what the function does with it, not what building it costs."""
    if expression not in cache:
        table = f"walk_value_{len(cache)}"
        conn.execute(f"CREATE TEMP TABLE {table} ON COMMIT DROP AS SELECT ({expression})::{type_name} AS v")
        conn.execute(f"GRANT SELECT ON {table} TO public")
        cache[expression] = f"(SELECT v FROM {table})"
    return cache[expression]


def calls_of(conn, function: dict, cache: dict[str, str]) -> list[str]:
    plain = [plain_value(t) for t in function["types"]]
    calls = [plain]
    for i, type_name in enumerate(function["types"]):
        for value in oversized_values(conn, type_name):
            calls.append(plain[:i] + [stored(conn, value, type_name, cache)] + plain[i + 1 :])
    if function["prokind"] == "p":
        return [f"CALL {function['name']}({', '.join(args)})" for args in calls]
    # the answer is measured in the database (its text's length), not sent: a megabyte of deep
    # jsonb would only test the client's JSON decoder
    return [
        f"SELECT sum(length(x::text)) FROM (SELECT {function['name']}({', '.join(args)}) AS x) AS s" for args in calls
    ]


@pytest.fixture
def tenants(rolled_back_db):
    conn = rolled_back_db
    insert_document(conn, "refund.md", "# Refunds\n\nRefunds within 14 days. 十四天内退款。", namespace="walk")
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with (
        temporary_role(conn, READER, "NOLOGIN IN ROLE pgkb_reader"),
        temporary_role(conn, WRITER, "NOLOGIN IN ROLE pgkb_writer"),
    ):
        for name in (READER, WRITER):
            conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'walk')", (name,))
        yield conn


def outcome_of(conn, statement: str, seconds: float) -> tuple[str, float]:
    """How one call ended ("answered", "named error …" or what went wrong) and its seconds."""
    conn.execute("SAVEPOINT walk")
    conn.execute(f"SET LOCAL statement_timeout = '{int(seconds * 10 * 1000)}ms'")
    start = time.perf_counter()
    outcome = "answered"
    try:
        conn.execute(statement)
    except psycopg.Error as exc:
        outcome = f"{type(exc).__name__}: {exc}" if exc.sqlstate in NOT_NAMED else f"named error {exc.sqlstate}"
    took = time.perf_counter() - start
    conn.execute("ROLLBACK TO SAVEPOINT walk")
    return outcome, took


def slow_or_unnamed(conn, role: str, statements: list[str], seconds: float) -> list[str]:
    found = []
    with acting_as(conn, role):
        for statement in statements:
            outcome, took = outcome_of(conn, statement, seconds)
            if took > seconds and outcome.startswith(("answered", "named")):
                # a shared machine's pause is not the call's cost: the best of three decides
                took = min([took] + [outcome_of(conn, statement, seconds)[1] for _ in range(2)])
            if took > seconds or not outcome.startswith(("answered", "named")):
                found.append(f"{statement[:300]} -> {outcome[:200]} in {took:.2f} s")
    return found


def test_the_walk_covers_the_doors_readers_and_writers_use(tenants):
    reader = {f["signature"] for f in executable(tenants, READER)}
    writer = {f["signature"] for f in executable(tenants, WRITER)}
    assert any(s.startswith("kb_retrieve(") for s in reader)
    assert any(s.startswith("kb.snippets(") for s in reader)
    assert any(s.startswith("kb.ingest_file(") for s in writer)


def test_every_function_a_reader_may_execute_answers_oversized_input_within_a_second(tenants):
    cache: dict[str, str] = {}
    statements = [c for f in executable(tenants, READER) for c in calls_of(tenants, f, cache)]
    assert len(statements) > 100
    found = slow_or_unnamed(tenants, READER, statements, READER_SECONDS)
    assert found == [], "\n".join(found)


def test_every_function_only_a_writer_may_execute_answers_oversized_input_within_its_limit(tenants):
    readers = {f["signature"] for f in executable(tenants, READER)}
    cache: dict[str, str] = {}
    statements = [
        c for f in executable(tenants, WRITER) if f["signature"] not in readers for c in calls_of(tenants, f, cache)
    ]
    assert statements
    found = slow_or_unnamed(tenants, WRITER, statements, WRITER_SECONDS)
    assert found == [], "\n".join(found)


def test_no_plpython_function_is_executable_by_a_reader_or_by_public(tenants):
    plpython = tenants.execute(
        """SELECT p.oid::regprocedure::text AS f,
                  has_function_privilege(%s, p.oid, 'EXECUTE') AS reader,
                  has_function_privilege('public', p.oid, 'EXECUTE') AS public
           FROM pg_catalog.pg_proc AS p INNER JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
           WHERE l.lanname = 'plpython3u' AND p.prorettype <> 'trigger'::regtype""",
        (READER,),
    ).fetchall()
    assert len(plpython) > 5
    assert [r["f"] for r in plpython if r["reader"] or r["public"]] == []
