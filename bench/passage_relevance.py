"""Fit and validate the passage relevance model (kb_pipeline.passage_relevance_model) across datasets.

Every passage of k = 10 of every case of evaluated runs (the cases of `pgkb eval`, kb.eval_results) is
asked again through kb_retrieve_explain, which gives each passage's signals and relevance; a passage is
relevant when its source is one the case expects (an unanswerable case expects none). Each mode's
logistic model is fitted on the --fit datasets and scored on the others, which it never saw; the
baseline in the same run is what a client had before: the call's evidence as every passage's relevance,
and the fused score (it orders one call only). Pooled over calls, so the AUC says whether a relevance
of one call compares with another's.

    python -m bench passage_relevance \\
        --runs xquad-cross=postgresql://…/evaldb_head:13 --runs cmrc=postgresql://…/evaldb_head:19 … \\
        --fit xquad-cross,cmrc --modes hybrid,dense,lexical [--cache /var/tmp/passage-relevance.json]

Prints JSON, a short table, and the fitted coefficients as kb_pipeline.passage_relevance_model's body.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import answerability, metrics, retrieval  # noqa: E402
from harness.db import connect  # noqa: E402

SIGNALS = {
    "lexical": ("lexical_coverage", "identifier_hit", "reciprocal_rank", "call_probability"),
    "dense": ("dense_z", "dense_cosine", "cross_lingual", "reciprocal_rank", "call_probability"),
    "hybrid": (
        "lexical_coverage",
        "dense_z",
        "dense_cosine",
        "both_legs",
        "identifier_hit",
        "cross_lingual",
        "reciprocal_rank",
        "call_probability",
    ),
}
K = 10


def cases_of_run(dsn: str, run_id: int) -> list[dict]:
    with connect(dsn) as conn:
        return conn.execute(
            """SELECT case_id, query, expected, namespace, context, as_of
               FROM kb.eval_results WHERE run_id = %s AND error IS NULL ORDER BY case_id""",
            (run_id,),
        ).fetchall()


def passages(dsn: str, run_id: int, mode: str) -> list[dict]:
    """Each passage of each case of the run asked again in ``mode``: its signals, relevance, fused score,
    the call's evidence and whether its source is expected."""
    found = []
    with connect(dsn) as conn:
        for case in cases_of_run(dsn, run_id):
            explain = retrieval.explain(
                conn,
                case["query"],
                k=K,
                mode=mode,
                namespace=case["namespace"],
                context=case["context"] or None,
                as_of=case["as_of"],
            )
            rows = {r["rank"]: r for r in explain.get("results") or []}
            for p in (explain.get("relevance") or {}).get("passages") or []:
                row = rows.get(p["rank"])
                if row is None:
                    continue
                found.append(
                    {
                        "case": case["case_id"],
                        "signals": p["signals"],
                        "relevance": p["relevance"],
                        "score": row["score"],
                        "evidence": row["evidence"],
                        "relevant": row["source"] in (case["expected"] or []),
                    }
                )
    return found


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """The chance that a relevant passage scores above an irrelevant one (ties count half)."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    if y.all() or not y.any():
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    positives = y.sum()
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * (len(s) - positives)))


def calibration(probabilities: list[float], labels: list[bool]) -> dict:
    """Calibration error and Brier score as `pgkb eval` computes them (harness.metrics.calibration)."""
    outcomes = [{"probability": p, "answer_correct": y} for p, y in zip(probabilities, labels, strict=True)]
    measured = metrics.calibration(outcomes, min_cases=1)
    return {"brier": measured["brier"], "ece": measured["calibration_error"]}


def scored(examples: list[dict], probabilities: list[float]) -> dict:
    labels = [e["relevant"] for e in examples]
    return {
        "passages": len(examples),
        "relevant_share": round(float(np.mean(labels)), 3),
        "auc_relevance": auc(probabilities, labels),
        "auc_call_evidence": auc([e["evidence"] for e in examples], labels),
        "auc_fused_score": auc([e["score"] for e in examples], labels),
        "relevance": calibration(probabilities, labels),
        "call_evidence": calibration([e["evidence"] for e in examples], labels),
    }


def fit(examples: list[dict], mode: str) -> dict[str, float]:
    x = np.array([[float(e["signals"].get(s, 0.0)) for s in SIGNALS[mode]] for e in examples])
    y = np.array([1.0 if e["relevant"] else 0.0 for e in examples])
    weights = answerability.fit_logistic(x, y)
    return {name: round(float(w), 4) for name, w in zip(("intercept", *SIGNALS[mode]), weights, strict=True)}


def parse_runs(given: list[str]) -> dict[str, tuple[str, int]]:
    runs = {}
    for item in given:
        name, _, where = item.partition("=")
        dsn, _, run_id = where.rpartition(":")
        runs[name] = (dsn, int(run_id))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", action="append", required=True, help="NAME=DSN:RUN_ID, e.g. cmrc=postgresql://…:19")
    parser.add_argument("--fit", required=True, help="the datasets the model is fitted on, e.g. cmrc,scifact")
    parser.add_argument("--modes", default="hybrid,dense,lexical", help="e.g. hybrid")
    parser.add_argument("--cache", type=Path, help="passages asked before: read, and what it lacks asked and added")
    args = parser.parse_args()
    runs, fit_on, modes = parse_runs(args.runs), set(args.fit.split(",")), args.modes.split(",")
    collected = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}
    for mode in modes:  # what the cache lacks is asked, and the cache written after each run
        for name, (dsn, run) in runs.items():
            if name not in collected.setdefault(mode, {}):
                collected[mode][name] = passages(dsn, run, mode)
                if args.cache:
                    args.cache.write_text(json.dumps(collected))
    report: dict = {"fit_on": sorted(fit_on), "k": K, "modes": {}}
    for mode in modes:
        training = [e for name in fit_on for e in collected[mode][name]]
        coefficients = fit(training, mode)
        per_dataset = {}
        for name, examples in collected[mode].items():
            if examples:
                fitted = [answerability.probability(coefficients, e["signals"]) for e in examples]
                per_dataset[name] = {"held_out": name not in fit_on, **scored(examples, fitted)}
        report["modes"][mode] = {"coefficients": coefficients, "datasets": per_dataset}
    print(json.dumps(report, indent=2))
    print(f"\n{'mode':7} {'dataset':14} {'held out':8} {'n':>6} {'AUC rel':>8} {'AUC ev':>7} {'AUC fused':>9} "
          f"{'ECE rel':>8} {'ECE ev':>7} {'Brier rel':>9} {'Brier ev':>8}")  # fmt: skip
    for mode, result in report["modes"].items():
        for name, s in result["datasets"].items():
            print(
                f"{mode:7} {name:14} {str(s['held_out']):8} {s['passages']:>6} {s['auc_relevance'] or 0:>8.3f} "
                f"{s['auc_call_evidence'] or 0:>7.3f} {s['auc_fused_score'] or 0:>9.3f} {s['relevance']['ece']:>8.3f} "
                f"{s['call_evidence']['ece']:>7.3f} {s['relevance']['brier']:>9.3f} {s['call_evidence']['brier']:>8.3f}"
            )
    body = {"coefficients": {mode: result["coefficients"] for mode, result in report["modes"].items()}}
    print("\nkb_pipeline.passage_relevance_model():\n" + json.dumps(body, indent=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
