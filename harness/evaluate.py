"""`pgkb eval`: golden cases or a BEIR folder, per mode, metrics printed and stored
in kb.eval_runs / kb.eval_results (views kb.eval_run_summary, kb.eval_metric_trend)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from tqdm import tqdm

from . import metrics, retrieval
from .config import REPO_ROOT, load_settings
from .db import connect


@dataclass
class Case:
    id: str
    query: str
    expected: list[str]
    forbidden: list[str] = field(default_factory=list)
    category: str | None = None
    namespace: str | None = None
    as_of: str | None = None
    context: list[str] | None = None


def load_cases(path: str) -> list[Case]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    return cases_from(data, path)


def cases_from(data: object, path: str = "cases") -> list[Case]:
    """Cases from the JSON list of a cases file (examples/eval/cases.json's format)."""
    if not isinstance(data, list):
        raise RuntimeError(f"{path}: expected a JSON list of cases")
    cases = []
    for i, item in enumerate(data):
        missing = [k for k in ("id", "query", "expected") if k not in item]
        if missing:
            raise RuntimeError(f"{path}: case #{i} lacks {', '.join(missing)}")
        cases.append(
            Case(
                id=str(item["id"]),
                query=item["query"],
                expected=list(item["expected"]),
                forbidden=list(item.get("forbidden", [])),
                category=item.get("category"),
                namespace=item.get("namespace"),
                as_of=item.get("as_of"),
                context=item.get("context"),
            )
        )
    return cases


def judged_cases(conn) -> list[Case]:
    """The ready golden cases the accepted judgments the connection's role may read make (kb.judged_cases:
    never a disputed or incomplete one, never a suggestion nobody accepted)."""
    rows = conn.execute("SELECT golden_case FROM kb.judged_cases WHERE state = 'ready' ORDER BY case_id").fetchall()
    return cases_from([r["golden_case"] for r in rows], "kb.judged_cases")


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def sample_corpus(corpus: list[dict], cases: list[Case], others: int) -> list[dict]:
    """A fixed, reproducible sub-corpus: every document relevant to the selected
    queries plus the first `others` remaining documents in corpus order."""
    relevant = {doc for case in cases for doc in case.expected}
    keep = [d for d in corpus if str(d["_id"]) in relevant]
    keep += [d for d in corpus if str(d["_id"]) not in relevant][:others]
    return keep


def load_beir(
    directory: str,
    queries_file: str | None,
    qrels_file: str | None,
    limit: int | None,
    category_key: str | None = "kind",
):
    """The corpus and the cases of a BEIR folder. A case's category is the query's
    metadata[category_key] when it has one (xquad-mixed: kind = same | cross)."""
    d = Path(directory)
    corpus_path = next((p for p in (d / "corpus.jsonl.gz", d / "corpus.jsonl") if p.exists()), None)
    if corpus_path is None:
        raise RuntimeError(f"{d}: no corpus.jsonl[.gz]")
    queries_path = d / queries_file if queries_file else next(iter(sorted(d.glob("queries*.jsonl"))), None)
    qrels_path = d / qrels_file if qrels_file else next(iter(sorted(d.glob("qrels*.tsv"))), None)
    if queries_path is None or qrels_path is None:
        raise RuntimeError(f"{d}: needs queries*.jsonl and qrels*.tsv (or --queries/--qrels)")
    with _open_text(corpus_path) as f:
        corpus = [json.loads(line) for line in f if line.strip()]
    with open(queries_path, encoding="utf-8") as f:
        query_rows = {str(o["_id"]): o for o in map(json.loads, f)}
    queries = {qid: o["text"] for qid, o in query_rows.items()}
    categories = {
        qid: str(o["metadata"][category_key])
        for qid, o in query_rows.items()
        if category_key and isinstance(o.get("metadata"), dict) and category_key in o["metadata"]
    }
    relevant: dict[str, list[str]] = defaultdict(list)
    with open(qrels_path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0:
                relevant[str(row["query-id"])].append(str(row["corpus-id"]))
    cases = [
        Case(id=qid, query=queries[qid], expected=docs, category=categories.get(qid))
        for qid, docs in relevant.items()
        if qid in queries
    ]
    if limit:
        cases = cases[:limit]
    return corpus, cases


def make_unanswerable(corpus: list[dict], cases: list[Case], count: int) -> tuple[list[dict], list[Case]]:
    """A corpus without the relevant documents of `count` queries, chosen deterministically (the
    smallest SHA-256 of their ids). Every query left with no relevant document (those, and any
    other query about the same documents) becomes unanswerable: expected [], honest answer "no
    evidence", category "unanswerable"; the others keep the relevant documents that remain."""
    chosen = sorted((c.id for c in cases), key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:count]
    removed = {doc for c in cases if c.id in set(chosen) for doc in c.expected}
    for c in cases:
        remaining = [doc for doc in c.expected if doc not in removed]
        if not remaining:
            c.category = "unanswerable"
        c.expected = remaining
    return [d for d in corpus if str(d["_id"]) not in removed], cases


def decoy_cases(spec: str) -> list[Case]:
    """Unanswerable questions from another BEIR folder ("DIR" or "DIR:N", the first N queries, 100 by
    default), asked against the corpus under evaluation: questions of another domain and often another
    language, whose honest answer is "no evidence" (category "decoy")."""
    directory, _, count = spec.partition(":")
    _, cases = load_beir(directory, None, None, int(count or 100), None)
    name = Path(directory).resolve().name
    return [Case(id=f"decoy:{name}:{c.id}", query=c.query, expected=[], category="decoy") for c in cases]


def ensure_corpus_loaded(dsn: str, namespace: str, corpus: list[dict], progress: bool) -> int:
    """Insert the documents of a BEIR corpus not yet in the namespace (vectors of
    documents already there are reused). Returns how many were inserted."""
    with connect(dsn) as conn:
        present = {
            r["source"] for r in conn.execute("SELECT source FROM kb.documents WHERE namespace = %s", (namespace,))
        }
        todo = [d for d in corpus if str(d["_id"]) not in present and (d.get("text") or "").strip()]
        batch = 20
        with tqdm(total=len(todo), desc=f"load {namespace}", unit="doc", disable=not progress, file=sys.stderr) as bar:
            for i in range(0, len(todo), batch):
                chunk = todo[i : i + batch]
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO kb.documents (namespace, source, title, body, doc_type) "
                        "VALUES (%s, %s, %s, %s, 'beir')",
                        [(namespace, str(d["_id"]), d.get("title") or None, d["text"]) for d in chunk],
                    )
                bar.update(len(chunk))
        conn.execute("SELECT kb.refresh_lexical_stats()")
        conn.execute("SELECT kb.refresh_language_statistics()")
    return len(todo)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def run_mode(
    conn,
    cases: list[Case],
    mode: str,
    k: int,
    default_namespace: str | None,
    progress: bool,
    on_case: Callable[[], None] | None = None,
):
    results = []
    for case in tqdm(cases, desc=f"eval {mode}", unit="q", disable=not progress, file=sys.stderr):
        if on_case:
            on_case()
        started = time.perf_counter()
        try:
            explain = retrieval.explain(
                conn,
                case.query,
                k=k,
                namespace=case.namespace or default_namespace,
                mode=mode,
                as_of=case.as_of,
                context=case.context,
            )
        except psycopg.Error as exc:
            results.append({"case": case, "error": exc.diag.message_primary or str(exc), "latency": None})
            continue
        latency = (time.perf_counter() - started) * 1000
        ranked = metrics.distinct_in_order([r["source"] for r in explain["results"]])
        answerability = explain["answerability"]
        outcome = metrics.case_outcome(
            ranked, case.expected, case.forbidden, answerability["decision"], answerability.get("probability")
        )
        results.append(
            {
                "case": case,
                "ranked": ranked,
                "outcome": outcome,
                "latency": latency,
                "low_confidence": explain["low_confidence"],
                "answerability": {
                    "decision": answerability["decision"],
                    "probability": answerability.get("probability"),
                    "mode": explain["mode"],
                    "signals": {k: v["value"] for k, v in (answerability.get("signals") or {}).items()},
                },
                "error": None,
            }
        )
    ok = [r for r in results if r["error"] is None]
    summary = metrics.aggregate([r["outcome"] for r in ok], [r["latency"] for r in ok], len(results) - len(ok))
    by_category = metrics.aggregate_by_category([(r["case"].category, r["outcome"], r["latency"]) for r in ok])
    return summary, by_category, results


def configuration(conn, k: int) -> dict:
    """The complete configuration a run retrieves with: every session-overridable setting in force (the
    catalogue's value for this session, overrides included), k, and complete = true."""
    rows = conn.execute("SELECT key, value FROM kb.settings_catalogue WHERE session_override ORDER BY key").fetchall()
    return {"settings": {r["key"]: r["value"] for r in rows}, "k": k, "complete": True}


def case_set_version(cases: list[Case], default_namespace: str | None = None) -> str:
    """A hash of the cases as asked (each in its namespace, else the run's): two runs with the same value
    asked the same questions with the same expectations (kb.eval_runs.case_set_version)."""
    canonical = json.dumps(
        [
            [
                c.id,
                c.query,
                c.context or [],
                c.namespace or default_namespace,
                c.as_of,
                sorted(c.expected),
                sorted(c.forbidden),
            ]
            for c in sorted(cases, key=lambda c: c.id)
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def store_run(
    conn,
    dataset: str,
    mode: str,
    params: dict,
    summary: dict,
    by_category: dict,
    results,
    config: dict | None = None,
    default_namespace: str | None = None,
) -> int:
    model = conn.execute("SELECT name FROM kb.models WHERE active").fetchone()
    k = params.get("k")
    with conn.transaction():
        run_id = conn.execute(
            """INSERT INTO kb.eval_runs (dataset, mode, model, git_commit, params, metrics, metrics_by_category,
                   configuration, case_set_version, corpus_fingerprint)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, kb.corpus_fingerprint(%s)) RETURNING id""",
            (
                dataset,
                mode,
                model["name"] if model else None,
                git_commit(),
                Jsonb(params),
                Jsonb(summary),
                Jsonb(by_category),
                Jsonb(config or {}),
                case_set_version([r["case"] for r in results], default_namespace),
                default_namespace,
            ),
        ).fetchone()["id"]
        with conn.cursor() as cur:
            cur.executemany(
                """INSERT INTO kb.eval_results (run_id, case_id, category, query, expected, returned,
                       first_relevant_rank, ndcg_10, forbidden_hit, low_confidence, latency_ms, error,
                       namespace, context, as_of, k, forbidden, answerability)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                [
                    (
                        run_id,
                        r["case"].id,
                        r["case"].category,
                        r["case"].query,
                        r["case"].expected,
                        r.get("ranked", [])[:20],
                        (r.get("outcome") or {}).get("first_relevant_rank"),
                        (r.get("outcome") or {}).get("ndcg@10"),
                        bool((r.get("outcome") or {}).get("forbidden_hit")),
                        r.get("low_confidence"),
                        r["latency"],
                        r["error"],
                        r["case"].namespace or default_namespace,
                        r["case"].context,
                        r["case"].as_of,
                        k,
                        r["case"].forbidden,
                        Jsonb(r["answerability"]) if r.get("answerability") else None,
                    )
                    for r in results
                ],
            )
    return run_id


def evaluate(
    dsn: str,
    *,
    cases_file: str | None = None,
    beir: str | None = None,
    queries: str | None = None,
    qrels: str | None = None,
    mode: str = "all",
    k: int = 100,
    limit: int | None = None,
    namespace: str | None = None,
    corpus_sample: int | None = None,
    unanswerable: int | None = None,
    decoys: str | None = None,
    category_key: str | None = "kind",
    settings: dict[str, str] | None = None,
    progress: bool = True,
    cases: list[Case] | None = None,
    dataset: str | None = None,
    role: str | None = None,
    on_case: Callable[[], None] | None = None,
    on_stored: Callable[[str, int], None] | None = None,
) -> dict:
    """Evaluate golden cases (cases_file, or cases given with their dataset name) or a BEIR folder in each
    mode and store every run. role: SET ROLE before anything (the lab's role); on_case: called before each
    case of each mode (progress); on_stored: called with each mode and its run id once its run is stored."""
    modes = list(retrieval.MODES) if mode == "all" else [m.strip() for m in mode.split(",")]
    bad = [m for m in modes if m not in retrieval.MODES]
    if bad:
        raise RuntimeError(f"unknown mode {bad[0]!r}; modes: {', '.join(retrieval.MODES)}, all")
    if beir:
        corpus, cases = load_beir(beir, queries, qrels, limit, category_key)
        name = Path(beir).resolve().name
        if corpus_sample is not None:
            corpus = sample_corpus(corpus, cases, corpus_sample)
            name += f"-sample{len(corpus)}"
        if unanswerable:
            corpus, cases = make_unanswerable(corpus, cases, unanswerable)
            name += f"-minus{unanswerable}"
        namespace = namespace or "beir-" + name
        ensure_corpus_loaded(dsn, namespace, corpus, progress)
        dataset = f"beir:{name}" + (f":{queries}" if queries else "")
        if decoys:
            cases += decoy_cases(decoys)
            dataset += f"+decoys:{Path(decoys.partition(':')[0]).resolve().name}"
    elif cases_file:
        cases = load_cases(cases_file)[: limit or None]
        dataset = f"cases:{Path(cases_file).name}"
    elif cases is not None:
        cases = cases[: limit or None]
        dataset = dataset or "cases"
    else:
        raise RuntimeError("give a cases file or --beir DIR")
    report = {"dataset": dataset, "cases": len(cases), "k": k, "modes": {}}
    with connect(dsn) as conn:
        if role:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        # retrieval settings for this run only (session GUCs pgkb.<key>, read by kb.setting)
        for key, value in (settings or {}).items():
            conn.execute("SELECT set_config(%s, %s, false)", (f"pgkb.{key}", str(value)))
            conn.execute("SELECT kb.setting(%s)", (key,))  # a wrong value is refused before any case runs
        config = configuration(conn, k)
        for m in modes:
            summary, by_category, results = run_mode(conn, cases, m, k, namespace, progress, on_case)
            params = {
                "k": k,
                "limit": limit,
                "namespace": namespace,
                "queries": queries,
                "qrels": qrels,
                "unanswerable": unanswerable,
                "decoys": decoys,
                "settings": settings or {},
            }
            run_id = store_run(conn, dataset, m, params, summary, by_category, results, config, namespace)
            report["modes"][m] = {"run_id": run_id, "metrics": summary, "by_category": by_category}
            if on_stored:
                on_stored(m, run_id)
    return report


TABLE_COLUMNS = (
    "ndcg@10",
    "mrr@10",
    "recall@1",
    "recall@10",
    "recall@100",
    "pass_top1",
    "pass_top3",
    "answered_when_found",
    "answer_precision",
    "no_answer_accuracy",
    "answerable_no_rows",
    "low_confidence_share",
    "calibration_error",
    "forbidden_hits",
    "errors",
    "latency_p50_ms",
    "latency_p95_ms",
)


def format_table(report: dict) -> str:
    header = f"{'mode':<8} " + " ".join(f"{c:>12}" for c in TABLE_COLUMNS)
    lines = [f"{report['dataset']}  ({report['cases']} cases, k={report['k']})", header]

    def row(label: str, metrics_: dict) -> str:
        values = []
        for c in TABLE_COLUMNS:
            v = metrics_.get(c)
            values.append(f"{'-':>12}" if v is None else f"{v:>12.4g}" if isinstance(v, float) else f"{v:>12}")
        return f"{label:<8} " + " ".join(values)

    for mode, data in report["modes"].items():
        lines.append(row(mode, data["metrics"]))
        # one row per category when the cases have several (e.g. kind = same | cross, unanswerable)
        categories = data.get("by_category") or {}
        if len(categories) > 1:
            lines.extend(row(f"  {name}", m) for name, m in sorted(categories.items()))
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(report["modes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    bars = ("ndcg@10", "mrr@10", "recall@10")
    width = 0.8 / len(bars)
    for i, key in enumerate(bars):
        values = [report["modes"][m]["metrics"].get(key) or 0 for m in modes]
        left.bar([x + i * width for x in range(len(modes))], values, width, label=key)
    left.set_xticks([x + width for x in range(len(modes))], modes)
    left.set_ylim(0, 1)
    left.set_title(f"{report['dataset']}: quality per mode")
    left.legend()
    ks = metrics.RECALL_KS
    for m in modes:
        right.plot(ks, [report["modes"][m]["metrics"].get(f"recall@{k}") or 0 for k in ks], marker="o", label=m)
    right.set_xscale("log")
    right.set_xticks(ks, [str(k) for k in ks])
    right.set_ylim(0, 1)
    right.set_xlabel("k")
    right.set_title("Recall@k")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(args) -> int:
    report = evaluate(
        load_settings().dsn,
        cases_file=args.cases,
        beir=args.beir,
        queries=args.queries,
        qrels=args.qrels,
        mode=args.mode,
        k=args.k,
        limit=args.limit,
        namespace=args.namespace,
        corpus_sample=args.corpus_sample,
        unanswerable=args.unanswerable,
        decoys=args.decoys,
        category_key=args.category_key or None,
        settings=dict(item.split("=", 1) for item in (args.set or [])),
        progress=not args.json and sys.stderr.isatty(),
    )
    if args.plot:
        plot(report, args.plot)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(format_table(report))
    return 0
