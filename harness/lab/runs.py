"""Evaluation runs side by side, and runs grouped by configuration. Pure functions over stored rows.

* ``passed`` is the lab's reading of a stored case (the evaluator's rules, harness.metrics).
* ``overlap_at`` and ``rank_biased_overlap`` compare two ranked lists of sources: the share of the
  first k they have in common, and Webber, Moffat and Zobel's rank-biased overlap (extrapolated,
  persistence p), which weighs agreement near the top more.
* ``run_against_run`` joins two runs' cases: which flipped (passed in one, failed in the other), the
  per-case deltas, and the mean overlap of their returned lists.
* ``configurations`` groups runs by their configuration key and case set (one trend line each) and says
  what differs between them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def passed(result: dict[str, Any]) -> bool:
    """A case passed: no error, no forbidden hit, and the expected source first; or (expected nothing)
    nothing returned or only with low confidence (the evaluator counts that as "no evidence")."""
    if result.get("error") or result.get("forbidden_hit"):
        return False
    if not result.get("expected"):
        return not result.get("returned") or bool(result.get("low_confidence"))
    return result.get("first_relevant_rank") == 1


def overlap_at(left: list[str], right: list[str], k: int) -> float | None:
    """|top k of left ∩ top k of right| / the longer of the two top-k lists: 1 for identical lists however
    short, 0 for disjoint ones (None when both are empty)."""
    a, b = left[:k], right[:k]
    if not a and not b:
        return None
    return len(set(a) & set(b)) / max(len(a), len(b))


def rank_biased_overlap(left: list[str], right: list[str], p: float = 0.9) -> float | None:
    """Extrapolated rank-biased overlap of two rankings without ties (1: identical, 0: disjoint); None
    when both are empty. Lists of different lengths are handled as uneven rankings (RBO_ext, eq. 32 of
    Webber et al. 2010)."""
    if not left and not right:
        return None
    if not left or not right:
        return 0.0
    short, long_ = (left, right) if len(left) <= len(right) else (right, left)
    s, depth = len(short), len(long_)
    # X_d: the items the two lists share down to depth d (the short list stops at s)
    shared = [len(set(short[:d]) & set(long_[:d])) for d in range(1, depth + 1)]
    x_s, x_l = shared[s - 1], shared[-1]
    total = sum(shared[d - 1] / d * p**d for d in range(1, depth + 1))
    total += sum(x_s * (d - s) / (s * d) * p**d for d in range(s + 1, depth + 1))
    return (1 - p) / p * total + ((x_l - x_s) / depth + x_s / s) * p**depth


# what makes two runs' cases of one id the same case: asked alike, expecting alike
CASE_AS_ASKED = ("query", "context", "namespace", "as_of", "k", "expected", "forbidden")


def as_asked(result: dict[str, Any]) -> tuple:
    return tuple(
        tuple(sorted(v)) if key in ("expected", "forbidden") and v else (tuple(v) if isinstance(v, list) else v)
        for key, v in ((key, result.get(key)) for key in CASE_AS_ASKED)
    )


def differences(left_run: dict[str, Any], right_run: dict[str, Any]) -> list[str]:
    """What two runs did not share, said before any figure: the case set, the corpus, the role."""
    said = []
    for key, what in (
        ("case_set_version", "the case sets differ: only the cases both asked alike are compared"),
        ("corpus_fingerprint", "the corpora differ: documents or statistics changed between the runs"),
        ("role_name", "the runs were made by different roles, which may read different documents"),
    ):
        a, b = left_run.get(key), right_run.get(key)
        if a != b:
            said.append(f"{what} (A {a or 'not recorded'} · B {b or 'not recorded'})")
    return said


def run_against_run(
    left: list[dict[str, Any]], right: list[dict[str, Any]], k: int = 10, p: float = 0.9
) -> dict[str, Any]:
    """Two runs' cases joined by case id: each with both outcomes, the nDCG@10 delta (right - left), the
    first relevant ranks, overlap@k and RBO of the returned lists, and whether it flipped; the flipped
    first. Only cases both runs asked alike are compared (shared: their mean nDCG@10 and pass share per
    side); cases of one run only, and cases whose question or expectations changed, are listed apart."""
    by_id = {r["case_id"]: r for r in right}
    cases = []
    changed = []
    for a in left:
        b = by_id.get(a["case_id"])
        if b is None:
            continue
        if as_asked(a) != as_asked(b):
            changed.append(a["case_id"])
            continue
        pa, pb = passed(a), passed(b)
        ndcg_a, ndcg_b = a.get("ndcg_10"), b.get("ndcg_10")
        cases.append(
            {
                "case_id": a["case_id"],
                "query": a["query"],
                "category": a.get("category"),
                "left": a,
                "right": b,
                "passed_left": pa,
                "passed_right": pb,
                "flip": None if pa == pb else ("fixed" if pb else "broken"),
                "ndcg_delta": None if ndcg_a is None or ndcg_b is None else ndcg_b - ndcg_a,
                "overlap": overlap_at(a.get("returned") or [], b.get("returned") or [], k),
                "rbo": rank_biased_overlap(a.get("returned") or [], b.get("returned") or [], p),
            }
        )
    cases.sort(key=lambda c: (c["flip"] is None, c["flip"] != "broken", -abs(c["ndcg_delta"] or 0), c["case_id"]))
    overlaps = [c["overlap"] for c in cases if c["overlap"] is not None]
    rbos = [c["rbo"] for c in cases if c["rbo"] is not None]
    left_ids = {r["case_id"] for r in left}
    shared = {}
    for side in ("left", "right"):
        ndcgs = [c[side]["ndcg_10"] for c in cases if c[side].get("ndcg_10") is not None]
        shared[side] = {
            "cases": len(cases),
            "ndcg@10": sum(ndcgs) / len(ndcgs) if ndcgs else None,
            "passed": sum(1 for c in cases if c[f"passed_{side}"]) / len(cases) if cases else None,
        }
    return {
        "cases": cases,
        "shared": shared,
        "changed": sorted(changed),
        "fixed": sum(1 for c in cases if c["flip"] == "fixed"),
        "broken": sum(1 for c in cases if c["flip"] == "broken"),
        "mean_overlap": sum(overlaps) / len(overlaps) if overlaps else None,
        "mean_rbo": sum(rbos) / len(rbos) if rbos else None,
        "only_left": sorted(left_ids - set(by_id)),
        "only_right": sorted(set(by_id) - left_ids),
        "k": k,
        "p": p,
    }


def configurations(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations of some runs, newest first: key, mode, model, the runs (newest first), and the
    settings whose values differ between the configurations shown (what tells them apart), plus k."""
    groups: dict[str, dict[str, Any]] = {}
    for run in sorted(runs, key=lambda r: (r["started_at"], r["id"]), reverse=True):
        key = run.get("series_key") or run.get("configuration_key") or f"run-{run['id']}"
        group = groups.setdefault(
            key,
            {
                "key": key,
                "mode": run["mode"],
                "model": run.get("model"),
                "configuration": run.get("configuration") or {},
                "case_set_version": run.get("case_set_version"),
                "runs": [],
            },
        )
        group["runs"].append(run)
    # what tells complete configurations apart; a run stored before configurations were complete names
    # only its overrides, which are shown as they are
    settings = [g["configuration"].get("settings") or {} for g in groups.values() if g["configuration"].get("complete")]
    keys = sorted({k for s in settings for k in s})
    differing = [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]
    modes = Counter(g["mode"] for g in groups.values())
    models = {g["model"] for g in groups.values()}
    case_sets = {g["case_set_version"] for g in groups.values()}
    for group in groups.values():
        config = group["configuration"]
        values = config.get("settings") or {}
        shown = {k: values[k] for k in differing if k in values} if config.get("complete") else dict(values)
        parts = [group["mode"]]
        if len(models) > 1:
            parts.append(group["model"] or "no model")
        parts += [f"{k}={v}" for k, v in shown.items()]
        if len(case_sets) > 1:
            parts.append(f"cases {group['case_set_version'] or 'not recorded'}")
        if not config.get("complete", True):
            parts.append("(settings not recorded)" if not config.get("settings") else "(overrides only)")
        group["differs"] = shown
        group["label"] = " · ".join(str(p) for p in parts)
        group["latest"] = group["runs"][0]
        group["complete"] = bool(config.get("complete", False))
        group["mode_count"] = modes[group["mode"]]
    return list(groups.values())
