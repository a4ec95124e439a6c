"""The benchmark's report: the JSON document (stdout and a file) and short tables (stderr).

``write_report`` writes the JSON (indented, UTF-8) to its file and to stdout and the table to
stderr. ``table`` renders a latency/recall report: per size and kind of query, p50/p95 ms of
``kb_retrieve`` hybrid, its stages and the bare legs, the p95 ratios, the recall at the database's
ef_search, then the ef_search sweep and the vector statistics. ``compare_table`` renders a
comparison report: per mode and kind, p50/p95 of each database and the ratios B/A.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def write_report(report: dict, out: Path, text: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=2, ensure_ascii=False))
    print(text, file=sys.stderr)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def sweep_table(size: str, rc: dict) -> list[str]:
    """recall@10 and p50/p95 ms per ef_search: filtered limit 10, filtered limit 100, no filter."""
    lines = [
        f"{'size':>7} {'ef':>4} | {'filtered, limit 10: R@10 tie p50 p95':38} | "
        f"{'limit 100, ef >= 150: R@10 p50 p95':38} | {'no filter: R@10 p50 p95':28}"
        + (" | language-corrected limit 100: R@10 p50 p95" if "corrected_limit100" in rc["sweep"][0] else "")
    ]
    for e in rc["sweep"]:
        f, h, u = e["filtered"], e["filtered_limit100"], e["unfiltered"]
        c = e.get("corrected_limit100")
        lines.append(
            f"{size:>7} {e['ef_search']:>4} | {f['recall_at_10']:>6.3f} {f['recall_at_10_tie_aware']:>6.3f} "
            f"{_fmt(f['latency_ms']['p50']):>8} {_fmt(f['latency_ms']['p95']):>8}       | "
            f"{h['recall_at_10']:>6.3f} {_fmt(h['latency_ms']['p50']):>8} {_fmt(h['latency_ms']['p95']):>8}"
            f"{'':14} | {u['recall_at_10']:>6.3f} {_fmt(u['latency_ms']['p50']):>8} "
            f"{_fmt(u['latency_ms']['p95']):>8}"
            + (
                f" | {c['recall_at_10']:>6.3f} {_fmt(c['latency_ms']['p50']):>8} {_fmt(c['latency_ms']['p95']):>8}"
                if c
                else ""
            )
            + "".join(f"  [{leg}: {plan}]" for leg, plan in e["plans"].items() if not plan.startswith("hnsw"))
        )
    reach = {leg: v["strict"] or "none" for leg, v in rc["min_ef_search_for_recall_0.95"].items()}
    lines.append(
        f"{size:>7} smallest ef_search with recall@10 >= 0.95: filtered {reach['filtered']}, "
        f"limit 100 {reach['filtered_limit100']}, no filter {reach['unfiltered']}"
        + (f", language-corrected {reach['corrected_limit100']}" if "corrected_limit100" in reach else "")
    )
    for idx in rc.get("hnsw_indexes", []):
        lines.append(f"{size:>7} index {idx['name']}: {idx['options']}, {idx['bytes'] / 2**20:.1f} MiB")
    lines.append(f"{size:>7} {rc['scan_bounds']['check']}")
    ex = rc["exact_latency_ms"]
    lines.append(
        f"{size:>7} exact search (sequential scan, recall 1): p50 {_fmt(ex['p50'])} ms, p95 {_fmt(ex['p95'])} ms"
    )
    vs = rc["vector_stats"]
    for kind, s in vs["queries"].items():
        lines.append(
            f"{size:>7} {kind} queries (n {s['n']}): cos sim to exact #1 {s['sim_1']:.3f}, #10 {s['sim_10']:.3f}, "
            f"#100 {s['sim_100']:.3f}; random chunks mean {s['rand_mean']:.3f} p99 {s['rand_p99']:.3f} "
            f"max {s['rand_max']:.3f}; contrast {s['contrast_10']:.3f}, LID {s['lid_100']}, "
            f"{s['nonzero']:.0f} non-zero coordinates, cos to mean chunk vector {s['mean_dir']:.3f}"
        )
    c = vs["chunks"]
    lines.append(
        f"{size:>7} chunks: random pairs cos sim mean {c['random_pair_sim_mean']:.3f} p99 "
        f"{c['random_pair_sim_p99']:.3f}; own nearest #1 {c['sim_1_mean']:.3f}, #10 {c['sim_10_mean']:.3f}; "
        f"mean vector norm {vs['mean_vector_norm']:.3f}; {c['nonzero_coordinates_mean']:.0f} non-zero coordinates"
    )
    lines.append(
        f"{size:>7} chunk vectors as queries ({c['nn_sample']}), no filter, recall@10 per ef_search: "
        + ", ".join(
            f"{ef} {r:.3f}{'' if ef not in c['as_queries_not_hnsw'] else ' (seq scan)'}"
            for ef, r in c["as_queries_unfiltered_recall_at_10"].items()
        )
    )
    return lines


def table(report: dict) -> str:
    lines = []
    head = f"{'size':>7} {'kind':5} {'leg':26} {'p50 ms':>8} {'p95 ms':>8}"
    legs = [
        ("hybrid", "kb_retrieve hybrid"),
        ("embed", "  embed (+analysis)"),
        ("hybrid_excl_embed", "  hybrid excl. embed"),
        ("stage_lexical", "  lexical stage"),
        ("stage_dense", "  dense stage"),
        ("stage_fuse", "  fuse+snippets"),
        ("bare_dense", "bare pgvector HNSW"),
        ("bare_trigram", "bare trigram"),
        ("bare_bm25", "bare BM25"),
    ]
    for size, r in report["sizes"].items():
        if "latency_ms" in r:
            lines.append(head)
        for kind, s in r.get("latency_ms", {}).items():
            for key, label in legs:
                lines.append(f"{size:>7} {kind:5} {label:26} {_fmt(s[key]['p50']):>8} {_fmt(s[key]['p95']):>8}")
            ra = r["ratios"][kind]
            lines.append(
                f"{size:>7} {kind:5} {'ratio hybrid/sum bare p95':26} {'':>8} "
                f"{_fmt(ra['hybrid_p95_over_sum_bare_p95']):>8}  (excl. embed "
                f"{_fmt(ra['hybrid_excl_embed_p95_over_sum_bare_p95'])}; vs dense+bm25 only "
                f"{_fmt(ra['hybrid_excl_embed_p95_over_dense_plus_bm25_p95'])}; timeouts "
                f"{r['diagnostics'][kind]['timeouts'] or 'none'})"
            )
        rc = r["recall"]
        lines.append(
            f"{size:>7} recall@10 with lifecycle filter at ef_search {rc['ef_search']}: {rc['recall_at_10']:.3f} "
            f"(tie-aware {rc['recall_at_10_tie_aware']:.3f}, limit-100 call {rc['recall_at_10_of_top100_call']:.3f}); "
            f"visible {r['data']['visible_fraction']:.0%} of {r['data']['chunks']} chunks"
        )
        lines.extend(sweep_table(size, rc))
        mem = r.get("memory")
        if mem:
            st = mem.get("backend_status") or {}
            lines.append(
                f"{size:>7} memory: shared_buffers {mem['settings'].get('shared_buffers')}; backend RSS "
                f"{st.get('VmRSS', 'n/a')} (shared {st.get('RssShmem', 'n/a')}, own {st.get('RssAnon', 'n/a')}); "
                + ", ".join(f"{k} {v['pretty']}" for k, v in list(mem["relations"].items())[:8])
            )
        lines.append(f"{size:>7} load average after the run: {r.get('loadavg_after')}")
        lines.append("")
    return "\n".join(lines)


def compare_table(report: dict) -> str:
    """p50/p95 ms of each database and the ratios B/A, per mode and kind of query."""
    cmp = report["compare"]
    a, b = cmp["databases"]["a"], cmp["databases"]["b"]

    def who(label: str, db: dict) -> str:
        schema = db["schema"]
        return (
            f"{label} = {db['name']} (last migration {schema['last_migration']}, "
            f"functions {schema['functions_md5'][:8]})"
        )

    lines = [
        who("A", a),
        who("B", b),
        f"same corpus: {cmp['same_corpus']} ({a['corpus']['chunks']} chunks); {cmp['order']}",
        f"{'mode':8} {'kind':5} {'n':>4} {'A p50':>8} {'A p95':>8} {'B p50':>8} {'B p95':>8} "
        f"{'B/A p50':>8} {'B/A p95':>8} {'paired':>7} {'same ids':>9}",
    ]
    for mode in cmp["modes"]:
        for kind, by_mode in cmp["results"].items():
            r = by_mode[mode]
            paired = r["paired_median_b_over_a"]
            lines.append(
                f"{mode:8} {kind:5} {r['a']['n']:>4} {_fmt(r['a']['p50']):>8} {_fmt(r['a']['p95']):>8} "
                f"{_fmt(r['b']['p50']):>8} {_fmt(r['b']['p95']):>8} {_fmt(r['b_over_a']['p50']):>8} "
                f"{_fmt(r['b_over_a']['p95']):>8} {_fmt(paired):>7} "
                f"{r['identical_results']['chunk_ids']:>4}/{r['a']['n']:<4}"
                + (f"  timeouts {r['timeouts']}" if any(r["timeouts"].values()) else "")
            )
    return "\n".join(lines)
