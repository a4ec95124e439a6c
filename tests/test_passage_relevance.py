"""Each passage's relevance (docs/RETRIEVAL.md, "A passage's relevance"): every row carries a number in
[0, 1] that is the shipped relevance model's logistic function of the passage's own signals, shown beside
them in the explain object, and it follows what the passage holds, not where it sits in one call. Hash
model: these are rules about how the relevance is computed and carried; its quality is measured by
`python -m bench passage_relevance` with the bundled model."""

from __future__ import annotations

import math

import pytest
from helpers import insert_document

from harness.retrieval import explain, retrieve

DOCS = {
    "refunds.md": "# Refunds\n\nCustomers may request a refund within 14 days of delivery.",
    "travel.md": "# Travel\n\nHotels in Shanghai are reimbursed up to 600 yuan a night.",
    "oncall.md": "# On-call\n\nThe primary on-call engineer acknowledges a page within 15 minutes.",
}
MODES = ["lexical", "dense", "hybrid"]


@pytest.fixture
def kb(rolled_back_db):
    for source, body in DOCS.items():
        insert_document(rolled_back_db, source, body)
    # every call returns its passages, so that each one's relevance can be read
    rolled_back_db.execute("SET pgkb.no_evidence_probability = 0")
    return rolled_back_db


def relevance_of(conn, question: str, source: str, mode: str) -> float:
    rows = retrieve(conn, question, mode=mode, k=3)
    return next(r["relevance"] for r in rows if r["source"] == source)


@pytest.mark.parametrize("mode", MODES)
def test_every_row_carries_the_models_logistic_function_of_its_passages_signals(kb, mode):
    question = "refund within 14 days"
    rows = retrieve(kb, question, mode=mode, k=3)
    shown = explain(kb, question, mode=mode, k=3)["relevance"]
    assert rows and len(shown["passages"]) == len(rows)
    coefficients = shown["coefficients"]
    assert set(coefficients) - {"intercept"}, "the model weighs at least one signal"
    for row, passage in zip(rows, shown["passages"], strict=True):
        z = coefficients["intercept"] + sum(
            weight * passage["signals"][name] for name, weight in coefficients.items() if name != "intercept"
        )
        assert 0 <= row["relevance"] <= 1
        assert row["relevance"] == pytest.approx(passage["relevance"])
        assert row["relevance"] == pytest.approx(1 / (1 + math.exp(-z)), abs=6e-4)


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_passage_is_more_relevant_to_the_question_it_answers_than_to_another(kb, mode):
    answered = relevance_of(kb, "How many days do customers have to request a refund?", "refunds.md", mode)
    # shares one word with the refunds passage, so every mode returns it
    other = relevance_of(kb, "Which customers stay in hotels in Shanghai?", "refunds.md", mode)
    assert answered > other


def test_a_call_that_declines_returns_no_rows_and_no_relevance(kb):
    question = "Which customers stay in hotels in Shanghai?"  # touches two passages, answers neither
    assert retrieve(kb, question, mode="lexical", k=3), "the legs find passages"
    kb.execute("SET pgkb.no_evidence_probability = 0.99")
    assert retrieve(kb, question, mode="lexical", k=3) == []
    assert explain(kb, question, mode="lexical", k=3)["relevance"]["passages"] == []
