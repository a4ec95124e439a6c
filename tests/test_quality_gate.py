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

# Overall floors over the 88 cases. Measured 2026-12-02 (e5-small for hybrid, docs/EVALUATION.md,
# "Golden cases") minus about 0.03. Lexical cannot answer a question whose only answer is in the
# other language (29 cross_lingual cases), so its overall figures are low. A near miss passes as
# no rows or as "low confidence", which the answer-type check gives a typed question whose top
# passages hold no value of its type bound to its subject (docs/RETRIEVAL.md).
# measured: lexical pass@3 0.4098, MRR@10 0.3913, nDCG@10 0.3998, no-answer 0.9259; hybrid 0.8689,
# 0.8462, 0.8756, 0.9259
LEXICAL_FLOORS = {"pass_top3": 0.38, "mrr@10": 0.36, "ndcg@10": 0.37, "no_answer_accuracy": 0.89}
HYBRID_FLOORS = {"pass_top3": 0.84, "mrr@10": 0.81, "ndcg@10": 0.84, "no_answer_accuracy": 0.89}

# hybrid, per category (one spelling each: examples/README.md): measured as above minus one case.
# The targets of issue 26 are above some of these (golden cross_lingual pass@3 >= 0.95): the gate
# guards what is reached.
HYBRID_CATEGORY_FLOORS = {
    "cross_lingual": {"pass_top3": 0.72, "ndcg@10": 0.75},  # measured 0.7586 / 0.7856 (29 cases)
    "no_answer": {"no_answer_accuracy": 0.87},  # measured 0.9167 (24 cases, 21 near misses)
    "lifecycle": {"pass_top3": 0.85},  # measured 1.0 (7 answerable of 8 cases)
}

_SHOWN = ("cases", "pass_top1", "pass_top3", "mrr@10", "ndcg@10", "no_answer_accuracy", "forbidden_hits")


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
    assert not failures, "; ".join(failures)
    assert hybrid["mrr@10"] >= dense["mrr@10"], "hybrid fell below its dense leg"
