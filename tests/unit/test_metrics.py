import math

from harness import metrics


def test_distinct_in_order_keeps_best_rank_of_each_document():
    assert metrics.distinct_in_order(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_ndcg_binary():
    assert metrics.ndcg_at(["x", "a"], {"a"}) == 1 / math.log2(3)
    assert metrics.ndcg_at(["a", "b"], {"a", "b"}) == 1.0
    assert metrics.ndcg_at(["x"] * 10 + ["a"], {"a"}) == 0.0


def test_case_outcome_answerable_and_no_answer():
    out = metrics.case_outcome(["x", "a", "f"], ["a"], ["f"], "answer", 0.8)
    assert out["first_relevant_rank"] == 2 and out["mrr@10"] == 0.5
    assert out["pass_top1"] == 0.0 and out["pass_top3"] == 1.0
    assert out["forbidden_hit"] is True
    assert out["recall@1"] == 0.0 and out["recall@3"] == 1.0
    assert out["answer_correct"] is True
    assert metrics.case_outcome([], [], [], "no evidence", 0.0)["no_answer_pass"] is True
    assert metrics.case_outcome(["x"], [], [], "low confidence", 0.3)["no_answer_pass"] is True
    assert metrics.case_outcome(["x"], [], [], "answer", 0.9)["no_answer_pass"] is False


def test_aggregate_and_percentiles():
    outcomes = [
        metrics.case_outcome(["a"], ["a"], [], "answer", 0.9),
        metrics.case_outcome(["b"], ["a"], [], "low confidence", 0.3),
        metrics.case_outcome([], [], [], "no evidence", 0.0),
    ]
    agg = metrics.aggregate(outcomes, [10.0, 20.0, 30.0], errors=1)
    assert agg["cases"] == 4 and agg["errors"] == 1 and agg["answerable"] == 2
    assert agg["pass_top1"] == 0.5 and agg["miss"] == 1
    assert agg["no_answer_accuracy"] == 1.0
    assert agg["latency_p50_ms"] == 20.0 and agg["latency_p95_ms"] == 30.0


def test_a_hedge_cannot_improve_both_sides_of_the_decision():
    # every case "low confidence": every unanswerable one declined, and no answerable one answered
    hedged = [
        metrics.case_outcome(["a"], ["a"], [], "low confidence", 0.4),
        metrics.case_outcome(["b"], ["b"], [], "low confidence", 0.4),
        metrics.case_outcome(["c"], [], [], "low confidence", 0.4),
    ]
    m = metrics.decision_metrics(hedged)
    assert m["no_answer_accuracy"] == 1.0 and m["answered_when_found"] == 0.0
    assert m["balanced_accuracy"] == 0.5 and m["low_confidence_share"] == 1.0
    decided = [
        metrics.case_outcome(["a"], ["a"], [], "answer", 0.9),
        metrics.case_outcome(["b"], ["b"], [], "answer", 0.9),
        metrics.case_outcome([], [], [], "no evidence", 0.0),
    ]
    m = metrics.decision_metrics(decided)
    assert m["balanced_accuracy"] == 1.0 and m["answer_precision"] == 1.0 and m["no_answer_no_rows"] == 1.0


def test_an_answer_whose_passage_is_below_the_top_3_is_not_a_correct_answer():
    out = metrics.case_outcome(["x", "y", "z", "a"], ["a"], [], "answer", 0.9)
    assert out["answer_correct"] is False
    assert metrics.decision_metrics([out])["answer_precision"] == 0.0


def test_calibration_needs_enough_cases_and_measures_the_gap():
    few = [metrics.case_outcome(["a"], ["a"], [], "answer", 0.9)] * 10
    assert metrics.calibration(few) == {"calibration_error": None, "brier": None}
    # 300 cases at probability 0.75, three in four correct: calibrated
    cases = [metrics.case_outcome(["a"], ["a"], [], "answer", 0.75)] * 225
    cases += [metrics.case_outcome(["b"], ["a"], [], "answer", 0.75)] * 75
    assert metrics.calibration(cases)["calibration_error"] == 0.0
    assert metrics.calibration(cases)["brier"] == 0.1875
    # the same cases claimed at 0.95: off by 0.2
    over = [dict(o, probability=0.95) for o in cases]
    assert metrics.calibration(over)["calibration_error"] == 0.2
