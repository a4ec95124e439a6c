"""The BM25 term representation of pgkb: one function for documents, one for queries, same rules.

Every chunk is turned into ``{term: term frequency}`` at ingest (:func:`document_terms`) and every
query into its distinct terms (:func:`query_terms`). Both run the same tokenizer, so a query term
and a document term are equal exactly when they came from the same surface form after the rules
below. Changing any rule changes the index: bump :data:`TERMS_VERSION` and re-index.

Rules, applied in this order:

1. **Normalise.** Every invisible format character (Unicode category ``Cf``: zero-width space
   U+200B, ZWNJ/ZWJ U+200C/U+200D, word joiner U+2060, U+FEFF, soft hyphen U+00AD, the bidi marks
   and embeddings U+200E/U+200F, U+202A-U+202E, U+2066-U+2069, tag characters, ...) is removed,
   so ``ref\\u200bund`` is ``refund`` and ``E-40\\u200b31`` is ``E-4031``: text that looks the same
   gives the same terms, and a writer cannot hide a word from BM25 with it (:func:`strip_format`).
   Then Unicode NFKC (full-width ``Ｅ－４０３１`` becomes ``E-4031``). English contractions
   are expanded so that negation survives: ``n't`` becomes `` not`` (``can't`` -> ``can not``,
   ``won't`` -> ``will not``); the clitics ``'s 're 've 'll 'd 'm`` are dropped.
2. **Split by script.** The text is scanned once, left to right, into maximal runs of

   * CJK characters (:data:`pgkb_plpy.vocabulary.CJK`: Han ideographs incl. extensions and
     compatibility ideographs, Hiragana, Katakana, Hangul syllables and jamo, plus 々 〆 〇), and
   * *word tokens*: letters/digits of any other script, optionally joined by a single connector
     ``- _ . : /`` between two alphanumerics (``E-4031``, ``session.ttl_seconds``, ``v2.3.1``).

   Everything else (whitespace, punctuation, symbols, emoji, controls) separates tokens; format
   characters are gone by then, so they separate nothing. A script
   change is a boundary too, so ``退款policy在30天内`` gives ``退款 | policy | 在 | 30 | 天内``.
3. **CJK runs** become overlapping character bigrams (``如何打断`` -> ``如何 何打 打断``); a run of one
   character becomes that character. No dictionary segmentation, no CJK stop words.
4. **Word tokens** are lowercased and split into their alphanumeric parts (``E-4031`` -> ``e``,
   ``4031``). Each part is dropped if it is an English stop word (:data:`STOP_WORDS`, about 120
   words; negations such as ``not``, ``no``, ``nor``, ``never`` are *kept*) and otherwise stemmed
   with the Snowball English stemmer when it is purely alphabetic Latin (``refunds``, ``refunded``
   -> ``refund``). Parts with digits, non-Latin letters or mixed case (``iPhone``, ``getUserName``,
   random base64) are only lowercased: they are names, not English words, and skipping them
   keeps the stemmer off pathological input.
5. **Identifiers** (see :func:`is_identifier`: word tokens with a digit that are not plain
   numbers, tokens with an internal connector, except ordinary hyphenated words such as
   ``well-known`` and dotted abbreviations such as ``e.g.``, and camelCase words) are *also*
   emitted whole, lowercased and unstemmed, before their parts: ``E-4031`` -> ``e-4031 e 4031``.
   The whole term is rare, so an exact identifier query gets a high IDF. When the whole equals
   the only part (``RFC7231`` -> ``rfc7231``) it is emitted once.
6. **Length limit.** Terms longer than :data:`MAX_TERM_CHARS` (64) characters are ignored; the
   parts of an over-long token still count. Every step is a single linear scan and the per-token
   work is memoised, so a 1 MB line without spaces takes well under a second and produces no
   giant term.

Non-CJK scripts without spaces (Thai, Lao, ...) are not segmented; their long runs fall under rule 6.

Weights are not a term rule: ingest (:func:`pgkb_plpy.ingest.chunk_rows`) counts the
:func:`key_terms` of :func:`inline_code` spans and of a document's ``concept_keys`` more than once
in a chunk's term frequencies; the terms themselves are the ones above.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

import snowballstemmer

from .vocabulary import CJK, lines_outside_fences

__all__ = [
    "MAX_TERM_CHARS",
    "STOP_WORDS",
    "TERMS_VERSION",
    "TermsVersionError",
    "WORD_CHAR",
    "check_terms_version",
    "cjk_grams",
    "document_terms",
    "identifiers",
    "inline_code",
    "is_cjk",
    "is_identifier",
    "key_terms",
    "normalize",
    "query_terms",
    "spans",
    "stem",
    "strip_format",
    "word_term",
]

#: Version of the rules above. Postings built with another version must be rebuilt; the database
#: records the version its postings were built with (setting ``lexical_terms_version``).
#: 1: the rules as first shipped; 2: format characters (category Cf) removed in rule 1.
TERMS_VERSION = 2

#: Terms longer than this (in characters) are ignored.
MAX_TERM_CHARS = 64

#: English stop words dropped from word tokens. Negations (not, no, nor, never) are deliberately
#: absent: "refunds are not allowed" and "refunds are allowed" must not look the same.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just me
    more most my myself of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why
    will with would you your yours yourself yourselves shall may might must also s t
    """.split()
)

_CONNECTORS = "-_.:/"
_WORD_CHAR = rf"[^\W_{CJK}]"  # a letter or digit that is not CJK
#: Regex class for one word-token character (a letter or digit of a non-CJK script).
WORD_CHAR = _WORD_CHAR

_CJK_RE = re.compile(rf"[{CJK}]")
_TOKEN_RE = re.compile(rf"(?P<cjk>[{CJK}]+)|(?P<word>{_WORD_CHAR}+(?:[{re.escape(_CONNECTORS)}]{_WORD_CHAR}+)*)")
_PART_RE = re.compile(rf"{_WORD_CHAR}+")
_SEPARATOR_RE = re.compile(rf"[{re.escape(_CONNECTORS)}]")
_CAMEL_RE = re.compile(r"[a-z][A-Z]")
_LATIN_MAX = "\u024f"  # end of Latin Extended-B: words up to here are stemmed

# Contractions: (pattern, replacement), applied only when the text contains an apostrophe.
_APOSTROPHES = ("'", "\u2019")
_CONTRACTIONS = [
    (re.compile(r"\b(can)['\u2019]t\b", re.IGNORECASE), r"\1 not"),
    (re.compile(r"\b(w)on['\u2019]t\b", re.IGNORECASE), r"\1ill not"),
    (re.compile(r"\b(sha)n['\u2019]t\b", re.IGNORECASE), r"\1ll not"),
    (re.compile(r"([^\W\d_])n['\u2019]t\b", re.IGNORECASE), r"\1 not"),
    (re.compile(r"(?<=[^\W\d_])['\u2019](?:s|re|ve|ll|d|m)\b", re.IGNORECASE), ""),
]

_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball English stem of a lowercase word (memoised)."""
    return _STEMMER.stemWord(word)


def _format_class() -> str:
    """Regex class of every format character (category Cf) of this Python's Unicode database.

    Cf characters live in planes 0, 1 and 14 only (planes 2-3 are ideographs, 15-16 private use,
    the rest unassigned), so only those are scanned: a few milliseconds once per backend, not
    the 60 ms of all 1.1 million code points."""
    planes = itertools.chain(range(0x20000), range(0xE0000, 0xE1000))
    codes = [c for c in planes if unicodedata.category(chr(c)) == "Cf"]
    ranges: list[list[int]] = []
    for c in codes:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return "[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]"


_FORMAT_RE = re.compile(_format_class())


def strip_format(text: str) -> str:
    """``text`` without its invisible format characters (Unicode category Cf; rule 1)."""
    return _FORMAT_RE.sub("", text) if text else ""


def normalize(text: str) -> str:
    """Format characters removed, NFKC and contraction expansion (rule 1); case is preserved so
    identifiers can be detected. The removal comes first, so a combining mark separated from its
    base by a format character still composes with it; NFKC produces no format character."""
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", strip_format(text))
    if any(a in text for a in _APOSTROPHES):
        for pattern, replacement in _CONTRACTIONS:
            text = pattern.sub(replacement, text)
    return text


class TermsVersionError(RuntimeError):
    """The postings were built with other term rules than this module's :data:`TERMS_VERSION`.

    ``hint`` says how to rebuild them."""

    def __init__(self, stored: object):
        super().__init__(
            f"pgkb: the lexical postings were built with terms version {stored}, "
            f"but this pgkb_plpy produces terms version {TERMS_VERSION}"
        )
        self.stored = stored
        self.hint = (
            "run pgkb migrate, which rebuilds them (SELECT kb.rebuild_lexical_terms(), as the owner: every "
            "document is chunked and indexed again, only chunks whose text changed are re-embedded); until "
            "then query terms and postings would not match (docs/RETRIEVAL.md, term rules)"
        )


def check_terms_version(stored: object) -> None:
    """Raise :class:`TermsVersionError` unless ``stored`` -- the setting ``lexical_terms_version``
    as its JSON gives it: a number, or text when a session setting supplies it -- is
    :data:`TERMS_VERSION`."""
    if _as_version(stored) != TERMS_VERSION:
        raise TermsVersionError(stored)


def _as_version(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def is_cjk(ch: str) -> bool:
    """True when the single character ``ch`` belongs to a CJK run (rule 2)."""
    return _CJK_RE.match(ch) is not None


def is_identifier(token: str) -> bool:
    """Whether a word token (NFKC, original case) counts as an identifier (rule 5).

    * contains a digit and is not a plain number: ``E-4031``, ``v2.3.1``, ``RFC7231``, ``3.5``
      (but not ``2024``);
    * contains a connector ``- _ . : /`` between alphanumerics: ``session.ttl_seconds``,
      ``API_KEY``, ``kb.documents`` -- except words joined only by hyphens with no ALLCAPS part
      (``well-known``, ``follow-up``) and runs of single letters (``e.g``, ``U.S``);
    * camelCase: a lowercase letter directly followed by an uppercase one (``getUserName``).
    """
    if not token or len(token) > MAX_TERM_CHARS:
        return False
    if any(c.isdigit() for c in token):
        return not token.isdigit()
    if _SEPARATOR_RE.search(token):
        parts = _PART_RE.findall(token)
        if all(len(p) == 1 for p in parts):
            return False
        if set(_SEPARATOR_RE.findall(token)) == {"-"}:
            return any(len(p) > 1 and p.isupper() for p in parts)
        return True
    return _CAMEL_RE.search(token) is not None


def word_term(part: str) -> str | None:
    """The term for one alphanumeric part in its original case (rule 4), or None when dropped."""
    if not part or len(part) > MAX_TERM_CHARS:
        return None
    lower = part.lower()
    if lower in STOP_WORDS:
        return None
    if lower.isalpha() and max(lower) <= _LATIN_MAX and (part.islower() or part.isupper() or part.istitle()):
        return stem(lower)
    return lower


def cjk_grams(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run; a one-character run is its own unigram (rule 3)."""
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


@functools.lru_cache(maxsize=131072)
def _word_token_terms(token: str) -> tuple[str, ...]:
    """Terms of one word token (rules 4-6), memoised: real text repeats its words."""
    whole = token.lower() if is_identifier(token) else None
    if _SEPARATOR_RE.search(token) is None:
        term = word_term(token)
        if whole is None or whole == term:
            return () if term is None else (term,)
        return (whole,) if term is None else (whole, term)
    terms = [] if whole is None else [whole]
    for part in _PART_RE.findall(token):
        term = word_term(part)
        if term is not None:
            terms.append(term)
    return tuple(terms)


def _terms(text: str) -> Iterator[str]:
    for match in _TOKEN_RE.finditer(normalize(text)):
        run = match.group("cjk")
        if run is not None:
            yield from cjk_grams(run)
        elif len(match.group("word")) <= 4 * MAX_TERM_CHARS:
            yield from _word_token_terms(match.group("word"))
        else:  # very long tokens (a whole line of base64, say): not worth a cache slot
            yield from _word_token_terms.__wrapped__(match.group("word"))


def spans(text: str) -> Iterator[tuple[str, int, int]]:
    """``(kind, start, end)`` of each CJK run (``"cjk"``) and word token (``"word"``) of rule 2.

    Runs on ``text`` exactly as given (no format-character removal, no NFKC, no contraction
    expansion), so offsets index the caller's string; used for highlighting and for query
    analysis. A format character therefore still splits a span here (``ref\\u200bund`` gives
    ``ref`` and ``und``) although the terms of rule 1 remove it: a caller that wants the terms'
    tokens and needs no offsets runs :func:`strip_format` first.
    """
    for match in _TOKEN_RE.finditer(text):
        yield ("cjk" if match.group("cjk") is not None else "word", match.start(), match.end())


def document_terms(text: str) -> dict[str, int]:
    """Term -> term frequency of a chunk, for the postings table."""
    if not text:
        return {}
    return dict(Counter(_terms(text)))


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query, in order of first appearance."""
    if not text:
        return []
    return list(dict.fromkeys(_terms(text)))


def identifiers(text: str) -> list[str]:
    """Identifier-like tokens as they appear (after NFKC, case kept), distinct, in order."""
    if not text:
        return []
    found: dict[str, None] = {}
    for match in _TOKEN_RE.finditer(normalize(text)):
        token = match.group("word")
        if token is not None and is_identifier(token):
            found.setdefault(token, None)
    return list(found)


# a code span: a run of n backticks, text without a line break, the same run (CommonMark)
_CODE_SPAN_RE = re.compile(r"(?<!`)(`+)(?!`)([^\n]+?)(?<!`)\1(?!`)")
#: Longest code span taken as a term to weigh (a longer one is a command or code, not a name).
MAX_CODE_SPAN_CHARS = 100


def key_terms(text: str) -> dict[str, int]:
    """Term -> frequency of the terms that name something in ``text``, the ones ingest weighs
    (a backticked span, a concept key): an identifier's whole term (``session.ttl_seconds``,
    not its parts ``session``, ``ttl``, ``second``), a plain word's term, a CJK run's bigrams."""
    found: Counter[str] = Counter()
    for match in _TOKEN_RE.finditer(normalize(text)):
        run = match.group("cjk")
        if run is not None:
            found.update(cjk_grams(run))
            continue
        token = match.group("word")
        if is_identifier(token):
            found[token.lower()] += 1
        else:
            found.update(_word_token_terms(token) if len(token) <= 4 * MAX_TERM_CHARS else ())
    return dict(found)


def inline_code(text: str) -> list[str]:
    """The contents of the inline code spans of Markdown ``text`` (```like_this```), in order,
    outside fenced code blocks; spans longer than :data:`MAX_CODE_SPAN_CHARS` are left out."""
    if "`" not in text:
        return []
    spans_found: list[str] = []
    for _, line in lines_outside_fences(text.split("\n")):
        if "`" in line:
            for match in _CODE_SPAN_RE.finditer(line):
                content = match.group(2).strip()
                if content and len(content) <= MAX_CODE_SPAN_CHARS:
                    spans_found.append(content)
    return spans_found
