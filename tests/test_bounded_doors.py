"""The doors a reader may call into PL/Python bound their work as kb_retrieve does: text longer than a
query may be, too many context turns, too many characters of passages or a width out of range is
refused by name before any PL/Python runs, within a second; and a reader embeds with the active
model only (an inactive one may be a paid provider whose key the admin keeps for later)."""

from __future__ import annotations

import time

import psycopg
import pytest
from helpers import acting_as, temporary_role

LONG = "refund " * 3000  # 21,000 characters: ten times what a query may be

CALLS = [
    ("kb.query_terms", "SELECT kb.query_terms(%(long)s)", "kb.query_terms: the text must be at most"),
    ("kb.analyze_query", "SELECT kb.analyze_query(%(long)s)", "kb.analyze_query: the query must be at most"),
    (
        "kb.analyze_query context",
        "SELECT kb.analyze_query('refund', ARRAY[%(long)s])",
        "kb.analyze_query: a context turn must be at most",
    ),
    (
        "kb.analyze_query turns",
        "SELECT kb.analyze_query('refund', array_fill('turn'::text, ARRAY[100000]))",
        "kb.analyze_query: context has 100000 turns",
    ),
    ("kb.snippets query", "SELECT kb.snippets(ARRAY['a refund'], %(long)s)", "kb.snippets: the query must be at most"),
    (
        "kb.snippets passages",
        "SELECT kb.snippets(array_fill(repeat('refund ', 3500), ARRAY[500]), 'refund')",
        "kb.snippets: the passages hold 12250000 characters",
    ),
    ("kb.snippets width", "SELECT kb.snippets(ARRAY['a refund'], 'refund', 100000)", "width must be between"),
    ("kb.snippet", "SELECT kb.snippet(repeat('refund ', 300000), 'refund')", "kb.snippets: the passages hold"),
    ("kb.embed_query", "SELECT kb.embed_query(%(long)s, 'hash-64')", "kb.embed_query: the query must be at most"),
]


@pytest.fixture
def reader(rolled_back_db):
    with temporary_role(rolled_back_db, "bounded_reader", "NOLOGIN IN ROLE pgkb_reader") as name:
        yield rolled_back_db, name


@pytest.mark.parametrize("name,call,error", CALLS, ids=[c[0] for c in CALLS])
def test_a_readers_oversized_call_is_refused_by_name_within_a_second(reader, name, call, error):
    conn, role = reader
    with acting_as(conn, role):
        conn.execute("SAVEPOINT bounded")
        start = time.perf_counter()
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match=error):
            conn.execute(call, {"long": LONG}).fetchall()
        assert time.perf_counter() - start < 1.0, name
        conn.execute("ROLLBACK TO SAVEPOINT bounded")
        # the same door answers a call within its bounds
        assert conn.execute("SELECT kb.query_terms('refund days') AS t").fetchone()["t"] == ["refund", "day"]


def test_a_reader_embeds_with_the_active_model_only(reader):
    conn, role = reader
    conn.execute("SELECT kb.register_model('inactive-hash', 'hash', 'hash', 32, '{}', false)")
    assert conn.execute("SELECT kb.embed_query('refund', 'inactive-hash') IS NOT NULL AS ok").fetchone()["ok"]
    with acting_as(conn, role):
        assert conn.execute("SELECT kb.embed_query('refund', 'hash-64') IS NOT NULL AS ok").fetchone()["ok"]
        conn.execute("SAVEPOINT inactive")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match='model "inactive-hash" is not the active model'):
            conn.execute("SELECT kb.embed_query('refund', 'inactive-hash')")
        conn.execute("ROLLBACK TO SAVEPOINT inactive")


def test_snippets_at_their_bounds_answer_within_a_second(reader):
    """The worst case kb.max_snippet_chars allows: passages where every word matches one of a
    2,000-character query's 400 terms."""
    conn, role = reader
    with acting_as(conn, role):
        bound = conn.execute("SELECT kb.max_snippet_chars() AS n").fetchone()["n"]
        times = []
        for _ in range(3):  # the best of three: a shared machine's pause is not the call's cost
            start = time.perf_counter()
            snippets = conn.execute(
                """SELECT kb.snippets(array_fill(left(repeat('w1 词1 w2 词2 w3 ', 100000), %s), ARRAY[25]),
                                      (SELECT left(string_agg('w' || g || ' 词' || g, ' '), 2000)
                                       FROM generate_series(1, 400) AS g), 200) AS s""",
                (bound // 25,),
            ).fetchone()["s"]
            times.append(time.perf_counter() - start)
        assert min(times) < 1.0
    assert len(snippets) == 25
