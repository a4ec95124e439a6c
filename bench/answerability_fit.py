"""Fit and validate the shipped answerability model (kb.shipped_answerability_model) across datasets.

Two steps, each printing JSON and a short table:

  cases   golden cases from a BEIR folder for a namespace that holds part of its corpus: a query
          whose relevant documents are loaded is answerable (expected: those), one whose relevant
          documents are not loaded is unanswerable (its gold passages were dropped; the passages
          left around it are the decoys of its own kind). Writes a cases file for `pgkb eval`.

  fit     reads evaluated cases (kb.eval_results.answerability, written by `pgkb eval`) of runs
          grouped by dataset, fits each mode's logistic model on all but one dataset and scores the
          one left out (leave-one-dataset-out), then fits on all: the coefficients to ship.

    python bench/answerability_fit.py cases --dsn DSN --beir ../shared/datasets/cmrc2018 \\
        --namespace beir-cmrc2018-sample311-minus40 --limit 400 --out /tmp/cmrc-cases.json
    python bench/answerability_fit.py fit --runs xquad=DSN:1,2,3 --runs golden=DSN2:4,5,6 ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import answerability, evaluate, metrics  # noqa: E402
from harness.db import connect  # noqa: E402

# the shipped defaults of answer_probability and no_evidence_probability (sql/005_settings/01_catalogue.sql)
THRESHOLDS = {"answer_probability": 0.5, "no_evidence_probability": 0.08}


TABLE_KEYS = (
    "cases",
    "answered_when_found",
    "answer_precision",
    "no_answer_accuracy",
    "answerable_no_rows",
    "no_answer_no_rows",
    "low_confidence_share",
    "calibration_error",
    "brier",
)


def print_table(label: str, rows: dict[str, dict]) -> None:
    """The short table (stderr) beside the JSON: one row per set, the decision's metrics."""
    print(f"{label:<40}" + "".join(f"{k[:20]:>21}" for k in TABLE_KEYS), file=sys.stderr)
    for name, m in rows.items():
        print(
            f"{name:<40}" + "".join(f"{'-' if m.get(k) is None else m[k]!s:>21}" for k in TABLE_KEYS), file=sys.stderr
        )


def cases(args) -> int:
    _, beir_cases = evaluate.load_beir(args.beir, args.queries, args.qrels, args.limit, None)
    with connect(args.dsn) as conn:
        loaded = {
            r["source"] for r in conn.execute("SELECT source FROM kb.documents WHERE namespace = %s", (args.namespace,))
        }
    out = []
    for c in beir_cases:
        present = [d for d in c.expected if d in loaded]
        out.append(
            {
                "id": c.id,
                "category": "answerable" if present else "unanswerable",
                "query": c.query,
                "expected": present,
                "namespace": args.namespace,
            }
        )
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0), encoding="utf-8")
    answerable = sum(1 for c in out if c["expected"])
    print(json.dumps({"cases": len(out), "answerable": answerable, "unanswerable": len(out) - answerable}))
    return 0


def examples_of(spec: str) -> tuple[str, list[answerability.Example]]:
    group, _, rest = spec.partition("=")
    dsn, _, ids = rest.rpartition(":")
    with connect(dsn) as conn:
        examples = answerability.examples_of_runs(conn, [int(i) for i in ids.split(",")])
    for e in examples:
        e.case_id = f"{group}:{e.case_id}"
    return group, examples


def fit(args) -> int:
    groups: dict[str, list[answerability.Example]] = {}
    for spec in args.runs:
        group, examples = examples_of(spec)
        groups.setdefault(group, []).extend(examples)
    report: dict = {"held_out": {}, "coefficients": {}, "in_sample": {}}
    for mode in answerability.MODES:
        by_group = {g: [e for e in ex if e.mode == mode] for g, ex in groups.items()}
        if not any(by_group.values()):
            continue
        for held, test in by_group.items():
            train = [e for g, ex in by_group.items() if g != held for e in ex]
            if not test or not train:
                continue
            coefficients = answerability.fit_mode(train, mode)
            probabilities = [answerability.probability(coefficients, e.signals) for e in test]
            report["held_out"].setdefault(mode, {})[held] = answerability.scored(test, probabilities, THRESHOLDS)
        everything = [e for ex in by_group.values() for e in ex]
        coefficients = answerability.fit_mode(everything, mode)
        report["coefficients"][mode] = coefficients
        report["in_sample"][mode] = {
            g: answerability.scored(ex, [answerability.probability(coefficients, e.signals) for e in ex], THRESHOLDS)
            for g, ex in by_group.items()
            if ex
        }
    print(json.dumps(report, indent=1))
    print_table(
        "held out / mode", {f"{g} / {mode}": m for mode, held in report["held_out"].items() for g, m in held.items()}
    )
    return 0


def decisions(args) -> int:
    """Both sides of the decision for stored runs, by category: what `pgkb eval` reports, read back
    from kb.eval_results (runs stored before the probability: the decision from its rows and its
    low-confidence flag, no calibration)."""
    report = {}
    for spec in args.runs:
        label, _, rest = spec.partition("=")
        dsn, _, ids = rest.rpartition(":")
        with connect(dsn) as conn:
            rows = conn.execute(
                """SELECT r.run_id, r.category, r.expected, r.returned, r.first_relevant_rank, r.low_confidence,
                          to_jsonb(r) -> 'answerability' AS answerability, e.mode
                   FROM kb.eval_results AS r JOIN kb.eval_runs AS e ON e.id = r.run_id
                   WHERE r.run_id = ANY(%s) AND r.error IS NULL""",
                ([int(i) for i in ids.split(",")],),
            ).fetchall()
        for r in rows:
            decision = (r["answerability"] or {}).get("decision") or (
                "no evidence" if not r["returned"] else "low confidence" if r["low_confidence"] else "answer"
            )
            outcome = metrics.case_outcome(
                r["returned"], r["expected"], [], decision, (r["answerability"] or {}).get("probability")
            )
            for key in (f"{label}/{r['mode']}", f"{label}/{r['mode']}/{r['category'] or 'uncategorised'}"):
                report.setdefault(key, []).append(outcome)
    table = {key: metrics.decision_metrics(outcomes) | {"cases": len(outcomes)} for key, outcomes in report.items()}
    print(json.dumps(table, indent=1))
    print_table("set", dict(sorted(table.items())))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cases")
    p.add_argument("--dsn", required=True)
    p.add_argument("--beir", required=True)
    p.add_argument("--queries")
    p.add_argument("--qrels")
    p.add_argument("--namespace", required=True)
    p.add_argument("--limit", type=int)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cases)
    p = sub.add_parser("decisions")
    p.add_argument("--runs", action="append", required=True, metavar="LABEL=DSN:ID,ID")
    p.set_defaults(func=decisions)
    p = sub.add_parser("fit")
    p.add_argument("--runs", action="append", required=True, metavar="GROUP=DSN:ID,ID")
    p.set_defaults(func=fit)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
