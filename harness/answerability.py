"""Fit the answerability model (docs/RETRIEVAL.md, "The decision") from evaluated cases.

The database computes the signals and applies the model (kb_pipeline.judged); this module only
fits coefficients from cases the database evaluated (kb.eval_results.answerability) and writes
them to kb.answerability_models, where kb.answerability_model_error checks them.

* ``fit_logistic``: L2-regularised logistic regression by Newton's method (a few features,
  thousands of cases: exact and fast, no library beyond numpy).
* ``cross_validated``: k folds by a hash of the case id; each fold scored by a model fitted on
  the others, against the probability the model in force gave it.
* ``fit_answerability``: `pgkb fit-answerability`: evaluate the knowledge base's golden cases
  (files and/or its judged cases) in each mode, fit, validate, write; ``undo`` goes back.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from psycopg.types.json import Jsonb

from harness import metrics
from harness.db import connect

MODES = ("lexical", "dense", "hybrid")
# the signals each mode's model weighs: a leg the mode does not run gives nothing to weigh
MODE_SIGNALS = {
    "lexical": (
        "lexical_coverage",
        "ambiguous_coverage",
        "lexical_gap",
        "identifier_found",
        "answer_bound",
        "answer_unbound",
    ),
    "dense": ("dense_z", "dense_cosine", "dense_gap", "answer_bound", "answer_unbound", "cross_lingual"),
    "hybrid": (
        "lexical_coverage",
        "ambiguous_coverage",
        "lexical_gap",
        "dense_z",
        "dense_cosine",
        "dense_gap",
        "legs_agree",
        "identifier_found",
        "answer_bound",
        "answer_unbound",
        "cross_lingual",
    ),
}
# below these a fit says nothing a knowledge base can rely on: refuse
MIN_CASES = 40
MIN_EACH_CLASS = 10
FOLDS = 5
L2 = 1.0
COEFFICIENT_BOUND = 50.0


@dataclass
class Example:
    case_id: str
    mode: str
    signals: dict[str, float]
    correct: bool  # answerable and its passage in the top 3
    answerable: bool
    probability: float | None  # what the model in force said


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2, iterations: int = 50) -> np.ndarray:
    """Weights [intercept, w...] minimising the logistic loss plus l2/2 |w|^2 (the intercept is
    not penalised): Newton steps until they stop moving."""
    design = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-np.clip(design @ w, -30, 30)))
        gradient = design.T @ (p - y) + penalty * w
        hessian = (design * (p * (1 - p))[:, None]).T @ design + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return np.clip(w, -COEFFICIENT_BOUND, COEFFICIENT_BOUND)


def coefficients_for(mode: str, weights: np.ndarray) -> dict[str, float]:
    names = ("intercept", *MODE_SIGNALS[mode])
    return {name: round(float(w), 4) for name, w in zip(names, weights, strict=True)}


def probability(coefficients: dict[str, float], signals: dict[str, float]) -> float:
    """The logistic function kb_pipeline.answer_probability applies (the same bound of +-30)."""
    z = coefficients.get("intercept", 0.0) + sum(
        w * float(signals.get(k, 0.0)) for k, w in coefficients.items() if k != "intercept"
    )
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def fit_mode(examples: list[Example], mode: str) -> dict[str, float]:
    x = np.array([[float(e.signals.get(s, 0.0)) for s in MODE_SIGNALS[mode]] for e in examples])
    y = np.array([1.0 if e.correct else 0.0 for e in examples])
    return coefficients_for(mode, fit_logistic(x, y))


def fold_of(case_id: str, folds: int = FOLDS) -> int:
    return int(hashlib.sha256(case_id.encode()).hexdigest(), 16) % folds


def scored(examples: list[Example], probabilities: list[float], thresholds: dict[str, float]) -> dict:
    """The decision metrics (harness.metrics) of examples given their probabilities and the thresholds
    in force; calibration over all of them whatever their number (the caller reports the count)."""
    outcomes = []
    for e, p in zip(examples, probabilities, strict=True):
        decision = (
            "no evidence"
            if p < thresholds["no_evidence_probability"]
            else "answer"
            if p >= thresholds["answer_probability"]
            else "low confidence"
        )
        outcomes.append(
            {
                "answerable": e.answerable,
                "answer_correct": e.correct,
                "decision": decision,
                "probability": p,
                "no_rows": decision == "no evidence",
                "no_answer_pass": decision != "answer",
            }
        )
    # a knowledge base's folds are small: calibration is reported for all of them, with their count
    return metrics.decision_metrics(outcomes, calibration_min_cases=1) | {"cases": len(outcomes)}


def cross_validated(examples: list[Example], mode: str, thresholds: dict[str, float], folds: int = FOLDS) -> dict:
    """Each fold's cases scored by a model fitted on the other folds ("after") and by the
    probability the model in force gave them ("before"), pooled over the folds."""
    after: list[float] = [0.0] * len(examples)
    for f in range(folds):
        train = [e for e in examples if fold_of(e.case_id, folds) != f]
        held = [i for i, e in enumerate(examples) if fold_of(e.case_id, folds) == f]
        if not held:
            continue
        coefficients = fit_mode(train, mode)
        for i in held:
            after[i] = probability(coefficients, examples[i].signals)
    before = [e.probability if e.probability is not None else 0.0 for e in examples]
    return {"before": scored(examples, before, thresholds), "after": scored(examples, after, thresholds)}


def examples_of_runs(conn, run_ids: list[int]) -> list[Example]:
    """The evaluated cases of stored runs with the signals the database computed for them."""
    rows = conn.execute(
        """SELECT r.run_id, r.case_id, r.expected, r.first_relevant_rank, r.answerability
           FROM kb.eval_results AS r
           WHERE r.run_id = ANY(%s) AND r.answerability IS NOT NULL AND r.error IS NULL
           ORDER BY r.run_id, r.case_id""",
        (run_ids,),
    ).fetchall()
    return [
        Example(
            case_id=f"{r['case_id']}",
            mode=r["answerability"]["mode"],
            signals=r["answerability"]["signals"],
            correct=bool(r["expected"]) and r["first_relevant_rank"] is not None and r["first_relevant_rank"] <= 3,
            answerable=bool(r["expected"]),
            probability=r["answerability"].get("probability"),
        )
        for r in rows
    ]


def refusal(examples: list[Example], mode: str) -> str | None:
    """Why a mode cannot be fitted from these examples (None: it can)."""
    positives = sum(e.correct for e in examples)
    negatives = len(examples) - positives
    if len(examples) < MIN_CASES:
        return f"{mode}: {len(examples)} evaluated cases, at least {MIN_CASES} are needed"
    if positives < MIN_EACH_CLASS or negatives < MIN_EACH_CLASS:
        return (
            f"{mode}: {positives} cases answered in the top 3 and {negatives} not; at least {MIN_EACH_CLASS} of each "
            "are needed (add golden cases whose honest answer is no evidence, or judge more questions)"
        )
    return None


def thresholds_in_force(conn) -> dict[str, float]:
    row = conn.execute(
        """SELECT (kb.setting('answer_probability') #>> '{}')::float8 AS answer_probability,
                  (kb.setting('no_evidence_probability') #>> '{}')::float8 AS no_evidence_probability"""
    ).fetchone()
    return {"answer_probability": row["answer_probability"], "no_evidence_probability": row["no_evidence_probability"]}


def fit_answerability(
    dsn: str,
    *,
    cases_files: list[str],
    judged: bool,
    modes: list[str],
    k: int = 10,
    write: bool = True,
    progress: bool = False,
) -> dict:
    """Evaluate the golden cases in each mode with no cutoff (every call keeps its rows, so each case
    is labelled by where its passage ranks), fit each mode, cross-validate, and (write) store the
    model as the active one. Raises RuntimeError naming what is missing when there is too little data."""
    from harness import evaluate

    cases = []
    for path in cases_files:
        cases += evaluate.load_cases(path)
    sources = [f"cases:{p}" for p in cases_files]
    if judged:
        with connect(dsn) as conn:
            judged_cases = evaluate.judged_cases(conn)
        cases += judged_cases
        sources.append(f"kb.judged_cases ({len(judged_cases)})")
    if not cases:
        raise RuntimeError("fit-answerability: no cases: give golden case files and/or --judged")
    report = evaluate.evaluate(
        dsn,
        cases=cases,
        dataset="fit-answerability",
        mode=",".join(modes),
        k=k,
        settings={"no_evidence_probability": "0"},
        progress=progress,
    )
    run_ids = [m["run_id"] for m in report["modes"].values()]
    with connect(dsn) as conn:
        examples = examples_of_runs(conn, run_ids)
        thresholds = thresholds_in_force(conn)
        current = conn.execute("SELECT kb.answerability_model() AS m").fetchone()["m"]
        by_mode = {m: [e for e in examples if e.mode == m] for m in modes}
        problems = [p for m in modes if (p := refusal(by_mode[m], m))]
        if problems:
            raise RuntimeError("fit-answerability: too little data to fit: " + "; ".join(problems))
        coefficients = dict(current["coefficients"])
        validation = {}
        for m in modes:
            coefficients[m] = fit_mode(by_mode[m], m)
            validation[m] = cross_validated(by_mode[m], m, thresholds)
        problem = conn.execute("SELECT kb.answerability_model_error(%s) AS p", (Jsonb(coefficients),)).fetchone()["p"]
        if problem:
            raise RuntimeError(f"fit-answerability: the fitted model is not usable: {problem}")
        result = {
            "fitted_on": {"sources": sources, "cases": len(cases), "modes": modes, "runs": run_ids},
            "coefficients": coefficients,
            "validation": validation,
            "replaced": current["source"],
            "written": None,
        }
        if write:
            with conn.transaction():
                replaced = conn.execute("SELECT id FROM kb.answerability_models WHERE active").fetchone()
                conn.execute("UPDATE kb.answerability_models SET active = false WHERE active")
                result["written"] = conn.execute(
                    """INSERT INTO kb.answerability_models (fitted_on, coefficients, validation, replaced, active)
                       VALUES (%s, %s, %s, %s, true) RETURNING id""",
                    (
                        Jsonb(result["fitted_on"]),
                        Jsonb(coefficients),
                        Jsonb(validation),
                        replaced["id"] if replaced else None,
                    ),
                ).fetchone()["id"]
    return result


def undo(dsn: str) -> str:
    """Deactivate the active fitted model and reactivate the one it replaced (or the shipped default)."""
    with connect(dsn) as conn, conn.transaction():
        active = conn.execute("SELECT id, replaced FROM kb.answerability_models WHERE active FOR UPDATE").fetchone()
        if active is None:
            raise RuntimeError("fit-answerability --undo: no fitted model is active (the shipped default is in force)")
        conn.execute("UPDATE kb.answerability_models SET active = false WHERE id = %s", (active["id"],))
        if active["replaced"] is not None:
            conn.execute("UPDATE kb.answerability_models SET active = true WHERE id = %s", (active["replaced"],))
            return f"model {active['id']} undone: model {active['replaced']} is in force again"
        return f"model {active['id']} undone: the shipped default is in force again"


def format_validation(result: dict) -> str:
    keys = ("cases", "answered_when_found", "answer_precision", "no_answer_accuracy", "calibration_error", "brier")
    lines = [f"{'mode':<8} {'':<7}" + "".join(f"{k:>21}" for k in keys)]
    for mode, v in result["validation"].items():
        for side in ("before", "after"):
            values = "".join(f"{'-' if v[side].get(k) is None else v[side][k]!s:>21}" for k in keys)
            lines.append(f"{mode:<8} {side:<7}{values}")
    return "\n".join(lines)
