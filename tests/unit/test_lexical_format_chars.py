"""Issue 42: invisible format characters (Unicode category Cf) are removed before tokenising.

A zero-width space, word joiner, soft hyphen or bidi mark inside a word must neither split it
(hiding it from BM25) nor make a pasted query miss; documents and queries follow the one rule
of :func:`pgkb_plpy.lexical.normalize`. No database needed."""

from __future__ import annotations

import sys
import time
import unicodedata

import pytest
from pgkb_plpy import lexical
from pgkb_plpy.lexical import document_terms, identifiers, key_terms, normalize, query_terms

#: The format characters the issue names, plus a few more of category Cf.
NAMED = [
    "\u200b",  # zero width space
    "\u200c",  # zero width non-joiner
    "\u200d",  # zero width joiner
    "\u2060",  # word joiner
    "\ufeff",  # zero width no-break space / BOM
    "\u00ad",  # soft hyphen
    "\u200e",  # left-to-right mark
    "\u200f",  # right-to-left mark
    *[chr(c) for c in range(0x202A, 0x202F)],  # LRE RLE PDF LRO RLO
    *[chr(c) for c in range(0x2066, 0x206A)],  # LRI RLI FSI PDI
    "\u061c",  # arabic letter mark
    "\u180e",  # mongolian vowel separator
    "\U000e0041",  # tag latin capital letter a
]

EVERY_CF = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]


def test_the_named_characters_are_all_format_characters():
    assert all(unicodedata.category(ch) == "Cf" for ch in NAMED)


def test_zero_width_space_inside_a_word_does_not_split_it():
    assert query_terms("ref\u200bund") == query_terms("refund") == ["refund"]
    assert query_terms("Ref\u200bunds are not allowed") == query_terms("Refunds are not allowed")


@pytest.mark.parametrize("ch", NAMED, ids=lambda ch: f"U+{ord(ch):04X}")
def test_each_named_format_character_is_removed(ch):
    assert query_terms(f"ref{ch}und") == ["refund"]
    assert document_terms(f"The ref{ch}und pol{ch}icy.") == document_terms("The refund policy.")
    assert normalize(f"a{ch}b") == "ab"


def test_every_format_character_of_this_python_is_removed():
    assert len(EVERY_CF) > 150
    assert normalize("".join(EVERY_CF)) == ""
    assert query_terms("ref" + "".join(EVERY_CF) + "und") == ["refund"]
    for ch in EVERY_CF:
        assert query_terms(f"ref{ch}und") == ["refund"], f"U+{ord(ch):04X}"


def test_soft_hyphen_inside_a_chinese_run_keeps_the_bigram():
    assert query_terms("退\u00ad款政策") == query_terms("退款政策") == ["退款", "款政", "政策"]
    assert document_terms("退\u200b款\u2060政策") == document_terms("退款政策")


def test_zero_width_space_inside_an_identifier_keeps_it_one_identifier():
    assert query_terms("E-40\u200b31") == query_terms("E-4031") == ["e-4031", "e", "4031"]
    assert identifiers("see E-40\u200b31 now") == ["E-4031"]
    assert identifiers("session.ttl\u2060_seconds") == ["session.ttl_seconds"]
    assert key_terms("`session.ttl\u200b_seconds`") == key_terms("`session.ttl_seconds`")


def test_document_and_query_agree():
    doc = document_terms("Customers get a ref\u00adund within 30 days; see HT-20\u200b24-0173.")
    for query in ["refund", "ref\u200bund", "HT-2024-0173", "HT\u2060-2024-0173"]:
        assert set(query_terms(query)) <= set(doc), query
    assert doc["refund"] == 1 and doc["ht-2024-0173"] == 1


def test_format_characters_between_words_still_leave_them_apart_when_spaced():
    # a removed character joins only what it stood between; spaces still separate
    assert query_terms("refund \u200b policy") == ["refund", "polici"]
    assert query_terms("\u200brefund\u200b") == ["refund"]


def test_visible_separators_are_not_format_characters():
    # no-break space (Zs), a control (Cc) and combining marks are not touched by the rule
    assert query_terms("ref\u00a0und") == ["ref", "und"]
    assert query_terms("ref\tund") == ["ref", "und"]
    assert query_terms("cafe\u0301") == query_terms("café")


def test_contractions_still_expand_across_a_removed_character():
    assert "not" in query_terms("can\u200b't refund")


def test_many_format_characters_are_linear():
    text = ("a\u200b" * 500_000) + " " + ("\u00ad" * 500_000)
    started = time.perf_counter()
    terms = document_terms(text)
    assert time.perf_counter() - started < 2.0
    assert terms == {}  # one 500k-letter token: longer than MAX_TERM_CHARS, no parts either


def test_terms_version_bumped_for_the_rule():
    assert lexical.TERMS_VERSION == 2


def test_terms_version_error_names_what_to_run():
    exc = lexical.TermsVersionError(1)
    assert "pgkb migrate" in exc.hint and "kb.rebuild_lexical_terms()" in exc.hint
