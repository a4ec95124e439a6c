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


def case_outcome(ranked: list[str], expected: list[str], forbidden: list[str], low_confidence: bool) -> dict:
    relevant = set(expected)
    rank = first_relevant_rank(ranked, relevant)
    out = {
        "first_relevant_rank": rank,
        "forbidden_hit": bool(set(ranked[:5]) & set(forbidden)),
        "answerable": bool(relevant),
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
        out["no_answer_pass"] = not ranked or low_confidence
    return out


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
    metrics["no_answer_accuracy"] = (
        round(sum(1 for o in no_answer if o["no_answer_pass"]) / len(no_answer), 4) if no_answer else None
    )
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
