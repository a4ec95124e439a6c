"""The language correction's arithmetic (pgkb_plpy.language_statistics) and the passage language
rule (query_analysis.han_share, passage_language), without a database: the pooled moments are the moments
of the vectors themselves, the correction keeps each group's order, and groups too small for
statistics keep their own mean, the within-group variance of all groups making up their missing vectors."""

from __future__ import annotations

import numpy as np
import pytest
from pgkb_plpy import language_statistics as ls
from pgkb_plpy.query_analysis import han_share, passage_language

RNG = np.random.default_rng(7)


def group(namespace: str, language: str, vectors: np.ndarray) -> ls.GroupStatistics:
    mean = vectors.mean(axis=0)
    return ls.GroupStatistics(namespace, language, len(vectors), mean, ls.covariance(vectors, mean))


def test_moments_equal_mean_and_spread_of_query_similarities_pooled_over_namespaces():
    a, b = RNG.normal(size=(50, 8)), RNG.normal(loc=0.3, size=(70, 8))
    q = RNG.normal(size=8)
    (moment,) = ls.query_moments(q, [group("a", "en", a), group("b", "en", b)], min_vectors=10)
    sims = np.concatenate([a @ q, b @ q])
    assert moment.vectors == 120 and not moment.pooled
    assert moment.offset == pytest.approx(sims.mean())
    assert moment.scale == pytest.approx(sims.std())


def test_correction_keeps_the_order_inside_a_group_and_lifts_the_other_language():
    # two languages whose vectors sit around different centres: the query is nearer every
    # vector of its own language, but the z-score ranks by closeness within each language
    en = RNG.normal(size=(40, 6)) + np.array([3, 0, 0, 0, 0, 0])
    zh = RNG.normal(size=(40, 6)) + np.array([0, 3, 0, 0, 0, 0])
    q = zh[0] + np.array([0, 0, 2, 0, 0, 0])
    moments = {m.language: m for m in ls.query_moments(q, [group("n", "en", en), group("n", "zh", zh)], 10)}
    z_en = (en @ q - moments["en"].offset) / moments["en"].scale
    z_zh = (zh @ q - moments["zh"].offset) / moments["zh"].scale
    assert list(np.argsort(-z_zh)) == list(np.argsort(-(zh @ q)))
    assert list(np.argsort(-z_en)) == list(np.argsort(-(en @ q)))
    assert abs(z_en.mean()) < 1e-9 and abs(z_zh.mean()) < 1e-9


def test_group_of_another_language_is_scored_for_the_query_without_its_language_mean():
    en = RNG.normal(size=(40, 6)) + np.array([3, 0, 0, 0, 0, 0])
    zh = RNG.normal(size=(40, 6)) + np.array([0, 3, 0, 0, 0, 0])
    q = zh[0] + np.array([0, 0, 2, 0, 0, 0])
    groups = [group("n", "en", en), group("n", "zh", zh)]
    moments = {m.language: m for m in ls.query_moments(q, groups, 10, query_share=1.0)}
    assert moments["zh"].query_vector is None  # its own language: the query as it is
    v = ls.parse_vector(moments["en"].query_vector)
    centred = q - zh.mean(axis=0)
    assert v == pytest.approx(centred / np.linalg.norm(centred), abs=1e-6)
    sims = en @ v
    assert moments["en"].offset == pytest.approx(sims.mean(), abs=1e-5)
    assert moments["en"].scale == pytest.approx(sims.std(), abs=1e-5)
    # the zh and en moments for the en group's vector, for its bilingual passages
    assert moments["en"].en_offset == pytest.approx(moments["en"].offset)
    assert moments["en"].zh_offset == pytest.approx((zh @ v).mean(), abs=1e-5)
    assert moments["zh"].zh_offset == pytest.approx(moments["zh"].offset)


def test_mixed_question_is_centred_between_the_language_means_by_its_share_of_chinese():
    en = RNG.normal(size=(40, 4)) + np.array([2, 0, 0, 0])
    zh = RNG.normal(size=(40, 4)) + np.array([0, 2, 0, 0])
    groups = [group("n", "en", en), group("n", "zh", zh)]
    mean = ls.language_mean(groups, 0.7, 10)
    assert mean == pytest.approx(0.7 * zh.mean(axis=0) + 0.3 * en.mean(axis=0))
    assert ls.language_mean(groups, None, 10) is None  # no "other" group


def test_no_centring_when_the_question_language_has_too_few_vectors():
    en = RNG.normal(size=(40, 4))
    zh = RNG.normal(size=(5, 4)) + 1
    q = RNG.normal(size=4)
    moments = ls.query_moments(q, [group("n", "en", en), group("n", "zh", zh)], 20, query_share=1.0)
    assert all(m.query_vector is None for m in moments)


def test_all_groups_make_up_the_missing_vectors_of_a_small_groups_mean_and_variance():
    # a small group is often one document, every passage on the topic a question asks about:
    # its own mean alone would hold that relevance and push its passages below chance ones
    big = RNG.normal(size=(60, 5)) + np.array([4, 0, 0, 0, 0])
    small = RNG.normal(size=(5, 5)) + np.array([0, 4, 0, 0, 0])
    q = small[0] / np.linalg.norm(small[0])
    moments = {m.language: m for m in ls.query_moments(q, [group("n", "en", big), group("n", "zh", small)], 20)}
    own_big, own_small = big @ q, small @ q
    within = (60 * own_big.var() + 5 * own_small.var()) / 65
    mean_all = np.concatenate([own_big, own_small]).mean()
    assert moments["zh"].pooled and not moments["en"].pooled
    assert moments["zh"].offset == pytest.approx((5 * own_small.mean() + 15 * mean_all) / 20)
    assert moments["en"].offset == pytest.approx(own_big.mean())  # enough vectors of its own
    assert moments["zh"].scale == pytest.approx(np.sqrt((5 * own_small.var() + 15 * within) / 20))
    assert moments["en"].scale == pytest.approx(own_big.std())  # enough vectors of its own
    # the gap between the languages is in neither scale
    assert moments["zh"].scale < np.concatenate([own_big, own_small]).std()
    assert moments["zh"].vectors == 5


def test_one_language_keeps_its_own_moments_exactly():
    only = RNG.normal(size=(40, 5))
    q = RNG.normal(size=5)
    (moment,) = ls.query_moments(q, [group("n", "en", only)], 20)
    assert moment.offset == pytest.approx((only @ q).mean()) and moment.scale == pytest.approx((only @ q).std())


def test_no_correction_when_all_groups_together_are_too_few_or_have_no_spread():
    q = np.ones(4)
    assert ls.query_moments(q, [group("n", "en", RNG.normal(size=(5, 4)))], 20) == []
    same = np.tile(np.arange(4.0), (30, 1))
    assert ls.query_moments(q, [group("n", "en", same)], 20) == []
    assert ls.query_moments(q, [], 20) == []


def test_covariance_round_trips_through_its_stored_form():
    m = ls.covariance(RNG.normal(size=(30, 7)), np.zeros(7))
    back = ls.decode_covariance(ls.encode_covariance(m), 7)
    assert np.allclose(back, m, rtol=1e-6, atol=1e-7)
    assert len(ls.encode_covariance(m)) == 4 * 7 * 7


def test_parse_vector_reads_pgvector_text():
    assert list(ls.parse_vector("[1,-2.5,3e-2]")) == [1.0, -2.5, 0.03]


@pytest.mark.parametrize(
    ("stored", "now", "stale"),
    [(None, 1, True), (None, 0, False), (100, 109, False), (100, 110, True), (100, 90, True), (100, 100, False)],
)
def test_statistics_are_stale_when_missing_or_the_group_changed_by_the_drift(stored, now, stale):
    assert ls.is_stale(stored, now, 0.1) is stale


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("客户自签收之日起 14 天内可申请退款。", "zh"),
        ("使用 kubectl apply 部署服务到生产集群，然后检查日志", "zh"),
        ("Refunds are accepted within 14 days of delivery.", "en"),
        ("Der Antrag wird binnen 14 Tagen geprüft.", "en"),  # the Latin-script group
        ("Привет мир", "other"),
        ("12345 !!!", "other"),
    ],
)
def test_passage_language_is_the_script_group_of_its_tokens(text, language):
    assert passage_language(han_share(text)) == language


def test_han_share_counts_han_characters_against_latin_words():
    assert han_share("退款 refund") == pytest.approx(2 / 3)
    assert han_share("Session 会话 expires 过期") == pytest.approx(4 / 6)
    assert han_share("123") is None
