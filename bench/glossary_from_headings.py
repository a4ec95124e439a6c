"""A glossary built from a corpus's own bilingual headings and glosses, and what it does to
lexical retrieval across languages.

Teams often write a heading or title in both languages (``数据保留与删除规范（Data Retention
Policy）``, ``研发值班制度 Engineering On-call Rotation``) and gloss a term in the other language
where it first appears (``会话（session）``, ``美式足球联合会 (AFC)``). This script collects those
pairs -- from the corpus only, never from queries or relevance judgements -- into a glossary
file that `pgkb glossary load` reads, and optionally measures lexical-mode nDCG@10 with and
without it through the eval harness.

Sources (``--from``, default both):

* ``headings``: Markdown headings and front-matter titles of a folder, or the ``title`` of a BEIR
  corpus. A heading ``A（B）`` / ``A (B)`` whose one side is Chinese and the other Latin script
  gives the pair (A, B); a *title* made of a Chinese part followed by a Latin part of two or more
  words (``会话与登录配置手册 Session & Auth Configuration``) too. Numbering (``一、``, ``2.``,
  ``Q1：``) is dropped.
* ``glosses``: in body text, a Chinese term directly followed by a parenthesised Latin one
  (``市镇 (gmina)``), or the reverse. Chinese has no spaces, so the Chinese side is the end of the
  CJK run, cut after the last common function character (的 在 是 和 ...), and kept when it is 2 to 8
  characters long; the Latin side has at most 6 words and no digits.

Pairs that share a term (case-insensitive) are merged into one concept. The output is a TSV with
the header ``concept, zh, en`` (several terms of a cell separated by ``|``).

    /opt/pgkb/venv/bin/python bench/glossary_from_headings.py ../shared/datasets/xquad-mixed \\
        --out /tmp/xquad-glossary.tsv [--from headings,glosses] [--show]
    # and measure (PGKB_DSN: a scratch database; the corpus is loaded by the eval harness):
    PGKB_DSN=postgresql://postgres@127.0.0.1:5498/pgkb_glossary_bench \\
    /opt/pgkb/venv/bin/python bench/glossary_from_headings.py ../shared/datasets/xquad-mixed \\
        --out /tmp/xquad-glossary.tsv --measure queries-cross.jsonl,queries-same.jsonl --qrels qrels.tsv

``--measure`` loads the glossary into the eval namespace (``beir-<folder>``, replacing its
glossary), runs ``--mode`` (default lexical) once with it and once after deleting it again, and
prints both; the database's glossary is left empty. It measures whatever the database's lexical
leg does: when ``kb_pipeline.lexical_inputs`` does not call ``kb.glossary_expansion`` the two runs are the same
(a note says so)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HAN = re.compile(f"[{CJK}]")
# a CJK run (middle dots of transliterated names included), then a parenthesised Latin gloss
CJK_THEN_LATIN = re.compile(rf"([{CJK}·・]+)\s*[（(]\s*([^()（）{CJK}]{{2,80}}?)\s*[)）]")
LATIN_THEN_CJK = re.compile(
    rf"((?:[A-Za-z][A-Za-z'&.-]*\s+){{0,2}}[A-Za-z][A-Za-z'&.-]*)\s*[（(]\s*([{CJK}]{{2,8}})\s*[)）]"
)
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
NUMBERING = re.compile(
    r"^\s*(?:第[一二三四五六七八九十百零〇]+[章节条部分]|[一二三四五六七八九十]+[、.．]|\d+(?:\.\d+)*[.、．]?|Q\d+[:：])\s*"
)
# after these, a new word usually starts: the Chinese side of a gloss is cut after the last one
FUNCTION_CHARS = set("的在是和与及或为由被把从以对向于有叫称即其该这那等个名并而也就让使给到经如所之了")
QUOTES = "\"'“”‘’「」『』"
MAX_CJK, MIN_CJK, MAX_LATIN_WORDS = 8, 2, 6


def is_cjk_side(text: str) -> bool:
    return bool(HAN.search(text))


def clean_latin(text: str) -> str | None:
    """A gloss of letters (any non-CJK script), spaces and & ' . - only, 2+ characters, at most 6 words."""
    text = " ".join(text.strip(QUOTES + " ,;:").split())
    if len(text) < 2 or len(text.split()) > MAX_LATIN_WORDS or HAN.search(text) or not text[0].isalpha():
        return None
    if any(not (c.isalpha() or c in " &'.-") for c in text):
        return None
    return text


def trim_cjk(run: str) -> str | None:
    """The end of a CJK run after its last function character, when 2-8 characters long."""
    cut = max((i for i, c in enumerate(run) if c in FUNCTION_CHARS), default=-1)
    term = run[cut + 1 :].strip("·・")
    han = len(HAN.findall(term))
    return term if MIN_CJK <= han <= MAX_CJK else None


def heading_pair(text: str, is_title: bool) -> tuple[str, str] | None:
    """(Chinese, Latin) of a bilingual heading or title, or None."""
    text = NUMBERING.sub("", text.strip())
    match = re.match(r"^(.+?)\s*[（(]([^()（）]+)[)）]\s*(.*)$", text)
    if match and not match.group(3):
        left, right = match.group(1).strip(), match.group(2).strip()
        if is_cjk_side(left) and not is_cjk_side(right):
            latin = clean_latin(right)
            return (left, latin) if latin else None
        if is_cjk_side(right) and not is_cjk_side(left):
            latin = clean_latin(left)
            return (right, latin) if latin else None
        return None
    if not is_title:
        return None
    # a title: Chinese part (its parenthesised notes dropped), then a Latin part of 2+ words
    text = re.sub(r"[（(][^()（）]*[)）]", " ", text)
    match = re.match(rf"^([^A-Za-z]*[{CJK}][^A-Za-z]*?)\s+([A-Za-z][^{CJK}]*)$", text)
    if not match:
        return None
    chinese, latin = match.group(1).strip(), clean_latin(match.group(2))
    if latin and len(latin.split()) >= 2 and is_cjk_side(chinese):
        return chinese, latin
    return None


def gloss_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for match in CJK_THEN_LATIN.finditer(text):
        chinese, latin = trim_cjk(match.group(1)), clean_latin(match.group(2))
        if chinese and latin:
            pairs.append((chinese, latin))
    for match in LATIN_THEN_CJK.finditer(text):
        latin, chinese = clean_latin(match.group(1)), match.group(2)
        if latin and chinese:
            pairs.append((chinese, latin))
    return pairs


# -- corpora ---------------------------------------------------------------------------------------


def beir_documents(folder: Path):
    path = next((p for p in (folder / "corpus.jsonl.gz", folder / "corpus.jsonl") if p.exists()), None)
    if path is None:
        raise SystemExit(f"{folder}: no corpus.jsonl[.gz]")
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                yield str(d["_id"]), [(d.get("title") or "", True)], d.get("text") or ""


def markdown_documents(folder: Path):
    for path in sorted(folder.rglob("*")):
        if path.suffix.lower() not in (".md", ".markdown", ".txt") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        headings = []
        body_lines = []
        lines = text.splitlines()
        if lines and lines[0].strip() == "---":
            end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), 0)
            for line in lines[1:end]:
                if line.startswith("title:"):
                    headings.append((line[len("title:") :].strip().strip("\"'"), True))
            lines = lines[end + 1 :]
        for line in lines:
            match = HEADING.match(line)
            if match:
                headings.append((match.group(1), False))
            else:
                body_lines.append(line)
        yield str(path.relative_to(folder)), headings, "\n".join(body_lines)


def collect_pairs(folder: Path, sources: set[str]) -> list[tuple[str, str, str, str]]:
    """(chinese, latin, origin, document id) of every pair found."""
    documents = beir_documents(folder) if any(folder.glob("corpus.jsonl*")) else markdown_documents(folder)
    found = []
    for doc_id, headings, body in documents:
        if "headings" in sources:
            for text, is_title in headings:
                pair = heading_pair(text, is_title) if text else None
                if pair:
                    found.append((*pair, "title" if is_title else "heading", doc_id))
        if "glosses" in sources:
            found.extend((c, latin, "gloss", doc_id) for c, latin in gloss_pairs(body))
    return found


def merge(pairs) -> list[dict]:
    """Concepts from pairs that share a term (case-insensitive), in order of first appearance."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for chinese, latin, *_ in pairs:
        parent[find(chinese.casefold())] = find(latin.casefold())
    groups: dict[str, dict] = {}
    for chinese, latin, origin, doc_id in pairs:
        g = groups.setdefault(find(latin.casefold()), {"zh": [], "en": [], "origins": []})
        for side, term in (("zh", chinese), ("en", latin)):
            if term.casefold() not in {t.casefold() for t in g[side]}:
                g[side].append(term)
        g["origins"].append(f"{origin}:{doc_id}")
    return list(groups.values())


def write_tsv(concepts: list[dict], path: Path) -> None:
    lines = ["concept\tzh\ten"]
    for c in concepts:
        lines.append("\t".join([c["en"][0].lower(), "|".join(c["zh"]), "|".join(c["en"])]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- measurement -----------------------------------------------------------------------------------


def measure(args, glossary_file: Path) -> dict:
    import psycopg

    from harness import evaluate
    from harness import glossary as glossary_cli

    dsn = os.environ.get("PGKB_DSN")
    if not dsn:
        raise SystemExit("--measure needs PGKB_DSN (a scratch database; the eval harness loads the corpus there)")
    namespace = "beir-" + Path(args.corpus).resolve().name
    settings = dict(item.split("=", 1) for item in (args.set or []))
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        source = conn.execute("SELECT pg_get_functiondef('kb_pipeline.lexical_inputs'::regproc) AS s").fetchone()["s"]
        integrated = "glossary_expansion" in source
        if not integrated:
            print(
                "note: kb_pipeline.lexical_inputs does not call kb.glossary_expansion: both runs are the same",
                file=sys.stderr,
            )
    report = {"integrated": integrated, "namespace": namespace, "settings": settings, "runs": {}}
    for queries in args.measure.split(","):
        for label in ("without", "with"):
            with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
                conn.execute("DELETE FROM kb.glossary WHERE namespace = %s", (namespace,))
                if label == "with":
                    glossary_cli.load(conn, glossary_file, namespace, replace=True)
                    texts = [json.loads(line)["text"] for line in open(Path(args.corpus) / queries, encoding="utf-8")]
                    expanded = conn.execute(
                        "SELECT count(*) FILTER (WHERE cardinality(e.added_terms) > 0) AS n "
                        "FROM unnest(%s::text[]) AS q (text) CROSS JOIN LATERAL kb.glossary_expansion(q.text, %s) AS e",
                        (texts, namespace),
                    ).fetchone()["n"]
                    report["runs"][f"{queries}:expanded_queries"] = {"expanded": expanded, "queries": len(texts)}
            result = evaluate.evaluate(
                dsn,
                beir=args.corpus,
                queries=queries,
                qrels=args.qrels,
                mode=args.mode,
                k=args.k,
                settings=settings,
                progress=False,
            )
            with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
                for m, data in result["modes"].items():
                    empty = conn.execute(
                        "SELECT count(*) FILTER (WHERE cardinality(returned) = 0) AS n FROM kb.eval_results "
                        "WHERE run_id = %s",
                        (data["run_id"],),
                    ).fetchone()["n"]
                    report["runs"][f"{queries}:{label}:{m}"] = {
                        key: data["metrics"].get(key)
                        for key in ("ndcg@10", "recall@10", "mrr@10", "latency_p50_ms", "latency_p95_ms")
                    } | {"no_rows": empty, "run_id": data["run_id"]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM kb.glossary WHERE namespace = %s", (namespace,))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="a BEIR folder (corpus.jsonl[.gz]) or a folder of Markdown files")
    parser.add_argument("--out", required=True, help="the glossary TSV to write")
    parser.add_argument("--from", dest="sources", default="headings,glosses")
    parser.add_argument("--show", action="store_true", help="print every concept with where it was found")
    parser.add_argument("--measure", metavar="QUERIES[,QUERIES]", help="queries files of the BEIR folder")
    parser.add_argument("--qrels", default=None)
    parser.add_argument("--mode", default="lexical")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="a retrieval setting for the runs")
    args = parser.parse_args(argv)
    sources = {s.strip() for s in args.sources.split(",") if s.strip()}
    unknown = sources - {"headings", "glosses"}
    if unknown:
        parser.error(f"unknown source {sorted(unknown)[0]!r}: headings, glosses")
    pairs = collect_pairs(Path(args.corpus), sources)
    concepts = merge(pairs)
    write_tsv(concepts, Path(args.out))
    by_origin = defaultdict(int)
    for _, _, origin, _ in pairs:
        by_origin[origin] += 1
    summary = {"pairs": len(pairs), "by_origin": dict(by_origin), "concepts": len(concepts), "out": args.out}
    if args.show:
        for c in concepts:
            print(f"{'|'.join(c['zh'])}\t{'|'.join(c['en'])}\t{', '.join(c['origins'])}", file=sys.stderr)
    if args.measure:
        summary["measurement"] = measure(args, Path(args.out))
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
