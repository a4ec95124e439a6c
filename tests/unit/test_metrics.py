import math

from harness import metrics


def test_distinct_in_order_keeps_best_rank_of_each_document():
    assert metrics.distinct_in_order(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_ndcg_binary():
    assert metrics.ndcg_at(["x", "a"], {"a"}) == 1 / math.log2(3)
    assert metrics.ndcg_at(["a", "b"], {"a", "b"}) == 1.0
    assert metrics.ndcg_at(["x"] * 10 + ["a"], {"a"}) == 0.0


def test_case_outcome_answerable_and_no_answer():
    out = metrics.case_outcome(["x", "a", "f"], ["a"], ["f"], low_confidence=False)
    assert out["first_relevant_rank"] == 2 and out["mrr@10"] == 0.5
    assert out["pass_top1"] == 0.0 and out["pass_top3"] == 1.0
    assert out["forbidden_hit"] is True
    assert out["recall@1"] == 0.0 and out["recall@3"] == 1.0
    assert metrics.case_outcome([], [], [], low_confidence=False)["no_answer_pass"] is True
    assert metrics.case_outcome(["x"], [], [], low_confidence=True)["no_answer_pass"] is True
    assert metrics.case_outcome(["x"], [], [], low_confidence=False)["no_answer_pass"] is False


def test_aggregate_and_percentiles():
    outcomes = [
        metrics.case_outcome(["a"], ["a"], [], False),
        metrics.case_outcome(["b"], ["a"], [], False),
        metrics.case_outcome([], [], [], False),
    ]
    agg = metrics.aggregate(outcomes, [10.0, 20.0, 30.0], errors=1)
    assert agg["cases"] == 4 and agg["errors"] == 1 and agg["answerable"] == 2
    assert agg["pass_top1"] == 0.5 and agg["miss"] == 1
    assert agg["no_answer_accuracy"] == 1.0
    assert agg["latency_p50_ms"] == 20.0 and agg["latency_p95_ms"] == 30.0
