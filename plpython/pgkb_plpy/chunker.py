"""Structure-aware Markdown chunker (stdlib only; runs in PL/Python and plain Python).

``chunk_document(body, title)`` turns a Markdown (or plain-text) document into
``Chunk`` objects:

* A leading YAML front matter block (``---`` .. ``---`` or ``...``) is metadata, not text, when
  what lies between is empty, comments, or looks like a YAML mapping: its first line that is not
  blank or a comment is ``key:`` (or ``key: value``, keys quoted or plain), and every later one is
  a key line, an indented line or a ``-`` list item. Anything else between two ``---`` lines (a
  sentence, a list, Markdown) is the document's text and is chunked as such (``---`` is then a
  thematic break or a setext underline).
* ATX headings (``#`` .. ``######``) and one-line setext headings (``===`` / ``---``
  underline) build a section path, e.g. ``["Refund policy", "Eligibility"]``.  A
  heading resets every deeper level.  The document title comes first when given,
  unless the document's first H1 is the title itself (compared on letters and digits only, case- and
  whitespace-insensitively), in which case it is not repeated.  Lines inside
  fenced code blocks are never headings.
* The body between headings is cut into blocks: paragraphs, lists (a contiguous
  list including nested items and blank-line separated items is one block),
  tables (contiguous ``|`` lines), fenced code blocks (`````` ``` `````` or ``~~~``) and
  block quotes.  Thematic breaks carry no text and are dropped.
* Consecutive blocks of one section are packed into one chunk (joined by a blank
  line) while the chunk stays within ``max_tokens``.  A heading always starts a new
  chunk; chunks never span sections.
* A block larger than the budget is split on its own: prose at sentence ends
  (``。！？；`` always, ``. ! ?`` when followed by whitespace), then at newlines, then
  by tokens (hard cut, which also cuts inside a long word).  Lists split first at
  item starts, code blocks and tables at line boundaries.  Consecutive pieces of
  one split block overlap by up to ``overlap_tokens`` (whole trailing sentences or
  lines; nothing when the last sentence alone is longer).  Separate blocks never
  overlap.  Every piece of a split table starts with the table's header (its first row and
  the delimiter row), so each piece reads as a table with its column names; the pieces after
  the first hold the header although their source span starts at their first row.
* The heading path counts against the budget: ``token_count`` (the estimate of
  ``embed_text``) is at most ``max_tokens``.  Only when the heading path alone
  takes more than three quarters of ``max_tokens`` is the content budget held at
  ``max_tokens // 4`` and the limit exceeded.
* A body that is not blank (:func:`pgkb_plpy.vocabulary.is_blank`) always yields at least one
  chunk: when its structure leaves no paragraph (only headings, only front matter, only
  thematic breaks), the text after the front matter -- or, when nothing follows it, the whole
  body -- is one plain block under the title, so a heading alone (``# Refunds``) is one chunk.
  A blank body yields none (the database refuses it before the chunker runs).

Token estimate (``estimate_tokens``) approximates a multilingual subword
tokenizer (e5 / XLM-R SentencePiece), without special tokens:

* every CJK ideograph, Kana or Hangul character is 1 token;
* every other word (a run of letters, digits and combining marks) is
  ``ceil(len / 4)`` tokens, so words of 1-4 characters are 1 token;
* every other non-space character (punctuation, symbols, ``_``) is 1 token;
* whitespace is free.

The estimate is additive across whitespace, sentence ends and CJK characters, so
the pieces of a split never exceed the budget.

Offsets: ``body[char_start:char_end]`` is the source span of the chunk in the
ORIGINAL ``body`` string (``\\r\\n`` is normalised to ``\\n`` for processing, and
offsets are mapped back).  For a packed chunk the span runs from its first block
to its last block (including the blank lines between them); for a piece of a split
block it includes the overlap taken from the previous piece.

Everything is linear in the size of the body.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .vocabulary import CJK_ONE_TOKEN_EACH, HAN_UNIFIED, is_blank

__all__ = ["CHUNKER_VERSION", "Chunk", "chunk_document", "describe_code", "estimate_tokens", "strip_front_matter"]

#: The version of the chunking rules (``kb.chunker_version()`` in sql/022_files/01_versions_and_limits.sql
#: holds the same literal; a test compares them). Bump both when chunk boundaries, paths or embed texts change:
#: documents chunked with another version are stale (``kb.stale_documents``).
#: 2: numbered and Chinese headings (第X章, 一、, 1.1 ...), code and diagrams embedded as descriptions.
#: 3: front-matter concept keys, aliases and backticked terms weigh in the postings.
#: 4: every piece of a table split across chunks starts with the table's header rows.
#: 5: section numbers carried by Markdown headings, chapters and appendices (A.1) continue; back matter
#:    is not nested under the last numbered section; a sentence wrapped over lines is not a heading.
#:    A table's group heading row is not cut from the row it heads.
CHUNKER_VERSION = "5"


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    section_path: list[str]
    content: str
    embed_text: str
    char_start: int
    char_end: int
    token_count: int
    content_hash: str


# --------------------------------------------------------------------------- tokens

_CJK = CJK_ONE_TOKEN_EACH
# Combining marks (not matched by \w in Python) so that e.g. Hindi or Thai words stay words.
_MARKS = "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0900-\u0dff\u0e00-\u0eff"
_WORD_CHAR = rf"(?:[^\W_{_CJK}]|[{_MARKS}])"
# One match == one estimated token: a CJK char, up to 4 word characters, or any other non-space.
_TOKEN_RE = re.compile(rf"[{_CJK}]|{_WORD_CHAR}{{1,4}}|\S")
_ASCII_TOKEN_RE = re.compile(r"[A-Za-z0-9]{1,4}|[^\sA-Za-z0-9]")  # same rule, faster on ASCII


def estimate_tokens(text: str) -> int:
    """Estimated subword tokens of ``text`` (see the module docstring for the rule)."""
    if not text:
        return 0
    if text.isascii():
        return _ASCII_TOKEN_RE.subn("", text)[1]
    return _TOKEN_RE.subn("", text)[1]


# --------------------------------------------------------------------- front matter


# A line of a YAML block mapping that opens a key: a plain key (not starting with a YAML
# indicator) or a quoted one, then ':' at the end of the line or before a space.
_YAML_KEY_LINE_RE = re.compile(r"""^(?:[^\s#:\-?,\[\]{}&*!|>'"%@`][^:\n]*|"[^"\n]*"|'[^'\n]*')[ \t]*:(?:[ \t]|$)""")


def _is_front_matter(lines: list[str]) -> bool:
    """True when ``lines`` (between the ``---`` lines) are empty, comments, or a YAML mapping's shape."""
    seen_key = False
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if _YAML_KEY_LINE_RE.match(line):
            seen_key = True
        elif not seen_key or not (line[0] in " \t" or stripped == "-" or line.startswith("- ")):
            return False
    return True


def strip_front_matter(body: str) -> tuple[str, int]:
    """Remove a leading YAML front matter block (``---`` ... ``---`` or ``...``).

    Returns ``(rest, offset)`` with ``rest == body[offset:]``; ``(body, 0)`` when there is
    no complete front matter block, or when what lies between the two lines is not front
    matter (see the module docstring: it is then text).  A leading BOM and ``\\r\\n`` line
    ends are accepted.
    """
    start = 1 if body.startswith("\ufeff") else 0
    first_nl = body.find("\n", start)
    if first_nl < 0 or body[start:first_nl].rstrip() != "---":
        return body, 0
    pos = first_nl + 1
    n = len(body)
    inner: list[str] = []
    while pos < n:
        nl = body.find("\n", pos)
        line_end = n if nl < 0 else nl
        line = body[pos:line_end].rstrip("\r")
        if line.rstrip() in ("---", "..."):
            if not _is_front_matter(inner):
                return body, 0
            rest = n if nl < 0 else nl + 1
            return body[rest:], rest
        inner.append(line)
        if nl < 0:
            break
        pos = nl + 1
    return body, 0


# -------------------------------------------------------------------- block parsing

_FENCE_RE = re.compile(r"^( *)(`{3,}|~{3,})(.*)$")
_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_ATX_CLOSE_RE = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_RE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LIST_RE = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])(?:[ \t]+\S|[ \t]*$)")
_QUOTE_RE = re.compile(r"^ {0,3}>")
_TABLE_DELIM_RE = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


# ---------------------------------------------------------------- numbered headings
#
# Documents written without Markdown headings carry their structure in numbering at the start of
# a line: 第一章 / 第一节 / 第一条 / 第一款 (and 第一编), 一、, （一）, 1. / 1.1 / 1.1.1, (1) or 1),
# roman numerals I. II. ... Such a line is a heading when it starts a line (outside code, lists
# and tables) and looks like one:
#
# * "titled": the text after the marker is short (at most HEADING_MAX_TOKENS estimated tokens),
#   not empty, and does not end like a sentence or a clause (。！？；，、：.!?;:,) -- the whole line
#   is the heading (``二、请假规定``, ``1.2 Scope``);
# * otherwise only the Chinese legal markers (第X编/章/节/条/款) are headings, with the marker alone
#   as the heading text (``第五条``) and the line kept as the start of the article's text;
# * kinds that are also list markers (1., (1), 1), roman numerals) are not headings when the next
#   or previous non-blank line carries the same kind of marker (a list), or when the next line is
#   indented (a list item's continuation);
# * numbers must follow on: a kind's number is 1 or the previous heading's of that kind plus one
#   (1.2 after 1.1 or 1.1.x, 1.2.1 after 1.2, 2 after 1.x), so that "3.5 kg" or "2. Pour the
#   milk." in running text is not a heading. The Chinese legal markers are not checked. A first
#   chapter may be 0 ("0. Preface"). A line standing alone (blank lines around it) may skip
#   numbers within its section (1.2 as the first under "1.", 5.5 after 5.1), as hand-numbered
#   documents do. The numbers already in force count whoever set them: a
#   Markdown heading that starts with a number ("# 2 Structure", "## 1.1. Version"), a
#   "Chapter 3" line or an appendix ("Appendix A", "附录A": A.1 follows) sets them too;
# * a line that runs on into a next line starting in lower case is a sentence wrapped over lines
#   ("I. Preserve the section Entitled ... and add" / "to it an item ..."), not a heading;
# * dotted numbers (1.2, A.1) may end with a question ("1.2. What is this spec?");
# * "Chapter N", "Appendix A", "附录A" head when they start a paragraph, alone on their line or
#   followed by a title.
#
# Levels: a numbered heading nests under the Markdown heading in force. Among numbered headings
# a kind seen again returns to its level (closing everything under it); a new kind nests under
# the current one, except that kinds which rank below it by the usual order
# (编 > 章 > 节 > 条 > 款 > I. > 一、 > （一） > 1. > 1.1 > 1.1.1 > (1)) are closed first. Numbers
# nest by their prefixes across Markdown and numbered headings: 1.2 closes "## 1.1" and stays under
# "# 1", "### 3.1.1" stays under a numbered line "3.1". Back matter (References, Bibliography,
# Acknowledgements, Appendix, 参考文献, 致谢, 附录) closes every numbered heading: it is not the
# last section's subsection.

#: Longest text after a marker that can make a line a titled heading (estimated tokens).
HEADING_MAX_TOKENS = 24

_ZH_NUMERALS = "零〇一二两三四五六七八九十百千"
_ZH_DIGIT_VALUES = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_ZH_UNIT_VALUES = {"十": 10, "百": 100, "千": 1000}
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10}
_SEP = r"[ \t\u3000]"

# not a reference in running text: "第三条规定的", "第二章中", "第五条至第八条"
_LEGAL_RE = re.compile(
    rf"^ {{0,3}}(第([{_ZH_NUMERALS}\d]{{1,6}})([编章节条款]))(?![的规所中之和至或及与第])(?:{_SEP}|[:：、.．]|(?=\S)|$)"
)
_ROMAN_RE = re.compile(rf"^ {{0,3}}((X{{0,3}}(?:IX|IV|V?I{{0,3}}))[.．、])(?={_SEP})")
_ZH_ITEM_RE = re.compile(rf"^ {{0,3}}(([{_ZH_NUMERALS}]{{1,4}})[、．])")
_ZH_PAREN_RE = re.compile(rf"^ {{0,3}}([（(]([{_ZH_NUMERALS}]{{1,4}})[)）])")
_DOTTED_RE = re.compile(
    rf"^ {{0,3}}(((?:\d{{1,2}}|[A-Z])(?:[.．]\d{{1,2}}){{1,4}})(?:[.．、](?!\d)|(?={_SEP}))"
    rf"|(\d{{1,2}})[.．、](?![\d.．]))"
)
#: "Chapter 3", "Appendix A", "附录A" (kind "chapter"): the number its sections' numbers start with.
_CHAPTER_RE = re.compile(
    rf"^ {{0,3}}((?:Chapter|CHAPTER|Appendix|APPENDIX|附录|附錄){_SEP}*(\d{{1,2}}|[A-Z])(?![A-Za-z0-9])[:：.．]?)"
    rf"(?={_SEP}|$|[{HAN_UNIFIED}])"
)
_PAGE_END_RE = re.compile(r"\s\d{1,4}$")
#: The section number a Markdown heading starts with ("2 Structure", "1.1. Version", "A.2 Syntax").
_HEADING_NUMBER_RE = re.compile(rf"^(((?:\d{{1,2}}|[A-Z](?=[.．]\d))(?:[.．]\d{{1,2}}){{0,4}})[.．]?)(?:{_SEP}|$)")
#: Back matter: a heading of the document, never a subsection of its last numbered section.
_BACK_MATTER_RE = re.compile(
    r"^(?:references|bibliography|acknowledge?ments?|appendix\b.*|appendices|annex\b.*|参考文献|致\s*谢|附\s*[录錄].*)$",
    re.IGNORECASE,
)
_PAREN_NUM_RE = re.compile(r"^ {0,3}([（(](\d{1,2})[)）]|(\d{1,2})[)）])")
#: Characters a numbered heading can start with (after up to three spaces): the fast path.
_NUMBERED_FIRST_CHARS = frozenset("第附" + _ZH_NUMERALS + "（(0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
#: Natural rank of each kind (smaller: higher up); dotted headings add their depth.
_RANKS = {
    "chapter": 10,
    "编": 10,
    "章": 11,
    "节": 12,
    "条": 13,
    "款": 14,
    "roman": 20,
    "zh_item": 21,
    "zh_paren": 22,
    "dotted": 30,
}
_RANK_PAREN_NUM = 40
_LIST_LIKE = ("dotted:1", "paren_num", "roman")
_LEGAL_KINDS = ("编", "章", "节", "条", "款")
_CLAUSE_END = frozenset("。！？；，、：.!?;:,…")


def _zh_number(text: str) -> int:
    """The value of a Chinese (or Arabic) numeral: 一 1, 十二 12, 二十 20, 一百零五 105, 12 12."""
    if text.isdigit():
        return int(text)
    total = current = 0
    previous_digit = False
    for ch in text:
        if ch in _ZH_DIGIT_VALUES:
            value = _ZH_DIGIT_VALUES[ch]
            current = current * 10 + value if previous_digit else value
            previous_digit = True
        else:
            total += (current or 1) * _ZH_UNIT_VALUES[ch]
            current, previous_digit = 0, False
    return total + current


def _roman_number(text: str) -> int:
    values = [_ROMAN_VALUES[c] for c in text]
    return sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))


def _part(text: str) -> int | str:
    """A part of a section number: 12 as a number, an appendix letter (A.1) as itself."""
    return int(text) if text.isdigit() else text


def _after(part: int | str) -> int | str:
    return part + 1 if isinstance(part, int) else chr(ord(part) + 1)


class _Marker(NamedTuple):
    kind: str  # "chapter" "编" "章" "节" "条" "款" "roman" "zh_item" "zh_paren" "dotted:<depth>" "paren_num"
    rank: int
    number: tuple[int | str, ...]
    end: int  # index in the line just after the marker
    label: str  # the marker as the heading shows it when the line is not a titled heading


def _marker(line: str) -> _Marker | None:
    """The numbering marker that starts ``line``, if any (no judgement yet of whether it heads)."""
    if not line or line.lstrip(" ")[:1] not in _NUMBERED_FIRST_CHARS:
        return None
    m = _LEGAL_RE.match(line)
    if m:
        kind = m.group(3)
        return _Marker(kind, _RANKS[kind], (_zh_number(m.group(2)),), m.end(1), m.group(1))
    m = _CHAPTER_RE.match(line)
    if m:
        return _Marker("chapter", _RANKS["chapter"], (_part(m.group(2)),), m.end(1), m.group(1))
    m = _DOTTED_RE.match(line)
    if m:
        parts = tuple(_part(p) for p in re.split("[.．]", m.group(2) or m.group(3)))
        return _Marker(f"dotted:{len(parts)}", _RANKS["dotted"] + len(parts), parts, m.end(1), m.group(1))
    m = _ZH_ITEM_RE.match(line)
    if m:
        return _Marker("zh_item", _RANKS["zh_item"], (_zh_number(m.group(2)),), m.end(1), m.group(1))
    m = _ZH_PAREN_RE.match(line)
    if m:
        return _Marker("zh_paren", _RANKS["zh_paren"], (_zh_number(m.group(2)),), m.end(1), m.group(1))
    m = _PAREN_NUM_RE.match(line)
    if m:
        number = int(m.group(2) or m.group(3))
        return _Marker("paren_num", _RANK_PAREN_NUM, (number,), m.end(1), m.group(1))
    m = _ROMAN_RE.match(line)
    if m and m.group(2):
        return _Marker("roman", _RANKS["roman"], (_roman_number(m.group(2)),), m.end(1), m.group(1))
    return None


class _Numbering:
    """The numbers of the numbered headings accepted so far (for the follow-on rule)."""

    def __init__(self) -> None:
        self.dotted: tuple[int | str, ...] = ()
        self.last: dict[str, int | str] = {}

    def follows(self, marker: _Marker, alone: bool = False) -> bool:
        p = marker.number
        if marker.kind == "chapter":
            return True
        if marker.kind in _LEGAL_KINDS:
            return p[0] >= 1
        if marker.kind.startswith("dotted:"):
            last, n = self.dotted, len(p)
            if p[-1] == 1 or p == (0,):  # a restart: "0. Preface", "1. Build Dependencies"
                return not last or p[:-1] == last[: n - 1]
            if n <= len(last) and p[:-1] == last[: n - 1] and p[-1] == _after(last[n - 1]):
                return True
            # a line standing alone may skip numbers within its section: 1.2 first under "1.", 5.5 after 5.1
            return (
                alone
                and n >= 2
                and p[:-1] == last[: n - 1]
                and (len(last) == n - 1 or isinstance(last[n - 1], int) and p[-1] > last[n - 1])
            )
        return p[0] == 1 or p[0] == self.last.get(marker.kind, -1) + 1

    def accept(self, marker: _Marker) -> None:
        if marker.kind.startswith("dotted:") or marker.kind == "chapter":
            self.dotted = marker.number
        else:
            self.last[marker.kind] = marker.number[0]

    def carried(self, heading: str) -> tuple[int | str, ...]:
        """A Markdown heading that starts with a section number ("2 Structure", "Appendix A") sets
        the numbers in force: 2.1 follows it. Returns that number (or ())."""
        m = _CHAPTER_RE.match(heading) or _HEADING_NUMBER_RE.match(heading)
        if m is None:
            return ()
        self.dotted = tuple(_part(p) for p in re.split("[.．]", m.group(2)))
        return self.dotted


def _titled(rest: str) -> bool:
    rest = rest.strip(" \t\u3000")
    return (
        bool(rest) and rest[-1] not in _CLAUSE_END and "。" not in rest and estimate_tokens(rest) <= HEADING_MAX_TOKENS
    )


def _next_nonblank(lines: list[str], i: int, step: int) -> str | None:
    j = i + step
    while 0 <= j < len(lines):
        if not _is_blank(lines[j]):
            return lines[j]
        j += step
    return None


def _numbered_heading(lines: list[str], i: int, numbering: _Numbering) -> tuple[_Marker, str, bool] | None:
    """``(marker, heading text, titled)`` when line ``i`` is a numbered heading (see above)."""
    line = lines[i]
    marker = _marker(line)
    if marker is None:
        return None
    alone = (i == 0 or _is_blank(lines[i - 1])) and (i + 1 == len(lines) or _is_blank(lines[i + 1]))
    if not numbering.follows(marker, alone):
        return None
    rest = line[marker.end :]
    if marker.kind.startswith("dotted:") and rest.rstrip().endswith(("?", "？")):
        rest = rest.rstrip()[:-1]  # a question is a title too: "1.2. What is this spec?"
    titled = _titled(rest)
    if marker.kind == "chapter":
        if i > 0 and not _is_blank(lines[i - 1]) or not (titled or is_blank(rest)) or _PAGE_END_RE.search(rest):
            return None  # "Chapter 3" within a paragraph is a reference; "Appendix A: Copying 26" a running header
        titled = True
    elif not titled and marker.kind not in _LEGAL_KINDS:
        return None
    if titled and i + 1 < len(lines) and lines[i + 1].lstrip()[:1].islower() and marker.kind not in _LEGAL_KINDS:
        return None  # a sentence wrapped over lines
    if marker.kind in _LIST_LIKE:
        for neighbour in (_next_nonblank(lines, i, 1), _next_nonblank(lines, i, -1)):
            other = _marker(neighbour) if neighbour is not None else None
            if other is not None and other.kind == marker.kind and _indent(neighbour) == _indent(line):
                return None
        if i + 1 < len(lines) and not _is_blank(lines[i + 1]) and _indent(lines[i + 1]) >= 2:
            return None
    text = " ".join(line.split()) if titled else marker.label
    return marker, text, titled


class _Block(NamedTuple):
    """One block of the parsed body. ``start:end`` is its span of the normalised text, trimmed
    of surrounding whitespace; a heading also has its ``level`` (1-6) and ``text`` (whitespace
    collapsed, closing ``#`` removed)."""

    kind: str  # "heading" | "para" | "list" | "table" | "code" | "quote"
    start: int
    end: int
    level: int = 0
    text: str = ""
    marker: str = ""  # a numbered heading's kind (see _NUMBERED); "" for a Markdown heading
    number: tuple = ()  # a heading's section number (1, 2) or ("A", 1), () when it has none


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _is_blank(line: str) -> bool:
    return is_blank(line)


def _fence_open(line: str) -> tuple[str, int] | None:
    m = _FENCE_RE.match(line)
    if not m:
        return None
    fence = m.group(2)
    if fence[0] == "`" and "`" in m.group(3):
        return None  # inline code such as ```x```, not a fence
    return fence[0], len(fence)


def _fence_closes(line: str, char: str, length: int) -> bool:
    s = line.strip()
    return len(s) >= length and s == char * len(s)


def _table_start(lines: list[str], i: int) -> bool:
    line = lines[i]
    if "|" not in line:
        return False
    if line.lstrip().startswith("|"):
        return True
    if i + 1 < len(lines):
        nxt = lines[i + 1]
        return "|" in nxt and len(nxt) < 4096 and _TABLE_DELIM_RE.match(nxt) is not None
    return False


_BLOCK_FIRST_CHARS = frozenset("#>-*_+`~|0123456789")


def _starts_block(lines: list[str], i: int, numbering: _Numbering | None = None) -> bool:
    """True when line ``i`` starts a block that interrupts a paragraph (with ``numbering``: a
    numbered heading does too)."""
    line = lines[i]
    first = line.lstrip(" \t")[:1]
    if numbering is not None and first in _NUMBERED_FIRST_CHARS and _numbered_heading(lines, i, numbering):
        return True
    if first not in _BLOCK_FIRST_CHARS and "|" not in line:
        return False  # fast path for ordinary text lines
    if _ATX_RE.match(line) or _THEMATIC_RE.match(line) or _QUOTE_RE.match(line):
        return True
    if _fence_open(line) and _indent(line) <= 3:
        return True
    m = _LIST_RE.match(line)
    if m and _indent(line) <= 3:
        marker = m.group(2)
        if not marker[0].isdigit() or marker[:-1] == "1":
            return True
    return _table_start(lines, i)


def _parse(text: str, offset: int) -> list[_Block]:
    """Split ``text[offset:]`` into heading and content blocks (offsets into ``text``)."""
    lines = text[offset:].split("\n")
    starts: list[int] = []
    pos = offset
    for ln in lines:
        starts.append(pos)
        pos += len(ln) + 1
    n = len(lines)
    out: list[_Block] = []
    numbering = _Numbering()
    article_line = -1  # a line whose marker was just emitted as a heading; its text follows

    def span(first: int, last: int) -> tuple[int, int]:
        """The span of lines ``first..last``, trimmed of surrounding whitespace."""
        return _trim(text, starts[first], starts[last] + len(lines[last]))

    def emit(kind: str, first: int, last: int) -> None:
        s, e = span(first, last)
        if e > s:
            out.append(_Block(kind, s, e))

    def skip_fence(i: int, char: str, length: int) -> int:
        """Index of the closing fence line of a fence opened at line ``i`` (or last line)."""
        j = i + 1
        while j < n and not _fence_closes(lines[j], char, length):
            j += 1
        return min(j, n - 1)

    i = 0
    while i < n:
        line = lines[i]
        if _is_blank(line):
            i += 1
            continue
        fence = _fence_open(line)
        if fence and _indent(line) <= 3:
            j = skip_fence(i, *fence)
            emit("code", i, j)
            i = j + 1
            continue
        m = _ATX_RE.match(line)
        if m:
            htext = " ".join(_ATX_CLOSE_RE.sub("", m.group(2).strip()).split())
            number = numbering.carried(htext)
            out.append(_Block("heading", *span(i, i), level=len(m.group(1)), text=htext, number=number))
            i += 1
            continue
        if _THEMATIC_RE.match(line):
            i += 1
            continue
        numbered = _numbered_heading(lines, i, numbering) if i != article_line else None
        if numbered is not None:
            marker, htext, titled = numbered
            numbering.accept(marker)
            s, _ = span(i, i)
            number = marker.number if marker.kind == "chapter" or marker.kind.startswith("dotted:") else ()
            if titled:
                out.append(_Block("heading", *span(i, i), text=htext, marker=marker.kind, number=number))
                i += 1
            else:  # the marker heads the article; the line is its first text
                out.append(_Block("heading", s, s + len(marker.label), text=htext, marker=marker.kind, number=number))
                article_line = i
            continue
        if _QUOTE_RE.match(line):
            j = i + 1
            while j < n and not _is_blank(lines[j]) and (_QUOTE_RE.match(lines[j]) or not _starts_block(lines, j)):
                j += 1
            emit("quote", i, j - 1)
            i = j
            continue
        if _table_start(lines, i):
            j = i + 1
            while j < n and "|" in lines[j] and not _is_blank(lines[j]):
                j += 1
            emit("table", i, j - 1)
            i = j
            continue
        if _LIST_RE.match(line) and _indent(line) <= 3:
            base = _indent(line)
            j = i + 1
            last = i
            while j < n:
                cur = lines[j]
                if _is_blank(cur):
                    k = j + 1
                    while k < n and _is_blank(lines[k]):
                        k += 1
                    if k < n and (_indent(lines[k]) >= base + 2 or _LIST_RE.match(lines[k])):
                        if _indent(lines[k]) < base and _numbered_heading(lines, k, numbering):
                            break  # "4. This document" after an indented list is the next section
                        j = k
                        continue
                    break
                fence = _fence_open(cur)
                if fence:
                    if _indent(cur) <= base and not _LIST_RE.match(cur):
                        break  # a top-level fence ends the list
                    j = last = skip_fence(j, *fence)
                    j += 1
                    continue
                if _indent(cur) < base + 2 and not _LIST_RE.match(cur) and _starts_block(lines, j, numbering):
                    break
                last = j
                j += 1
            emit("list", i, last)
            i = last + 1
            continue
        # paragraph (with optional one-line setext heading)
        if i + 1 < n and _SETEXT_RE.match(lines[i + 1]) and not _is_blank(line):
            level = 1 if lines[i + 1].strip()[0] == "=" else 2
            htext = " ".join(line.split())
            number = numbering.carried(htext)
            out.append(_Block("heading", *span(i, i + 1), level=level, text=htext, number=number))
            i += 2
            continue
        j = i + 1
        while j < n and not _is_blank(lines[j]) and not _starts_block(lines, j, numbering):
            j += 1
        emit("para", i, j - 1)
        i = j
    return out


# ------------------------------------------------------------------------ splitting

_SENT_END_RE = re.compile(
    r"[。！？；]+[」』”’）)\]\"']*"
    r"|[.!?]+[)\]\"'”’」』]*(?=\s)"
)
_LIST_ITEM_START_RE = re.compile(r"\n(?=[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$))")

_Cutter = Callable[[str, int, int], list[int]]


def _cut_sentences(text: str, s: int, e: int) -> list[int]:
    return [m.end() for m in _SENT_END_RE.finditer(text, s, e)]


def _cut_lines(text: str, s: int, e: int) -> list[int]:
    out = []
    p = text.find("\n", s, e)
    while p >= 0:
        out.append(p + 1)
        p = text.find("\n", p + 1, e)
    return out


def _cut_list_items(text: str, s: int, e: int) -> list[int]:
    return [m.end() for m in _LIST_ITEM_START_RE.finditer(text, s, e)]


_TABLE_CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")


def _filled_cells(row: str) -> tuple[int, int]:
    """(cells with text, cells) of a Markdown table row."""
    cells = _TABLE_CELL_SPLIT_RE.split(row.strip())
    if cells and not cells[0].strip():
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    return sum(1 for cell in cells if cell.strip()), len(cells)


def _cut_table_rows(text: str, s: int, e: int) -> list[int]:
    """A table's row ends, except after a group heading row (one that fills at most a third of its
    cells, at least one, over a fuller row): the heading stays with the first row it heads."""
    out = []
    rows = text[s:e].split("\n")
    pos = s
    for i, row in enumerate(rows[:-1]):
        pos += len(row) + 1
        filled, cells = _filled_cells(row)
        below = _filled_cells(rows[i + 1])[0]
        if not (1 <= filled <= max(1, cells // 3) and below > filled):
            out.append(pos)
    return out


_LEVELS: dict[str, tuple[_Cutter, ...]] = {
    "para": (_cut_sentences, _cut_lines),
    "quote": (_cut_sentences, _cut_lines),
    "list": (_cut_list_items, _cut_lines, _cut_sentences),
    "table": (_cut_table_rows, _cut_lines),
    "code": (_cut_lines,),
}

_Atom = tuple[int, int, int]  # start, end, tokens


def _atomise(
    text: str, s: int, e: int, budget: int, granule: int, levels: tuple[_Cutter, ...], out: list[_Atom]
) -> None:
    """Cut ``text[s:e]`` into contiguous atoms of at most ``budget`` tokens each."""
    if not levels:
        # Hard cut: every match of _TOKEN_RE is one token; cut every ``granule`` tokens.
        count = 0
        prev = s
        for m in _TOKEN_RE.finditer(text, s, e):
            if count == granule:
                out.append((prev, m.start(), count))
                prev = m.start()
                count = 0
            count += 1
        if e > prev:
            out.append((prev, e, count))
        return
    cuts = levels[0](text, s, e)
    if not cuts or cuts == [e]:
        _atomise(text, s, e, budget, granule, levels[1:], out)
        return
    prev = s
    for cut in [*cuts, e]:
        if cut <= prev:
            continue
        tokens = estimate_tokens(text[prev:cut])
        if tokens <= budget:
            out.append((prev, cut, tokens))
        else:
            _atomise(text, prev, cut, budget, granule, levels[1:], out)
        prev = cut


def _pack(atoms: list[_Atom], budget: int, overlap: int) -> list[_Atom]:
    """Greedy packing of atoms into spans of at most ``budget`` tokens, overlapping by whole atoms."""
    pieces: list[_Atom] = []
    n = len(atoms)
    i = 0
    while i < n:
        total = 0
        j = i
        while j < n and total + atoms[j][2] <= budget:
            total += atoms[j][2]
            j += 1
        if j == i:  # cannot happen (atoms fit the budget); guarantees progress anyway
            total, j = atoms[i][2], i + 1
        pieces.append((atoms[i][0], atoms[j - 1][1], total))
        if j >= n:
            break
        k, ov = j, 0
        while k - 1 > i and ov + atoms[k - 1][2] <= overlap:
            k -= 1
            ov += atoms[k][2]
        while k < j and ov + atoms[j][2] > budget:
            ov -= atoms[k][2]
            k += 1
        i = k
    return pieces


def _trim(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _trim_blank(text: str, s: int, e: int) -> tuple[int, int]:
    """``s:e`` without blank characters (:data:`pgkb_plpy.vocabulary.BLANK`) at either end."""
    while s < e and is_blank(text[s]):
        s += 1
    while e > s and is_blank(text[e - 1]):
        e -= 1
    return s, e


# ---------------------------------------------------------------- code and diagrams
#
# A code block or a Mermaid diagram stays in the chunk's content as written, but what is embedded
# (``embed_text``) is a short description: for code its language, length and first lines; for a
# diagram its type and the labels of its nodes and edges. Raw code pulls a passage's vector
# towards "code" whatever it does, and a diagram's syntax towards nothing. The BM25 terms are
# still those of the content (identifiers in code stay findable). A description is used only
# when it is shorter (in estimated tokens) than the block, so tiny snippets are embedded as they
# are and the token budget holds.

#: First lines of a code block its description quotes.
CODE_DESCRIPTION_LINES = 3
#: Labels of a diagram its description lists at most.
DIAGRAM_DESCRIPTION_LABELS = 24

_MERMAID_TYPE_RE = re.compile(
    r"^\s*(graph|flowchart|sequenceDiagram|classDiagram|stateDiagram(?:-v2)?|erDiagram|gantt|pie|journey|"
    r"mindmap|timeline|gitGraph|quadrantChart|requirementDiagram|C4Context|sankey-beta|xychart-beta|block-beta)\b"
)
_MERMAID_LABEL_RE = re.compile(
    r"\[\[?\(?[\"']?([^\[\](){}\"'|\n]+?)[\"']?\)?\]?\]"  # A[label] A[[label]] A[(label)]
    r"|\(\(?[\"']?([^\[\](){}\"'|\n]+?)[\"']?\)?\)"  # A(label) A((label))
    r"|\{\{?[\"']?([^\[\](){}\"'|\n]+?)[\"']?\}?\}"  # A{label} A{{label}}
    r"|\|[\"']?([^|\n\"']+?)[\"']?\|"  # -->|label|
)
_MERMAID_TEXT_RE = re.compile(
    r"^\s*(?:participant|actor)\s+\S+(?:\s+as\s+(.+))?$"  # sequence participants
    r"|^\s*[^:\n]*?(?:->>|-->>|->|-->|-x|--x|-\)|--\))[^:\n]*:\s*(.+)$"  # sequence messages
    r"|^\s*title\s+(.+)$"
    r"|^\s*section\s+(.+)$",
    re.MULTILINE,
)


def _code_language(text: str, s: int, e: int) -> str:
    """The info string's first word of the fenced block ``text[s:e]`` ("" when none)."""
    first = text[s : text.find("\n", s, e) if "\n" in text[s:e] else e]
    m = _FENCE_RE.match(first)
    return (m.group(3).split() or [""])[0].lower() if m else ""


def describe_code(code: str, language: str = "") -> str:
    """A short text standing for a code block or a Mermaid diagram in what is embedded."""
    lines = code.split("\n")
    if lines and _FENCE_RE.match(lines[0]):
        lines = lines[1:]
    if lines and lines[-1].strip() and set(lines[-1].strip()) <= {"`", "~"}:
        lines = lines[:-1]
    body = [ln for ln in lines if ln.strip()]
    source = "\n".join(lines)
    diagram = _MERMAID_TYPE_RE.match(body[0]) if body else None
    if language == "mermaid" or diagram:
        kind = diagram.group(1) if diagram else "diagram"
        labels: list[str] = []
        for m in _MERMAID_LABEL_RE.finditer(source):
            labels.append(next(g for g in m.groups() if g))
        for m in _MERMAID_TEXT_RE.finditer(source):
            label = next((g for g in m.groups() if g), None)
            if label:
                labels.append(label)
        unique = list(dict.fromkeys(" ".join(label.split()) for label in labels if label.strip()))
        return f"[diagram: mermaid {kind}] " + ", ".join(unique[:DIAGRAM_DESCRIPTION_LABELS])
    head = "\n".join(ln.rstrip() for ln in body[:CODE_DESCRIPTION_LINES])
    return f"[code: {language or 'unknown language'}, {len(body)} lines]\n{head}"


def _embed_form(part: str, language: str | None) -> str:
    """What is embedded for one packed part: the part itself, or a code block's description."""
    if language is None:
        return part
    description = describe_code(part, language)
    return description if estimate_tokens(description) < estimate_tokens(part) else part


def _table_header(text: str, s: int, e: int) -> int | None:
    """Where the rows of the table ``text[s:e]`` start after its header (first line and delimiter
    row), or None when its second line is not a delimiter row."""
    first = text.find("\n", s, e)
    if first < 0:
        return None
    second = text.find("\n", first + 1, e)
    if second < 0:
        return None
    delimiter = text[first + 1 : second]
    return second + 1 if "-" in delimiter and _TABLE_DELIM_RE.match(delimiter) else None


def _within(number: tuple, outer: tuple) -> bool:
    """Whether section ``number`` lies within section ``outer`` (3.1.1 within 3.1 and 3, A.1 within A)."""
    return bool(outer) and len(number) > len(outer) and number[: len(outer)] == outer


def _marker_rank(kind: str) -> int:
    if kind.startswith("dotted:"):
        return _RANKS["dotted"] + int(kind.split(":", 1)[1])
    return _RANK_PAREN_NUM if kind == "paren_num" else _RANKS[kind]


def _open_heading(stack: list[tuple[int, str, int, str, tuple]], block: _Block, heading_text: str) -> None:
    """Open heading ``block`` on ``stack`` (the open headings, outermost first: Markdown level or 0,
    numbered kind or "", rank, text, number), closing the headings it ends (see the rules above)."""
    entry = (block.level, block.marker, block.level, heading_text, block.number)
    if not block.marker:  # Markdown: closes every heading down to the next shallower Markdown one
        if _BACK_MATTER_RE.match(block.text):
            while stack and stack[-1][4]:  # not under the last numbered section
                stack.pop()
        while (
            stack
            and not (stack[-1][0] and stack[-1][0] < block.level)
            and not (not stack[-1][0] and _within(block.number, stack[-1][4]))
        ):
            stack.pop()
        stack.append(entry)
        return
    number = block.number
    entry = (0, block.marker, _marker_rank(block.marker), heading_text, number)
    if block.marker == "chapter":  # closes every numbered heading and the back matter
        while stack and (stack[-1][4] or _BACK_MATTER_RE.match(stack[-1][3])):
            stack.pop()
        stack.append(entry)
        return
    # a number closes the Markdown headings numbered beside or below it: 1.2 closes "## 1.1";
    # a list restarting at 1. under "# 2 Structure" nests in it
    restart = len(number) == 1 and number[0] in (0, 1)
    while number and not restart and stack and stack[-1][0] and stack[-1][4] and not _within(number, stack[-1][4]):
        stack.pop()
    # the same kind under the Markdown heading in force: back to its level
    for j in range(len(stack) - 1, -1, -1):
        if stack[j][0]:
            break
        if stack[j][1] == block.marker:
            del stack[j:]
            stack.append(entry)
            return
    # a new kind: close the open numbered headings that rank below it, then nest; a list of
    # sections restarting at 0. or 1. under A.1 nests in it
    if restart and stack and not stack[-1][0] and len(stack[-1][4]) > 1:
        stack.append(entry)
        return
    while stack and not stack[-1][0] and stack[-1][2] > entry[2]:
        stack.pop()
    stack.append(entry)


# ------------------------------------------------------------------------- chunking


def _norm_key(s: str) -> str:
    # letters and digits only: "规范 Data Policy" and "规范（Data Policy）" are the same title
    return "".join(ch for ch in unicodedata.normalize("NFKC", s).casefold() if ch.isalnum())


def chunk_document(body: str, title: str | None = None, max_tokens: int = 380, overlap_tokens: int = 48) -> list[Chunk]:
    """Chunk a Markdown/plain-text document; see the module docstring for the rules."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if overlap_tokens < 0:
        raise ValueError("overlap_tokens must be >= 0")
    if is_blank(body):
        return []

    # Normalise newlines; remember where "\r\n" lost its "\r" to map offsets back.
    crlf = [m.start() for m in re.finditer("\r\n", body)]
    removed = [p - k for k, p in enumerate(crlf)]  # normalised index of each such "\n"
    text = body.replace("\r\n", "\n").replace("\r", "\n") if "\r" in body else body

    def orig_start(i: int) -> int:
        return i + bisect_right(removed, i)

    def orig_end(i: int) -> int:
        return i + bisect_left(removed, i)

    fm_end = strip_front_matter(text)[1]
    if fm_end == 0 and text.startswith("\ufeff"):
        fm_end = 1
    blocks = _parse(text, fm_end)

    title = " ".join(title.split()) if title and title.strip() else None
    first_h1 = next((b for b in blocks if b.kind == "heading" and b.level == 1), None)
    title_h1 = first_h1 if title and first_h1 and _norm_key(first_h1.text) == _norm_key(title) else None

    chunks: list[Chunk] = []
    # open headings, outermost first: (Markdown level or 0, numbered kind or "", rank, text, number);
    # the text is "" for the H1 that repeats the title
    stack: list[tuple[int, str, int, str, tuple]] = []

    def emit(path: list[str], parts: list[tuple[int, int, str | None]], s: int, e: int, head: str = "") -> None:
        content = head + "\n\n".join(text[ps:pe] for ps, pe, _ in parts)
        embedded = head + "\n\n".join(_embed_form(text[ps:pe], lang) for ps, pe, lang in parts)
        embed = " > ".join(path) + "\n\n" + embedded if path else embedded
        plain = " > ".join(path) + "\n\n" + content if path else content
        # the hash covers what is embedded and, when a code block is described, the content too
        hashed = embed if embed == plain else embed + "\x00" + content
        chunks.append(
            Chunk(
                ordinal=len(chunks),
                section_path=list(path),
                content=content,
                embed_text=embed,
                char_start=orig_start(s),
                char_end=orig_end(e),
                token_count=estimate_tokens(embed),
                content_hash=hashlib.sha256(hashed.encode("utf-8")).hexdigest(),
            )
        )

    def flush_section(section: list[_Block]) -> None:
        if not section:
            return
        path = ([title] if title else []) + [entry[3] for entry in stack if entry[3]]
        prefix = estimate_tokens(" > ".join(path))
        budget = max(max_tokens - prefix, max(1, max_tokens // 4))
        overlap = min(overlap_tokens, budget // 2)
        granule = budget if overlap == 0 else max(1, min(budget, overlap // 2))
        group: list[tuple[int, int, str | None]] = []
        group_tokens = 0

        def flush_group() -> None:
            nonlocal group, group_tokens
            if group:
                emit(path, group, group[0][0], group[-1][1])
            group, group_tokens = [], 0

        for block in section:
            s, e = block.start, block.end
            lang = _code_language(text, s, e) if block.kind == "code" else None
            tokens = estimate_tokens(text[s:e])
            if tokens <= budget:
                if group_tokens + tokens > budget:
                    flush_group()
                group.append((s, e, lang))
                group_tokens += tokens
                continue
            flush_group()
            header = _table_header(text, s, e) if block.kind == "table" else None
            if header is not None and estimate_tokens(text[s:header]) <= budget // 2:
                head = text[s:header].rstrip("\n") + "\n"
                room = budget - estimate_tokens(head)
                atoms = []
                _atomise(text, header, e, room, min(granule, room), _LEVELS["table"], atoms)
                for k, (ps, pe, _tokens) in enumerate(_pack(atoms, room, min(overlap, room // 2))):
                    ps, pe = _trim(text, ps, pe)
                    if pe > ps:
                        if k == 0:  # the header is in place: the span starts with it
                            emit(path, [(s, pe, None)], s, pe)
                        else:
                            emit(path, [(ps, pe, None)], ps, pe, head)
                continue
            atoms: list[_Atom] = []
            _atomise(text, s, e, budget, granule, _LEVELS[block.kind], atoms)
            for ps, pe, _tokens in _pack(atoms, budget, overlap):
                ps, pe = _trim(text, ps, pe)
                if pe > ps:
                    emit(path, [(ps, pe, lang)], ps, pe)
        flush_group()

    section: list[_Block] = []
    for block in blocks:
        if block.kind == "heading":
            flush_section(section)
            section = []
            _open_heading(stack, block, "" if block is title_h1 else block.text)
        else:
            section.append(block)
    flush_section(section)
    if not chunks:
        # nothing but structure: the text itself is the content (never drop a non-blank body)
        s, e = _trim_blank(text, fm_end, len(text))
        if s == e:
            s, e = _trim_blank(text, 0, len(text))
        stack.clear()
        flush_section([_Block("para", s, e)])
    return chunks
