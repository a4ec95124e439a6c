"""The real-text corpus: short passages of the shared datasets and of the machine's man pages, and
the datasets' real questions as queries.

``RealCorpus`` gives documents of one short passage each (one chunk at any reasonable chunk
budget), so that a real model can embed 100k of them in minutes rather than hours:

* **SciFact** (English): every abstract split into sentences; a passage is one sentence, or two
  consecutive ones when the first has fewer than 12 words; the document's title is the abstract's
  title;
* **CMRC 2018** (Chinese) and **xquad-mixed** (English and Chinese): the same over their
  paragraphs (a Chinese passage: one sentence, or two when the first has fewer than 30 characters);
* **man pages** (English, ``/usr/share/man/man[1-8]``, only as many as needed to reach the chunk
  count): the troff source with its requests and escapes stripped, paragraphs split into
  sentences as above; the title is ``name(section)``; at most ``MAN_PER_PAGE`` passages of one page.

Passages are de-duplicated (the same text from two sources is kept once), cut at 70 words / 160
characters, and shuffled with the seed; every dataset passage comes before any man-page passage
is taken, so the questions' answers are in the corpus whatever its size (up to the datasets' ~70k
passages). Documents carry their origin (``metadata.origin``).

``PerturbedCorpus`` goes beyond the real passages (``--perturb-from``, the 1M benchmark): every
passage once, then perturbed copies of them, whose vectors are the real ones plus noise.

``real_queries`` draws the benchmark's queries from the datasets' questions (SciFact claims,
CMRC 2018 and xquad-mixed questions), half English and half Chinese for each kind: **short** are
the questions of at most 6 words (English) or 12 Han characters (Chinese), **long** the others.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

from .corpus import Document

MAN_ROOT = Path("/usr/share/man")
MAX_WORDS = 70
MAX_CHARS = 160
MAN_PER_PAGE = 12  # passages of one man page at most (a few tools ship thousands of near-alike pages)
EN_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
ZH_SENTENCE = re.compile(r"(?<=[。！？])")
HAN = re.compile(r"[\u4e00-\u9fff]")
WORD = re.compile(r"[A-Za-z0-9]+")
SHORT_WORDS = 6
SHORT_HAN = 12


def is_cjk(text: str) -> bool:
    return len(HAN.findall(text)) > len(WORD.findall(text))


def passages(text: str) -> list[str]:
    """One sentence per passage, or two when the first is short; cut at MAX_WORDS / MAX_CHARS."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return []
    cjk = is_cjk(text)
    parts = [s.strip() for s in (ZH_SENTENCE.split(text) if cjk else EN_SENTENCE.split(text)) if s.strip()]
    out: list[str] = []
    i = 0
    while i < len(parts):
        unit = parts[i]
        short = len(HAN.findall(unit)) < 30 if cjk else len(unit.split()) < 12
        if short and i + 1 < len(parts):
            unit = unit + ("" if cjk else " ") + parts[i + 1]
            i += 1
        i += 1
        if cjk:
            unit = unit[:MAX_CHARS]
            if len(HAN.findall(unit)) >= 8:
                out.append(unit)
        else:
            words = unit.split()
            if len(words) >= 5 and sum(c.isalpha() for c in unit) > 0.6 * len(unit):
                out.append(" ".join(words[:MAX_WORDS]))
    return out


def dataset_documents(datasets: Path) -> list[Document]:
    """Passages of the SciFact, CMRC 2018 and xquad-mixed corpora (missing files are skipped)."""
    docs: list[Document] = []
    for name in ("scifact", "cmrc2018", "xquad-mixed"):
        path = datasets / name / "corpus.jsonl.gz"
        if not path.is_file():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                title = (rec.get("title") or "").strip()
                for p in passages(rec.get("text") or ""):
                    docs.append(Document(title=title or p[:40], body=p, is_cjk=is_cjk(p), origin=name))
    return docs


_TROFF_ESCAPES = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)|\\s[+-]?\d+|\\\(..|\\\[[^\]]*\]|\\\*(?:\(..|\[[^\]]*\]|.)|\\.")
_PARAGRAPH_REQUESTS = {"PP", "P", "LP", "TP", "IP", "SH", "SS", "HP", "sp", "br", "RS", "RE", "nf", "fi", "TH"}
_TEXT_REQUESTS = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB"}


def man_text(raw: str) -> list[str]:
    """Paragraphs of a troff man page: requests dropped (text requests like ``.B`` kept as text),
    escapes removed."""
    paragraphs: list[str] = []
    cur: list[str] = []
    skip = False
    for line in raw.splitlines():
        if line.startswith((".", "'")):
            req = line[1:].split(" ", 1)
            name = req[0].strip()
            if name in ("TS", "EX", "nf"):
                skip = True
            elif name in ("TE", "EE", "fi"):
                skip = False
            if name in _TEXT_REQUESTS and len(req) > 1 and not skip:
                cur.append(req[1].replace('"', ""))
            elif name in _PARAGRAPH_REQUESTS and cur:
                paragraphs.append(" ".join(cur))
                cur = []
            continue
        if skip:
            continue
        if not line.strip():
            if cur:
                paragraphs.append(" ".join(cur))
                cur = []
            continue
        cur.append(line)
    if cur:
        paragraphs.append(" ".join(cur))
    return [_TROFF_ESCAPES.sub("", p).replace("\\", "") for p in paragraphs]


def man_documents(root: Path = MAN_ROOT) -> Iterator[Document]:
    """Passages of the English man pages under ``root`` (sorted, so deterministic)."""
    for section in sorted(root.glob("man[1-8]")):
        for path in sorted(section.glob("*.gz")):
            try:
                with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
                    raw = fh.read()
            except (OSError, EOFError):
                continue
            if raw.startswith(".so "):
                continue  # an alias of another page
            name = path.name[: -len(".gz")]
            title = re.sub(r"\.(\d\w*)$", r"(\1)", name)
            taken = 0
            for para in man_text(raw):
                for p in passages(para):
                    if not is_cjk(p) and taken < MAN_PER_PAGE:
                        taken += 1
                        yield Document(title=title, body=p, is_cjk=False, origin="man")


class RealCorpus:
    """Documents of real passages (see the module docstring); a finite, seeded stream."""

    vocab_source = "real passages: scifact, cmrc2018, xquad-mixed corpora + man pages"
    han_source = "real passages"

    def __init__(self, seed: int, datasets: Path, size: int, man_root: Path = MAN_ROOT, keep=None):
        seen: set[str] = set()
        base: list[Document] = []
        for d in dataset_documents(datasets):
            if d.body not in seen:
                seen.add(d.body)
                base.append(d)
        extra: list[Document] = []
        want = int(size * 1.02) + 1000  # the chunker may split or merge a few
        if len(base) < want:
            for d in man_documents(man_root):
                if d.body not in seen:
                    seen.add(d.body)
                    extra.append(d)
        rng = random.Random(seed)
        rng.shuffle(extra)
        docs = base + extra[: max(0, want - len(base))]
        rng.shuffle(docs)
        if keep is not None:  # a subset of this corpus (the passages a partial vector store holds)
            docs = [d for d in docs if keep(d)]
        self.docs = docs
        self.datasets = datasets
        self.origins = {o: sum(d.origin == o for d in docs) for o in sorted({d.origin for d in docs})}

    def documents(self, seed: int) -> Iterator[Document]:
        yield from self.docs
        raise RuntimeError(f"the real corpus has only {len(self.docs)} passages")

    def fillers(self, seed: int) -> Iterator[Document]:
        raise RuntimeError("the real corpus needs no fillers: every passage is one chunk")
        yield  # pragma: no cover

    def word(self, rng: random.Random) -> str:  # queries are real questions, never perturbed
        raise RuntimeError("the real corpus has no vocabulary to perturb queries with")


def _questions(datasets: Path) -> list[tuple[str, str]]:
    out = []
    for rel in ("scifact/queries-train.jsonl", "cmrc2018/queries.jsonl", "xquad-mixed/queries.jsonl"):
        path = datasets / rel
        if path.is_file():
            with path.open(encoding="utf-8") as fh:
                out.extend((rel.split("/")[0], json.loads(line)["text"].strip()) for line in fh)
    return out


def is_short_question(text: str) -> bool:
    return len(HAN.findall(text)) <= SHORT_HAN if is_cjk(text) else len(WORD.findall(text)) <= SHORT_WORDS


def real_queries(datasets: Path, seed: int, n_each: int) -> dict[str, list[str]]:
    """``{"short": [...], "long": [...]}``: ``n_each`` real questions of each kind, alternately
    English and Chinese (seeded sample, no repeats)."""
    rng = random.Random(seed + 3)
    pools: dict[tuple[str, bool], list[str]] = {}
    for _, q in sorted(set(_questions(datasets))):
        pools.setdefault(("short" if is_short_question(q) else "long", is_cjk(q)), []).append(q)
    out: dict[str, list[str]] = {}
    for kind in ("short", "long"):
        en = rng.sample(pools.get((kind, False), []), min(len(pools.get((kind, False), [])), n_each))
        zh = rng.sample(pools.get((kind, True), []), min(len(pools.get((kind, True), [])), n_each))
        mixed = [q for pair in zip(en, zh, strict=False) for q in pair]
        rest = en[len(zh) :] + zh[len(en) :]
        out[kind] = (mixed + rest)[:n_each]
    return out


#: share of a passage's words (English) or Han characters (Chinese) a perturbed copy replaces
PERTURB_SHARE = 0.15


class PerturbedCorpus:
    """A corpus larger than the real passages: every passage of ``base`` once as it is, then
    perturbed copies of them up to the wanted size (all shuffled together with the seed).

    A copy keeps its passage's title and replaces ``PERTURB_SHARE`` of its words (English) or Han
    characters (Chinese) by ones drawn from the corpus's own text of that language (so term
    frequencies stay real-like); its vector is the passage's real vector plus Gaussian noise of
    norm about ``sigma``, renormalised (``perturbed_vector``), i.e. cosine about
    1 / sqrt(1 + sigma^2) to the original. Copies of one passage are near each other in both
    legs, as the versions and near-duplicates of a real knowledge base are."""

    han_source = "real passages and perturbed copies"

    def __init__(self, base: RealCorpus, size: int, seed: int, sigma: float):
        self.seed = seed
        self.sigma = sigma
        self.vocab_source = f"{base.vocab_source}; perturbed copies ({PERTURB_SHARE:.0%} of tokens, sigma {sigma})"
        words = [w for d in base.docs if not d.is_cjk for w in d.body.split()]
        han = [c for d in base.docs if d.is_cjk for c in HAN.findall(d.body)]
        want = int(size * 1.02) + 1000
        rng = random.Random(seed + 11)
        seen = {d.body for d in base.docs}
        copies: list[Document] = []
        #: copy -> (index of its passage in base.docs, copy number): what its vector derives from
        self.copy_of: dict[tuple[str, str], tuple[int, int]] = {}
        number = 0
        while len(base.docs) + len(copies) < want:
            number += 1
            for i, d in enumerate(base.docs):
                if len(base.docs) + len(copies) >= want:
                    break
                body = perturb_text(d.body, d.is_cjk, random.Random(f"{seed}:{number}:{i}"), words, han)
                if body in seen:
                    continue
                seen.add(body)
                copy = Document(title=d.title, body=body, is_cjk=d.is_cjk, origin=f"{d.origin}+perturbed")
                copies.append(copy)
                self.copy_of[(copy.title, copy.body)] = (i, number)
        docs = base.docs + copies
        rng.shuffle(docs)
        self.base = base
        self.docs = docs
        self.datasets = base.datasets
        self.origins = {o: sum(d.origin == o for d in docs) for o in sorted({d.origin for d in docs})}

    documents = RealCorpus.documents
    fillers = RealCorpus.fillers
    word = RealCorpus.word


def perturb_text(body: str, cjk: bool, rng: random.Random, words: list[str], han: list[str]) -> str:
    """``body`` with ``PERTURB_SHARE`` of its words (or Han characters) replaced by random ones of
    ``words`` (or ``han``)."""
    if cjk:
        chars = list(body)
        spots = [i for i, c in enumerate(chars) if HAN.fullmatch(c)]
        for i in rng.sample(spots, max(1, round(len(spots) * PERTURB_SHARE))):
            chars[i] = rng.choice(han)
        return "".join(chars)
    tokens = body.split()
    for i in rng.sample(range(len(tokens)), max(1, round(len(tokens) * PERTURB_SHARE))):
        tokens[i] = rng.choice(words)
    return " ".join(tokens)


def perturbed_vector(vector, key: tuple[int, int], seed: int, sigma: float):
    """The vector of copy ``key`` (passage index, copy number): ``vector`` plus Gaussian noise of
    expected norm ``sigma``, renormalised; deterministic for the key and seed."""
    import numpy as np

    rng = np.random.default_rng([seed, key[0], key[1]])
    v = np.asarray(vector, dtype=np.float64)
    v = v + rng.standard_normal(v.shape[0]) * (sigma / np.sqrt(v.shape[0]))
    return (v / np.linalg.norm(v)).astype(np.float32)
