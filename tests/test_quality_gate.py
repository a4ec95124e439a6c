"""Regression gate: retrieval quality on the bilingual sample corpus and its golden
cases (examples/) must not drop below the recorded floors. Lexical paths run with
the `hash` provider; the hybrid path with the real bundled model (e5-small).

Floors are the figures measured when the gate was set (see docs/EVALUATION.md) minus
a small margin; raise them when quality improves, never lower them silently.

Besides the overall floors, the hybrid path has per-category floors for the cases that
cross languages (``cross_lingual``: a question in one language whose only answer is written in
the other), for the no-answer cases (``no_answer``: questions on the corpus's topics whose answer
is not there, most of them near misses with a value of the asked type about something else
nearby) and for the version chains (``lifecycle``). Every category's figures are printed with -s."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import loader
from harness.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"
CASES = ROOT / "examples" / "eval" / "cases.json"

# Overall floors over the 88 cases: the ranking and both sides of the decision (harness.metrics:
# answered_when_found, the answerable cases with their passage in the top 3 labelled "answer";
# answer_precision; no_answer_accuracy, the unanswerable ones not labelled "answer"), so that a hedge
# that improves one side shows on the other. Measured 2026-12-05 (e5-small for hybrid, the
# bilingual dictionary on, docs/RETRIEVAL.md, "Across languages") minus about 0.03.
# measured: lexical pass@3 0.8361, MRR@10 0.7295, nDCG@10 0.7725, answered when found 0.5098, answer
# precision 0.6667, no-answer 0.5185; hybrid pass@3 0.9016, MRR@10 0.847, nDCG@10 0.8691, 0.7273, 0.7407,
# 0.4815. The decision's sides were lowered with the dictionary (lexical 0.6786 / 0.8261 / 0.8519 and
# hybrid no-answer 0.6296 before it): a known defect, docs/STATUS.md.
LEXICAL_FLOORS = {
    "pass_top3": 0.80,
    "mrr@10": 0.69,
    "ndcg@10": 0.74,
    "answered_when_found": 0.48,
    "answer_precision": 0.63,
    "no_answer_accuracy": 0.48,
}
HYBRID_FLOORS = {
    "pass_top3": 0.85,
    "mrr@10": 0.82,
    "ndcg@10": 0.86,
    "answered_when_found": 0.65,
    # the same code gives 0.7358 on some machines and 0.74 or more on others (582fe50 measured
    # both ways): the floor holds the lower, so it guards against a change of the code, not of the CPU
    "answer_precision": 0.73,
    "no_answer_accuracy": 0.45,
}
# answerable cases that come back with no rows: at most this share (measured hybrid 3 of 61)
HYBRID_MAX_ANSWERABLE_NO_ROWS = 0.06

# hybrid, per category (one spelling each: examples/README.md): measured as above minus one case.
# The targets of issues 26 and 39 are above some of these (golden cross_lingual pass@3 >= 0.95, no
# answer >= 0.90): the gate guards what is reached.
HYBRID_CATEGORY_FLOORS = {
    "cross_lingual": {"pass_top3": 0.75, "ndcg@10": 0.77},  # measured 0.7931 / 0.806 (29 cases)
    "no_answer": {"no_answer_accuracy": 0.41},  # measured 0.4583 (24 cases, 21 near misses)
    "lifecycle": {"pass_top3": 0.85},  # measured 1.0 (7 answerable of 8 cases)
}

# the off-topic questions of examples/eval/off-topic.json (never fitted on): how many come back with
# no rows at the default settings (measured 12 of 20 in hybrid)
OFF_TOPIC_NO_ROWS_FLOOR = 11
OFF_TOPIC = ROOT / "examples" / "eval" / "off-topic.json"

_SHOWN = (
    "cases",
    "pass_top3",
    "ndcg@10",
    "answered_when_found",
    "answer_precision",
    "no_answer_accuracy",
    "answerable_no_rows",
    "forbidden_hits",
)


def _check(metrics: dict, floors: dict, label: str = "") -> list[str]:
    return [f"{label}{k} {metrics[k]} < floor {v}" for k, v in floors.items() if (metrics[k] or 0) < v]


def _check_categories(by_category: dict, floors: dict) -> list[str]:
    failures = []
    for category, category_floors in floors.items():
        if category not in by_category:
            failures.append(f"{category}: no case of this category was evaluated")
            continue
        failures += _check(by_category[category], category_floors, f"{category}: ")
    return failures


def _print_categories(mode: str, by_category: dict) -> None:
    print(f"\n{mode} by category:")
    print(f"  {'category':<22}" + "".join(f"{k:>20}" for k in _SHOWN))
    for category, m in sorted(by_category.items()):
        values = "".join(f"{'-' if m.get(k) is None else m[k]!s:>20}" for k in _SHOWN)
        print(f"  {category:<22}{values}")


def _assert_lifecycle_clean(by_category: dict) -> None:
    # a superseded, draft, expired or future document in the top 5 is never acceptable
    for category in ("lifecycle", "as_of"):
        assert by_category[category]["forbidden_hits"] == 0, category


def test_lexical_quality_gate(fresh_db, dsn):
    summary = loader.ingest(dsn, [str(CORPUS)], progress=False)
    assert summary.failed == []
    report = evaluate(dsn, cases_file=str(CASES), mode="lexical", k=10, progress=False)
    metrics = report["modes"]["lexical"]["metrics"]
    assert metrics["errors"] == 0
    _assert_lifecycle_clean(report["modes"]["lexical"]["by_category"])
    print("lexical gate metrics:", metrics)
    _print_categories("lexical", report["modes"]["lexical"]["by_category"])
    failures = _check(metrics, LEXICAL_FLOORS)
    assert not failures, "; ".join(failures)


@pytest.mark.real_model
def test_hybrid_quality_gate_with_bundled_model(migrated_db, dsn):
    summary = loader.ingest(dsn, [str(CORPUS)], progress=False)
    assert summary.failed == []
    report = evaluate(dsn, cases_file=str(CASES), mode="hybrid,dense", k=10, progress=False)
    hybrid = report["modes"]["hybrid"]["metrics"]
    dense = report["modes"]["dense"]["metrics"]
    by_category = report["modes"]["hybrid"]["by_category"]
    assert hybrid["errors"] == 0
    _assert_lifecycle_clean(by_category)
    print("hybrid gate metrics:", hybrid, "dense:", dense)
    _print_categories("hybrid", by_category)
    _print_categories("dense", report["modes"]["dense"]["by_category"])
    failures = _check(hybrid, HYBRID_FLOORS) + _check_categories(by_category, HYBRID_CATEGORY_FLOORS)
    if hybrid["answerable_no_rows"] > HYBRID_MAX_ANSWERABLE_NO_ROWS:
        failures.append(f"answerable_no_rows {hybrid['answerable_no_rows']} > {HYBRID_MAX_ANSWERABLE_NO_ROWS}")
    off_topic = evaluate(dsn, cases_file=str(OFF_TOPIC), mode="hybrid", k=8, progress=False)["modes"]["hybrid"]
    no_rows = round(off_topic["metrics"]["no_answer_no_rows"] * off_topic["metrics"]["cases"])
    print("off-topic questions with no rows:", no_rows, "of", off_topic["metrics"]["cases"])
    if no_rows < OFF_TOPIC_NO_ROWS_FLOOR:
        failures.append(f"off-topic questions with no rows {no_rows} < floor {OFF_TOPIC_NO_ROWS_FLOOR}")
    assert not failures, "; ".join(failures)
    assert hybrid["mrr@10"] >= dense["mrr@10"], "hybrid fell below its dense leg"
