"""pgkb eval end to end on a tiny BEIR folder and a cases file, with the hash model."""

from __future__ import annotations

import gzip
import json

from helpers import count_rows, insert_document

from harness.evaluate import evaluate, plot


def _beir_folder(tmp_path):
    docs = [
        {"_id": "d1", "title": "Vitamin D", "text": "Vitamin D deficiency raises the risk of tuberculosis."},
        {"_id": "d2", "title": "Statins", "text": "Statins lower cholesterol and cardiovascular events."},
        {"_id": "d3", "title": "退款", "text": "客户自签收之日起十四天内可以申请退款。"},
        {"_id": "d4", "title": "Sleep", "text": "Short sleep duration is linked to obesity in children."},
    ]
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    queries = [
        {"_id": "q1", "text": "vitamin D deficiency and tuberculosis risk"},
        {"_id": "q2", "text": "cholesterol lowering statins"},
        {"_id": "q3", "text": "退款期限"},
    ]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    return tmp_path


def test_beir_eval_loads_corpus_once_and_stores_runs(fresh_db, dsn, tmp_path):
    folder = _beir_folder(tmp_path)
    report = evaluate(dsn, beir=str(folder), mode="lexical,hybrid", k=10, progress=False)
    lexical = report["modes"]["lexical"]["metrics"]
    assert lexical["cases"] == 3 and lexical["errors"] == 0
    assert lexical["pass_top1"] == 1.0 and lexical["ndcg@10"] == 1.0
    assert count_rows(fresh_db, "kb.documents WHERE namespace = %s", "beir-" + folder.name) == 4
    again = evaluate(dsn, beir=str(folder), mode="lexical", k=10, progress=False)
    assert fresh_db.execute("SELECT count(*) AS n FROM kb.documents").fetchone()["n"] == 4  # not loaded twice
    runs = fresh_db.execute("SELECT run_id, mode, ndcg_10 FROM kb.eval_run_summary ORDER BY run_id").fetchall()
    assert [r["mode"] for r in runs] == ["lexical", "hybrid", "lexical"]
    assert again["modes"]["lexical"]["run_id"] == runs[-1]["run_id"]
    trend = fresh_db.execute("SELECT count(*) AS n FROM kb.eval_metric_trend WHERE metric = 'ndcg@10'").fetchone()
    assert trend["n"] == 3
    results = fresh_db.execute("SELECT count(*) AS n FROM kb.eval_results").fetchone()
    assert results["n"] == 9
    png = tmp_path / "eval.png"
    plot(report, str(png))
    assert png.stat().st_size > 1000


def test_cases_eval_no_answer_forbidden_and_settings(fresh_db, dsn, tmp_path):
    insert_document(
        fresh_db,
        "v1.md",
        "# Refund\n\nRefunds are possible within 7 days.",
        status="active",
        effective_from="2024-01-01",
    )
    insert_document(
        fresh_db,
        "v2.md",
        "# Refund\n\nRefunds are possible within 14 days.",
        status="active",
        effective_from="2025-07-01",
        supersedes="v1.md",
    )
    cases = [
        {
            "id": "now",
            "category": "lifecycle",
            "query": "refund days",
            "expected": ["v2.md"],
            "forbidden": ["v1.md"],
            "as_of": "2026-01-01",
        },
        {
            "id": "then",
            "category": "as_of",
            "query": "refund days",
            "expected": ["v1.md"],
            "forbidden": ["v2.md"],
            "as_of": "2025-01-01",
        },
        {"id": "none", "category": "no_answer", "query": "parking garage opening hours", "expected": []},
    ]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    report = evaluate(dsn, cases_file=str(path), mode="lexical", k=5, settings={"fusion": "rrf"}, progress=False)
    m = report["modes"]["lexical"]
    assert m["metrics"]["pass_top1"] == 1.0
    assert m["metrics"]["forbidden_hits"] == 0
    assert m["metrics"]["no_answer_accuracy"] == 1.0
    assert set(m["by_category"]) == {"lifecycle", "as_of", "no_answer"}
    params = fresh_db.execute("SELECT params FROM kb.eval_runs").fetchone()["params"]
    assert params["settings"] == {"fusion": "rrf"}
