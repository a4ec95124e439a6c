"""Query-aware snippets: a window of the passage around the densest cluster of query matches.

:func:`make_snippet` rules:

* Whitespace runs (and control characters such as NUL) collapse to one space; the window length
  is counted in code points (a CJK character counts 1), marks and ellipses not included.
* A *match* is a span of the passage that corresponds to a query term under the BM25 rules of
  :mod:`pgkb_plpy.lexical`:

  - a word whose term equals a query term: case-insensitive, after NFKC, and by Snowball stem
    (the query ``refund`` marks ``Refunds`` and ``refunded``); English stop words never match;
  - an identifier of the query (``E-4031``, ``session.ttl_seconds``) found verbatim,
    case-insensitively, not inside a longer alphanumeric run;
  - a CJK bigram (or single-character run) of the query found as a substring; overlapping matches
    merge, so the query ``打断别人`` marks ``打断别人`` once.

  One-character terms (``e`` of ``E-4031``, ``在`` of ``退款policy在30天内``) only count when the
  query is that single term: they would light up every occurrence of a common letter or particle.

* The window is the ``width`` characters that contain the most *distinct* query terms (ties: most
  matches, then earliest), centred on that cluster, and moved to word boundaries when a space is
  near. It never starts or ends inside a combining sequence or an emoji ZWJ sequence.
* Every match inside the window is wrapped in ``mark``; ``…`` is added where the passage is cut.
* Nothing matches: the first ``width`` characters (cut at a space when one is near).
* Work is bounded: only the first :data:`~pgkb_plpy.vocabulary.MAX_QUERY_CHARS` (2000) characters
  of the query and at most 64 of its identifiers and 64 of its CJK grams are searched; the
  passage is scanned a constant number of times.

The function never raises on any input (emoji, RTL text, combining marks, NUL, regex
metacharacters, SQL wildcards); on an internal error it degrades to the plain leading window.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from . import lexical
from .vocabulary import MAX_QUERY_CHARS

__all__ = ["make_snippet"]

ELLIPSIS = "…"
_SPACE_RE = re.compile(r"[\s\x00-\x1f\x7f]+")
_WORD_BOUNDARY_SLACK = 20  # how far (chars) we move a cut to reach a space
_MAX_QUERY_KEYS = 64  # identifiers / CJK grams of the query searched as substrings (bounds the work)
_ZWJ = "\u200d"
_PART_RE = re.compile(lexical.WORD_CHAR + "+")
_WORD_CHAR_RE = re.compile(lexical.WORD_CHAR)


def _collapse(text: str) -> str:
    return _SPACE_RE.sub(" ", text).strip()


def _joins_previous(ch: str) -> bool:
    """True for characters that belong to the grapheme before them."""
    return (
        ch == _ZWJ
        or unicodedata.combining(ch) != 0
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or "\ufe00" <= ch <= "\ufe0f"  # variation selectors
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # skin tone modifiers
        or "\U000e0020" <= ch <= "\U000e007f"  # tag characters (flag sequences)
    )


def _grapheme_start(text: str, i: int) -> int:
    """Move ``i`` forward until it does not split a grapheme."""
    n = len(text)
    while 0 < i < n and (_joins_previous(text[i]) or text[i - 1] == _ZWJ):
        i += 1
    return i


def _grapheme_end(text: str, j: int) -> int:
    """Move ``j`` forward until the cut does not split a grapheme (bounded)."""
    n = len(text)
    steps = 0
    while 0 < j < n and (_joins_previous(text[j]) or text[j - 1] == _ZWJ) and steps < 16:
        j += 1
        steps += 1
    return j


def _query_keys(query: str) -> tuple[set[str], list[str], list[str]]:
    """(word terms, identifiers, CJK grams) of the query."""
    terms = lexical.query_terms(query)
    only = terms[0] if len(terms) == 1 else None
    words = {t for t in terms if len(t) > 1 or t == only}
    idents = [i for i in lexical.identifiers(query) if len(i) > 1][:_MAX_QUERY_KEYS]
    grams: list[str] = []
    normalized = unicodedata.normalize("NFKC", query)
    for kind, start, end in lexical.spans(normalized):
        if kind == "cjk":
            for gram in lexical.cjk_grams(normalized[start:end]):
                if len(grams) < _MAX_QUERY_KEYS and gram not in grams and (len(gram) > 1 or gram == only):
                    grams.append(gram)
    return words, idents, grams


# Snowball English stems whose word does not start with the stem minus its last letter.
_STEM_EXCEPTIONS = {"die": "dy", "lie": "ly", "tie": "ty"}  # dying, lying, tying


def _term_prefixes(words: set[str]) -> tuple[str, ...]:
    """Prefixes a word part must start with (lowercased) to have one of ``words`` as its term.

    A Snowball stem changes at most its last letter (``accuracy`` -> ``accuraci``), apart from
    the exceptions above; so the parts of a passage that cannot match are skipped unstemmed."""
    prefixes = {w[:-1] if len(w) > 1 else w for w in words}
    prefixes.update(_STEM_EXCEPTIONS[w] for w in words if w in _STEM_EXCEPTIONS)
    return tuple(prefixes)


@functools.lru_cache(maxsize=128)
def _query_plan(query: str) -> tuple[frozenset[str], tuple[str, ...], re.Pattern | None, tuple[str, ...]]:
    """What the matching needs of the query, worked out once per query (a call's passages share
    it): its word terms, their prefixes, one pattern for its identifiers, its CJK grams."""
    words, idents, grams = _query_keys(query)
    pattern = None
    if idents:
        alternatives = "|".join(re.escape(i) for i in sorted(idents, key=len, reverse=True))
        pattern = re.compile(rf"(?<!{lexical.WORD_CHAR})(?:{alternatives})(?!{lexical.WORD_CHAR})", re.IGNORECASE)
    return frozenset(words), _term_prefixes(words), pattern, tuple(grams)


def _matches(text: str, query: str) -> list[tuple[int, int, frozenset[str]]]:
    """Merged match spans ``(start, end, keys)`` in ``text``, sorted."""
    words, prefixes, ident_pattern, grams = _query_plan(query)
    raw: list[tuple[int, int, str]] = []
    if words:
        for kind, start, end in lexical.spans(text):
            if kind != "word":
                continue
            token = text[start:end]
            norm = unicodedata.normalize("NFKC", token)
            if norm.lower() in words:
                raw.append((start, end, norm.lower()))
            if norm == token:
                for part in _PART_RE.finditer(token):
                    if not part.group(0).lower().startswith(prefixes):
                        continue
                    term = lexical.word_term(part.group(0))
                    if term is not None and term in words:
                        raw.append((start + part.start(), start + part.end(), term))
            else:  # compatibility forms: offsets of parts differ, mark the whole token
                for part in _PART_RE.findall(norm):
                    if not part.lower().startswith(prefixes):
                        continue
                    term = lexical.word_term(part)
                    if term is not None and term in words:
                        raw.append((start, end, term))
    if ident_pattern is not None:
        raw.extend((m.start(), m.end(), m.group(0).lower()) for m in ident_pattern.finditer(text))
    for gram in grams:
        pos = text.find(gram)
        while pos != -1:
            raw.append((pos, pos + len(gram), gram))
            pos = text.find(gram, pos + 1)
    raw.sort()
    merged: list[tuple[int, int, frozenset[str]]] = []
    for start, end, key in raw:
        if merged and start <= merged[-1][1]:
            m_start, m_end, keys = merged[-1]
            merged[-1] = (m_start, max(m_end, end), keys | {key})
        else:
            merged.append((start, end, frozenset({key})))
    return merged


def _best_cluster(spans: list[tuple[int, int, frozenset[str]]], width: int) -> tuple[int, int]:
    """Indices ``(i, j)`` of the span run that fits in ``width`` with the best score."""
    best = (-1, -1, 0)
    best_ij = (0, 0)
    j = 0
    counts: dict[str, int] = {}
    for i in range(len(spans)):
        if j < i:
            j = i
            counts = {}
        while j < len(spans) and (spans[j][1] - spans[i][0] <= width or j == i):
            for key in spans[j][2]:
                counts[key] = counts.get(key, 0) + 1
            j += 1
        score = (len(counts), j - i, -spans[i][0])
        if score > best:
            best = score
            best_ij = (i, j - 1)
        for key in spans[i][2]:
            counts[key] -= 1
            if counts[key] == 0:
                del counts[key]
    return best_ij


def _in_word(text: str, i: int) -> bool:
    """True when a cut at ``i`` would split a (non-CJK) word."""
    return 0 < i < len(text) and bool(_WORD_CHAR_RE.match(text[i - 1])) and bool(_WORD_CHAR_RE.match(text[i]))


def _snap_start(text: str, start: int) -> int:
    if not _in_word(text, start):
        return start
    space = text.find(" ", start, start + _WORD_BOUNDARY_SLACK)
    return space + 1 if space != -1 else start


def _snap_end(text: str, end: int) -> int:
    if not _in_word(text, end):
        return end
    space = text.rfind(" ", max(0, end - _WORD_BOUNDARY_SLACK), end)
    return space if space > 0 else end


def _render(text: str, start: int, end: int, spans, mark: tuple[str, str]) -> str:
    open_mark, close_mark = mark
    out: list[str] = [ELLIPSIS] if start > 0 else []
    pos = start
    for s, e, _ in spans:
        s, e = max(s, start), min(e, end)
        if s >= e or s < pos:
            continue
        out.append(text[pos:s])
        out.append(open_mark + text[s:e] + close_mark)
        pos = e
    out.append(text[pos:end])
    if end < len(text):
        out.append(ELLIPSIS)
    return "".join(out).strip()


def _leading(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    end = _grapheme_end(text, _snap_end(text, width))
    return text[:end].rstrip() + ELLIPSIS


def make_snippet(content: str, query: str, width: int = 200, mark: tuple[str, str] = ("«", "»")) -> str:
    """A window of about ``width`` characters of ``content`` around the query matches, marked."""
    try:
        text = _collapse(content if isinstance(content, str) else str(content or ""))
        width = max(int(width), 1)
        if not isinstance(mark, (tuple, list)) or len(mark) != 2:
            mark = ("«", "»")
        mark = (str(mark[0]), str(mark[1]))
        if isinstance(query, str) and query.strip():
            spans = _matches(text, query[:MAX_QUERY_CHARS])
        else:
            spans = []
        if not spans:
            return _leading(text, width)
        i, j = _best_cluster(spans, width)
        first, last = spans[i][0], spans[j][1]
        if last - first >= width:  # one match longer than the window: show its beginning
            start, end = first, first + width
        else:
            start = max(0, first - (width - (last - first)) // 2)
            end = min(len(text), start + width)
            start = max(0, end - width)
            if start > 0:
                start = min(_snap_start(text, start), first)
            if end < len(text):
                end = max(_snap_end(text, end), last)
        start = _grapheme_start(text, start)
        end = _grapheme_end(text, end)
        return _render(text, start, end, spans, mark)
    except Exception:  # noqa: BLE001 - a snippet must never break retrieval
        try:
            return _leading(_collapse(str(content)), max(int(width), 1))
        except Exception:  # noqa: BLE001
            return ""
