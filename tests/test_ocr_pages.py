"""Scanned pages in the database: the pages ocr_max_pages skipped are read once it is raised
(kb.reparse_files), an OCR run's time limit grows with its pages, and a failed OCR leaves a warning
on each page it was to read. The scans are drawn by tests/scanbuild.py (a few lines a page, so that
each OCR takes about a second of CPU)."""

from __future__ import annotations

import shutil

import pytest
from filebuild import SERVER_PYTHON
from scanbuild import EN_PAGE, ZH_PAGES, render_page, scan_pdf

pytestmark = pytest.mark.skipif(
    not SERVER_PYTHON.exists() or shutil.which("tesseract") is None, reason="no server venv or tesseract"
)


def ingest(db, source: str, data: bytes) -> dict:
    return db.execute("SELECT * FROM kb.ingest_file('scans', %s, %s)", (source, data)).fetchone()


def document(db, doc_id: int) -> dict:
    return db.execute("SELECT * FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()


def warnings(db, doc_id: int) -> list[tuple]:
    return [
        (r["page"], r["kind"])
        for r in db.execute("SELECT page, kind FROM kb.file_warnings WHERE document_id = %s ORDER BY page", (doc_id,))
    ]


def set_setting(db, key: str, value: int) -> None:
    db.execute("UPDATE kb.settings SET value = to_jsonb(%s::integer) WHERE key = %s", (value, key))


def short_scan() -> bytes:
    """Two image-only pages of a few lines: the English page's first lines, the regulation's last."""
    return scan_pdf([render_page(EN_PAGE[:3]), render_page(ZH_PAGES[1][-5:-3])])


def test_raising_ocr_max_pages_then_reparse_files_reads_the_pages_the_limit_skipped(rolled_back_db):
    db = rolled_back_db
    set_setting(db, "ocr_max_pages", 1)
    row = ingest(db, "two-scans.pdf", short_scan())
    assert warnings(db, row["document_id"]) == [(1, "ocr_pending"), (2, "ocr_limit")]
    assert db.execute("SELECT kb.ocr_pending(5) AS n").fetchone()["n"] == 1
    assert "Records Retention Policy" in document(db, row["document_id"])["body"]
    assert not db.execute("SELECT 1 FROM kb.stale_documents WHERE parser_stale").fetchall()

    set_setting(db, "ocr_max_pages", 5)
    stale = db.execute("SELECT document_id FROM kb.stale_documents WHERE parser_stale").fetchall()
    assert [r["document_id"] for r in stale] == [row["document_id"]]
    assert db.execute("SELECT kb.reparse_files('scans') AS n").fetchone()["n"] == 1
    assert db.execute("SELECT pages FROM kb.ocr_queue").fetchone()["pages"] == [1, 2]
    assert db.execute("SELECT kb.ocr_pending(5) AS n").fetchone()["n"] == 1
    d = document(db, row["document_id"])
    assert "第四章\u3000附则" in d["body"] and warnings(db, row["document_id"]) == []
    assert d["title"] == "Records Retention Policy"
    assert db.execute("SELECT kb.reparse_files('scans') AS n").fetchone()["n"] == 0  # nothing skipped now


def test_an_ocr_runs_time_limit_grows_with_the_pages_it_reads(rolled_back_db):
    db = rolled_back_db
    limits = db.execute("SELECT kb.file_limits() AS l").fetchone()["l"]
    per_page = db.execute("SELECT (kb.setting('ocr_page_timeout_s') #>> '{}')::integer AS s").fetchone()["s"]
    row = db.execute(
        "SELECT kb.ocr_run_timeout_s(kb.file_limits(), 3) AS three, kb.ocr_run_timeout_s(kb.file_limits(), NULL) AS all"
    ).fetchone()
    assert row["three"] == limits["file_parse_timeout_s"] + 3 * per_page
    assert row["all"] == limits["file_parse_timeout_s"] + limits["ocr_max_pages"] * per_page
    # a run one second would cut short is given its pages' time
    set_setting(db, "file_parse_timeout_s", 1)
    doc = ingest(db, "one-scan.pdf", scan_pdf([render_page(EN_PAGE[:3])]))
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 1
    d = document(db, doc["document_id"])
    assert d["parse_error"] is None and d["ocr"]["status"] == "done" and "Records Retention Policy" in d["body"]


def test_a_failed_ocr_of_a_scan_without_text_leaves_a_warning_on_each_page_it_was_to_read(rolled_back_db):
    db = rolled_back_db
    row = ingest(db, "slow-scan.pdf", scan_pdf([render_page(ZH_PAGES[0])]))
    set_setting(db, "file_parse_timeout_s", 1)
    set_setting(db, "ocr_page_timeout_s", 0)
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 1
    d = document(db, row["document_id"])
    assert d["parse_error"].startswith("timeout:") and d["ocr"]["status"] == "failed"
    assert warnings(db, row["document_id"]) == [(1, "ocr_failed")]
    message = db.execute("SELECT message FROM kb.file_warnings WHERE document_id = %s", (row["document_id"],))
    assert "file_parse_timeout_s" in message.fetchone()["message"]
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 0  # not claimed again
