"""pgkb eval end to end on a tiny BEIR folder and a cases file, with the hash model."""

from __future__ import annotations

import gzip
import hashlib
import json

from helpers import count_rows, insert_document

from harness.evaluate import Case, evaluate, load_beir, make_unanswerable, plot


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


def test_beir_query_metadata_becomes_the_category(tmp_path):
    folder = _beir_folder(tmp_path)
    rows = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    for row, kind in zip(rows, ("same", "cross", "same"), strict=True):
        row["metadata"] = {"kind": kind}
    (folder / "queries.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    _, cases = load_beir(str(folder), None, None, None)
    assert {c.id: c.category for c in cases} == {"q1": "same", "q2": "cross", "q3": "same"}
    _, cases = load_beir(str(folder), None, None, None, category_key=None)
    assert {c.category for c in cases} == {None}


def test_unanswerable_queries_lose_their_documents_and_expect_no_evidence(tmp_path):
    folder = str(_beir_folder(tmp_path))

    def prepared():
        corpus, cases = load_beir(folder, None, None, None)
        cases.append(Case(id="q4", query="tuberculosis again", expected=["d1", "d4"]))
        return corpus, cases

    corpus, cases = prepared()
    kept_corpus, cases = make_unanswerable(corpus, cases, 1)
    chosen = min(("q1", "q2", "q3", "q4"), key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    by_id = {c.id: c for c in cases}
    assert by_id[chosen].expected == [] and by_id[chosen].category == "unanswerable"
    removed = {d["_id"] for d in corpus} - {d["_id"] for d in kept_corpus}
    assert removed and all(doc not in c.expected for c in cases for doc in removed)
    assert len(cases) == 4, "no query is dropped: it is answerable with what remains, or unanswerable"
    again, _ = make_unanswerable(*prepared(), 1)
    assert [d["_id"] for d in again] == [d["_id"] for d in kept_corpus], "the same choice every time"
