"""BM25 terms for Chinese: pgkb's overlapping character bigrams against jieba words.

Three term functions that differ only in how a CJK run is split; everything else is
``pgkb_plpy.lexical`` as shipped (NFKC, English stems, identifiers, its token pattern):

    bigrams (pgkb)   ``lexical.cjk_grams``
    jieba precise    ``jieba.lcut(run, HMM=True)``
    jieba search     ``jieba.cut_for_search(run)``

Each indexes a corpus (``title + "\\n" + text`` per document) and ranks with BM25 as pgkb's SQL
does by default (k1 1.2, b 0.4, idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``, a query's distinct
terms), in Python. Reported per query set: nDCG@10 and recall@10 (and nDCG@10 per query language:
``zh`` when the query has a CJK character); per corpus and term function: distinct terms and
tokenizing speed (characters per second and ms per document, best of ``--repeat`` passes with
pgkb's word and stem caches cleared before each, and the bigrams' speed over each jieba mode's); jieba's
version and dictionary load time. Query sets, from ``--datasets`` (default ``PGKB_DATASETS``,
else ``../shared/datasets`` beside the repository):

* ``cmrc-questions``: the first ``--cmrc-queries`` (1,000) questions of ``cmrc2018/``;
* ``xquad-questions``: every question of ``xquad-mixed/`` (English and Chinese);
* ``cmrc-substrings``: ``--short-queries`` (500) random 2-4-character substrings of a run of at
  least 4 Han characters of a random CMRC paragraph (``random.Random(7)``), that paragraph
  counted relevant: short queries typed as they come, across word boundaries or not;
* ``cmrc-jieba-words``: as many random jieba words of 2-4 Han characters of a random paragraph
  (``random.Random(8)``), a sample that favours jieba.

A smaller ``--cmrc-queries`` / ``--short-queries`` takes the first queries of the same sequences.

jieba is not a pgkb dependency and must not go into its venvs or ``pyproject.toml``: install it
into a folder of its own and pass it as ``--extra-site``::

    /opt/pgkb/venv/bin/python -m pip install --target /tmp/pgkb-eco-extra jieba markdown-it-py mistune
    /opt/pgkb/venv/bin/python bench/ecosystem/cjk_terms.py --extra-site /tmp/pgkb-eco-extra \\
        [--datasets ../shared/datasets] [--cmrc-queries 1000] [--short-queries 500] [--repeat 3]

Takes about two minutes on one busy core at the defaults. JSON report on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import random
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

from common import default_datasets, emit, host, import_extra, use_plpython, version

HAN_RUN = re.compile("[\u4e00-\u9fff]{4,}")
HAN_WORD = re.compile("[\u4e00-\u9fff]{2,4}")


def load(folder: Path):
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        corpus = {o["_id"]: (o.get("title") or "") + "\n" + o["text"] for o in map(json.loads, f)}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = [(o["_id"], o["text"]) for o in map(json.loads, f)]
    relevant = defaultdict(set)
    with open(folder / "qrels.tsv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            relevant[row["query-id"]].add(row["corpus-id"])
    return corpus, queries, relevant


class Index:
    """BM25 postings of a corpus under one term function; built ``repeat`` times to time it."""

    def __init__(self, corpus: dict[str, str], terms, clear_caches, repeat: int, k1=1.2, b=0.4):
        best = float("inf")
        for _ in range(repeat):
            clear_caches()  # every pass of every term function starts with cold word and stem caches
            t0 = time.perf_counter()
            tfs = {d: Counter(terms(text)) for d, text in corpus.items()}
            best = min(best, time.perf_counter() - t0)
        self.seconds = best
        self.terms, self.k1, self.b = terms, k1, b
        self.length = {d: sum(tf.values()) for d, tf in tfs.items()}
        self.avg = sum(self.length.values()) / len(self.length)
        self.postings = defaultdict(list)
        for d, tf in tfs.items():
            for term, n in tf.items():
                self.postings[term].append((d, n))

    def top10(self, query: str) -> list[str]:
        n_docs, k1, b = len(self.length), self.k1, self.b
        scores = defaultdict(float)
        for term in dict.fromkeys(self.terms(query)):
            ps = self.postings.get(term, ())
            idf = math.log(1 + (n_docs - len(ps) + 0.5) / (len(ps) + 0.5))
            for d, n in ps:
                scores[d] += idf * n * (k1 + 1) / (n + k1 * (1 - b + b * self.length[d] / self.avg))
        return sorted(scores, key=lambda d: (-scores[d], d))[:10]


def evaluate(index: Index, queries, relevant, is_cjk) -> dict:
    ndcg = recall = 0.0
    by_lang = defaultdict(list)
    for qid, q in queries:
        rel = relevant[qid]
        top = index.top10(q)
        gain = sum(1 / math.log2(i + 2) for i, d in enumerate(top) if d in rel)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(rel))))
        v = gain / ideal if ideal else 0.0
        ndcg += v
        recall += len(set(top) & rel) / max(1, len(rel))
        by_lang["zh" if any(map(is_cjk, q)) else "en"].append(v)
    return {
        "ndcg10": round(ndcg / len(queries), 3),
        "recall10": round(recall / len(queries), 3),
        "ndcg10_by_language": {k: {"ndcg10": round(sum(v) / len(v), 3), "n": len(v)} for k, v in by_lang.items()},
    }


def short_queries(corpus, n: int, seed: int, candidates) -> tuple[list, dict]:
    """``n`` queries drawn by ``candidates(rng, text)`` from random documents; each its document's."""
    rng, ids = random.Random(seed), sorted(corpus)
    queries, relevant = [], {}
    while len(queries) < n:
        d = rng.choice(ids)
        q = candidates(rng, corpus[d])
        if q:
            queries.append((f"s{seed}-{len(queries)}", q))
            relevant[queries[-1][0]] = {d}
    return queries, relevant


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extra-site", help="folder holding jieba (pip install --target)")
    ap.add_argument("--datasets", type=Path, default=default_datasets())
    ap.add_argument("--cmrc-queries", type=int, default=1000)
    ap.add_argument("--short-queries", type=int, default=500, help="queries per short-query sample")
    ap.add_argument("--repeat", type=int, default=3, help="tokenizing passes per corpus; the best counts")
    args = ap.parse_args()

    (jieba,) = import_extra(args.extra_site, "jieba")
    use_plpython()
    from pgkb_plpy import lexical

    jieba.setLogLevel(60)
    t0 = time.perf_counter()
    jieba.initialize()  # the dictionary (from jieba's cache file after a first run): paid per process
    jieba_load_s = time.perf_counter() - t0

    def terms_with(split_cjk):
        """``lexical._terms`` with CJK runs split by ``split_cjk`` instead of into bigrams."""
        cached, uncached = lexical._word_token_terms, lexical._word_token_terms.__wrapped__

        def terms(text):
            for m in lexical._TOKEN_RE.finditer(lexical.normalize(text)):
                run, word = m.group("cjk"), m.group("word")
                if run is not None:
                    yield from split_cjk(run)
                else:  # as lexical._terms: very long tokens bypass the cache
                    yield from (cached if len(word) <= 4 * lexical.MAX_TERM_CHARS else uncached)(word)

        return terms

    variants = {
        "bigrams (pgkb)": lexical._terms,  # what ingest stores, unchanged
        "jieba precise": terms_with(lambda run: jieba.lcut(run, HMM=True)),
        "jieba search": terms_with(lambda run: list(jieba.cut_for_search(run))),
    }

    def clear_caches():
        lexical._word_token_terms.cache_clear()
        lexical.stem.cache_clear()

    def substring(rng, text):
        runs = HAN_RUN.findall(text)
        if not runs:
            return None
        run = rng.choice(runs)
        n = rng.randint(2, 4)
        s = rng.randint(0, len(run) - n)
        return run[s : s + n]

    def jieba_word(rng, text):
        words = [w for w in jieba.lcut(text) if HAN_WORD.fullmatch(w)]
        return rng.choice(words) if words else None

    cmrc, cmrc_q, cmrc_rel = load(args.datasets / "cmrc2018")
    xquad, xquad_q, xquad_rel = load(args.datasets / "xquad-mixed")
    plan = {  # corpus -> query sets on it
        "cmrc2018": (
            cmrc,
            {
                "cmrc-questions": (cmrc_q[: args.cmrc_queries], cmrc_rel),
                "cmrc-substrings": short_queries(cmrc, args.short_queries, 7, substring),
                "cmrc-jieba-words": short_queries(cmrc, args.short_queries, 8, jieba_word),
            },
        ),
        "xquad-mixed": (xquad, {"xquad-questions": (xquad_q, xquad_rel)}),
    }
    corpora, query_sets = {}, {}
    for cname, (corpus, sets) in plan.items():
        chars = sum(map(len, corpus.values()))
        corpora[cname] = {"documents": len(corpus), "characters": chars, "variants": {}}
        for vname, terms in variants.items():
            index = Index(corpus, terms, clear_caches, args.repeat)
            corpora[cname]["variants"][vname] = {
                "distinct_terms": len(index.postings),
                "m_chars_per_s": round(chars / index.seconds / 1e6, 3),
                "ms_per_document": round(index.seconds / len(corpus) * 1e3, 3),
            }
            for sname, (queries, relevant) in sets.items():
                query_sets.setdefault(sname, {"corpus": cname, "queries": len(queries), "variants": {}})
                query_sets[sname]["examples"] = [q for _, q in queries[:5]]
                query_sets[sname]["variants"][vname] = evaluate(index, queries, relevant, lexical.is_cjk)
        v = corpora[cname]["variants"]
        for vname in list(v)[1:]:
            v[vname]["bigrams_speed_over_this"] = round(
                v["bigrams (pgkb)"]["m_chars_per_s"] / v[vname]["m_chars_per_s"], 2
            )

    report = {
        "benchmark": "cjk_terms",
        "host": host(),
        "config": {
            "datasets": str(args.datasets),
            "cmrc_queries": args.cmrc_queries,
            "short_queries": args.short_queries,
            "repeat": args.repeat,
            "bm25": {"k1": 1.2, "b": 0.4},
            "jieba": getattr(jieba, "__version__", None) or version("jieba"),
            "jieba_dictionary_load_s": round(jieba_load_s, 2),
        },
        "corpora": corpora,
        "query_sets": query_sets,
    }

    def cell(r):
        zh = r["ndcg10_by_language"].get("zh")
        mixed = zh and len(r["ndcg10_by_language"]) > 1
        return f"{r['ndcg10']:.3f} / {r['recall10']:.3f}" + (f" (zh {zh['ndcg10']:.3f})" if mixed else "")

    rows = [[f"{s} ({q['queries']})", *(cell(q["variants"][v]) for v in variants)] for s, q in query_sets.items()]
    for cname, c in corpora.items():
        rows.append(
            [f"{cname}: M chars/s, terms"]
            + [f"{x['m_chars_per_s']:.2f}, {x['distinct_terms']:,}" for x in c["variants"].values()]
        )
    rows.append([f"jieba {report['config']['jieba']} dictionary load", f"{jieba_load_s:.2f} s", "", ""])
    emit(report, ["nDCG@10 / R@10", *variants], rows)


if __name__ == "__main__":
    main()
