"""Files whose name says another format than their content, through both doors: kb.ingest_file (any
SQL client) and `pgkb ingest` (the folder loader). The content decides whenever it is a format
pgkb reads; the name is shown (a ``name_mismatch`` warning), not obeyed; only what the bytes confirm
is refused (a legacy Office file, naming the format to save it as); an empty file is ``empty``."""

from __future__ import annotations

from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON
from helpers import count_rows

from harness import loader
from harness.retrieval import retrieve

FIXTURES = Path(__file__).parent / "fixtures" / "files"
DOCX = (FIXTURES / "policy-en.docx").read_bytes()
REAL_XLS = (FIXTURES / "sniffing" / "ragged.xls").read_bytes()
WORD_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
EXCEL_HTML = (
    b'<html xmlns:o="urn:schemas-microsoft-com:office:office" xmlns:x="urn:schemas-microsoft-com:office:excel">'
    b"<head><meta name=ProgId content=Excel.Sheet><title>Travel budget</title></head><body><table>"
    b"<tr><td>Item</td><td>Cost</td></tr><tr><td>Travel allowance</td><td>1200</td></tr></table></body></html>"
)
pytestmark = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")


def ingest(db, source: str, data: bytes, content_type: str | None = None) -> dict:
    return db.execute("SELECT * FROM kb.ingest_file('named', %s, %s, %s)", (source, data, content_type)).fetchone()


def document(db, doc_id: int) -> dict:
    return db.execute("SELECT * FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()


def warning_kinds(db, doc_id: int) -> list[str]:
    rows = db.execute("SELECT kind FROM kb.file_warnings WHERE document_id = %s ORDER BY page NULLS FIRST", (doc_id,))
    return [r["kind"] for r in rows]


def scan(kind: str = "PNG") -> bytes:
    import importlib.util

    path = Path(__file__).parents[1] / "scripts" / "sniffing_table.py"
    spec = importlib.util.spec_from_file_location("sniffing_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rendered_image(kind, ["Receipts are kept for seven years.", "Claims close in 90 days."])


def test_a_real_docx_saved_under_a_pdf_name_is_indexed_as_the_docx_it_is(rolled_back_db):
    row = ingest(rolled_back_db, "really-a-docx.pdf", (FIXTURES / "bad" / "really-a-docx.pdf").read_bytes())
    assert row["ingest_status"] == "indexed", row
    assert document(rolled_back_db, row["document_id"])["parser_version"].startswith("docx/")


@pytest.mark.parametrize("content_type", [None, WORD_TYPE, "application/msword"])
def test_a_docx_named_doc_is_indexed_through_sql_whatever_type_is_declared(rolled_back_db, content_type):
    db = rolled_back_db
    row = ingest(db, "minutes.doc", DOCX, content_type)
    assert row["ingest_status"] == "indexed", row
    d = document(db, row["document_id"])
    assert d["content_type"] == WORD_TYPE and d["parser_version"].startswith("docx/") and d["parse_error"] is None
    assert count_rows(db, "kb.chunks WHERE document_id = %s", row["document_id"]) > 0
    assert warning_kinds(db, row["document_id"])[0] == "name_mismatch"


def test_an_html_export_named_xls_is_indexed_and_a_real_xls_is_refused_naming_what_to_save_it_as(rolled_back_db):
    db = rolled_back_db
    export = ingest(db, "budget.xls", EXCEL_HTML)
    assert export["ingest_status"] == "indexed", export
    assert document(db, export["document_id"])["content_type"] == "text/html"
    assert retrieve(db, "travel allowance", k=1, mode="lexical", namespace="named")[0]["source"] == "budget.xls"
    real = ingest(db, "ragged.xls", REAL_XLS)
    assert real["ingest_status"] == "failed"
    assert real["ingest_error"] == (
        "unsupported_format: a legacy Excel .xls workbook (named 'ragged.xls') is not supported: save it as .xlsx"
    )


@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
def test_an_image_named_pdf_is_stored_waits_for_ocr_and_is_indexed_once_read(rolled_back_db, kind):
    db = rolled_back_db
    row = ingest(db, "scan.pdf", scan(kind))
    assert row["ingest_status"] == "pending", row
    assert warning_kinds(db, row["document_id"]) == ["name_mismatch", "ocr_pending"]
    queued = db.execute("SELECT pages FROM kb.ocr_queue WHERE document_id = %s", (row["document_id"],)).fetchone()
    assert queued["pages"] == [1]
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 1
    d = document(db, row["document_id"])
    assert d["ingest_status"] == "indexed" and d["ocr_status"] == "done" and d["parser_version"] == "image/1"
    assert d["content_type"] == f"image/{kind.lower()}"
    assert "Receipts are kept for seven years." in d["body"]
    hit = retrieve(db, "receipts seven years", k=1, mode="lexical", namespace="named")[0]
    assert hit["source"] == "scan.pdf"


@pytest.mark.parametrize("name", ["empty.pdf", "empty.docx"])
def test_an_empty_pdf_or_docx_is_stored_failed_as_an_empty_file(rolled_back_db, name):
    row = ingest(rolled_back_db, name, b"")
    assert row["ingest_status"] == "failed"
    assert row["ingest_error"] == "empty: the file is empty (0 bytes)"


def test_pgkb_ingest_reads_a_folder_by_content_as_kb_ingest_file_does(fresh_db, dsn, tmp_path):
    zh = (FIXTURES / "handbook-zh.txt").read_text("utf-8")
    files = {
        "minutes.doc": DOCX,
        "minutes-no-extension": DOCX,
        "budget.xls": EXCEL_HTML,
        "handbook.txt": zh.encode("gb18030"),
        "ragged.xls": REAL_XLS,
        "empty.pdf": b"",
        "Makefile": b"all:\n",
        "scan.pdf": scan("JPEG"),
        "figure.png": scan("PNG"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    summary = loader.ingest(dsn, [str(tmp_path)], progress=False)
    assert sorted(summary.synced) == [
        "budget.xls",
        "empty.pdf",
        "handbook.txt",
        "minutes-no-extension",
        "minutes.doc",
        "scan.pdf",
    ]
    assert {n["source"]: n["reason"] for n in summary.not_loaded} == {
        "ragged.xls": "legacy_format",
        "Makefile": "unknown_extension",
        "figure.png": "image",
    }
    legacy = next(n for n in summary.not_loaded if n["source"] == "ragged.xls")
    assert legacy["message"] == "a legacy Excel .xls workbook: save it as .xlsx"
    assert [f["file"] for f in summary.failed] == [str(tmp_path / "empty.pdf")]
    assert "empty: the file is empty (0 bytes)" in summary.failed[0]["error"]
    rows = {
        r["source"]: r
        for r in fresh_db.execute("SELECT source, ingest_status, chunk_count, body FROM kb.documents").fetchall()
    }
    for source in ("minutes.doc", "minutes-no-extension", "budget.xls", "handbook.txt"):
        assert rows[source]["ingest_status"] == "indexed" and rows[source]["chunk_count"] > 0, rows[source]
    assert rows["handbook.txt"]["body"].strip() == zh.strip()
    assert rows["scan.pdf"]["ingest_status"] == "pending"  # stored, waiting for OCR (pgkb worker)
    named_otherwise = {Path(w["file"]).name for w in summary.warnings if w["kind"] == "name_mismatch"}
    assert named_otherwise == {"minutes.doc", "budget.xls", "scan.pdf"}
