"""Lifecycle rules of kb_retrieve (docs/LIFECYCLE.md "current"), checked in every retrieval mode.

A document is current at ``as_of`` when it is not a draft, ``as_of`` lies in its effective window
(``effective_to`` inclusive, a deprecated document needs an end date) and no document current at
``as_of`` names it in ``supersedes``. Each fixture pairs documents whose facts conflict, so the
wrong version showing up is visible in the sources returned.
"""

from __future__ import annotations

import pytest
from helpers import insert_document, sources

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
    rolled_back_db.execute("SET timezone = 'UTC'")  # as_of is cut to a calendar day in the session time zone
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


def test_every_visibility_path_agrees_with_visible_documents(versions):
    """Every way visibility is judged gives exactly kb.visible_documents' set: kb.document_is_current
    per document, and kb.visible_candidate (the legs' condition) without filters (its fast path for
    plain documents, else kb.document_is_current) and with a filter that keeps everything."""
    insert_document(versions, "draft.md", REFUND_V2, status="draft", supersedes="refund-v2.md")
    insert_document(versions, "old.md", "# Old\n\nOld rule.", status="deprecated", effective_to="2022-06-30")
    insert_document(versions, "legacy.md", "# Legacy\n\nLegacy rule.", status="deprecated")
    insert_document(versions, "next.md", "# Next\n\nNext rule.", effective_from="2030-01-01", supersedes="hotel-v3.md")
    insert_document(versions, "other-ns.md", "# Other\n\nOther rule.", namespace="other", supersedes="refund-v2.md")
    # a cycle: each names the other
    insert_document(versions, "loop-a.md", "# Loop A\n\nA.", supersedes="loop-b.md")
    insert_document(versions, "loop-b.md", "# Loop B\n\nB.", supersedes="loop-a.md", effective_to="2022-12-31")
    all_ids = {r["id"] for r in versions.execute("SELECT id FROM kb.documents").fetchall()}
    for as_of in ("2020-01-01", "2021-06-01", "2022-06-30", "2022-07-01", "2023-06-01", "2024-06-01", "2031-01-01"):
        for namespace in (None, "default", "other"):
            params = {"as_of": as_of, "ns": namespace}
            visible = {
                r["id"]
                for r in versions.execute(
                    "SELECT kb.visible_documents(%(as_of)s, %(ns)s, '{}') AS id", params
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
                           kb.visible_candidate(d.id, %(as_of)s, %(ns)s, %(filters)s, %(restrict)s) AS v (id)
                       WHERE %(ns)s::text IS NULL OR d.namespace = %(ns)s""",
                    {**params, "filters": filters, "restrict": restrict},
                ).fetchall()
            }
            assert visible == current, (as_of, namespace)
            assert candidates == {(f, i) for f in ("{}", '{"source_prefix": ""}') for i in visible}, (as_of, namespace)
            assert visible <= all_ids
