"""The one definition of blank (pgkb_plpy.vocabulary.BLANK) is the Unicode it says it is, and
every Python side that asks "is this blank?" asks it; no database needed (the SQL side is
compared in tests/test_blank_sql.py)."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from pgkb_plpy import chunker, query_analysis, vocabulary

from harness import loader

BLANK_CATEGORIES = {"Cc", "Cf", "Zs", "Zl", "Zp"}
# Cf characters drawn as visible signs (Unicode property Prepended_Concatenation_Mark)
PREPENDED_CONCATENATION_MARKS = {*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x110BD, 0x110CD}
FROZEN_AT = "14.0.0"


def _is_surrogate(cp: int) -> bool:
    return 0xD800 <= cp <= 0xDFFF


def test_blank_is_every_control_format_and_separator_character_except_visible_marks():
    defined = {ord(c) for c in vocabulary.BLANK_CHARACTERS}
    by_category = {
        cp
        for cp in range(sys.maxunicode + 1)
        if not _is_surrogate(cp)
        and unicodedata.category(chr(cp)) in BLANK_CATEGORIES
        and cp not in PREPENDED_CONCATENATION_MARKS
    }
    # never a character this Python's Unicode calls something else (letters, marks, symbols)
    assert {cp for cp in defined - by_category if unicodedata.category(chr(cp)) != "Cn"} == set()
    if unicodedata.unidata_version == FROZEN_AT:
        assert by_category - defined == set()
    else:  # a later Unicode may add format characters: the class is frozen at FROZEN_AT
        assert len(by_category - defined) < 32


@pytest.mark.parametrize(
    "text",
    ["", " ", "\t\r\n", "\u00a0", "\u3000", "\u2003", "\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\U000e0041"],
)
def test_whitespace_and_invisible_characters_are_blank(text):
    assert vocabulary.is_blank(text * 3)
    assert vocabulary.strip_blank(f"{text}a b{text}") == "a b"


@pytest.mark.parametrize("text", ["a", "。", "\u0600", "\u0301", "\ufe0f", "\u3164", "\u2800", "😀", "\ue000"])
def test_letters_marks_symbols_and_visible_signs_are_not_blank(text):
    assert not vocabulary.is_blank(f"\u200b{text}\u3000")


def test_is_blank_is_linear_on_long_texts():
    assert vocabulary.is_blank("\u3000" * 5_000_000)
    assert not vocabulary.is_blank(" " * 5_000_000 + "x")


@pytest.mark.parametrize("text", ["\u00a0\u3000", "\u200b\u200d\ufeff", "\x1c\u2028\u00ad"])
def test_chunker_analysis_and_loader_agree_on_blank(text, tmp_path):
    assert chunker.chunk_document(text) == []
    assert query_analysis.analyze(text)["stages"] == []
    path = tmp_path / "blank.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(loader.DocumentError, match="empty"):
        loader.read_document(path, "blank.md", None)
    assert loader.vocabulary.BLANK == vocabulary.BLANK
