"""Tenant isolation through the shard coordinator. The coordinator reaches the shards as each
caller itself (`kb_shard.configure` with no user: a user mapping without one), so the shards'
row-level security decides what a tenant's fan-out sees. With tenant_isolation on in every
database (the shards, the coordinator with its copy of the language statistics, and a one-node
reference holding everything), a tenant granted one namespace gets from `kb_shard.retrieve`
exactly what `kb_retrieve` gives it on the one node: only its namespace's passages, scored with
only its namespace's statistics, in every mode; and asking for another tenant's namespace tells it
no more than on one node. Same clusters and tolerance as tests/test_shards.py."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_shards import CORPUS, MODES, NAMESPACES, QUERIES, _prepare, asked_both, comparable

from harness import shards
from harness.db import connect

TENANT = "pgkb_shard_tenant"
WRITER = "pgkb_shard_tenant_writer"
GRANTED = "policies"


def as_role(dsn: str, role: str) -> str:
    """The same database, connected to as a login role."""
    scheme, rest = dsn.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


@pytest.fixture(scope="module")
def tenant_clusters():
    """Clusters of this module's own (harness.shards.local_sharded_corpus) with a reader and a
    writer of one tenant, granted GRANTED only: each role exists in every cluster (the shards are
    reached as it), tenant_isolation is on and the grants given in every database."""
    with shards.local_sharded_corpus(CORPUS, NAMESPACES, _prepare, prefix="pgkb-tenants-") as built:
        shard_dsns = [s.embedded_dsn for s in built["shards"]]
        for cluster_dsn in [built["coordinator"], *shard_dsns]:
            with connect(cluster_dsn) as conn:
                conn.execute(f"CREATE ROLE {TENANT} LOGIN IN ROLE pgkb_reader")
                conn.execute(f"CREATE ROLE {WRITER} LOGIN IN ROLE pgkb_writer")
        for dsn in [built["coordinator"], built["reference"], *shard_dsns]:
            with connect(dsn) as conn:
                conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
                for role in (TENANT, WRITER):
                    conn.execute(
                        "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role, GRANTED)
                    )
        with connect(built["coordinator"]) as conn:
            conn.execute("SELECT kb_shard.configure(NULL)")
        for shard_dsn in shard_dsns:
            shards.open_doors(shard_dsn, None)
        yield built


@pytest.fixture(scope="module")
def tenant_sessions(tenant_clusters):
    """(one node, coordinator) connections of the tenant's reader."""
    with (
        connect(as_role(tenant_clusters["reference"], TENANT)) as one,
        connect(as_role(tenant_clusters["coordinator"], TENANT)) as many,
    ):
        yield one, many


@pytest.mark.parametrize("mode", MODES)
def test_a_tenant_through_the_coordinator_gets_what_it_gets_on_one_node(tenant_sessions, mode):
    one_node, coordinator = tenant_sessions
    compared = 0
    for query in QUERIES:
        one, many = asked_both(one_node, coordinator, query, k=10, mode=mode)
        assert {r["namespace"] for r in many} <= {GRANTED}, (query, mode)
        assert comparable(many) == comparable(one), (query, mode)
        compared += len(one)
    assert compared > len(QUERIES), "the tenant's own namespace answers"


@pytest.mark.parametrize("namespace", [n for n in NAMESPACES if n != GRANTED])
def test_another_tenants_namespace_through_the_coordinator_tells_no_more_than_one_node(tenant_sessions, namespace):
    one_node, coordinator = tenant_sessions
    for query in QUERIES[:4]:
        one, many = asked_both(one_node, coordinator, query, k=10, mode="hybrid", namespace=namespace)
        assert many == one == [], (query, namespace)


def test_a_tenants_write_through_the_coordinator_lands_only_in_its_own_namespace(tenant_clusters):
    """The writer's own namespace is written on its shard; another tenant's is refused with the
    error of a namespace that is mapped nowhere, so the refusal tells it nothing."""
    coordinator = tenant_clusters["coordinator"]

    def write(conn, namespace: str):
        document = {"namespace": namespace, "source": "tenant-note.md", "body": "# Note\n\nA tenant's own note."}
        return conn.execute("SELECT * FROM kb_shard.upsert_document(%s)", (Jsonb(document),)).fetchall()

    def refusal(conn, namespace: str) -> str:
        with pytest.raises(psycopg.errors.RaiseException) as refused:
            write(conn, namespace)
        return refused.value.diag.message_primary.replace(namespace, "<namespace>")

    with connect(as_role(coordinator, WRITER)) as writer:
        assert len(write(writer, GRANTED)) == 1
        others = [n for n in NAMESPACES if n != GRANTED]
        assert {refusal(writer, n) for n in others} == {refusal(writer, "mapped-nowhere")}
    for i, settings in enumerate(tenant_clusters["shards"]):
        with connect(settings.embedded_dsn) as conn:
            found = conn.execute(
                "SELECT namespace, ingest_status FROM kb.documents WHERE source = 'tenant-note.md'"
            ).fetchall()
        assert [(r["namespace"], r["ingest_status"]) for r in found] == (
            [(GRANTED, "indexed")] if NAMESPACES[i] == GRANTED else []
        )


def logged(coordinator_dsn: str) -> int:
    with connect(coordinator_dsn) as conn:
        return conn.execute("SELECT count(*) AS n FROM kb.retrieval_log").fetchone()["n"]


@pytest.fixture
def coordinator_log(tenant_clusters):
    coordinator = tenant_clusters["coordinator"]
    with connect(coordinator) as conn:
        conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    yield coordinator
    with connect(coordinator) as conn:
        conn.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'retrieval_log'")


def test_a_retrieval_over_the_shards_writes_one_log_row_however_it_is_called(tenant_sessions, coordinator_log):
    _, coordinator = tenant_sessions
    before = logged(coordinator_log)
    call = "SELECT count(*) AS n FROM kb_shard.retrieve('how long do refunds take', 5, mode => 'lexical')"
    assert coordinator.execute(call).fetchone()["n"] > 0
    assert logged(coordinator_log) == before + 1
    direct = coordinator.execute(
        """SELECT cardinality((r).rows) AS n
           FROM (SELECT kb_pipeline.retrieve_over_shards(
                    kb_pipeline.validated_request('how long do refunds take', 5, NULL, 'lexical', NULL, now(), NULL,
                        NULL, false),
                    false) AS r) AS x"""
    ).fetchone()["n"]
    assert direct > 0 and logged(coordinator_log) == before + 2, "the pipeline called directly logs its call too"


@pytest.mark.parametrize(
    "rows,k,error",
    [
        (
            'array_fill(jsonb_populate_record(NULL::kb.retrieval_row, \'{"namespace": "policies"}\'), ARRAY[3])',
            999999,
            "k must be between 1 and 1000",
        ),
        (
            'array_fill(jsonb_populate_record(NULL::kb.retrieval_row, \'{"namespace": "policies"}\'), ARRAY[20000])',
            5,
            "20000 rows for k 5",
        ),
        (
            'ARRAY[jsonb_populate_record(NULL::kb.retrieval_row, \'{"namespace": "support", "source": "x.md"}\')]',
            5,
            "a row names a namespace the caller may not read",
        ),
    ],
    ids=["k", "rows", "another tenant"],
)
def test_the_coordinators_log_door_takes_only_what_a_retrieval_produces(
    tenant_sessions, coordinator_log, rows, k, error
):
    _, coordinator = tenant_sessions
    before = logged(coordinator_log)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=error):
        coordinator.execute(f"SELECT kb_shard.log_retrieval('{{}}', {rows}, %s)", (k,))
    assert logged(coordinator_log) == before
