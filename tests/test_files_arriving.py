"""Files as they arrive (issue 30): scanned pages read by OCR through the worker's queue, per-page
warnings stored, XLSX and PPTX indexed, uploads sniffed, skipped files reported, limits as settings.

The scans are generated: a page of a fixture PDF rendered to an image (cropped to a few lines, so
each OCR takes about a second) on an image-only page."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from filebuild import SERVER_PYTHON, make_docx, make_pptx, make_xlsx, para, scanned_pdf
from helpers import count_rows

from harness import loader
from harness.retrieval import retrieve

FIXTURES = Path(__file__).parent / "fixtures" / "files"
EN = (FIXTURES / "policy-en.pdf").read_bytes()
ZH = (FIXTURES / "handbook-zh.pdf").read_bytes()
pytestmark = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")


def ingest(db, source: str, data: bytes, content_type: str | None = None) -> dict:
    return db.execute("SELECT * FROM kb.ingest_file('arriving', %s, %s, %s)", (source, data, content_type)).fetchone()


def document(db, doc_id: int) -> dict:
    return db.execute("SELECT * FROM kb.documents WHERE id = %s", (doc_id,)).fetchone()


def chunk_rows(db, doc_id: int) -> list[dict]:
    return db.execute(
        "SELECT content, section_path, page_start, page_end FROM kb.chunks WHERE document_id = %s ORDER BY ordinal",
        (doc_id,),
    ).fetchall()


def warnings(db, doc_id: int) -> list[tuple]:
    return [
        (r["page"], r["kind"])
        for r in db.execute("SELECT page, kind FROM kb.file_warnings WHERE document_id = %s ORDER BY page", (doc_id,))
    ]


def test_a_half_scanned_pdf_is_indexed_at_once_and_its_scanned_page_after_the_worker_reads_it(rolled_back_db):
    db = rolled_back_db
    pdf = scanned_pdf([("text", {"pdf": ZH, "page": 0}), ("scan", {"pdf": EN, "page": 0, "keep": 0.25})])
    row = ingest(db, "half-scanned.pdf", pdf)
    # the INSERT did not wait for OCR: the text page is indexed, the scan is pending and says so
    assert row["ingest_status"] == "pending"
    assert warnings(db, row["document_id"]) == [(2, "ocr_pending")]
    queued = db.execute("SELECT pages FROM kb.ocr_queue WHERE document_id = %s", (row["document_id"],)).fetchone()
    assert queued["pages"] == [2]
    assert (
        db.execute("SELECT ocr_pending FROM kb.ingest_status WHERE namespace = 'arriving'").fetchone()["ocr_pending"]
        == 1
    )
    assert {c["page_start"] for c in chunk_rows(db, row["document_id"])} == {1}
    assert retrieve(db, "病假 诊断证明", k=1, mode="lexical", namespace="arriving")[0]["source"] == "half-scanned.pdf"
    assert retrieve(db, "Travel and expense policy", k=1, mode="lexical", namespace="arriving") == []

    assert db.execute("SELECT kb.ocr_pending(5) AS n").fetchone()["n"] == 1
    d = document(db, row["document_id"])
    assert d["ocr_status"] == "done" and d["ingest_status"] == "indexed"
    assert d["parse_warnings"] is None
    [page] = d["ocr"]["pages"]
    assert page["page"] == 2 and page["confidence"] > 60 and d["ocr"]["engine"].startswith("tesseract")
    assert count_rows(db, "kb.ocr_queue") == 0
    hit = retrieve(db, "Travel and expense policy", k=1, mode="lexical", namespace="arriving")[0]
    assert hit["source"] == "half-scanned.pdf" and hit["provenance"]["page_end"] == 2
    # the passage's provenance says its text was read by OCR, with what confidence
    assert re.search(
        rf"; OCR tesseract [\d.]+ \(chi_sim\+eng\): p\. 2 confidence {page['confidence']:.0f}$",
        hit["provenance"]["parser"],
    )
    # nothing left to read: another call claims nothing
    assert db.execute("SELECT kb.ocr_pending(5) AS n").fetchone()["n"] == 0


def test_a_scanned_chinese_page_waits_unchunked_then_is_found_by_its_chinese_text(rolled_back_db):
    db = rolled_back_db
    pdf = scanned_pdf([("scan", {"pdf": ZH, "page": 0, "keep": 0.3})])
    row = ingest(db, "扫描件.pdf", pdf, "application/octet-stream")
    assert row["ingest_status"] == "pending" and row["ingest_error"] is None
    assert chunk_rows(db, row["document_id"]) == []  # the stand-in body is never chunked
    db.execute("SELECT kb.ocr_pending(1)")
    d = document(db, row["document_id"])
    assert d["ingest_status"] == "indexed" and d["ocr"]["pages"][0]["confidence"] > 60
    text = "".join(c["content"] for c in chunk_rows(db, row["document_id"]))
    assert "本手册适用于公司全体正式员工" in text
    assert retrieve(db, "试用期员工", k=1, mode="lexical", namespace="arriving")[0]["source"] == "扫描件.pdf"


def test_an_xlsx_becomes_tables_per_sheet_with_the_header_in_every_chunk_and_the_sheet_in_the_path(rolled_back_db):
    db = rolled_back_db
    rows = [["SKU", "Product", "Price EUR"]] + [
        [f"SKU-{i:04d}", f"Widget model {i} with a long name", 10 + i] for i in range(300)
    ]
    data = make_xlsx([("Price list", rows), ("Contacts", [["Name", "Phone"], ["Ana", "555-0101"]]), ("Blank", [])])
    row = ingest(db, "prices.xlsx", data)
    assert row["ingest_status"] == "indexed", row["ingest_error"]
    pieces = chunk_rows(db, row["document_id"])
    price_chunks = [c for c in pieces if c["section_path"] == ["Price list"]]
    assert len(price_chunks) > 1
    assert all(c["content"].startswith("| SKU | Product | Price EUR |") for c in price_chunks)
    assert any(c["section_path"] == ["Contacts"] and "555-0101" in c["content"] for c in pieces)
    assert warnings(db, row["document_id"]) == [(None, "empty_sheet")]
    hit = retrieve(db, "SKU-0123", k=1, mode="lexical", namespace="arriving")[0]
    assert hit["source"] == "prices.xlsx" and "133" in hit["content"]


def test_a_pptx_gives_each_slide_its_title_as_heading_with_its_speaker_notes(rolled_back_db):
    db = rolled_back_db
    data = make_pptx(
        [
            ("Onboarding week", ["Meet your buddy on Monday"], "Remind them the badge office closes at 16:00"),
            ("Security basics", ["Use the password manager", "Report phishing to secops"], ""),
        ]
    )
    row = ingest(db, "onboarding.pptx", data)
    assert row["ingest_status"] == "indexed", row["ingest_error"]
    pieces = chunk_rows(db, row["document_id"])
    assert [(c["section_path"], c["page_start"]) for c in pieces] == [
        (["Onboarding week"], 1),
        (["Security basics"], 2),
    ]
    assert "Notes: Remind them the badge office closes at 16:00" in pieces[0]["content"]
    assert retrieve(db, "badge office", k=1, mode="lexical", namespace="arriving")[0]["source"] == "onboarding.pptx"


@pytest.mark.parametrize("content_type", ["application/octet-stream", "", "binary/octet-stream"])
def test_uploads_with_a_generic_or_no_type_are_sniffed_and_a_lying_name_is_read_by_content(
    rolled_back_db, content_type
):
    db = rolled_back_db
    docx = make_docx(para("Upload policy: keep receipts for seven years."))
    xlsx = make_xlsx([("Sheet1", [["Key", "Value"], ["retention", "seven years"]])])
    outcomes = {
        name: ingest(db, name, data, content_type)
        for name, data in [("upload-1", EN), ("upload-2", docx), ("upload-3", xlsx), ("report.docx", xlsx)]
    }
    assert {n: o["ingest_status"] for n, o in outcomes.items() if n.startswith("upload")} == dict.fromkeys(
        ["upload-1", "upload-2", "upload-3"], "indexed"
    )
    types = {
        r["source"]: r["content_type"]
        for r in db.execute("SELECT source, content_type FROM kb.documents WHERE namespace = 'arriving'")
    }
    assert types["upload-1"] == "application/pdf" and types["upload-3"].endswith("spreadsheetml.sheet")
    # an XLSX is not a corrupt Word file: read as the XLSX it is, the name that said DOCX shown
    assert outcomes["report.docx"]["ingest_status"] == "indexed"
    assert types["report.docx"].endswith("spreadsheetml.sheet")
    assert (None, "name_mismatch") in warnings(db, outcomes["report.docx"]["document_id"])


@pytest.mark.parametrize(
    "name,content_type,error",
    [
        ("minutes.doc", None, "a legacy Word .doc file (named 'minutes.doc') is not supported: save it as .docx"),
        ("budget.xls", None, "a legacy Excel .xls workbook (named 'budget.xls') is not supported: save it as .xlsx"),
        ("deck", "application/vnd.ms-powerpoint", "a legacy PowerPoint .ppt presentation"),
    ],
)
def test_legacy_office_files_are_stored_and_refused_by_name(rolled_back_db, name, content_type, error):
    row = ingest(rolled_back_db, name, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512, content_type)
    assert row["ingest_status"] == "failed"
    assert row["ingest_error"].startswith("unsupported_format: " + error), row["ingest_error"]


def test_limits_are_settings_named_in_their_errors_and_reparse_retries_only_what_can_succeed(rolled_back_db):
    db = rolled_back_db
    broken = ingest(db, "broken.pdf", (FIXTURES / "bad" / "truncated.pdf").read_bytes())
    two_pages = scanned_pdf([("text", {"pdf": EN, "page": 0}), ("text", {"pdf": ZH, "page": 0})])
    db.execute("UPDATE kb.settings SET value = '1' WHERE key = 'file_max_pages'")
    long = ingest(db, "two-pages.pdf", two_pages)
    assert long["ingest_error"] == "too_many_pages: the PDF has 2 pages; the limit file_max_pages is 1 (kb.settings)"
    db.execute("UPDATE kb.settings SET value = '2048' WHERE key = 'file_max_bytes'")
    big = ingest(db, "big.pdf", EN)
    assert (
        big["ingest_error"] == f"too_large: the file is {len(EN)} bytes; the limit file_max_bytes is 2048 (kb.settings)"
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="file_max_pages = 0 is outside its range 1 to 100000"):
        with db.transaction():
            db.execute("UPDATE kb.settings SET value = '0' WHERE key = 'file_max_pages'")
    # nothing changed: nothing is parsed again
    assert db.execute("SELECT kb.reparse_files('arriving', true) AS n").fetchone()["n"] == 0
    db.execute("UPDATE kb.settings SET value = default_value WHERE key IN ('file_max_pages', 'file_max_bytes')")
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    try:
        assert db.execute("SELECT kb.reparse_files('arriving', true) AS n").fetchone()["n"] == 2
    finally:
        db._notice_handlers.clear()
    assert notices and notices[-1].startswith("kb.reparse_files: 2 of 2 files parsed again (0 failed)")
    assert document(db, long["document_id"])["ingest_status"] == "indexed"
    assert document(db, big["document_id"])["ingest_status"] == "indexed"
    assert document(db, broken["document_id"])["parse_error"].startswith("corrupt:")  # deterministic: left alone


def test_ocr_stops_at_ocr_max_pages_with_a_warning_per_page_left_unread(rolled_back_db):
    db = rolled_back_db
    db.execute("UPDATE kb.settings SET value = '0' WHERE key = 'ocr_max_pages'")
    pdf = scanned_pdf([("text", {"pdf": EN, "page": 0}), ("scan", {"pdf": ZH, "page": 0, "keep": 0.1})])
    row = ingest(db, "no-ocr.pdf", pdf)
    assert row["ingest_status"] == "indexed"
    assert warnings(db, row["document_id"]) == [(2, "ocr_limit")]
    message = db.execute(
        "SELECT message FROM kb.file_warnings WHERE document_id = %s", (row["document_id"],)
    ).fetchone()
    assert "ocr_max_pages is 0" in message["message"]


def test_an_ocr_run_over_its_time_limit_keeps_the_text_the_document_had_and_says_so(rolled_back_db):
    db = rolled_back_db
    pdf = scanned_pdf([("text", {"pdf": EN, "page": 0}), ("scan", {"pdf": ZH, "page": 0, "keep": 1.0})])
    row = ingest(db, "slow-scan.pdf", pdf)
    before = chunk_rows(db, row["document_id"])
    db.execute("UPDATE kb.settings SET value = '1' WHERE key = 'file_parse_timeout_s'")
    db.execute("UPDATE kb.settings SET value = '0' WHERE key = 'ocr_page_timeout_s'")  # no time per page either
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 1
    d = document(db, row["document_id"])
    assert d["parse_error"] is None and d["ocr_status"] is None and d["ingest_status"] == "indexed"
    assert d["ocr"]["status"] == "failed" and d["ocr"]["error"].startswith("timeout:")
    assert warnings(db, row["document_id"]) == [(2, "ocr_failed")]
    assert "file_parse_timeout_s" in db.execute("SELECT message FROM kb.file_warnings").fetchone()["message"]
    assert chunk_rows(db, row["document_id"]) == before  # nothing lost
    assert db.execute("SELECT kb.ocr_pending(1) AS n").fetchone()["n"] == 0  # not claimed again


def test_pgkb_ingest_reports_every_file_it_does_not_load_and_why(tmp_path):
    (tmp_path / "policy.md").write_text("# Policy\n\ntext\n")
    (tmp_path / "minutes.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    (tmp_path / "slides.ppt").write_bytes(b"\xd0\xcf\x11\xe0")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "song.mp3").write_bytes(b"ID3\x03\x00\x00\x00")
    (tmp_path / "Makefile").write_text("all:\n")
    (tmp_path / "huge.md").write_bytes(b"x" * (loader.MAX_FILE_BYTES + 1))
    not_loaded: list[dict] = []
    found = loader.discover(tmp_path, not_loaded)
    assert [s for _, s in found] == ["policy.md"]
    assert {n["source"]: n["reason"] for n in not_loaded} == {
        "minutes.doc": "legacy_format",
        "slides.ppt": "legacy_format",
        "photo.jpg": "image",
        "song.mp3": "unknown_extension",
        "Makefile": "unknown_extension",
        "huge.md": "too_large",
    }
    summary = loader.Summary(not_loaded=not_loaded)
    assert summary.as_dict()["not_loaded"] == not_loaded
    table = "\n".join(loader.report_lines(summary))
    assert "minutes.doc" in table and "legacy_format" in table and "save it as .docx" in table


def test_pgkb_worker_reads_the_waiting_scans_then_embeds_their_text(fresh_db, dsn):
    from harness import worker

    fresh_db.execute("""UPDATE kb.settings SET value = '"deferred"' WHERE key = 'embed_mode'""")
    pdf = scanned_pdf([("scan", {"pdf": EN, "page": 0, "keep": 0.2})])
    row = ingest(fresh_db, "scan.pdf", pdf)
    assert row["ingest_status"] == "pending" and count_rows(fresh_db, "kb.chunks") == 0
    outcome = worker.run(worker.Options(dsn=dsn, once=True))
    assert outcome["stopped_by"] == "drained" and outcome["embedded"] >= 1 and outcome["remaining"] == 0
    d = document(fresh_db, row["document_id"])
    assert d["ingest_status"] == "indexed" and d["ocr_status"] == "done"
    assert count_rows(fresh_db, "kb.embeddings") == count_rows(fresh_db, "kb.chunks") >= 1
    assert "Travel and Expense Policy" in " ".join(c["content"] for c in chunk_rows(fresh_db, row["document_id"]))
