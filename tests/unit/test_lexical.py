"""Unit tests for the BM25 term representation (pgkb_plpy.lexical); no database needed."""

from __future__ import annotations

import random
import string
import time

import pytest
from pgkb_plpy import lexical
from pgkb_plpy.lexical import document_terms, identifiers, query_terms


def test_stemming_makes_inflections_share_a_term():
    refund = query_terms("refund")
    assert refund == ["refund"]
    assert query_terms("refunds") == refund
    assert query_terms("refunded") == refund
    assert query_terms("Refunding") == refund
    assert document_terms("Refunds were refunded; refund!") == {"refund": 3}


def test_stop_words_dropped_but_negations_kept():
    terms = query_terms("The refund is not available for the digital goods and no exceptions")
    assert "the" not in terms and "is" not in terms and "for" not in terms and "and" not in terms
    assert "not" in terms
    assert "no" in terms
    assert "refund" in terms


def test_contractions_keep_their_negation():
    assert "not" in query_terms("Refunds don't apply")
    assert "not" in query_terms("you can't refund it")
    assert query_terms("won't") == ["not"]
    assert query_terms("the customer's refund") == ["custom", "refund"]


def test_negation_changes_the_terms():
    assert set(query_terms("refunds are allowed")) != set(query_terms("refunds are not allowed"))


def test_error_code_identifier_is_emitted_whole_and_in_parts():
    terms = query_terms("E-4031")
    assert terms[0] == "e-4031"
    assert "4031" in terms
    doc = document_terms("When the server returns E-4031, retry later. E-4031 means the session expired.")
    assert doc["e-4031"] == 2
    # a document without the identifier does not produce the rare term
    assert "e-4031" not in document_terms("Error E 4031 is unrelated")


def test_identifier_terms_are_identical_on_both_sides():
    for ident in ["E-4031", "HT-2024-0173", "session.ttl_seconds", "API_KEY", "v2.3.1", "RFC7231"]:
        q = query_terms(ident)
        d = document_terms(f"See {ident} for details.")
        assert ident.lower() in q, ident
        assert ident.lower() in d, ident
        assert set(q) <= set(d)


def test_dotted_config_key_is_one_whole_term_plus_stemmed_parts():
    terms = query_terms("session.ttl_seconds")
    assert terms == ["session.ttl_seconds", "session", "ttl", "second"]


def test_single_word_identifier_not_counted_twice():
    assert document_terms("RFC7231") == {"rfc7231": 1}
    assert document_terms("RFC7231 RFC7231") == {"rfc7231": 2}


def test_full_width_identifier_is_nfkc_normalised():
    assert query_terms("Ｅ－４０３１") == query_terms("E-4031")
    assert identifiers("错误Ｅ－４０３１") == ["E-4031"]


def test_identifiers_verbatim_in_order():
    text = (
        "Set session.ttl_seconds and API_KEY, upgrade to v2.3.1 per RFC7231; ticket HT-2024-0173 "
        "and error E-4031. A well-known issue, e.g. in 2024, costs 30 dollars."
    )
    assert identifiers(text) == [
        "session.ttl_seconds",
        "API_KEY",
        "v2.3.1",
        "RFC7231",
        "HT-2024-0173",
        "E-4031",
    ]


@pytest.mark.parametrize("word", ["well-known", "e.g", "2024", "30", "refund", "TTL", "follow-up"])
def test_ordinary_words_are_not_identifiers(word):
    assert not lexical.is_identifier(word)


@pytest.mark.parametrize("word", ["E-4031", "API_KEY", "kb.documents", "getUserName", "AWS-SDK", "3.5"])
def test_identifier_shapes(word):
    assert lexical.is_identifier(word)


def test_cjk_bigrams():
    terms = query_terms("如何打断别人说话")
    assert "打断" in terms
    assert terms == ["如何", "何打", "打断", "断别", "别人", "人说", "说话"]


def test_short_cjk_query_is_its_own_bigram():
    assert query_terms("打断") == ["打断"]
    assert query_terms("退") == ["退"]
    # and a document containing it produces the same term
    assert "打断" in document_terms("不要随意打断别人。")


def test_mixed_chinese_english_splits_at_script_boundaries():
    terms = query_terms("退款policy在30天内")
    assert terms == ["退款", lexical.stem("policy"), "在", "30", "天内"]
    doc = document_terms("根据退款policy，在30天内可以申请退款。")
    assert doc["退款"] == 2
    assert lexical.stem("policy") in doc
    assert "30" in doc


def test_japanese_and_korean_runs_are_bigrammed_too():
    assert "東京" in query_terms("東京タワー")
    assert "한국" in query_terms("한국어 텍스트")


def test_query_terms_are_distinct_in_first_appearance_order():
    assert query_terms("refund policy refunds POLICY") == ["refund", lexical.stem("policy")]


def test_empty_and_punctuation_only_inputs():
    assert document_terms("") == {}
    assert query_terms("") == []
    assert identifiers("") == []
    assert query_terms("?!… —— 。，") == []


def test_hostile_characters_do_not_crash_or_leak_into_terms():
    text = "a'b\"c%d_e\\f\x00g 😀 .*+?[](){}|^$ שלום e\u0301"
    terms = query_terms(text)
    for term in terms:
        assert "\x00" not in term and "%" not in term and "\\" not in term and '"' not in term
    assert document_terms(text)


def _assert_fast_and_bounded(text: str) -> None:
    start = time.perf_counter()
    terms = document_terms(text)
    q = query_terms(text)
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0, f"{elapsed:.2f}s"
    assert all(len(t) <= lexical.MAX_TERM_CHARS for t in terms)
    assert all(len(t) <= lexical.MAX_TERM_CHARS for t in q)


def test_one_megabyte_line_without_spaces_is_fast_and_has_no_giant_term():
    _assert_fast_and_bounded("x" * 1_000_000)


def test_one_megabyte_of_connected_parts_is_fast():
    _assert_fast_and_bounded("ab-" * 333_333 + "ab")


def test_one_megabyte_random_base64_line_is_fast():
    rng = random.Random(7)
    _assert_fast_and_bounded(
        "".join(rng.choice(string.ascii_letters + string.digits + "+/=") for _ in range(1_000_000))
    )


def test_long_tokens_are_ignored_but_short_ones_kept():
    long_word = "a" * 65
    assert query_terms(f"{long_word} refund") == ["refund"]
    assert query_terms("b" * 64) == ["b" * 64]


def test_stem_is_memoised():
    lexical.stem.cache_clear()
    lexical.stem("refunds")
    lexical.stem("refunds")
    assert lexical.stem.cache_info().hits >= 1


@pytest.mark.parametrize("stored", [lexical.TERMS_VERSION, float(lexical.TERMS_VERSION), str(lexical.TERMS_VERSION)])
def test_the_terms_version_of_the_postings_may_come_as_number_or_text(stored):
    lexical.check_terms_version(stored)


@pytest.mark.parametrize("stored", [lexical.TERMS_VERSION + 1, 0, None, True, "one", 1.5, [1]])
def test_postings_of_another_terms_version_are_refused(stored):
    with pytest.raises(lexical.TermsVersionError) as ei:
        lexical.check_terms_version(stored)
    assert f"built with terms version {stored}" in str(ei.value)
    assert "pgkb migrate" in ei.value.hint


# ------------------------------------------------------------------ weights: inline code


def test_inline_code_finds_backticked_spans_outside_fenced_blocks():
    text = "Set `session.ttl_seconds` and ``a `b` c``.\n```\n`inside_fence`\n```\n`after` and ` ` and `open"
    assert lexical.inline_code(text) == ["session.ttl_seconds", "a `b` c", "after"]


def test_inline_code_leaves_out_spans_too_long_to_be_a_name():
    long_span = "x " * lexical.MAX_CODE_SPAN_CHARS
    assert lexical.inline_code(f"`{long_span}` and `short_name`") == ["short_name"]


def test_backticked_terms_weigh_more_but_the_chunk_is_not_longer():
    from pgkb_plpy.chunker import chunk_document
    from pgkb_plpy.front_matter import RetrievalOptions
    from pgkb_plpy.ingest import chunk_terms, document_terms

    chunk = chunk_document("Use `retry_budget` with care; the budget resets.")[0]
    plain_terms, plain_length = chunk_terms(chunk)
    terms, length = chunk_terms(chunk, document_terms(None, 3))
    assert plain_terms["retry_budget"] == 1 and terms["retry_budget"] == 3
    assert terms["budget"] == plain_terms["budget"]  # an identifier weighs whole, not by its parts
    assert length == plain_length
    keyed, keyed_length = chunk_terms(
        chunk, document_terms(RetrievalOptions(concept_keys=("quota", "api.rate_limit"), aliases=("RB",)), 3)
    )
    assert (keyed["quota"], keyed["api.rate_limit"], keyed["rate"], keyed["rb"]) == (3, 3, 1, 1)
    assert keyed_length == plain_length + 6  # quota, api.rate_limit, api, rate, limit, rb: once each


def test_key_terms_are_an_identifiers_whole_a_words_term_and_cjk_bigrams():
    assert lexical.key_terms("session.idle_timeout_seconds idle 会话过期 E-4031") == {
        "session.idle_timeout_seconds": 1,
        "idl": 1,
        "会话": 1,
        "话过": 1,
        "过期": 1,
        "e-4031": 1,
    }
