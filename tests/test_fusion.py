"""Fusion on hand-made leg hits: kb_pipeline.fuse is a pure function of the legs' candidates and the
weights, so its rules are checked without documents; kb_pipeline.passages (boosts, duplicates, top k,
row shape) on a few real chunks."""

from __future__ import annotations

import math

import psycopg
import pytest
from helpers import insert_document

FUSE = """SELECT f.* FROM kb_pipeline.fuse(
    %(lexical)s::kb_pipeline.leg_hit[], %(dense)s::kb_pipeline.leg_hit[], %(identifiers)s::bigint[],
    %(method)s, %(w_lexical)s, %(w_dense)s, %(rrf_k)s) AS f ORDER BY f.chunk_id"""


def hits(*rows: tuple) -> str:
    """A kb_pipeline.leg_hit[] literal from (chunk_id, score[, coverage[, trigram[, evidence[, other_language]]]])
    tuples, ranked in the given order."""
    items = []
    for rank, (chunk_id, score, *rest) in enumerate(rows, start=1):
        coverage = rest[0] if rest and rest[0] is not None else ""
        trigram = "t" if len(rest) > 1 and rest[1] else "f"
        evidence = rest[2] if len(rest) > 2 else ""
        other_language = ("t" if rest[3] else "f") if len(rest) > 3 else ""
        items.append(f'"({chunk_id},{rank},{score},{coverage},{trigram},,{evidence},{other_language},,)"')
    return "{" + ",".join(items) + "}"


def fuse(conn, lexical="{}", dense="{}", identifiers="{}", method="linear", w_lexical=0.55, w_dense=0.45, rrf_k=60):
    params = dict(
        lexical=lexical,
        dense=dense,
        identifiers=identifiers,
        method=method,
        w_lexical=w_lexical,
        w_dense=w_dense,
        rrf_k=rrf_k,
    )
    return {r["chunk_id"]: r for r in conn.execute(FUSE, params).fetchall()}


def test_linear_fusion_weights_min_max_normalised_scores(module_db):
    got = fuse(module_db, lexical=hits((1, 10.0), (2, 6.0), (3, 2.0)), dense=hits((2, 0.9), (3, 0.5)))
    assert got[1]["fused_score"] == pytest.approx(0.55 * 1.0)  # top of lexical, absent from dense
    assert got[2]["fused_score"] == pytest.approx(0.55 * 0.5 + 0.45 * 1.0)
    assert got[3]["fused_score"] == pytest.approx(0.0)  # bottom of both legs
    assert (got[2]["lexical_rank"], got[2]["dense_rank"]) == (2, 1)
    assert (got[2]["lexical_score"], got[2]["dense_score"]) == (6.0, 0.9)


def test_a_leg_whose_candidates_all_score_the_same_gives_each_full_weight(module_db):
    got = fuse(module_db, lexical=hits((1, 3.0)), dense=hits((1, 0.7), (2, 0.7)))
    assert got[1]["fused_score"] == pytest.approx(1.0)
    assert got[2]["fused_score"] == pytest.approx(0.45)


def test_trigram_hits_count_half_their_reciprocal_rank_and_stay_out_of_the_score_range(module_db):
    got = fuse(module_db, lexical=hits((1, 4.0, 0.5, False), (2, 2.0, 0.3, False), (3, 0.9, 0, True)))
    assert got[3]["fused_score"] == pytest.approx(0.55 * 0.5 / 3)
    assert got[3]["trigram"] is True and got[3]["lexical_score"] is None
    assert got[2]["fused_score"] == pytest.approx(0.0), "the range is 2..4, not 0.9..4"


def test_each_hit_weighs_by_its_own_evidence_and_keeps_a_floor_without_any(module_db):
    lexical = hits((1, 10.0, None, False, 1.0), (2, 5.0, None, False, 0.0), (3, 0.0, None, False, 1.0))
    fused = fuse(module_db, lexical=lexical, w_lexical=1, w_dense=0)
    assert fused[1]["fused_score"] == pytest.approx(1.0)
    assert fused[2]["fused_score"] == pytest.approx(0.5 * 0.05)  # normalised 0.5, no evidence: 5 %
    assert fused[3]["fused_score"] == pytest.approx(0.0)


def test_a_dense_hit_the_lexical_leg_could_not_read_is_not_held_back_by_its_silence(module_db):
    # chunk 1: the question's language, found by both legs; chunks 2 and 3: the dense leg alone,
    # equally, but 3 is written in another language than the question's
    lexical = hits((1, 8.0, None, False, 0.5), (9, 2.0, None, False, 0.5))
    dense = hits((2, 3.0, None, False, 1.0, False), (3, 3.0, None, False, 1.0, True), (1, 1.0, None, False, 1.0))
    fused = fuse(module_db, lexical=lexical, dense=dense)
    assert fused[2]["fused_score"] == pytest.approx(0.45 * 1.0)
    # its lexical part is the larger of its own (none) and its dense part times what the lexical
    # leg left open (its best evidence is 0.5)
    assert fused[3]["fused_score"] == pytest.approx(0.55 * 1.0 * 0.5 + 0.45 * 1.0)
    assert fused[3]["fused_score"] > fused[2]["fused_score"]
    # a lexical leg that found the question answered convincingly keeps its say
    convinced = hits((1, 8.0, None, False, 1.0), (9, 2.0, None, False, 0.5))
    fused = fuse(module_db, lexical=convinced, dense=dense)
    assert fused[3]["fused_score"] == pytest.approx(fused[2]["fused_score"])
    # rrf is rank-based and unchanged by it
    rrf = fuse(module_db, lexical=lexical, dense=dense, method="rrf")
    assert rrf[2]["fused_score"] > rrf[3]["fused_score"]


def test_rrf_scales_rank_one_in_both_legs_to_one(module_db):
    got = fuse(module_db, method="rrf", lexical=hits((1, 9.0), (2, 1.0)), dense=hits((1, 0.8), (3, 0.2)))
    assert got[1]["fused_score"] == pytest.approx(1.0)
    scale = (0.55 + 0.45) / 61
    assert got[2]["fused_score"] == pytest.approx((0.55 / 62) / scale)
    assert got[3]["fused_score"] == pytest.approx((0.45 / 62) / scale)


def test_identifier_hits_are_marked_and_kept_even_outside_both_legs(module_db):
    got = fuse(module_db, lexical=hits((1, 2.0)), identifiers="{1,7}")
    assert got[1]["identifier_hit"] and got[7]["identifier_hit"]
    assert got[7]["fused_score"] == 0 and got[7]["lexical_rank"] is None and got[7]["dense_rank"] is None


@pytest.mark.parametrize("method", ["linear", "rrf"])
def test_a_nan_or_infinite_leg_score_is_no_evidence_and_no_fused_score_is_nan(module_db, method):
    # NaN sorts above every number, so a NaN cosine arrives as the dense leg's rank 1
    dense = hits((3, "NaN"), (2, 0.9), (1, 0.5), (4, "Infinity"), (5, "-Infinity"))
    got = fuse(module_db, method=method, lexical=hits((1, 4.0), (2, 2.0), (6, "NaN")), dense=dense)
    assert all(math.isfinite(r["fused_score"]) for r in got.values())
    for chunk in (3, 4, 5):
        assert got[chunk]["fused_score"] == 0 and got[chunk]["dense_score"] is None
    assert got[3]["dense_rank"] == 1, "the leg's rank is reported as the leg gave it"
    assert got[6]["fused_score"] == 0 and got[6]["lexical_score"] is None
    assert min(got[1]["fused_score"], got[2]["fused_score"]) > 0
    if method == "linear":  # the ranges are taken over finite scores only: dense 0.5..0.9, lexical 2..4
        assert got[1]["fused_score"] == pytest.approx(0.55)
        assert got[2]["fused_score"] == pytest.approx(0.45)


def test_nan_weights_give_scores_of_zero_not_nan(module_db):
    for method in ("linear", "rrf"):
        got = fuse(module_db, method=method, lexical=hits((1, 4.0)), dense=hits((1, 0.9)), w_dense=float("nan"))
        assert [r["fused_score"] for r in got.values()] == [0], method


def test_every_fusion_method_of_the_catalogue_fuses_and_no_other(module_db):
    choices = module_db.execute("SELECT choices FROM kb.settings_catalogue WHERE key = 'fusion'").fetchone()["choices"]
    assert set(choices) == {"linear", "rrf"}
    for method in choices:
        assert fuse(module_db, method=method, lexical=hits((1, 4.0)), dense=hits((1, 0.9)))[1]["fused_score"] > 0
    with pytest.raises(psycopg.errors.RaiseException, match='unknown fusion method "borda"'):
        fuse(module_db, method="borda", lexical=hits((1, 4.0)))


def test_no_candidates_fuse_to_nothing(module_db):
    assert fuse(module_db) == {}
    assert (
        module_db.execute(
            "SELECT count(*) AS n FROM kb_pipeline.fuse(NULL, NULL, NULL, 'linear', 1, 1, 60)"
        ).fetchone()["n"]
        == 0
    )


WEIGHS = """SELECT kb_pipeline.weighs_hits_by_evidence(ARRAY(
    SELECT jsonb_populate_record(NULL::kb.language_moment, jsonb_build_object('language', g, 'vectors', 40))
    FROM unnest(%(groups)s::text[]) AS g)) AS weighs"""


@pytest.mark.parametrize(
    ("groups", "weighs"),
    [
        (["en", "zh"], True),
        (["en", "other", "zh"], True),
        (["en"], False),
        (["en", "other"], False),
        (["zh"], False),
        ([], False),
    ],
)
def test_fusion_weighs_hits_by_evidence_only_over_a_scope_of_both_languages(module_db, groups, weighs):
    assert module_db.execute(WEIGHS, {"groups": groups}).fetchone()["weighs"] is weighs


KEPT = """SELECT k.chunk_id, k.rank, k.score, k.evidence
FROM unnest(kb_pipeline.own_language_first_kept(%(dense)s::kb_pipeline.leg_hit[], %(language)s)) AS k"""


def corrected(*rows: tuple) -> str:
    """A corrected dense leg's kb_pipeline.leg_hit[] literal from (chunk_id, z, cosine, evidence, language)
    tuples, ranked in the given order (the order of the z-scores)."""
    items = [
        f'"({chunk_id},{rank},{z},,f,{cosine},{evidence},,{language},)"'
        for rank, (chunk_id, z, cosine, evidence, language) in enumerate(rows, start=1)
    ]
    return "{" + ",".join(items) + "}"


def kept(conn, dense: str, language: str) -> list[tuple]:
    rows = conn.execute(KEPT, {"dense": dense, "language": language}).fetchall()
    return [(r["chunk_id"], r["rank"], r["score"], r["evidence"]) for r in rows]


# chunk 6 is the Chinese passage raw cosine puts first among the Chinese ones (0.91), which the
# correction ranked last behind five English passages
BURIED = corrected(
    (1, 4.0, 0.81, 1.0, "en"),
    (2, 3.5, 0.80, 0.9, "en"),
    (3, 3.0, 0.79, 0.7, "en"),
    (4, 2.5, 0.78, 0.5, "en"),
    (5, 2.0, 0.77, 0.3, "zh"),
    (6, 1.0, 0.91, 0.0, "zh"),
)


def test_the_passage_raw_cosine_puts_first_in_the_questions_language_keeps_dense_rank_three(module_db):
    got = kept(module_db, BURIED, "zh")
    assert [r[0] for r in got] == [1, 2, 6, 3, 4, 5]
    assert [r[1] for r in got] == [1, 2, 3, 4, 5, 6]
    assert got[2][2:] == (3.0, 0.7), "it weighs as the hit whose place it took"
    assert got[3] == (3, 4, 3.0, 0.7), "that hit keeps its own score and evidence, one place down"


def test_the_own_language_guard_leaves_the_leg_alone_when_it_need_not_act(module_db):
    assert [r[0] for r in kept(module_db, BURIED, "mixed")] == [1, 2, 3, 4, 5, 6], "a mixed question"
    assert [r[0] for r in kept(module_db, BURIED, "en")] == [1, 2, 3, 4, 5, 6], "the nearest English one is first"
    uncorrected = hits((1, 0.81), (2, 0.80), (3, 0.79), (4, 0.91))
    assert [r[0] for r in kept(module_db, uncorrected, "zh")] == [1, 2, 3, 4], "hits without a language"
    short = corrected((1, 4.0, 0.81, 1.0, "en"), (2, 1.0, 0.91, 0.0, "zh"))
    assert [r[1] for r in kept(module_db, short, "zh")] == [1, 2]


# fused hits ranked (kb_pipeline.rank, with their facts) and shaped into rows (kb_node.passage_rows)
PASSAGES = """WITH
fused AS (
    SELECT ARRAY(SELECT f FROM kb_pipeline.fuse(%(lexical)s::kb_pipeline.leg_hit[], '{}', %(identifiers)s::bigint[],
        'linear', 1, 0, 60) AS f) AS hits
),
settings AS (
    SELECT jsonb_populate_record(kb_pipeline.read_retrieval_settings(),
        '{"boost_identifier": 0.5, "boost_title": 0.1, "freshness_margin": 0}') AS s
)
SELECT p.*
FROM fused, settings, unnest(kb_node.passage_rows(ARRAY(
    SELECT r FROM kb_pipeline.rank(fused.hits,
        kb_node.candidate_facts(ARRAY(SELECT h.chunk_id FROM unnest(fused.hits) AS h)),
        %(core)s, settings.s, %(k)s, NULL) AS r
))) AS p"""


def chunk_of(conn, document_id: int) -> int:
    return conn.execute("SELECT min(id) AS id FROM kb.chunks WHERE document_id = %s", (document_id,)).fetchone()["id"]


def test_passages_boost_dedupe_rank_and_shape_rows(rolled_back_db):
    a = chunk_of(rolled_back_db, insert_document(rolled_back_db, "a.md", "# A\n\nShared text about refunds."))
    b = chunk_of(rolled_back_db, insert_document(rolled_back_db, "b.md", "# A\n\nShared text about refunds."))
    c = chunk_of(
        rolled_back_db, insert_document(rolled_back_db, "c.md", "# Refund window\n\nOther text.", title="Refund window")
    )
    lexical = hits((a, 3.0), (b, 2.0), (c, 1.0))
    rows = rolled_back_db.execute(
        PASSAGES, dict(lexical=lexical, identifiers="{}", core="refund window", k=5)
    ).fetchall()
    # a and b have the same text: only the better one (a) stays; c gets the title boost
    assert [r["source"] for r in rows] == ["a.md", "c.md"]
    assert [r["rank"] for r in rows] == [1, 2]
    assert rows[1]["score"] == pytest.approx(0.1)
    assert rows[0]["snippet"] is None and rows[0]["match_type"] == "lexical"
    boosted = rolled_back_db.execute(PASSAGES, dict(lexical="{}", identifiers=f"{{{c}}}", core="", k=1)).fetchall()
    assert [(r["source"], r["match_type"], r["score"]) for r in boosted] == [("c.md", "identifier", 0.5)]


def test_kb_retrieve_returns_the_retrieval_row_type(rolled_back_db):
    """kb_retrieve's columns are kb.retrieval_row's attributes, in order."""
    attributes = [
        r["attname"]
        for r in rolled_back_db.execute(
            """SELECT attname FROM pg_attribute WHERE attrelid = 'kb.retrieval_row'::regclass AND attnum > 0
               ORDER BY attnum"""
        ).fetchall()
    ]
    insert_document(rolled_back_db, "a.md", "# Refunds\n\nRefunds take 14 days.")
    cur = rolled_back_db.execute("SELECT * FROM kb_retrieve('refunds', mode => 'lexical')")
    assert [d.name for d in cur.description] == attributes
    assert cur.fetchall()[0]["source"] == "a.md"


def test_a_score_that_is_not_a_number_is_no_evidence(module_db):
    got = module_db.execute(
        """SELECT kb_pipeline.calibrate('NaN', 0.2, 0.6) AS nan, kb_pipeline.calibrate('Infinity', 0.2, 0.6) AS inf,
                  kb_pipeline.calibrate(0.4, 0.2, 0.6) AS half, kb_pipeline.calibrate(NULL, 0.2, 0.6) AS missing"""
    ).fetchone()
    assert (got["nan"], got["inf"], got["missing"]) == (0, 0, 0)
    assert got["half"] == pytest.approx(0.5)
