"""The decision on every row (docs/RETRIEVAL.md, "The decision"): the probability is the answerability
model's logistic function of the call's signals, applied in SQL; two settings turn it into the decision;
a model is bounded when written and checked when read; `pgkb fit-answerability` fits one from a knowledge
base's golden cases, refuses too little data and can be undone. Hash model: these are rules about how the
probability is computed and used, not about its quality (the quality gate measures that with the bundled
model)."""

from __future__ import annotations

import json
import math
import re

import psycopg
import pytest
from helpers import insert_document
from psycopg.types.json import Jsonb

from harness import answerability
from harness.retrieval import explain, retrieve

DOCS = {
    "refunds.md": "# Refunds\n\nCustomers may request a refund within 14 days of delivery.",
    "travel.md": "# Travel\n\nHotels in Shanghai are reimbursed up to 600 yuan a night.",
    "oncall.md": "# On-call\n\nThe primary on-call engineer acknowledges a page within 15 minutes.",
}
KNOWN = {
    "lexical": {"intercept": -1.0, "lexical_coverage": 4.0, "identifier_found": 1.0},
    "dense": {"intercept": 0.5, "dense_z": 0.3, "dense_cosine": 0.2},
    "hybrid": {"intercept": -0.5, "lexical_coverage": 2.0, "dense_z": 0.4, "legs_agree": 1.0},
}


@pytest.fixture
def kb(rolled_back_db):
    for source, body in DOCS.items():
        insert_document(rolled_back_db, source, body)
    return rolled_back_db


def use_model(conn, coefficients) -> int:
    conn.execute("UPDATE kb.answerability_models SET active = false WHERE active")
    return conn.execute(
        "INSERT INTO kb.answerability_models (fitted_on, coefficients, active) VALUES ('{}', %s, true) RETURNING id",
        (Jsonb(coefficients),),
    ).fetchone()["id"]


@pytest.mark.parametrize("mode", ["lexical", "dense", "hybrid"])
def test_the_probability_is_the_models_logistic_function_of_the_signals(kb, mode):
    model_id = use_model(kb, KNOWN)
    kb.execute("SET pgkb.no_evidence_probability = 0")
    ex = explain(kb, "refund within 14 days", mode=mode)["answerability"]
    assert ex["model"] == f"fit {model_id}" and ex["mode"] == mode
    z = KNOWN[mode]["intercept"] + sum(
        w * ex["signals"][k]["value"] for k, w in KNOWN[mode].items() if k != "intercept"
    )
    assert ex["probability"] == pytest.approx(1 / (1 + math.exp(-z)), abs=6e-4)
    for name, s in ex["signals"].items():
        assert s["weight"] == KNOWN[mode].get(name, 0)
        assert s["contribution"] == pytest.approx(s["value"] * s["weight"], abs=6e-4)
    assert set(ex["signals"]) == set(kb.execute("SELECT kb.answerability_signal_names() AS n").fetchone()["n"])


def test_every_row_carries_the_decision_and_the_probability_as_its_evidence(kb):
    use_model(kb, KNOWN)
    rows = retrieve(kb, "refund within 14 days", mode="lexical")
    ex = explain(kb, "refund within 14 days", mode="lexical")
    assert rows and {r["answerability"] for r in rows} == {ex["answerability"]["decision"]}
    assert {r["evidence"] for r in rows} == {ex["answerability"]["probability"]} == {ex["evidence"]}


def test_the_decision_follows_the_two_thresholds_and_no_evidence_returns_no_rows(kb):
    use_model(kb, KNOWN)
    query = "refund within 14 days"
    p = explain(kb, query, mode="lexical")["answerability"]["probability"]
    assert 0 < p < 1

    def decided(answer: float, no_evidence: float):
        kb.execute(f"SET pgkb.answer_probability = {answer}")
        kb.execute(f"SET pgkb.no_evidence_probability = {no_evidence}")
        rows = retrieve(kb, query, mode="lexical")
        return rows, explain(kb, query, mode="lexical")["answerability"]["decision"]

    rows, decision = decided(round(p - 0.01, 3), 0)
    assert decision == "answer" and rows
    rows, decision = decided(round(p + 0.01, 3), round(p - 0.01, 3))
    assert decision == "low confidence" and rows and {r["answerability"] for r in rows} == {"low confidence"}
    rows, decision = decided(0.99, round(p + 0.01, 3))
    assert decision == "no evidence" and rows == []
    kb.execute("SET pgkb.no_evidence_cutoff = false")
    rows = retrieve(kb, query, mode="lexical")
    assert rows and {r["answerability"] for r in rows} == {"no evidence"}


def test_a_question_nothing_matches_has_probability_zero_and_no_rows(kb):
    ex = explain(kb, "zyxwvut qqqqq", mode="lexical")
    assert ex["answerability"]["probability"] == 0 and ex["answerability"]["decision"] == "no evidence"
    assert retrieve(kb, "zyxwvut qqqqq", mode="lexical") == []


def test_the_reason_sentence_reads_the_numbers_beside_it(kb):
    use_model(kb, KNOWN)
    kb.execute("SET pgkb.no_evidence_probability = 0.2")
    for query in ["refund within 14 days", "hotels Shanghai", "on-call page", "refund hotels page engineer"]:
        for mode in ("lexical", "dense", "hybrid"):
            a = explain(kb, query, mode=mode)["answerability"]
            head, _, rests_on = a["reason"].partition("; it rests most on ")
            p, high, low = a["probability"], a["answer_probability"], a["no_evidence_probability"]
            if a["decision"] == "answer":
                assert p >= high and head == f"probability {p:.3f} is at or above answer_probability {high}: answer"
            elif a["decision"] == "low confidence":
                assert low <= p < high and head == (
                    f"probability {p:.3f} is below answer_probability {high} and at or above "
                    f"no_evidence_probability {low}: low confidence"
                )
            else:
                assert (
                    p < low
                    and head == f"probability {p:.3f} is below no_evidence_probability {low}: no evidence (no rows)"
                )
            for name, value in re.findall(r"(\w+) ([+-]?[0-9.]+)", rests_on):
                assert float(value) == pytest.approx(a["signals"][name]["contribution"], abs=1e-3)


def test_coefficients_are_bounded_when_written(kb):
    for bad in (
        {"lexical": {"intercept": 51}, "dense": {}, "hybrid": {}},
        {"lexical": {"intercept": "high"}, "dense": {}, "hybrid": {}},
        {"lexical": {}, "dense": {}, "hybrid": {}, "rrf": {}},
    ):
        with pytest.raises(psycopg.errors.CheckViolation), kb.transaction():
            use_model(kb, bad)


def test_a_model_with_an_unknown_signal_is_refused_when_read_naming_it(kb):
    model_id = use_model(kb, {"lexical": {"intercept": 0, "moon_phase": 1.0}, "dense": {}, "hybrid": {}})
    with pytest.raises(psycopg.Error) as error, kb.transaction():
        retrieve(kb, "refund", mode="lexical")
    message = str(error.value)
    assert f"id {model_id}" in message and "lexical.moon_phase: unknown signal" in message


def test_without_a_fitted_model_the_shipped_default_is_in_force(kb):
    assert explain(kb, "refund", mode="lexical")["answerability"]["model"] == "shipped"
    shipped = kb.execute("SELECT kb.shipped_answerability_model() AS m").fetchone()["m"]
    assert kb.execute("SELECT kb.answerability_model_error(%s) AS e", (Jsonb(shipped),)).fetchone()["e"] is None


def _fit_cases(conn, tmp_path, answerable: int, unanswerable: int):
    words = [f"topic{i:02d}word" for i in range(answerable)]
    for i, w in enumerate(words):
        insert_document(conn, f"doc{i:02d}.md", f"# Note {i}\n\nThe {w} procedure is written here.", namespace="fit")
    conn.commit()
    cases = [{"id": f"a{i}", "query": f"{w} procedure", "expected": [f"doc{i:02d}.md"]} for i, w in enumerate(words)]
    cases += [{"id": f"u{i}", "query": f"unheardof{i:02d}term", "expected": []} for i in range(unanswerable)]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([c | {"namespace": "fit"} for c in cases]))
    return str(path)


def test_fit_answerability_refuses_too_little_data_naming_what_is_missing(fresh_db, dsn, tmp_path):
    path = _fit_cases(fresh_db, tmp_path, answerable=8, unanswerable=4)
    with pytest.raises(RuntimeError, match=r"lexical: 12 evaluated cases, at least 40 are needed"):
        answerability.fit_answerability(dsn, cases_files=[path], judged=False, modes=["lexical"])
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.answerability_models").fetchone()["n"] == 0


def test_fit_answerability_fits_validates_writes_and_can_be_undone(fresh_db, dsn, tmp_path):
    path = _fit_cases(fresh_db, tmp_path, answerable=30, unanswerable=20)
    result = answerability.fit_answerability(dsn, cases_files=[path], judged=False, modes=["lexical"])
    assert result["replaced"] == "shipped" and result["written"]
    validation = result["validation"]["lexical"]
    assert validation["before"]["cases"] == validation["after"]["cases"] == 50
    assert validation["after"]["balanced_accuracy"] >= 0.9, validation
    row = fresh_db.execute("SELECT * FROM kb.answerability_models WHERE active").fetchone()
    assert row["id"] == result["written"] and row["coefficients"]["lexical"] == result["coefficients"]["lexical"]
    shipped = fresh_db.execute("SELECT kb.shipped_answerability_model() AS m").fetchone()["m"]
    assert row["coefficients"]["hybrid"] == shipped["hybrid"], "a mode not fitted keeps the model in force"
    assert explain(fresh_db, "topic03word procedure", mode="lexical", namespace="fit")["answerability"]["model"] == (
        f"fit {row['id']}"
    )
    assert "shipped default" in answerability.undo(dsn)
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.answerability_models WHERE active").fetchone()["n"] == 0
    with pytest.raises(RuntimeError, match="no fitted model is active"):
        answerability.undo(dsn)
