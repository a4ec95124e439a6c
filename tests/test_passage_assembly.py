"""Passages as the reader gets them: provenance on every row, the per-document cap
(max_per_document) and the merging of adjacent chunks (merge_adjacent), their settings and
arguments, what the explain output says about them, and that none of it reaches another tenant."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from helpers import acting_as, insert_document, sources, temporary_role
from pgkb_plpy.chunker import CHUNKER_VERSION

from harness.mcp_server import citation
from harness.retrieval import explain, retrieve

FILES = Path(__file__).parent / "fixtures" / "files"

# one document whose sections all answer "refund", and two that answer it less well
LONG_GUIDE = "# Refund guide\n\n" + "\n\n".join(
    f"## Step {i}\n\nRefund refund step {i}: the refund desk checks the refund form {i}." for i in range(1, 6)
)
OTHER_GUIDE = "# Returns\n\nA refund of a returned parcel is booked by the warehouse."
THIRD_GUIDE = "# Finance\n\nFinance reconciles every refund monthly."


def corpus(conn) -> dict[str, int]:
    return {
        "long.md": insert_document(conn, "long.md", LONG_GUIDE),
        "other.md": insert_document(conn, "other.md", OTHER_GUIDE),
        "third.md": insert_document(conn, "third.md", THIRD_GUIDE),
    }


def chunk_ids(conn, document_id: int) -> list[int]:
    return [
        r["id"]
        for r in conn.execute(
            "SELECT id FROM kb.chunks WHERE document_id = %s ORDER BY ordinal", (document_id,)
        ).fetchall()
    ]


# ------------------------------------------------------------------ provenance


def test_every_row_carries_the_provenance_of_its_chunk_and_document(rolled_back_db):
    doc = insert_document(rolled_back_db, "refunds.md", "# Refunds\n\n## Window\n\nRefunds take 14 days.")
    row = retrieve(rolled_back_db, "refunds window", mode="lexical")[0]
    chunk = rolled_back_db.execute(
        """SELECT c.*, d.chunker_version, d.indexed_at FROM kb.chunks AS c JOIN kb.documents AS d
           ON d.id = c.document_id WHERE c.id = %s""",
        (row["chunk_id"],),
    ).fetchone()
    provenance = row["provenance"]
    assert row["document_id"] == doc
    assert provenance["heading_path"] == chunk["section_path"] == ["Refunds", "Window"]
    assert provenance["content_hash"] == chunk["content_hash"]
    assert (provenance["char_start"], provenance["char_end"]) == (chunk["char_start"], chunk["char_end"])
    assert provenance["chunker_version"] == chunk["chunker_version"] == CHUNKER_VERSION
    assert provenance["ingested_at"] is not None and provenance["indexed_at"] is not None
    # a document inserted as text has no file, parser or pages: the keys are there, NULL
    assert {
        k: provenance[k] for k in ("file_name", "content_type", "byte_size", "parser", "page_start")
    } == dict.fromkeys(("file_name", "content_type", "byte_size", "parser", "page_start"))
    assert provenance["chunks"] == [
        {
            "chunk_id": chunk["id"],
            "ordinal": chunk["ordinal"],
            "content_hash": chunk["content_hash"],
            "heading_path": ["Refunds", "Window"],
            "page_start": None,
            "page_end": None,
            "char_start": chunk["char_start"],
            "char_end": chunk["char_end"],
        }
    ]


def test_a_pdf_passage_names_its_pages_parser_content_type_and_size(rolled_back_db):
    data = (FILES / "policy-en.pdf").read_bytes()
    rolled_back_db.execute("SELECT kb.ingest_file('files', 'policy-en.pdf', %s)", (data,))
    document = rolled_back_db.execute(
        "SELECT parser, parser_version FROM kb.documents WHERE source = 'policy-en.pdf'"
    ).fetchone()
    rows = retrieve(rolled_back_db, "expense approval", namespace="files", mode="lexical", k=3)
    assert rows, "the PDF's text is retrievable"
    for row in rows:
        provenance = row["provenance"]
        assert provenance["content_type"] == "application/pdf"
        assert provenance["byte_size"] == len(data)
        assert provenance["file_name"] == "policy-en.pdf"
        assert (provenance["parser"], provenance["parser_version"]) == (document["parser"], document["parser_version"])
        assert provenance["parser"].startswith("pypdfium2 ")
        assert provenance["page_start"] == provenance["page_end"] == 1
    cited = citation(rows[0])
    assert "p. 1" in cited and "parsed by pypdfium2 " in cited and "(pdfium" not in cited


def test_a_citation_gives_the_page_range_of_a_passage_over_pages():
    row = {
        "source": "handbook.pdf",
        "section_path": "Handbook > Leave",
        "version": "3",
        "status": "active",
        "provenance": {"page_start": 4, "page_end": 6, "parser": "pypdfium2 5.15.2 (pdfium 1)"},
    }
    assert citation(row) == "handbook.pdf § Handbook > Leave (pp. 4–6, version 3, parsed by pypdfium2 5.15.2)"
    assert citation({"source": "a.md", "provenance": {"page_start": None, "parser": None}}) == "a.md"


# ------------------------------------------------------------------ the per-document cap


def test_max_per_document_lets_other_documents_take_the_places(rolled_back_db):
    corpus(rolled_back_db)
    uncapped = retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1000)
    assert sources(uncapped) == ["long.md"] * 4, "the premise: one document fills every place"
    capped = retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=2)
    assert sources(capped)[:2] == ["long.md", "long.md"] and set(sources(capped)[2:]) == {"other.md", "third.md"}
    assert [r["rank"] for r in capped] == [1, 2, 3, 4]
    # the two chunks kept are the document's two best, at their places
    assert [r["chunk_id"] for r in capped[:2]] == [r["chunk_id"] for r in uncapped[:2]]


def test_the_cap_keeps_the_order_of_the_documents(rolled_back_db):
    corpus(rolled_back_db)
    uncapped = retrieve(rolled_back_db, "refund", mode="lexical", k=20, max_per_document=1000)
    capped = retrieve(rolled_back_db, "refund", mode="lexical", k=3, max_per_document=1)
    first_seen = list(dict.fromkeys(sources(uncapped)))
    assert sources(capped) == first_seen


def test_explain_names_the_chunks_the_cap_dropped(rolled_back_db):
    corpus(rolled_back_db)
    uncapped = [r["chunk_id"] for r in retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1000)]
    assembly = explain(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=2)["assembly"]
    assert assembly["max_per_document"] == 2 and assembly["merge_adjacent"] is False
    assert assembly["dropped_by_cap"] == 2
    assert assembly["dropped_chunk_ids"] == uncapped[2:]
    assert assembly["returned"] == assembly["chunks_selected"] == 4 and assembly["merged"] == []
    rolled_back_db.execute("SET LOCAL pgkb.max_per_document = '0'")
    plain = explain(rolled_back_db, "refund", mode="lexical", k=4)["assembly"]
    assert (plain["max_per_document"], plain["dropped_by_cap"], plain["dropped_chunk_ids"]) == (None, 0, [])


# ------------------------------------------------------------------ merging adjacent chunks


def overlapping_document(conn) -> tuple[int, str]:
    """A document whose one long paragraph is split into pieces that overlap (small chunks)."""
    sentences = [f"Sentence {i} tells the refund story number {i}." for i in range(1, 13)]
    body = "# Story\n\n" + " ".join(sentences)
    conn.execute("SET LOCAL pgkb.chunk_max_tokens = '50'")
    conn.execute("SET LOCAL pgkb.chunk_overlap_tokens = '20'")
    doc = insert_document(conn, "story.md", body)
    conn.execute("RESET pgkb.chunk_max_tokens")
    conn.execute("RESET pgkb.chunk_overlap_tokens")
    return doc, body


def test_merged_passage_has_no_repeated_overlap(rolled_back_db):
    doc, body = overlapping_document(rolled_back_db)
    spans = rolled_back_db.execute(
        "SELECT char_start, char_end FROM kb.chunks WHERE document_id = %s ORDER BY ordinal", (doc,)
    ).fetchall()
    assert len(spans) >= 3 and any(b["char_start"] < a["char_end"] for a, b in zip(spans, spans[1:], strict=False)), (
        "the premise: consecutive chunks overlap"
    )
    rows = retrieve(rolled_back_db, "refund story", mode="lexical", k=len(spans), merge_adjacent=True)
    assert len(rows) == 1
    passage = rows[0]["content"]
    assert passage == body[spans[0]["char_start"] : spans[-1]["char_end"]]
    for i in range(1, 13):
        assert passage.count(f"Sentence {i} ") == 1, i


def test_merged_passage_keeps_document_order_and_the_place_of_its_best_chunk(rolled_back_db):
    docs = corpus(rolled_back_db)
    unmerged = retrieve(rolled_back_db, "refund", mode="lexical", k=20, max_per_document=1000)
    merged = retrieve(rolled_back_db, "refund", mode="lexical", k=20, max_per_document=1000, merge_adjacent=True)
    long_rows = [r for r in unmerged if r["source"] == "long.md"]
    assert sources(merged)[0] == "long.md" and set(sources(merged)[1:]) == {"other.md", "third.md"}
    assert [r["rank"] for r in merged] == [1, 2, 3]
    top = merged[0]
    assert top["chunk_id"] == unmerged[0]["chunk_id"] and top["score"] == unmerged[0]["score"]
    listed = top["provenance"]["chunks"]
    assert [c["chunk_id"] for c in listed] == chunk_ids(rolled_back_db, docs["long.md"])
    assert [c["ordinal"] for c in listed] == sorted(c["ordinal"] for c in listed)
    assert len(listed) == len(long_rows)
    # the document's own text from the first chunk to the last: the headings between them too
    assert top["content"].startswith("Refund refund step 1") and "## Step 3" in top["content"]
    assert top["content"].endswith("refund form 5.")
    assert top["section_path"] == "Refund guide > Step 1"
    assert top["provenance"]["heading_path"] == ["Refund guide", "Step 1"]
    # the explain output says what was merged
    assembly = explain(rolled_back_db, "refund", mode="lexical", k=20, max_per_document=1000, merge_adjacent=True)[
        "assembly"
    ]
    assert assembly["merged"] == [
        {
            "rank": 1,
            "source": "long.md",
            "document_id": docs["long.md"],
            "chunk_ids": [c["chunk_id"] for c in listed],
            "ordinals": [c["ordinal"] for c in listed],
        }
    ]
    assert (assembly["chunks_selected"], assembly["returned"]) == (len(unmerged), 3)


def test_chunks_that_do_not_follow_each_other_stay_separate_passages(rolled_back_db):
    body = "# Guide\n\n## A\n\nRefund rules here.\n\n## B\n\nNothing about money.\n\n## C\n\nRefund again here."
    doc = insert_document(rolled_back_db, "gaps.md", body)
    ids = chunk_ids(rolled_back_db, doc)
    rows = retrieve(rolled_back_db, "refund", mode="lexical", k=10, merge_adjacent=True)
    assert len(ids) == 3 and sorted(r["chunk_id"] for r in rows) == [ids[0], ids[2]]
    assert all(len(r["provenance"]["chunks"]) == 1 for r in rows)


def test_merging_spans_the_pages_of_its_chunks(rolled_back_db):
    data = (FILES / "handbook-zh.pdf").read_bytes()
    rolled_back_db.execute("SELECT kb.ingest_file('files', 'handbook.pdf', %s)", (data,))
    doc = rolled_back_db.execute("SELECT id FROM kb.documents WHERE source = 'handbook.pdf'").fetchone()["id"]
    # pages as a longer PDF would have them: chunk n on page n + 1
    rolled_back_db.execute(
        "UPDATE kb.chunks SET page_start = ordinal + 1, page_end = ordinal + 1 WHERE document_id = %s", (doc,)
    )
    n = len(chunk_ids(rolled_back_db, doc))
    assert n >= 2
    rows = retrieve(
        rolled_back_db, "员工 手册 请假 报销 考勤", namespace="files", mode="lexical", k=n, merge_adjacent=True
    )
    spanning = [r for r in rows if len(r["provenance"]["chunks"]) > 1]
    assert spanning, "the premise: consecutive chunks rank"
    for row in spanning:
        listed = row["provenance"]["chunks"]
        assert row["provenance"]["page_start"] == listed[0]["page_start"]
        assert row["provenance"]["page_end"] == listed[-1]["page_end"] > row["provenance"]["page_start"]
        assert f"pp. {row['provenance']['page_start']}–" in citation(row)


# ------------------------------------------------------------------ settings, arguments, bad input


def test_by_default_one_document_holds_at_most_two_places_while_others_have_candidates(rolled_back_db):
    corpus(rolled_back_db)
    rows = retrieve(rolled_back_db, "refund", mode="lexical", k=4)
    assert sources(rows)[:2] == ["long.md", "long.md"] and set(sources(rows)[2:]) == {"other.md", "third.md"}
    assert explain(rolled_back_db, "refund", mode="lexical", k=4)["assembly"]["max_per_document"] == 2
    assert explain(rolled_back_db, "refund", mode="lexical", k=4)["assembly"]["merge_adjacent"] is False


def test_the_settings_are_the_defaults_and_the_arguments_override_them(rolled_back_db):
    corpus(rolled_back_db)
    rolled_back_db.execute("SET LOCAL pgkb.max_per_document = '1'")
    assert sorted(sources(retrieve(rolled_back_db, "refund", mode="lexical", k=3))) == [
        "long.md",
        "other.md",
        "third.md",
    ]
    assert sources(retrieve(rolled_back_db, "refund", mode="lexical", k=3, max_per_document=3)) == ["long.md"] * 3
    rolled_back_db.execute("SET LOCAL pgkb.max_per_document = '0'")
    assert sources(retrieve(rolled_back_db, "refund", mode="lexical", k=3)) == ["long.md"] * 3
    rolled_back_db.execute("SET LOCAL pgkb.merge_adjacent = 'true'")
    assert len(retrieve(rolled_back_db, "refund", mode="lexical", k=3)) == 1
    assert len(retrieve(rolled_back_db, "refund", mode="lexical", k=3, merge_adjacent=False)) == 3


@pytest.mark.parametrize("value", [-1, 1001])
def test_a_max_per_document_out_of_range_is_refused_naming_it(rolled_back_db, value):
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(rolled_back_db, "refund", max_per_document=value)
    assert info.value.diag.message_primary == (
        f"kb_retrieve: max_per_document must be between 0 (no cap) and 1000 (got {value})"
    )


def test_max_per_document_zero_means_no_cap_as_argument_and_as_setting(rolled_back_db):
    corpus(rolled_back_db)
    uncapped = [r["chunk_id"] for r in retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1000)]
    capped = [r["chunk_id"] for r in retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1)]
    assert capped != uncapped
    by_argument = [r["chunk_id"] for r in retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=0)]
    rolled_back_db.execute("SET LOCAL pgkb.max_per_document = '0'")
    by_setting = [r["chunk_id"] for r in retrieve(rolled_back_db, "refund", mode="lexical", k=4)]
    assert by_argument == by_setting == uncapped


def test_a_negative_max_per_document_setting_is_refused_naming_the_setting(rolled_back_db):
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    rolled_back_db.execute("SET LOCAL pgkb.max_per_document = '-2'")
    with pytest.raises(psycopg.errors.RaiseException) as info:
        retrieve(rolled_back_db, "refund", mode="lexical")
    assert "pgkb.max_per_document = -2 is outside its range 0 to 1000" in info.value.diag.message_primary


def test_kb_retrieve_has_one_signature_with_the_assembly_arguments(rolled_back_db):
    found = rolled_back_db.execute(
        """SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args FROM pg_proc AS p
           WHERE p.proname IN ('kb_retrieve', 'kb_retrieve_explain') ORDER BY 1"""
    ).fetchall()
    assert [r["proname"] for r in found] == ["kb_retrieve", "kb_retrieve_explain"]
    for r in found:
        assert r["args"].endswith("max_per_document integer, merge_adjacent boolean"), r
    # below the doors the arguments travel as one request value
    core = rolled_back_db.execute(
        """SELECT pg_get_function_identity_arguments(p.oid) AS args FROM pg_proc AS p
           WHERE p.proname = 'retrieve_core'"""
    ).fetchall()
    assert [r["args"] for r in core] == ["p_request kb_pipeline.retrieval_request, p_explain boolean"]
    attributes = rolled_back_db.execute(
        """SELECT array_agg(a.attname::text ORDER BY a.attnum) AS names FROM pg_attribute AS a
           WHERE a.attrelid = 'kb_pipeline.retrieval_request'::regclass AND a.attnum > 0"""
    ).fetchone()["names"]
    assert {"max_per_document", "merge_adjacent"} <= set(attributes)


# ------------------------------------------------------------------ tenants


def test_assembly_shows_a_tenant_nothing_of_another(fresh_db):
    conn = fresh_db
    insert_document(conn, "a/guide.md", LONG_GUIDE, namespace="acme")
    secret = insert_document(conn, "b/guide.md", LONG_GUIDE.replace("desk", "globexdesk"), namespace="globex")
    secret_chunks = chunk_ids(conn, secret)
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with temporary_role(conn, "assembly_acme_reader", "NOLOGIN IN ROLE pgkb_reader") as reader:
        conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (reader,))
        with acting_as(conn, reader):
            rows = retrieve(conn, "refund desk", mode="lexical", k=20, max_per_document=10, merge_adjacent=True)
            assembly = explain(conn, "refund desk", mode="lexical", k=20, max_per_document=1)["assembly"]
            # merging a forged row naming the other tenant's chunks is not the reader's to run
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    """SELECT kb_node.merged_passages(ARRAY(
                           SELECT jsonb_populate_record(NULL::kb.retrieval_row, jsonb_build_object('rank', 1,
                               'chunk_id', c, 'provenance', jsonb_build_object('chunks', jsonb_build_array(
                                   jsonb_build_object('chunk_id', c)))))
                           FROM unnest(%s::bigint[]) AS c))""",
                    (secret_chunks,),
                )
    assert {r["source"] for r in rows} == {"a/guide.md"}
    assert all("globex" not in r["content"] for r in rows)
    assert not set(assembly["dropped_chunk_ids"]) & set(secret_chunks)


def test_the_cap_fills_the_places_from_one_document_when_no_other_is_left(rolled_back_db):
    insert_document(rolled_back_db, "long.md", LONG_GUIDE)
    uncapped = retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1000)
    capped = retrieve(rolled_back_db, "refund", mode="lexical", k=4, max_per_document=1)
    assert [r["chunk_id"] for r in capped] == [r["chunk_id"] for r in uncapped]
    assert len(capped) == 4 and [r["rank"] for r in capped] == [1, 2, 3, 4]
