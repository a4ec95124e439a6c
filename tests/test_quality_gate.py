"""Regression gate: retrieval quality on the bilingual sample corpus and its golden
cases (examples/) must not drop below the recorded floors. Lexical paths run with
the `hash` provider; the hybrid path with the real bundled model (e5-small).

Floors are the figures measured when the gate was set (see docs/EVALUATION.md) minus
a small margin; raise them when quality improves, never lower them silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import loader
from harness.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"
CASES = ROOT / "examples" / "eval" / "cases.json"

LEXICAL_FLOORS = {"pass_top3": 0.66, "mrr@10": 0.67, "ndcg@10": 0.68, "no_answer_accuracy": 0.83}
HYBRID_FLOORS = {"pass_top3": 0.85, "mrr@10": 0.82, "ndcg@10": 0.84, "no_answer_accuracy": 0.80}


def _check(metrics: dict, floors: dict) -> list[str]:
    return [f"{k} {metrics[k]} < floor {v}" for k, v in floors.items() if (metrics[k] or 0) < v]


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
    assert _check(metrics, LEXICAL_FLOORS) == []


@pytest.mark.real_model
def test_hybrid_quality_gate_with_bundled_model(migrated_db, dsn):
    summary = loader.ingest(dsn, [str(CORPUS)], progress=False)
    assert summary.failed == []
    report = evaluate(dsn, cases_file=str(CASES), mode="hybrid,dense", k=10, progress=False)
    hybrid = report["modes"]["hybrid"]["metrics"]
    dense = report["modes"]["dense"]["metrics"]
    assert hybrid["errors"] == 0
    _assert_lifecycle_clean(report["modes"]["hybrid"]["by_category"])
    print("hybrid gate metrics:", hybrid, "dense:", dense)
    assert _check(hybrid, HYBRID_FLOORS) == []
    assert hybrid["mrr@10"] >= dense["mrr@10"], "hybrid fell below its dense leg"
