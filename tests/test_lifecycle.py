"""Lifecycle rules of kb_retrieve (docs/LIFECYCLE.md "current"), checked in every retrieval mode.

A document is current at ``as_of`` when it is not a draft, ``as_of`` lies in its effective window
(``effective_to`` inclusive, a deprecated document needs an end date) and no document current at
``as_of`` names it in ``supersedes``. Each fixture pairs documents whose facts conflict, so the
wrong version showing up is visible in the sources returned.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from helpers import count_rows, insert_document, sources

from harness.db import connect
from harness.retrieval import MODES, retrieve

REFUND_V1 = "# 退款政策\n\n退款期限：客户在收货后 7 天内可以申请退款，退款原路退回。"
REFUND_V2 = "# 退款政策\n\n退款期限：客户在收货后 14 天内可以申请退款，退款原路退回。"
HOTEL = "# Travel policy\n\nThe hotel allowance for business travel is {amount} CNY per night in tier one cities."


@pytest.fixture
def versions(rolled_back_db):
    """Refund policy v1 -> v2 (Chinese) and travel policy v1 -> v2 -> v3 (English)."""
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1, version="1", effective_from="2023-01-01")
    insert_document(
        rolled_back_db, "refund-v2.md", REFUND_V2, version="2", effective_from="2024-01-01", supersedes="refund-v1.md"
    )
    insert_document(rolled_back_db, "hotel-v1.md", HOTEL.format(amount=400), version="1", effective_from="2021-01-01")
    insert_document(
        rolled_back_db, "hotel-v2.md", HOTEL.format(amount=500), effective_from="2022-01-01", supersedes="hotel-v1.md"
    )
    insert_document(
        rolled_back_db, "hotel-v3.md", HOTEL.format(amount=600), effective_from="2023-01-01", supersedes="hotel-v2.md"
    )
    return rolled_back_db


def test_superseded_version_hidden_now_and_returned_as_of_its_time(versions):
    for mode in MODES:
        now = sources(retrieve(versions, "退款期限是几天？", k=5, mode=mode))
        assert "refund-v2.md" in now, mode
        assert "refund-v1.md" not in now, mode
        then = retrieve(versions, "退款期限是几天？", k=5, mode=mode, as_of="2023-06-01")
        assert "refund-v1.md" in sources(then), mode
        assert "refund-v2.md" not in sources(then), mode
        assert all("7 天" in r["content"] for r in then if r["source"].startswith("refund")), mode


def test_supersede_chain(versions):
    query = "hotel allowance per night"
    expected = {
        "2099-01-01": "hotel-v3.md",
        "2023-01-01": "hotel-v3.md",  # effective_from is inclusive
        "2022-12-31": "hotel-v2.md",
        "2022-06-01": "hotel-v2.md",
        "2021-06-01": "hotel-v1.md",
    }
    for mode in MODES:
        for as_of, source in expected.items():
            got = [s for s in sources(retrieve(versions, query, k=5, mode=mode, as_of=as_of)) if s.startswith("hotel")]
            assert got == [source], (mode, as_of)
        # before the first version took effect there is nothing to say
        before = sources(retrieve(versions, query, k=5, mode=mode, as_of="2020-06-01"))
        assert not [s for s in before if s.startswith("hotel")], mode


def test_draft_never_appears(rolled_back_db):
    insert_document(rolled_back_db, "refund.md", REFUND_V1)
    insert_document(rolled_back_db, "refund-draft.md", REFUND_V2.replace("14 天", "30 天"), status="draft")
    for mode in MODES:
        got = sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode))
        assert got == ["refund.md"], mode
        # not even a question about the draft's own wording surfaces it
        got = sources(retrieve(rolled_back_db, "收货后 30 天内申请退款", k=5, mode=mode))
        assert "refund-draft.md" not in got, mode


def test_draft_superseder_does_not_hide_predecessor(rolled_back_db):
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1)
    insert_document(rolled_back_db, "refund-v2.md", REFUND_V2, status="draft", supersedes="refund-v1.md")
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode)) == ["refund-v1.md"], mode


def test_expired_and_future_documents_excluded(rolled_back_db):
    body = "# Parking\n\nEmployee parking in garage {g} costs {n} CNY per month."
    insert_document(rolled_back_db, "parking-old.md", body.format(g="A", n=100), effective_to="2020-12-31")
    insert_document(rolled_back_db, "parking-now.md", body.format(g="B", n=200), effective_from="2021-01-01")
    insert_document(rolled_back_db, "parking-next.md", body.format(g="C", n=300), effective_from="2999-01-01")
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "employee parking garage cost", k=5, mode=mode)) == [
            "parking-now.md"
        ], mode
        got = sources(retrieve(rolled_back_db, "employee parking garage cost", k=5, mode=mode, as_of="2020-06-01"))
        assert got == ["parking-old.md"], mode
        got = sources(retrieve(rolled_back_db, "employee parking garage cost", k=5, mode=mode, as_of="2999-06-01"))
        assert sorted(got) == ["parking-next.md", "parking-now.md"], mode


def test_deprecated_documents(rolled_back_db):
    body = "# VPN\n\nThe {name} VPN client connects employees to the office network."
    insert_document(rolled_back_db, "vpn-legacy.md", body.format(name="legacy"), status="deprecated")
    insert_document(
        rolled_back_db, "vpn-old.md", body.format(name="old"), status="deprecated", effective_to="2999-12-31"
    )
    insert_document(
        rolled_back_db, "vpn-gone.md", body.format(name="gone"), status="deprecated", effective_to="2001-12-31"
    )
    for mode in MODES:
        got = sources(retrieve(rolled_back_db, "VPN client office network", k=5, mode=mode))
        assert got == ["vpn-old.md"], mode
        got = sources(retrieve(rolled_back_db, "VPN client office network", k=5, mode=mode, as_of="2001-06-01"))
        assert sorted(got) == ["vpn-gone.md", "vpn-old.md"], mode
        assert (
            sources(retrieve(rolled_back_db, "VPN client office network", k=5, mode=mode, as_of="3000-01-01")) == []
        ), mode


def test_effective_to_is_inclusive(rolled_back_db):
    # as_of is cut to a day of the knowledge base's calendar (calendar_time_zone, UTC by default)
    insert_document(
        rolled_back_db, "promo.md", "# 促销\n\n双十一促销活动期间全场商品打八折。", effective_to="2024-11-11"
    )
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "促销活动打折", mode=mode, as_of="2024-11-11 23:59:00+00")) == [
            "promo.md"
        ], mode
        assert sources(retrieve(rolled_back_db, "促销活动打折", mode=mode, as_of="2024-11-11 00:00:00+00")) == [
            "promo.md"
        ], mode
        assert retrieve(rolled_back_db, "促销活动打折", mode=mode, as_of="2024-11-12 00:00:01+00") == [], mode


def test_history_on_request(versions):
    versions.execute(
        "INSERT INTO kb.documents (namespace, source, body, status) VALUES ('default', 'refund-draft.md', %s, 'draft')",
        [REFUND_V2.replace("14 天", "30 天")],
    )
    for mode in MODES:
        history = sources(retrieve(versions, "退款期限", k=10, mode=mode, filters={"include_history": True}))
        assert {"refund-v1.md", "refund-v2.md", "refund-draft.md"} <= set(history), mode
        drafts = sources(retrieve(versions, "退款期限", k=10, mode=mode, filters={"status": "draft"}))
        assert drafts == ["refund-draft.md"], mode
        active = sources(retrieve(versions, "退款期限", k=10, mode=mode, filters={"status": ["active"]}))
        assert {"refund-v1.md", "refund-v2.md"} <= set(active), mode
        assert "refund-draft.md" not in active, mode
        explicit_off = sources(retrieve(versions, "退款期限", k=10, mode=mode, filters={"include_history": False}))
        assert "refund-v2.md" in explicit_off, mode
        assert "refund-v1.md" not in explicit_off, mode


def test_filters_never_resurrect_superseded_versions(rolled_back_db):
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1, metadata={"owner": "finance"})
    insert_document(rolled_back_db, "refund-v2.md", REFUND_V2, supersedes="refund-v1.md", metadata={"owner": "legal"})
    for mode in ("lexical", "dense"):
        # the filter excludes the superseder; the superseded version must stay hidden all the same
        assert retrieve(rolled_back_db, "退款期限", k=5, mode=mode, filters={"metadata": {"owner": "finance"}}) == [], (
            mode
        )
        got = sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, filters={"metadata": {"owner": "legal"}}))
        assert got == ["refund-v2.md"], mode


def test_supersedes_only_within_namespace(rolled_back_db):
    insert_document(rolled_back_db, "refund.md", REFUND_V1, namespace="shop-a")
    insert_document(rolled_back_db, "refund-new.md", REFUND_V2, namespace="shop-b", supersedes="refund.md")
    assert sorted(sources(retrieve(rolled_back_db, "退款期限", k=5, mode="lexical"))) == ["refund-new.md", "refund.md"]
    assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode="lexical", namespace="shop-a")) == ["refund.md"]


def test_removed_document_hidden_after_removal(rolled_back_db):
    doc = insert_document(rolled_back_db, "refund.md", REFUND_V1)
    rolled_back_db.execute("UPDATE kb.documents SET removed_at = '2024-05-01' WHERE id = %s", [doc])
    assert retrieve(rolled_back_db, "退款期限", mode="lexical") == []
    assert sources(retrieve(rolled_back_db, "退款期限", mode="lexical", as_of="2024-04-30")) == ["refund.md"]


@pytest.mark.parametrize(
    "calendar, session_zone", [("UTC", "UTC"), ("Pacific/Kiritimati", "America/Los_Angeles")], ids=["utc", "far"]
)
def test_every_visibility_path_agrees_with_visible_documents(versions, calendar, session_zone):
    """Every way visibility is judged gives exactly kb.visible_documents' set: kb.document_is_current
    per document, and kb.visible_candidate (the legs' condition) without filters (its fast path for
    documents nobody supersedes, else kb.document_is_current) and with a filter that keeps
    everything; also with a calendar far from the session's time zone."""
    versions.execute("UPDATE kb.settings SET value = %s WHERE key = 'calendar_time_zone'", [f'"{calendar}"'])
    versions.execute(f"SET LOCAL TimeZone = '{session_zone}'")
    insert_document(versions, "draft.md", REFUND_V2, status="draft", supersedes="refund-v2.md")
    insert_document(versions, "old.md", "# Old\n\nOld rule.", status="deprecated", effective_to="2022-06-30")
    insert_document(versions, "legacy.md", "# Legacy\n\nLegacy rule.", status="deprecated")
    insert_document(versions, "next.md", "# Next\n\nNext rule.", effective_from="2030-01-01", supersedes="hotel-v3.md")
    insert_document(versions, "other-ns.md", "# Other\n\nOther rule.", namespace="other", supersedes="refund-v2.md")
    # a cycle, as a database may already hold one (the check that refuses it runs at commit,
    # and this transaction is rolled back): every member that took effect hides the one it names
    insert_document(versions, "loop-a.md", "# Loop A\n\nA.", supersedes="loop-b.md")
    insert_document(versions, "loop-b.md", "# Loop B\n\nB.", supersedes="loop-a.md", effective_to="2022-12-31")
    all_ids = {r["id"] for r in versions.execute("SELECT id FROM kb.documents").fetchall()}
    for as_of in ("2020-01-01", "2021-06-01", "2022-06-30", "2022-07-01", "2023-06-01", "2024-06-01", "2031-01-01"):
        for namespace in (None, "default", "other"):
            params = {"as_of": as_of, "ns": namespace, "scope": [namespace] if namespace else None}
            visible = {
                r["id"]
                for r in versions.execute(
                    "SELECT kb.visible_documents(%(as_of)s, %(scope)s::text[], '{}') AS id", params
                ).fetchall()
            }
            current = {
                r["id"]
                for r in versions.execute(
                    """SELECT id FROM kb.documents
                       WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s) AND kb.document_is_current(id, %(as_of)s)""",
                    params,
                ).fetchall()
            }
            candidates = {
                (filters, r["id"])
                for filters, restrict in (("{}", False), ('{"source_prefix": ""}', True))
                for r in versions.execute(
                    """SELECT v.id FROM kb.documents AS d CROSS JOIN LATERAL
                           kb.visible_candidate(d.id, %(as_of)s, %(scope)s::text[], %(filters)s, %(restrict)s) AS v (id)
                       WHERE %(ns)s::text IS NULL OR d.namespace = %(ns)s""",
                    {**params, "filters": filters, "restrict": restrict},
                ).fetchall()
            }
            assert visible == current, (as_of, namespace)
            assert candidates == {(f, i) for f in ("{}", '{"source_prefix": ""}') for i in visible}, (as_of, namespace)
            assert visible <= all_ids


def test_a_replaced_policy_stays_replaced_after_its_replacement_expires(rolled_back_db):
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1, effective_from="2023-01-01")
    insert_document(
        rolled_back_db,
        "refund-v2.md",
        REFUND_V2,
        effective_from="2024-01-01",
        effective_to="2025-12-31",
        supersedes="refund-v1.md",
    )
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2023-06-01")) == ["refund-v1.md"]
        assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2025-06-01")) == ["refund-v2.md"]
        # the replacement ended; the policy it replaced does not come back
        assert retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2026-06-01") == [], mode


def test_a_removed_replacement_keeps_its_predecessor_replaced_once_it_took_effect(rolled_back_db):
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1)
    insert_document(rolled_back_db, "refund-v2.md", REFUND_V2, effective_from="2024-01-01", supersedes="refund-v1.md")
    rolled_back_db.execute("UPDATE kb.documents SET removed_at = '2024-06-01 12:00+00' WHERE source = 'refund-v2.md'")
    for mode in MODES:
        assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2023-06-01")) == ["refund-v1.md"]
        assert sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2024-03-01")) == ["refund-v2.md"]
        assert retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2024-07-01") == [], mode


def test_a_replacement_that_never_took_effect_replaces_nothing(rolled_back_db):
    """Removed before its first day, a draft, or deprecated without an end date: never in force,
    so the version it names stays current."""
    insert_document(rolled_back_db, "refund-v1.md", REFUND_V1)
    insert_document(rolled_back_db, "refund-v2.md", REFUND_V2, effective_from="2024-01-01", supersedes="refund-v1.md")
    rolled_back_db.execute("UPDATE kb.documents SET removed_at = '2023-12-01 00:00+00' WHERE source = 'refund-v2.md'")
    insert_document(rolled_back_db, "hotel-v1.md", HOTEL.format(amount=400))
    insert_document(
        rolled_back_db, "hotel-v2.md", HOTEL.format(amount=500), status="deprecated", supersedes="hotel-v1.md"
    )
    for mode in MODES:
        got = sources(retrieve(rolled_back_db, "退款期限", k=5, mode=mode, as_of="2024-06-01"))
        assert [s for s in got if s.startswith("refund")] == ["refund-v1.md"], mode
        got = sources(retrieve(rolled_back_db, "hotel allowance per night", k=5, mode=mode))
        assert [s for s in got if s.startswith("hotel")] == ["hotel-v1.md"], mode


def _commit_fails_with_cycle(conn, *statements) -> str:
    conn.execute("SAVEPOINT cycle")
    try:
        for statement, params in statements:
            conn.execute(statement, params)
        conn.execute("SET CONSTRAINTS kb.documents_supersedes_acyclic IMMEDIATE")  # the check of COMMIT, now
    except psycopg.errors.CheckViolation as exc:
        conn.execute("ROLLBACK TO SAVEPOINT cycle")
        return str(exc)
    raise AssertionError("the cycle was accepted")


def test_supersedes_cycles_are_refused(rolled_back_db):
    insert = "INSERT INTO kb.documents (namespace, source, body, supersedes) VALUES ('default', %s, 'x', %s)"
    message = _commit_fails_with_cycle(rolled_back_db, (insert, ["a.md", "b.md"]), (insert, ["b.md", "a.md"]))
    assert 'supersedes cycle in namespace "default"' in message and "a.md -> b.md -> a.md" in message
    assert "a.md -> a.md" in _commit_fails_with_cycle(rolled_back_db, (insert, ["a.md", "a.md"]))
    # a longer one, closed by an update
    for source, names in (("v1.md", None), ("v2.md", "v1.md"), ("v3.md", "v2.md")):
        rolled_back_db.execute(insert, [source, names])
    update = "UPDATE kb.documents SET supersedes = %s WHERE source = %s"
    cycle = _commit_fails_with_cycle(rolled_back_db, (update, ["v3.md", "v1.md"])).splitlines()[0].split(": ")[-1]
    assert sorted(cycle.split(" -> ")[1:]) == ["v1.md", "v2.md", "v3.md"]
    # chains, forks and names of documents that do not exist are fine
    rolled_back_db.execute(insert, ["v4.md", "v2.md"])
    rolled_back_db.execute(insert, ["v5.md", "nowhere.md"])
    rolled_back_db.execute("SET CONSTRAINTS kb.documents_supersedes_acyclic IMMEDIATE")


def test_a_cycle_closed_by_two_concurrent_transactions_is_refused(fresh_db, dsn):
    """Each transaction adds one half and, alone, sees no cycle; the checks take turns at commit."""
    first, second = connect(dsn), connect(dsn)
    try:
        first.execute("BEGIN")
        first.execute("INSERT INTO kb.documents (source, body, supersedes) VALUES ('a.md', 'a', 'b.md')")
        second.execute("BEGIN")
        second.execute("INSERT INTO kb.documents (source, body, supersedes) VALUES ('b.md', 'b', 'a.md')")
        first.execute("SET CONSTRAINTS kb.documents_supersedes_acyclic IMMEDIATE")  # holds the namespace's turn
        outcome: dict = {}

        def commit_second() -> None:
            try:
                second.execute("COMMIT")
                outcome["second"] = "committed"
            except psycopg.errors.CheckViolation as exc:
                outcome["second"] = str(exc)

        waiter = threading.Thread(target=commit_second)
        waiter.start()
        time.sleep(0.5)
        assert "second" not in outcome, "the second check waits for the first transaction"
        first.execute("COMMIT")
        waiter.join(timeout=30)
        assert "supersedes cycle" in outcome["second"]
    finally:
        first.close()
        second.close()
    assert count_rows(fresh_db, "kb.documents") == 1


def test_the_day_of_as_of_is_read_in_the_knowledge_bases_calendar(rolled_back_db):
    """The same instant gives the same answer in every session time zone; the calendar is the
    setting calendar_time_zone (UTC by default)."""
    insert_document(
        rolled_back_db, "promo.md", "# 促销\n\n双十一促销活动期间全场商品打八折。", effective_to="2024-11-11"
    )
    instant = "2024-11-11 20:00:00+00"  # 2024-11-12 04:00 in Shanghai, 2024-11-11 12:00 in Los Angeles
    for zone in ("UTC", "Asia/Shanghai", "America/Los_Angeles", "Pacific/Kiritimati"):
        rolled_back_db.execute(f"SET LOCAL TimeZone = '{zone}'")
        for mode in MODES:
            assert sources(retrieve(rolled_back_db, "促销活动打折", mode=mode, as_of=instant)) == ["promo.md"], zone
    rolled_back_db.execute("RESET TimeZone")
    rolled_back_db.execute("UPDATE kb.settings SET value = '\"Asia/Shanghai\"' WHERE key = 'calendar_time_zone'")
    for zone in ("UTC", "Asia/Shanghai", "America/Los_Angeles"):
        rolled_back_db.execute(f"SET LOCAL TimeZone = '{zone}'")
        for mode in MODES:
            assert retrieve(rolled_back_db, "促销活动打折", mode=mode, as_of=instant) == [], (zone, mode)
        got = sources(retrieve(rolled_back_db, "促销活动打折", mode="lexical", as_of="2024-11-11 15:59:59+00"))
        assert got == ["promo.md"], zone
    rolled_back_db.execute("RESET TimeZone")


def test_an_unknown_calendar_time_zone_is_refused(rolled_back_db):
    rolled_back_db.execute("SAVEPOINT s")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='calendar_time_zone "Mars/Olympus"'):
        rolled_back_db.execute("UPDATE kb.settings SET value = '\"Mars/Olympus\"' WHERE key = 'calendar_time_zone'")
    rolled_back_db.execute("ROLLBACK TO SAVEPOINT s")


def test_the_current_version_is_found_behind_many_hidden_versions_of_its_text(rolled_back_db):
    """Twelve versions of a 25-section policy (300 chunks with one text, a shortlist of 200): every
    mode returns the current version; so does the lexical leg when each term may read only a few
    postings (all of them hidden), and it stays fast."""
    body = "\n\n".join(
        f"## Section {i}\n\nTravel expense rule {i}: meals are reimbursed when the trip is approved." for i in range(25)
    )
    for v in range(1, 13):
        insert_document(
            rolled_back_db,
            f"travel-v{v}.md",
            body,
            namespace="ver",
            version=str(v),
            supersedes=f"travel-v{v - 1}.md" if v > 1 else None,
        )
    for mode in MODES:
        got = set(sources(retrieve(rolled_back_db, "travel expense meals reimbursed", k=5, namespace="ver", mode=mode)))
        assert got == {"travel-v12.md"}, mode
    rolled_back_db.execute("SET LOCAL pgkb.bm25_postings_per_term = '20'")
    started = time.monotonic()
    got = set(
        sources(retrieve(rolled_back_db, "travel expense meals reimbursed", k=5, namespace="ver", mode="lexical"))
    )
    assert got == {"travel-v12.md"}
    assert time.monotonic() - started < 5
    rolled_back_db.execute("RESET pgkb.bm25_postings_per_term")


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_halves_of_a_cycle_committed_by_two_snapshot_transactions_are_refused(fresh_db, dsn, level):
    """A snapshot taken before the other half committed cannot see it: the second check fails
    with a serialization failure (under REPEATABLE READ naming the namespace; SERIALIZABLE's own
    conflict detection may fail it first), and the cycle is never stored."""
    first, second = connect(dsn), connect(dsn)
    try:
        for conn in (first, second):
            conn.execute(f"BEGIN ISOLATION LEVEL {level}")
            conn.execute("SELECT count(*) FROM kb.documents")  # the snapshot
        first.execute("INSERT INTO kb.documents (source, body, supersedes) VALUES ('a.md', 'a', 'b.md')")
        second.execute("INSERT INTO kb.documents (source, body, supersedes) VALUES ('b.md', 'b', 'a.md')")
        first.execute("COMMIT")
        with pytest.raises(psycopg.errors.SerializationFailure) as failure:
            second.execute("COMMIT")
        if level == "REPEATABLE READ":
            assert 'supersedes chains of namespace "default"' in str(failure.value)
    finally:
        first.close()
        second.close()
    assert count_rows(fresh_db, "kb.documents") == 1
