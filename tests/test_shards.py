"""Shards on PL/Proxy (sql/shards/, sql/045_shard/01_shard_doors.sql): three shard clusters,
a coordinator, and a single-node reference holding the same documents, all real clusters of this
module's own (temporary folders, free ports). The example corpus's three namespaces go one to each
shard through the coordinator's routed ingest, and to the reference by the folder loader, in the
same order. Then the same questions, in every mode, with and without a namespace, must give the
same top 10 through the coordinator as on the one node.

Tolerance, and why: chunk ids differ between the reference and the shards, and ties break by chunk
id, so rows of equal score (to the 6 decimals a row carries) may come in another order among
themselves; the comparison sorts each run of equal scores before comparing, and compares the
scores of the rows with 1e-9 (they are the same sums of the same float8 operations). Everything
else (which passages, their scores, per-leg ranks and scores, match type) must be equal."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import psycopg
import pytest
from helpers import use_only_the_hash_model

from harness import cluster, shards
from harness.db import connect

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus"
NAMESPACES = ("policies", "support", "engineering")
# questions on the example corpus: English and Chinese, one word, a typo (shared with bench/shard_latency.py)
QUERIES = json.loads((CORPUS.parent / "eval" / "corpus-questions.json").read_text(encoding="utf-8"))
MODES = ("lexical", "dense", "hybrid")


def _prepare(dsn: str) -> None:
    """The hash model only, language correction on for it (so the dense leg's language moments,
    which the coordinator pools, are in play), hash vectors kept synchronously."""
    with connect(dsn) as conn:
        use_only_the_hash_model(conn)
        conn.execute("UPDATE kb.embedding_providers SET language_correction = true WHERE provider = 'hash'")


@pytest.fixture(scope="module")
def sharded():
    """{"coordinator": dsn, "reference": dsn, "shards": [Settings x 3]}: three shard clusters, and a
    fourth cluster holding the coordinator and the single-node reference databases
    (harness.shards.local_sharded_corpus)."""
    with shards.local_sharded_corpus(CORPUS, NAMESPACES, _prepare) as built:
        yield built


@pytest.fixture(scope="module")
def sessions(sharded):
    """One connection to the reference and one to the coordinator for the module: their backends
    (and the coordinator's PL/Proxy connections to the shards) stay warm, as a pooled client's do."""
    with connect(sharded["reference"]) as one, connect(sharded["coordinator"]) as many:
        yield one, many


def _rows(conn: psycopg.Connection, function: str, query: str, **arguments) -> list[dict]:
    names = ", ".join(f"{k} => %({k})s" for k in arguments)
    return conn.execute(
        f"SELECT * FROM {function}(%(query)s{', ' if names else ''}{names})", {"query": query, **arguments}
    ).fetchall()


def asked_both(one_node: psycopg.Connection, coordinator: psycopg.Connection, query: str, **arguments):
    """(rows of kb_retrieve on the one node, rows of kb_shard.retrieve on the coordinator) for the same call."""
    one = _rows(one_node, "kb_retrieve", query, **arguments)
    return one, _rows(coordinator, "kb_shard.retrieve", query, **arguments)


def comparable(rows: list[dict]) -> list[tuple]:
    """The rows as compared. Ties break by chunk id, which differs between the shards and the
    reference, so: runs of equal score are sorted by namespace, source and text; a leg's rank is
    compared only where that leg's score is not shared by another row (among equal leg scores the
    ranks may swap), the leg's score always."""
    counts = {}
    for r in rows:
        for leg in ("dense", "lexical"):
            counts[(leg, r[f"{leg}_score"])] = counts.get((leg, r[f"{leg}_score"]), 0) + 1

    def rank(r: dict, leg: str):
        return r[f"{leg}_rank"] if counts[(leg, r[f"{leg}_score"])] == 1 else "tied"

    keyed = [
        (
            round(r["score"], 6),
            r["namespace"],
            r["source"],
            r["content"],
            rank(r, "dense"),
            rank(r, "lexical"),
            r["dense_score"],
            r["lexical_score"],
            r["match_type"],
        )
        for r in rows
    ]
    out = []
    for _, run in itertools.groupby(keyed, key=lambda t: t[0]):
        out.extend(sorted(run, key=lambda t: (t[1], t[2], t[3])))
    return out


def test_each_namespace_lives_on_its_own_shard(sharded):
    """Routed ingest put every document on the shard of its namespace, and only there."""
    for i, settings in enumerate(sharded["shards"]):
        with connect(settings.embedded_dsn) as conn:
            found = conn.execute("SELECT DISTINCT namespace FROM kb.documents ORDER BY 1").fetchall()
        assert [r["namespace"] for r in found] == [NAMESPACES[i]]
    with connect(sharded["coordinator"]) as conn:
        assert conn.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 0
        # three shards in four PL/Proxy partitions: RUN ON ALL still asks each shard once
        answers = conn.execute("SELECT count(*) AS n FROM kb_shard.corpus_on_shards('{refund}', 'hash-64')").fetchone()
        assert answers["n"] == 3
        server = conn.execute("SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'pgkb_shards'").fetchone()
        assert sum(o.startswith("p") and o[1].isdigit() for o in server["srvoptions"]) == 4


def test_sharded_corpus_statistics_equal_one_node(sharded):
    """BM25 sizes and document frequencies summed over the shards are the single node's, and the
    coordinator's copy of the language statistics pools to the same moments."""
    terms = ["refund", "退款", "postgr", "queue", "absent-term"]
    with connect(sharded["reference"]) as ref, connect(sharded["coordinator"]) as coord:
        one = ref.execute("SELECT kb_node.lexical_corpus(%s, NULL) AS c", (terms,)).fetchone()["c"]
        parts = coord.execute("SELECT c FROM kb_shard.corpus_on_shards(%s, 'hash-64') AS c", (terms,)).fetchall()
        assert sum(p["c"]["lexical"]["chunk_count"] for p in parts) == one["chunk_count"] > 0
        assert sum(p["c"]["lexical"]["total_length"] for p in parts) == one["total_length"]
        for term in terms:
            assert sum(p["c"]["lexical"]["df"].get(term, 0) for p in parts) == one["df"].get(term, 0)
        assert any(one["df"].get(t, 0) > 0 for t in terms)
        vector = ref.execute("SELECT kb.embed_query('how long do refunds take', 'hash-64') AS v").fetchone()["v"]
        moments = "SELECT to_jsonb(kb.language_moments('hash-64', %s, NULL, 30, 'how long do refunds take')) AS m"
        reference_moments = ref.execute(moments, (vector,)).fetchone()["m"]
        assert reference_moments != []
        assert coord.execute(moments, (vector,)).fetchone()["m"] == reference_moments


@pytest.mark.parametrize("mode", MODES)
def test_sharded_all_namespace_ranking_equals_one_node(sessions, mode):
    one_node, coordinator = sessions
    compared = 0
    for query in QUERIES:
        one, many = asked_both(one_node, coordinator, query, k=10, mode=mode)
        assert comparable(many) == comparable(one), (query, mode)
        assert [r["rank"] for r in many] == list(range(1, len(many) + 1))
        compared += len(one)
    assert compared > 3 * len(QUERIES)


def test_sharded_answers_mix_shards(sessions):
    """At least one question's top 10 holds passages of every namespace (so of every shard): the
    equality above is a merge, not one shard answering."""
    mixes = [{r["namespace"] for r in _rows(sessions[1], "kb_shard.retrieve", q, k=10, mode="hybrid")} for q in QUERIES]
    assert any(m == set(NAMESPACES) for m in mixes)


NAMESPACE_QUESTIONS = [
    ("退款期限是多少天", "policies", "lexical"),
    ("who is on call for support", "support", "dense"),
    ("postgres failover runbook", "engineering", "hybrid"),
    ("数据保留多久", "policies", "hybrid"),
    ("payment error codes", "support", "lexical"),
]


def test_sharded_namespace_query_equals_one_node(sessions):
    """With a namespace the one shard holding it answers: the single node's answer in every mode."""
    one_node, coordinator = sessions
    for query, namespace, mode in NAMESPACE_QUESTIONS:
        one, many = asked_both(one_node, coordinator, query, k=10, mode=mode, namespace=namespace)
        assert one and comparable(many) == comparable(one), (query, namespace, mode)


def test_sharded_cap_and_filters_equal_one_node(sessions):
    one_node, coordinator = sessions
    for query in QUERIES[:4]:
        for arguments in ({"max_per_document": 1}, {"filters": psycopg.types.json.Jsonb({"doc_type": "policy"})}):
            one, many = asked_both(one_node, coordinator, query, k=10, mode="hybrid", **arguments)
            assert comparable(many) == comparable(one), (query, arguments)


def test_the_coordinator_explains_and_logs_with_the_nodes_steps(sessions):
    """Over all namespaces the coordinator judges, ranks and explains with the node's own steps: its
    explain object has the node's shape and decisions (stage used, answerability, evidence), its
    results are kb_shard.retrieve's rows, and the call is logged on the coordinator."""
    one_node, coordinator = sessions
    logged = "SELECT count(*) AS n FROM kb.retrieval_log"
    coordinator.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    before = coordinator.execute(logged).fetchone()["n"]
    for query in QUERIES[:4]:
        one = one_node.execute("SELECT kb_retrieve_explain(%s, 10, NULL, 'hybrid') AS e", (query,)).fetchone()["e"]
        many = coordinator.execute(
            "SELECT kb_shard.retrieve_explain(%s, 10, NULL, 'hybrid') AS e", (query,)
        ).fetchone()["e"]
        assert set(one) - {"retrieval_log"} <= set(many), query
        for key in ("stage_used", "evidence", "low_confidence", "no_evidence", "mode", "returned"):
            assert many[key] == one[key], (query, key)
        assert many["answerability"]["decision"] == one["answerability"]["decision"], query
        assert [s["stage"] for s in many["stages"]] == [s["stage"] for s in one["stages"]], query
        rows = _rows(coordinator, "kb_shard.retrieve", query, k=10, mode="hybrid")
        assert [(r["rank"], r["source"]) for r in many["results"]] == [(r["rank"], r["source"]) for r in rows]
        assert "shards_gather" in many["timings_ms"]
    assert coordinator.execute(logged).fetchone()["n"] == before + 8
    coordinator.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'retrieval_log'")


def test_merge_adjacent_over_all_namespaces_is_refused(sessions):
    with pytest.raises(psycopg.errors.RaiseException, match="merge_adjacent is not supported"):
        sessions[1].execute("SELECT * FROM kb_shard.retrieve('refunds', merge_adjacent => true)").fetchall()


def test_ingest_of_an_unmapped_namespace_is_refused(sharded, tmp_path):
    (tmp_path / "stray.md").write_text("---\nnamespace: nowhere\n---\n# Stray\n\nA document of no shard.\n")
    summary = shards.ingest(sharded["coordinator"], [str(tmp_path)])
    assert summary.synced == []
    assert len(summary.failed) == 1 and 'namespace "nowhere" is not mapped to a shard' in summary.failed[0]["error"]
    for settings in sharded["shards"]:
        with connect(settings.embedded_dsn) as conn:
            assert (
                conn.execute("SELECT count(*) AS n FROM kb.documents WHERE namespace = 'nowhere'").fetchone()["n"] == 0
            )


def test_a_shard_down_fails_the_query_naming_the_shard(sharded, sessions):
    """No partial answer: with one shard stopped, a query over all namespaces and one of that shard's
    namespace fail with an error that names the shard; another shard's namespace still answers, and
    once the shard is back so does everything. Runs last (it stops a shard, then starts it again)."""
    coordinator = sessions[1]
    down = sharded["shards"][1]
    cluster.stop(down)
    try:
        for namespace in (None, NAMESPACES[1]):
            with pytest.raises(psycopg.errors.RaiseException) as failure:
                coordinator.execute(
                    "SELECT * FROM kb_shard.retrieve('refunds', namespace => %s)", (namespace,)
                ).fetchall()
            message = failure.value.diag.message_primary
            assert message.startswith("pgkb shards: shard shard1 (") and f"port={down.port}" in message, message
        assert _rows(coordinator, "kb_shard.retrieve", "退款", namespace="policies")
    finally:
        cluster.start(down)
    assert _rows(coordinator, "kb_shard.retrieve", "refunds", k=3)
