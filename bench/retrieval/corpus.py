"""The synthetic corpus: vocabulary, English-like and Chinese text, Markdown documents, lifecycle mix.

Deterministic for a seed and the same frequency files. Words are drawn by unigram frequency: the
English word frequencies of the SciFact corpus and the Chinese character frequencies of CMRC 2018
when those files exist (so that trigram and BM25 selectivity resemble real text), else a
synthetic Zipf vocabulary of pseudo-words and Zipf-weighted Han characters. About 0.3% of English
words are identifiers (``E-4031``, ``getFooBar``, ``v2.3.1``, ``name.name_ttl``).

A document is Markdown, as a team would store it: a title (the ``title`` column) and 1-3
sections, each a paragraph of 40-220 words (8% of documents: Chinese, 120-400 characters); every
section but possibly the first has a ``## heading``. The chunker, not this module, decides the
chunks: a section longer than the chunk budget is split as ingest would split it.
"""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STOP = (
    "the of and to a in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will can more "
    "about up out do into than other"
).split()
ONSETS = "b c d f g h j k l m n p r s t v w st tr pl ch sh br gr cl fr sp".split()
VOWELS = "a e i o u ai ea ou io ie".split()
CODAS = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "rk", "m"]

CJK_SHARE = 0.08  # of documents
ENGLISH_WORDS = (40, 220)  # per section
CJK_CHARS = (120, 400)  # per section
FILLER_WORDS = (6, 12)  # the one-sentence documents that make the chunk count exact
FILLER_CHARS = (10, 20)


@dataclass(frozen=True)
class Document:
    title: str
    body: str  # Markdown
    is_cjk: bool
    origin: str = ""  # where a real passage comes from (realcorpus); empty for synthetic text


def frequencies(path: Path, pattern: str, top: int) -> list[tuple[str, int]] | None:
    """The ``top`` most frequent matches of ``pattern`` (lowercased) in the titles and texts of a
    BEIR-style ``corpus.jsonl.gz``; None when the file does not exist."""
    if not path.is_file():
        return None
    counts: Counter = Counter()
    rx = re.compile(pattern)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            counts.update(m.lower() for m in rx.findall(doc.get("title", "") + " " + doc.get("text", "")))
    return counts.most_common(top)


class Corpus:
    """Deterministic generator of documents and of the random words queries are perturbed with."""

    def __init__(self, seed: int, word_source: Path, han_source: Path, vocab_size: int = 30000):
        rng = random.Random(seed)
        real = frequencies(word_source, r"[A-Za-z]+(?:'[a-z]+)?", vocab_size)
        self.vocab_source = str(word_source) if real else "synthetic"
        if real:
            self.words = [w for w, _ in real]
            self.word_cum = list(itertools.accumulate(float(c) for _, c in real))
            self.stop_rate = 0.0  # function words come with the real frequencies
        else:
            words: list[str] = []
            seen = set(STOP)
            while len(words) < vocab_size:
                w = "".join(
                    rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(rng.randint(1, 3))
                )
                if 3 <= len(w) <= 14 and w not in seen:
                    seen.add(w)
                    words.append(w)
            self.words = words
            # Zipf-Mandelbrot rank frequencies (s = 1.07, q = 2.7), like English content words
            self.word_cum = list(itertools.accumulate(1.0 / (r + 2.7) ** 1.07 for r in range(len(words))))
            self.stop_rate = 0.42
        self.stop_cum = list(itertools.accumulate(1.0 / (r + 1.0) for r in range(len(STOP))))
        content = [w for w in self.words[:5000] if w not in STOP and len(w) > 2]
        idents = []
        for i in range(400):
            kind = i % 4
            if kind == 0:
                idents.append(f"{rng.choice('EKQX')}-{rng.randint(1000, 9999)}")
            elif kind == 1:
                idents.append(f"{rng.choice(content)}.{rng.choice(content)}_{rng.choice(['ms', 'max', 'ttl'])}")
            elif kind == 2:
                idents.append(f"v{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}")
            else:
                idents.append(f"get{rng.choice(content).capitalize()}{rng.choice(content).capitalize()}")
        self.identifiers = idents
        han = frequencies(han_source, r"[\u4e00-\u9fff]", 3500)
        self.han_source = str(han_source) if han else "synthetic"
        if han:
            self.han = [c for c, _ in han]
            self.han_cum = list(itertools.accumulate(float(n) for _, n in han))
        else:
            codes = list(range(0x4E00, 0x9FA6))
            rng.shuffle(codes)
            self.han = [chr(c) for c in codes[:3500]]
            self.han_cum = list(itertools.accumulate(1.0 / (r + 1.5) for r in range(len(self.han))))

    def word(self, rng: random.Random) -> str:
        return self.words[bisect.bisect(self.word_cum, rng.random() * self.word_cum[-1])]

    def english(self, rng: random.Random, n_words: int) -> str:
        """Sentences of 6-20 words, capitalised, with commas and a final full stop."""
        out: list[str] = []
        sentence_left = 0
        for _ in range(n_words):
            if sentence_left == 0:
                sentence_left = rng.randint(6, 20)
                capital = True
            r = rng.random()
            if r < self.stop_rate:
                w = STOP[bisect.bisect(self.stop_cum, rng.random() * self.stop_cum[-1])]
            elif r < self.stop_rate + 0.003:
                w = rng.choice(self.identifiers)
            else:
                w = self.word(rng)
            if capital:
                w = w[:1].upper() + w[1:]
                capital = False
            sentence_left -= 1
            if sentence_left == 0:
                w += "."
            elif rng.random() < 0.06:
                w += ","
            out.append(w)
        text = " ".join(out)
        return text if text.endswith(".") else text + "."

    def cjk(self, rng: random.Random, n_chars: int) -> str:
        """Han characters with a punctuation mark every 17 and an English word now and then."""
        out: list[str] = []
        for i in range(n_chars):
            out.append(self.han[bisect.bisect(self.han_cum, rng.random() * self.han_cum[-1])])
            if rng.random() < 0.03:
                out.append(" " + self.word(rng) + " ")
            if i % 17 == 16:
                out.append("。" if rng.random() < 0.5 else "，")
        return "".join(out) + "。"

    def document(self, rng: random.Random, sections: int, filler: bool = False) -> Document:
        """One document of ``sections`` sections; ``filler``: one sentence per section instead of a
        paragraph (a document that is one chunk at any reasonable chunk budget)."""
        is_cjk = rng.random() < CJK_SHARE
        if is_cjk:
            title = self.cjk(rng, rng.randint(4, 10)).rstrip("。")
            lengths = FILLER_CHARS if filler else CJK_CHARS
            texts = [self.cjk(rng, rng.randint(*lengths)) for _ in range(sections)]
            headings = [self.cjk(rng, rng.randint(2, 6)).rstrip("。") for _ in range(sections)]
        else:
            title = " ".join(self.word(rng) for _ in range(rng.randint(3, 6))).title()
            lengths = FILLER_WORDS if filler else ENGLISH_WORDS
            texts = [self.english(rng, rng.randint(*lengths)) for _ in range(sections)]
            headings = [" ".join(self.word(rng) for _ in range(rng.randint(1, 3))).title() for _ in range(sections)]
        parts: list[str] = []
        for i, (heading, text) in enumerate(zip(headings, texts, strict=True)):
            if i > 0 or rng.random() < 0.5:
                parts.append(f"## {heading}")
            parts.append(text)
        return Document(title=title, body="\n\n".join(parts), is_cjk=is_cjk)

    def documents(self, seed: int) -> Iterator[Document]:
        """An endless stream of documents of 1-3 sections."""
        rng = random.Random(seed)
        while True:
            yield self.document(rng, rng.randint(1, 3))

    def fillers(self, seed: int) -> Iterator[Document]:
        """An endless stream of one-section, one-sentence documents."""
        rng = random.Random(seed)
        while True:
            yield self.document(rng, 1, filler=True)


def lifecycle_plan(rng: random.Random, n_docs: int) -> list[str]:
    """Per document: ``current | draft | expired | future | superseded``, about 20% not current
    (7% drafts, 7% deprecated and expired, 3% not yet in force, 3% superseded by a later current
    document); the last document is always current."""
    plan = []
    for _ in range(n_docs):
        r = rng.random()
        plan.append(
            "draft"
            if r < 0.07
            else "expired"
            if r < 0.14
            else "future"
            if r < 0.17
            else "superseded"
            if r < 0.20
            else "current"
        )
    plan[-1] = "current"  # a superseded document needs a later current one
    return plan
