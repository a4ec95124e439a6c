"""The BM25 leg's bounded reads and its document-frequency statistics (docs/RETRIEVAL.md)."""

import pytest
from helpers import insert_document
from pgkb_plpy import lexical

LEG = "SELECT chunk_id, score, coverage FROM kb_node.lexical_candidates(%s::text[], now(), NULL, %s::jsonb, %s)"


def leg(conn, query: str, limit: int = 50, filters: str = "{}") -> list[tuple]:
    terms = conn.execute("SELECT kb.query_terms(%s) AS t", [query]).fetchone()["t"]
    rows = conn.execute(LEG, [terms, filters, limit]).fetchall()
    return [(r["chunk_id"], round(r["score"], 9), round(r["coverage"], 9)) for r in rows]


@pytest.fixture
def corpus(fresh_db):
    # "refund" in every document (1-4 times), "policy" in every third, "window" in two
    for i in range(24):
        words = ["refund"] * (1 + i % 4) + (["policy"] if i % 3 == 0 else []) + (["window"] if i in (5, 17) else [])
        filler = [f"filler{j}" for j in range(i % 7)]
        insert_document(fresh_db, f"d{i}.md", f"# Doc {i}\n\n" + " ".join(words + filler) + ".")
    return fresh_db


def test_truncated_terms_still_give_exact_scores(corpus):
    exact = leg(corpus, "refund policy window")
    assert len(exact) == 24
    # the rarest term may read 2 postings, the common ones fewer: both common terms are truncated
    corpus.execute("SET pgkb.bm25_postings_per_term = '2'")
    bounded = leg(corpus, "refund policy window")
    assert 2 <= len(bounded) < len(exact)
    by_chunk = {chunk: (score, coverage) for chunk, score, coverage in exact}
    # every chunk found has its full score: the truncated terms' weights were looked up
    assert [(c, by_chunk[c][0], by_chunk[c][1]) for c, _, _ in bounded] == bounded
    assert bounded[:2] == exact[:2]  # the two "window" documents lead either way


def test_filters_read_every_posting(corpus):
    exact = leg(corpus, "refund policy window")
    corpus.execute("SET pgkb.bm25_postings_per_term = '2'")
    assert leg(corpus, "refund policy window", filters='{"include_history": true}') == exact


def test_document_frequencies_count_chunks_added_after_the_refresh(corpus):
    assert corpus.execute("SELECT kb.refresh_term_stats() AS n").fetchone()["n"] > 0
    stored = corpus.execute("SELECT df FROM kb.lexical_terms WHERE term = 'window'").fetchone()["df"]
    assert stored == 2
    for i in range(3):
        insert_document(corpus, f"new{i}.md", f"# New {i}\n\nwindow refund.")
    after_inserts = leg(corpus, "refund window")
    corpus.execute("SELECT kb.refresh_term_stats()")
    assert corpus.execute("SELECT df FROM kb.lexical_terms WHERE term = 'window'").fetchone()["df"] == 5
    assert leg(corpus, "refund window") == after_inserts  # the new chunks were counted before the recount


def test_refresh_runs_once_the_corpus_changed_by_a_tenth(fresh_db):
    fresh_db.execute("UPDATE kb.lexical_stats SET terms_chunk_count = 1000, chunk_count = 1000")
    fresh_db.execute("SELECT kb.refresh_lexical_stats()")  # 0 chunks now: changed by far more than a tenth
    assert fresh_db.execute("SELECT terms_chunk_count FROM kb.lexical_stats").fetchone()["terms_chunk_count"] == 0


def test_a_word_split_by_an_invisible_format_character_is_found_by_the_plain_word(fresh_db):
    # issue 42: format characters (category Cf) are removed before tokenising, in documents and
    # queries alike (pgkb_plpy.lexical.normalize); a fresh database records the current rules
    assert fresh_db.execute("SELECT kb.setting('lexical_terms_version') AS v").fetchone()["v"] == lexical.TERMS_VERSION
    insert_document(
        fresh_db, "hidden.md", "# Returns\n\nA ref\u200bund is paid within thirty days; error E-40\u200b31 means retry."
    )
    insert_document(fresh_db, "other.md", "# Shipping\n\nParcels ship within three days; ref and und are notes.")
    hidden = fresh_db.execute("SELECT id FROM kb.documents WHERE source = 'hidden.md'").fetchone()["id"]
    terms = {
        r["term"]
        for r in fresh_db.execute("SELECT term FROM kb.lexical_postings WHERE document_id = %s", (hidden,)).fetchall()
    }
    assert {"refund", "e-4031"} <= terms and not {"ref", "und"} & terms
    for query in ("refund", "ref\u00adund", "E-4031"):
        rows = fresh_db.execute("SELECT source FROM kb_retrieve(%s, k => 5, mode => 'lexical')", (query,)).fetchall()
        assert [r["source"] for r in rows][:1] == ["hidden.md"], query
