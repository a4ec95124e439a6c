"""The shard doors (kb.shard_corpus, kb.shard_stage_candidates, kb.shard_passages) read as the owner
and write no log row: a retrieval through a coordinator is logged once, on the coordinator. So on a
database that is no shard no role but the owner may call them, and on a shard (kb.open_shard_doors)
only the roles its coordinator connects as may, with every input held to what kb_retrieve itself
produces. The coordinator's side is tests/test_shards_tenants.py."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role

STAGES = (
    """{"stages": [{"lexical": {"terms": %s}}, {"lexical": {"terms": ["refund"]}}, {"lexical": {"terms": []}}]%s}"""
)


def stage_call(terms: list[str], corpus: dict | None = None) -> str:
    extra = f', "lexical_corpus": {json.dumps(corpus)}' if corpus is not None else ""
    inputs = STAGES % (json.dumps(terms), extra)
    return (
        "SELECT kb.shard_stage_candidates('refund days', 5, 'lexical', '{}', '2030-01-01', NULL, "
        f"'{inputs}'::jsonb) AS c"
    )


@pytest.fixture
def shard(rolled_back_db):
    conn = rolled_back_db
    insert_document(conn, "refund.md", "# Refunds\n\nA refund takes 14 days.")
    with temporary_role(conn, "door_reader", "NOLOGIN IN ROLE pgkb_reader") as name:
        yield conn, name


DOORS = [
    "kb.shard_corpus(text[],text)",
    "kb.shard_stage_candidates(text,integer,text,jsonb,timestamp with time zone,text[],jsonb)",
    "kb.shard_passages(jsonb)",
]


def test_on_a_database_that_is_no_shard_no_reader_or_writer_may_call_a_shard_door(shard):
    conn, role = shard
    for group in ("pgkb_reader", "pgkb_writer", "pgkb_admin", role):
        for door in DOORS:
            may = conn.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE') AS may", (group, door)).fetchone()
            assert not may["may"], (group, door)
    with acting_as(conn, role):
        conn.execute("SAVEPOINT door")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT kb.shard_passages('[]')")
        conn.execute("ROLLBACK TO SAVEPOINT door")
    listed = conn.execute("SELECT array_agg(d::text ORDER BY d::text) AS d FROM unnest(kb.shard_doors()) AS d")
    assert listed.fetchone()["d"] == sorted(DOORS), "the grants walk the same doors"


def test_a_shard_opens_its_doors_to_the_roles_its_coordinator_connects_as(shard):
    conn, role = shard
    assert conn.execute("SELECT kb.open_shard_doors(%s) AS r", (role,)).fetchone()["r"] == [role]
    with acting_as(conn, role):
        assert conn.execute("SELECT count(*) AS n FROM kb.shard_passages('[]')").fetchone()["n"] == 0
        candidates = conn.execute(stage_call(["refund", "day"])).fetchone()["c"]
    assert candidates["stages"][0]["lexical"], "the door answers within its bounds"
    each_caller = conn.execute("SELECT kb.open_shard_doors(NULL) AS r").fetchone()["r"]
    assert each_caller == sorted([role, "pgkb_admin", "pgkb_reader", "pgkb_writer"]), "a coordinator of each caller"
    conn.execute("SAVEPOINT nobody")
    with pytest.raises(psycopg.errors.UndefinedObject, match='role "nobody_here" does not exist'):
        conn.execute("SELECT kb.open_shard_doors('nobody_here')")
    conn.execute("ROLLBACK TO SAVEPOINT nobody")


def test_a_shard_refuses_inputs_beyond_what_kb_retrieve_produces_by_name(shard):
    conn, role = shard
    conn.execute("SELECT kb.open_shard_doors(%s)", (role,))
    forged = [
        (stage_call([f"t{i}" for i in range(10000)]), psycopg.errors.InvalidParameterValue, "stage 1: at most"),
        (
            stage_call(["refund"], {"chunk_count": -5, "total_length": 10, "df": {"refund": 1}}),
            psycopg.errors.InvalidParameterValue,
            "chunk_count and total_length must be counts",
        ),
        (
            stage_call(["refund"], {"chunk_count": 5, "total_length": 10, "df": {"refund": 1e9}}),
            psycopg.errors.InvalidParameterValue,
            "df must hold at most",
        ),
        (
            "SELECT kb.shard_corpus(array_fill('t'::text, ARRAY[400000]), 'hash-64')",
            psycopg.errors.ProgramLimitExceeded,
            "kb.shard_corpus: 400000 terms",
        ),
        (
            """SELECT count(*) FROM kb.shard_passages((
                   SELECT jsonb_agg(jsonb_build_object('chunk_id', g, 'rank', g))
                   FROM generate_series(1, 1001) AS g))""",
            psycopg.errors.ProgramLimitExceeded,
            "at most 1000",
        ),
    ]
    with acting_as(conn, role):
        for call, error, message in forged:
            conn.execute("SAVEPOINT forged")
            with pytest.raises(error, match=message):
                conn.execute(call).fetchall()
            conn.execute("ROLLBACK TO SAVEPOINT forged")
