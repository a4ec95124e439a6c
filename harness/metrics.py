"""Retrieval metrics over ranked document lists (pure functions).

A document ranks where its best chunk ranks: callers pass the distinct sources
in rank order, so later chunks of one document never take extra places."""

from __future__ import annotations

import math
from collections import defaultdict

RECALL_KS = (1, 3, 5, 10, 100)


def distinct_in_order(sources: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for s in sources:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def first_relevant_rank(ranked: list[str], relevant: set[str]) -> int | None:
    return next((i + 1 for i, s in enumerate(ranked) if s in relevant), None)


def ndcg_at(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:k]) if s in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def recall_at(ranked: list[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[index]


# Calibration error and Brier score need enough calls per probability bin to mean
# anything: below this many cases they are not reported.
CALIBRATION_MIN_CASES = 300
CALIBRATION_BINS = 10


def case_outcome(
    ranked: list[str], expected: list[str], forbidden: list[str], decision: str, probability: float | None
) -> dict:
    """One case's outcome: its ranking metrics when answerable, and the decision's two sides
    (an answerable case answered, an unanswerable one declined). ``answer_correct`` is what the
    probability promises: the case is answerable and its passage is in the top 3."""
    relevant = set(expected)
    rank = first_relevant_rank(ranked, relevant)
    out = {
        "first_relevant_rank": rank,
        "forbidden_hit": bool(set(ranked[:5]) & set(forbidden)),
        "answerable": bool(relevant),
        "decision": decision,
        "probability": probability,
        "no_rows": not ranked,
        "answer_correct": bool(relevant) and rank is not None and rank <= 3,
    }
    if relevant:
        out["ndcg@10"] = ndcg_at(ranked, relevant)
        out["mrr@10"] = 1 / rank if rank and rank <= 10 else 0.0
        for k in RECALL_KS:
            out[f"recall@{k}"] = recall_at(ranked, relevant, k)
        for n in (1, 3, 8):
            out[f"pass_top{n}"] = 1.0 if rank and rank <= n else 0.0
        out["miss"] = rank is None
    else:
        # declined: anything but "answer" (low confidence and no rows alike); that a hedge
        # passes here is why answered_when_found stands beside it
        out["no_answer_pass"] = decision != "answer"
    return out


def _share(items: list, predicate) -> float | None:
    return round(sum(1 for o in items if predicate(o)) / len(items), 4) if items else None


def calibration(outcomes: list[dict], min_cases: int = CALIBRATION_MIN_CASES) -> dict:
    """Expected calibration error (equal-width bins, weighted by their cases) and Brier score of
    the probability against answer_correct; None below min_cases cases (or none)."""
    scored = [o for o in outcomes if o.get("probability") is not None]
    if not scored or len(scored) < min_cases:
        return {"calibration_error": None, "brier": None}
    bins: dict[int, list[dict]] = defaultdict(list)
    for o in scored:
        bins[min(CALIBRATION_BINS - 1, int(o["probability"] * CALIBRATION_BINS))].append(o)
    ece = sum(
        len(b)
        / len(scored)
        * abs(sum(o["probability"] for o in b) / len(b) - sum(o["answer_correct"] for o in b) / len(b))
        for b in bins.values()
    )
    brier = sum((o["probability"] - o["answer_correct"]) ** 2 for o in scored) / len(scored)
    return {"calibration_error": round(ece, 4), "brier": round(brier, 4)}


def decision_metrics(outcomes: list[dict], calibration_min_cases: int = CALIBRATION_MIN_CASES) -> dict:
    """Both sides of the decision. answered_when_found: of the answerable cases whose passage is
    in the top 3, the share labelled "answer"; answer_precision: of the cases labelled "answer",
    the share whose passage is in the top 3; no_answer_accuracy: of the unanswerable cases, the
    share not labelled "answer"; balanced_accuracy: the mean of the first and the last."""
    answerable = [o for o in outcomes if o["answerable"]]
    no_answer = [o for o in outcomes if not o["answerable"]]
    found = [o for o in answerable if o["answer_correct"]]
    answered = [o for o in outcomes if o["decision"] == "answer"]
    out = {
        "answered_when_found": _share(found, lambda o: o["decision"] == "answer"),
        "answer_precision": _share(answered, lambda o: o["answer_correct"]),
        "no_answer_accuracy": _share(no_answer, lambda o: o["no_answer_pass"]),
        "answerable_no_rows": _share(answerable, lambda o: o["no_rows"]),
        "no_answer_no_rows": _share(no_answer, lambda o: o["no_rows"]),
        "low_confidence_share": _share(outcomes, lambda o: o["decision"] == "low confidence"),
    }
    sides = [out["answered_when_found"], out["no_answer_accuracy"]]
    out["balanced_accuracy"] = round(sum(sides) / 2, 4) if None not in sides else None
    return out | calibration(outcomes, calibration_min_cases)


def aggregate(outcomes: list[dict], latencies_ms: list[float], errors: int) -> dict:
    answerable = [o for o in outcomes if o["answerable"]]
    no_answer = [o for o in outcomes if not o["answerable"]]
    metrics: dict = {"cases": len(outcomes) + errors, "errors": errors, "answerable": len(answerable)}
    keys = ["ndcg@10", "mrr@10", *[f"recall@{k}" for k in RECALL_KS], "pass_top1", "pass_top3", "pass_top8"]
    for key in keys:
        metrics[key] = round(sum(o[key] for o in answerable) / len(answerable), 4) if answerable else None
    metrics["miss"] = sum(1 for o in answerable if o["miss"])
    metrics["forbidden_hits"] = sum(1 for o in outcomes if o["forbidden_hit"])
    metrics["no_answer_cases"] = len(no_answer)
    metrics |= decision_metrics(outcomes)
    p50, p95 = percentile(latencies_ms, 50), percentile(latencies_ms, 95)
    metrics["latency_p50_ms"] = round(p50, 2) if p50 is not None else None
    metrics["latency_p95_ms"] = round(p95, 2) if p95 is not None else None
    return metrics


def aggregate_by_category(rows: list[tuple[str | None, dict, float]]) -> dict:
    groups: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for category, outcome, latency in rows:
        groups[category or "uncategorised"].append((outcome, latency))
    return {
        name: aggregate([o for o, _ in items], [lat for _, lat in items], 0) for name, items in sorted(groups.items())
    }
