"""Files into the database (issue 13), against the real server: PDF, DOCX, HTML, Markdown and
text files added through SQL alone (kb.ingest_file, or bytes written to kb.documents.file),
parsed in PL/Python, chunked along their structure, with pages per chunk; bad files stored as
failed with an error naming the problem, never lost, and re-parsed on request.

The fixtures are in tests/fixtures/files (generate.py made them); the zip bomb and the 200 MB
file are made here."""

from __future__ import annotations

import io
import time
import unicodedata
import zipfile
from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON, add_outline, draw_pdf, make_docx, para, write_pdf
from helpers import count_rows
from pgkb_plpy import chunker, parsers

from harness.retrieval import retrieve

FIXTURES = Path(__file__).parent / "fixtures" / "files"
BAD = FIXTURES / "bad"


def ingest(db, source: str, data: bytes, namespace: str = "files", **kw) -> dict:
    names = ", ".join(f"p_{k} => %({k})s" for k in kw)
    sql = f"SELECT * FROM kb.ingest_file(%(ns)s, %(source)s, %(data)s{', ' + names if names else ''})"
    return db.execute(sql, {"ns": namespace, "source": source, "data": data, **kw}).fetchone()


def fixture(db, name: str, **kw) -> dict:
    path = FIXTURES / name if (FIXTURES / name).exists() else BAD / name
    return ingest(db, name, path.read_bytes(), **kw)


def doc(db, doc_id: int) -> dict:
    return db.execute(
        """SELECT id, source, title, body, file_name, content_type, byte_size, parser, parser_version, parse_error,
                  page_starts, ingest_status, ingest_error, chunk_count, chunker_version
           FROM kb.documents WHERE id = %s""",
        (doc_id,),
    ).fetchone()


def chunks(db, doc_id: int) -> list[dict]:
    return db.execute(
        "SELECT ordinal, section_path, content, embed_text, page_start, page_end FROM kb.chunks "
        "WHERE document_id = %s ORDER BY ordinal",
        (doc_id,),
    ).fetchall()


def paths(db, doc_id: int) -> list[str]:
    return [" > ".join(c["section_path"]) for c in chunks(db, doc_id)]


# ------------------------------------------------------------------------ each format through SQL


@pytest.mark.parametrize(
    "name,content_type,parser",
    [
        ("handbook-zh.pdf", "application/pdf", "pypdfium2"),
        ("handbook-zh.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "lxml"),
        ("handbook-zh.html", "text/html", "python html.parser"),
        ("handbook-zh.txt", "text/plain", "pgkb"),
        ("runbook-en.md", "text/markdown", "pgkb"),
        ("policy-en.pdf", "application/pdf", "pypdfium2"),
        ("policy-en.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "lxml"),
        ("runbook-en.html", "text/html", "python html.parser"),
    ],
)
def test_each_format_is_parsed_chunked_and_indexed_through_sql_alone(rolled_back_db, name, content_type, parser):
    row = fixture(rolled_back_db, name)
    assert row["ingest_status"] == "indexed", row
    assert row["changed"] is True
    d = doc(rolled_back_db, row["document_id"])
    assert d["content_type"] == content_type
    assert d["parser"].startswith(parser)
    fmt = d["parser_version"].split("/")[0]
    assert d["parser_version"] == f"{fmt}/{parsers.FORMAT_VERSIONS[fmt]}" and d["parse_error"] is None
    assert d["byte_size"] == (FIXTURES / name).stat().st_size
    assert d["chunk_count"] > 0 and d["chunker_version"] == chunker.CHUNKER_VERSION
    assert count_rows(rolled_back_db, "kb.lexical_postings WHERE document_id = %s", row["document_id"]) > 0
    assert (
        count_rows(
            rolled_back_db,
            "kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id WHERE c.document_id = %s",
            row["document_id"],
        )
        == d["chunk_count"]
    )


def test_a_docx_and_a_pdf_of_the_same_policy_give_the_same_section_paths(rolled_back_db):
    from_docx = fixture(rolled_back_db, "handbook-zh.docx")["document_id"]
    from_pdf = fixture(rolled_back_db, "handbook-zh.pdf")["document_id"]
    expected = [
        "员工手册 > 第一章 总则 > 第一条",
        "员工手册 > 第一章 总则 > 第二条",
        "员工手册 > 第二章 考勤管理 > 一、工作时间",
        "员工手册 > 第二章 考勤管理 > 二、请假规定 > （一）病假",
        "员工手册 > 第二章 考勤管理 > 二、请假规定 > （二）年假",
        "员工手册 > 第三章 报销 > 第十条",
    ]
    assert paths(rolled_back_db, from_docx) == expected
    assert [p for p in paths(rolled_back_db, from_pdf) if p != "员工手册"] == expected
    en_docx = fixture(rolled_back_db, "policy-en.docx")["document_id"]
    en_pdf = fixture(rolled_back_db, "policy-en.pdf")["document_id"]
    assert [p for p in paths(rolled_back_db, en_pdf) if p != "Travel and Expense Policy"] == paths(
        rolled_back_db, en_docx
    )


def test_the_three_chapter_handbook_without_markdown_headings_shows_its_chapters(rolled_back_db):
    row = fixture(rolled_back_db, "handbook-zh.txt", title="员工手册")
    got = paths(rolled_back_db, row["document_id"])
    assert "员工手册 > 第二章 考勤管理 > 二、请假规定 > （一）病假" in got
    assert "员工手册 > 第三章 报销 > 第十一条" in got
    assert len(got) >= 8  # not three chunks whose path is only the title
    # no chunk ends with the next chapter's heading
    assert not any(c["content"].endswith("第三章 报销") for c in chunks(rolled_back_db, row["document_id"]))
    hit = retrieve(rolled_back_db, "病假 诊断证明", k=1, mode="lexical", namespace="files")[0]
    assert hit["section_path"] == "员工手册 > 第二章 考勤管理 > 二、请假规定 > （一）病假"


def test_pdf_chunks_carry_their_pages(rolled_back_db):
    row = fixture(rolled_back_db, "policy-en.pdf")
    d = doc(rolled_back_db, row["document_id"])
    assert d["page_starts"] == [0]
    assert {(c["page_start"], c["page_end"]) for c in chunks(rolled_back_db, row["document_id"])} == {(1, 1)}
    docx_row = fixture(rolled_back_db, "policy-en.docx")
    assert {c["page_start"] for c in chunks(rolled_back_db, docx_row["document_id"])} == {None}


def test_html_drops_scripts_styles_and_navigation_and_keeps_tables_whole(rolled_back_db):
    row = fixture(rolled_back_db, "handbook-zh.html")
    body = doc(rolled_back_db, row["document_id"])["body"]
    for dropped in ("不应被索引的脚本文字", "导航文字", "页眉文字", "页脚文字", "font-family"):
        assert dropped not in body
    assert "| 婚假 | 3天 |" in body
    table_chunks = [c for c in chunks(rolled_back_db, row["document_id"]) if "| 假期类型 |" in c["content"]]
    assert len(table_chunks) == 1 and "| 产假 | 158天 |" in table_chunks[0]["content"]


def test_code_and_mermaid_are_kept_in_the_passage_but_embedded_as_descriptions(rolled_back_db):
    row = fixture(rolled_back_db, "runbook-en.md")
    rows = chunks(rolled_back_db, row["document_id"])
    diagram = next(c for c in rows if "```mermaid" in c["content"])
    assert "A[Build image] --> B{Tests pass?}" in diagram["content"]
    assert (
        "[diagram: mermaid flowchart] Build image, Tests pass?, yes, Deploy to staging, no, Fix and rebuild, "
        "Deploy to production" in diagram["embed_text"]
    )
    assert "-->" not in diagram["embed_text"]
    code = next(c for c in rows if "```bash" in c["content"])
    assert "[code: bash, 4 lines]" in code["embed_text"] and "preflight.sh" not in code["embed_text"]
    # the code stays findable by its words (BM25 indexes the content)
    assert retrieve(rolled_back_db, "preflight.sh", k=1, mode="lexical", namespace="files")[0]["source"] == (
        "runbook-en.md"
    )


# ------------------------------------------------------------------------------ bad files


BAD_FILES = [
    ("encrypted.pdf", "encrypted: the PDF is encrypted"),
    ("truncated.pdf", "corrupt: not a readable PDF"),
    ("truncated.docx", "corrupt: not a readable DOCX"),
    ("gbk-not-utf8.txt", "encoding: not valid UTF-8 text"),
]


@pytest.mark.parametrize("name,error", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_stored_failed_with_an_error_naming_the_problem(rolled_back_db, name, error):
    row = fixture(rolled_back_db, name)
    assert row["ingest_status"] == "failed"
    assert row["ingest_error"].startswith(error), row["ingest_error"]
    d = doc(rolled_back_db, row["document_id"])
    assert d["parse_error"] == d["ingest_error"] and d["chunk_count"] == 0
    assert d["byte_size"] == (BAD / name).stat().st_size  # stored, bytes and all
    assert count_rows(rolled_back_db, "kb.chunks WHERE document_id = %s", row["document_id"]) == 0
    listed = rolled_back_db.execute(
        "SELECT parse_error FROM kb.document_files WHERE document_id = %s", (row["document_id"],)
    ).fetchone()
    assert listed["parse_error"] == d["parse_error"]
    # the stand-in body is never retrieved
    assert retrieve(rolled_back_db, "could not be parsed", k=5, mode="lexical", namespace="files") == []


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"<w:document>" + b" " * (300 * 1024 * 1024) + b"</w:document>")
    return buffer.getvalue()


def test_a_docx_zip_bomb_is_refused_before_it_expands(rolled_back_db):
    bomb = _zip_bomb()
    assert len(bomb) < 1024 * 1024
    row = ingest(rolled_back_db, "bomb.docx", bomb)
    assert row["ingest_status"] == "failed"
    assert row["ingest_error"].startswith("zip_bomb: word/document.xml would expand"), row["ingest_error"]


def _amplifying_xlsx(uses: int = 500, chars: int = 10_000) -> bytes:
    """Issue 42, item 6: one shared string of ``chars`` characters used by ``uses`` cells (a few KB
    that expand to ``uses * chars`` characters of text)."""
    s = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    words = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    rows = "".join(f'<row r="{r}"><c r="A{r}" t="s"><v>0</v></c></row>' for r in range(1, uses + 1))
    parts = {
        "[Content_Types].xml": "<Types/>",
        "xl/workbook.xml": f'<workbook xmlns="{s}" xmlns:r="{rel}"><sheets>'
        '<sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
        f'relationships"><Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
        "</Relationships>",
        "xl/sharedStrings.xml": f'<sst xmlns="{s}"><si><t>{words}</t></si></sst>',
        "xl/worksheets/sheet1.xml": f'<worksheet xmlns="{s}"><sheetData>{rows}</sheetData></worksheet>',
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, xml in parts.items():
            archive.writestr(name, xml)
    return buffer.getvalue()


def test_a_few_kilobytes_that_repeat_one_string_are_refused_quickly_not_indexed_as_thousands_of_chunks(
    rolled_back_db,
):
    crafted = _amplifying_xlsx()
    assert len(crafted) < 4096
    started = time.monotonic()
    row = ingest(rolled_back_db, "amplified.xlsx", crafted)
    elapsed = time.monotonic() - started
    assert row["ingest_status"] == "failed", (row, f"{elapsed:.1f} s")
    error = row["ingest_error"]
    assert error.startswith("zip_bomb: the XLSX would yield more than 100 characters of text per byte"), error
    assert "at sheet 'Data', cell A" in error and "the shared string at index 0 (10000 characters)" in error, error
    assert error.endswith("; the limit file_max_expansion_ratio is 100 (kb.settings)"), error
    d = doc(rolled_back_db, row["document_id"])
    assert d["byte_size"] == len(crafted) and d["chunk_count"] == 0  # stored, never chunked
    assert count_rows(rolled_back_db, "kb.chunks WHERE document_id = %s", row["document_id"]) == 0
    assert elapsed < 5, f"{elapsed:.1f} s"
    # a failure on a limit: parsed again once the limit changes (kb.parse_retry_reason)
    assert rolled_back_db.execute("SELECT kb.reparse_files('files', true) AS n").fetchone()["n"] == 0
    rolled_back_db.execute("UPDATE kb.settings SET value = '10' WHERE key = 'file_max_expansion_ratio'")
    assert rolled_back_db.execute("SELECT kb.reparse_files('files', true) AS n").fetchone()["n"] == 1
    assert "the limit file_max_expansion_ratio is 10 (kb.settings)" in doc(rolled_back_db, d["id"])["parse_error"]


def test_a_200_megabyte_file_is_stored_failed_without_being_parsed(rolled_back_db):
    big = b"%PDF-1.7\n" + b"0" * (200 * 1024 * 1024)
    row = ingest(rolled_back_db, "huge.pdf", big)
    assert row["ingest_status"] == "failed"
    assert row["ingest_error"] == (
        f"too_large: the file is {len(big)} bytes; the limit file_max_bytes is 67108864 (kb.settings)"
    )
    assert doc(rolled_back_db, row["document_id"])["byte_size"] == len(big)


def test_the_backend_survives_every_bad_file_and_then_ingests_a_good_one(rolled_back_db):
    pid = rolled_back_db.info.backend_pid
    for name, _ in BAD_FILES:
        fixture(rolled_back_db, name)
    assert rolled_back_db.info.backend_pid == pid
    assert fixture(rolled_back_db, "policy-en.docx")["ingest_status"] == "indexed"


def test_a_failed_file_is_reparsed_on_request_and_a_fixed_file_replaces_it(rolled_back_db):
    failed = ingest(rolled_back_db, "policy.pdf", (BAD / "truncated.pdf").read_bytes())
    assert failed["ingest_status"] == "failed"
    # the same bytes, conversion and limits fail the same way: not parsed again
    assert rolled_back_db.execute("SELECT kb.reparse_files('files', true) AS n").fetchone()["n"] == 0
    assert doc(rolled_back_db, failed["document_id"])["ingest_status"] == "failed"
    fixed = ingest(rolled_back_db, "policy.pdf", (FIXTURES / "policy-en.pdf").read_bytes())
    assert fixed["document_id"] == failed["document_id"] and fixed["ingest_status"] == "indexed"
    assert fixed["ingest_error"] is None
    again = ingest(rolled_back_db, "policy.pdf", (FIXTURES / "policy-en.pdf").read_bytes())
    assert again["changed"] is False  # the same bytes are not parsed again


def test_file_names_are_nfc_normalised_for_source_and_kept_as_given(rolled_back_db):
    decomposed = unicodedata.normalize("NFD", "  Café-手册.txt ")
    row = ingest(rolled_back_db, decomposed, "第一章 总则\n\n本手册适用于全体员工。".encode())
    d = doc(rolled_back_db, row["document_id"])
    assert d["source"] == "Café-手册.txt" == unicodedata.normalize("NFC", d["source"])
    assert d["file_name"] == decomposed


def test_bytes_written_to_the_file_column_are_parsed_as_well(rolled_back_db):
    data = (FIXTURES / "runbook-en.html").read_bytes()
    doc_id = rolled_back_db.execute(
        "INSERT INTO kb.documents (namespace, source, file) VALUES ('files', 'runbook.html', %s) RETURNING id",
        (data,),
    ).fetchone()["id"]
    d = doc(rolled_back_db, doc_id)
    assert d["title"] == "On-call runbook" and d["ingest_status"] == "indexed"
    assert "Skip to content" not in d["body"]


def test_stale_documents_are_listed_and_reindexed(rolled_back_db):
    row = fixture(rolled_back_db, "policy-en.docx")
    text_id = rolled_back_db.execute(
        "INSERT INTO kb.documents (namespace, source, body) VALUES ('files', 'n.md', '# N\n\nText.') RETURNING id"
    ).fetchone()["id"]
    assert count_rows(rolled_back_db, "kb.stale_documents WHERE namespace = 'files'") == 0
    rolled_back_db.execute("UPDATE kb.documents SET parser_version = 'docx/0' WHERE id = %s", (row["document_id"],))
    rolled_back_db.execute("UPDATE kb.documents SET chunker_version = '1' WHERE id = %s", (text_id,))
    stale = rolled_back_db.execute(
        "SELECT source, parser_stale, chunker_stale FROM kb.stale_documents WHERE namespace = 'files' ORDER BY source"
    ).fetchall()
    assert [(s["source"], s["parser_stale"], s["chunker_stale"]) for s in stale] == [
        ("n.md", False, True),
        ("policy-en.docx", True, False),
    ]
    ids_before = {c["ordinal"]: c for c in chunks(rolled_back_db, row["document_id"])}
    assert rolled_back_db.execute("SELECT kb.reindex_documents('files') AS n").fetchone()["n"] == 2
    assert count_rows(rolled_back_db, "kb.stale_documents WHERE namespace = 'files'") == 0
    assert len(chunks(rolled_back_db, row["document_id"])) == len(ids_before)


def test_a_failure_that_would_fail_alike_is_not_parsed_again_nor_listed_stale(rolled_back_db):
    data = (BAD / "truncated.pdf").read_bytes()
    first = ingest(rolled_back_db, "truncated.pdf", data)
    # a parse of the bytes writes the name they were sent under: a mark that shows whether one ran
    mark = "UPDATE kb.documents SET file_name = 'marked.pdf' WHERE id = %s"
    rolled_back_db.execute(mark, (first["document_id"],))
    assert count_rows(rolled_back_db, "kb.stale_documents WHERE namespace = 'files'") == 0
    # the same bytes again (a folder run): the failure is reported again, the file not parsed again
    again = ingest(rolled_back_db, "truncated.pdf", data)
    assert again["ingest_status"] == "failed" and again["ingest_error"] == first["ingest_error"]
    assert doc(rolled_back_db, first["document_id"])["file_name"] == "marked.pdf"
    # a limit its kind of failure comes from changed, or another conversion: then it is retried
    rolled_back_db.execute("UPDATE kb.documents SET parser_version = 'pdf/0' WHERE id = %s", (first["document_id"],))
    assert count_rows(rolled_back_db, "kb.stale_documents WHERE namespace = 'files' AND parser_stale") == 1
    ingest(rolled_back_db, "truncated.pdf", data)
    parsed = doc(rolled_back_db, first["document_id"])
    assert parsed["file_name"] == "truncated.pdf" and parsed["parser_version"] == parsers.format_version("pdf")
    assert count_rows(rolled_back_db, "kb.stale_documents WHERE namespace = 'files'") == 0


def test_sql_and_python_agree_on_file_limits_and_versions(rolled_back_db):
    from pgkb_plpy import chunker, parsers

    row = rolled_back_db.execute(
        "SELECT kb.file_max_bytes() AS m, kb.parser_versions() AS v, kb.chunker_version() AS c"
    ).fetchone()
    assert row["m"] == parsers.MAX_FILE_BYTES
    assert row["v"] == parsers.FORMAT_VERSIONS
    assert row["c"] == chunker.CHUNKER_VERSION


def test_pgkb_ingest_loads_a_folder_of_every_format_through_the_database(fresh_db, dsn, tmp_path):
    import shutil

    from harness import loader

    for name in ("handbook-zh.pdf", "policy-en.docx", "runbook-en.html", "handbook-zh.txt", "runbook-en.md"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    shutil.copy(BAD / "scanned.pdf", tmp_path / "scanned.pdf")
    summary = loader.ingest(dsn, [str(tmp_path)], progress=False)
    assert sorted(summary.synced) == sorted(p.name for p in tmp_path.iterdir())
    assert summary.failed == []
    # the scan is stored and waits for OCR (pgkb worker), which the report says
    assert [(w["file"], w["page"], w["kind"]) for w in summary.warnings] == [
        (str(tmp_path / "runbook-en.html"), None, "box_not_indexed"),  # its "Related articles" aside
        (str(tmp_path / "scanned.pdf"), 1, "ocr_pending"),
    ]
    rows = fresh_db.execute("SELECT source, content_type, ingest_status FROM kb.documents ORDER BY source").fetchall()
    assert {r["source"]: r["ingest_status"] for r in rows} == {
        "handbook-zh.pdf": "indexed",
        "handbook-zh.txt": "indexed",
        "policy-en.docx": "indexed",
        "runbook-en.html": "indexed",
        "runbook-en.md": "indexed",
        "scanned.pdf": "pending",
    }
    again = loader.ingest(dsn, [str(tmp_path)], progress=False)
    # unchanged files are not parsed again
    assert again.synced == [] and len(again.skipped) == 6
    (tmp_path / "policy-en.docx").unlink()
    gone = loader.ingest(dsn, [str(tmp_path)], progress=False)
    assert gone.removed == ["default/policy-en.docx"]


# ------------------------------------------------------------------------------ faithful parsing


def test_a_file_parsed_with_an_older_conversion_is_reparsed_with_the_version_in_provenance(rolled_back_db):
    row = fixture(rolled_back_db, "policy-en.pdf")
    rolled_back_db.execute(
        "UPDATE kb.documents SET parser_version = 'pdf/1', body = body || E'\\n\\n1' WHERE id = %s",
        (row["document_id"],),
    )
    assert rolled_back_db.execute("SELECT kb.reparse_files('files') AS n").fetchone()["n"] == 1
    d = doc(rolled_back_db, row["document_id"])
    assert d["parser_version"] == f"pdf/{parsers.FORMAT_VERSIONS['pdf']}" != "pdf/1"
    assert not d["body"].endswith("\n\n1")
    hit = retrieve(rolled_back_db, "expense approval", k=1, mode="lexical", namespace="files")[0]
    assert hit["provenance"]["parser_version"] == d["parser_version"]


@pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")
def test_no_chunk_of_a_stored_manual_is_page_furniture(rolled_back_db):
    pages = []
    for p in range(1, 7):
        pages.append(
            [
                ("ACME Agent Manual", 9, 810),
                (f"{p} Topic {chr(64 + p)}", 18, 760),
                (f"The agent keeps topic {chr(64 + p)} in the file {p * 11}.conf and reloads it hourly.", 11, 700),
                (str(p), 9, 30),
            ]
        )
    row = ingest(rolled_back_db, "manual.pdf", draw_pdf(pages))
    assert row["ingest_status"] == "indexed", row
    rows = chunks(rolled_back_db, row["document_id"])
    assert len(rows) == 6
    for c in rows:
        assert "ACME Agent Manual" not in c["content"] and "reloads it hourly" in c["content"]
    assert [c["page_start"] for c in rows] == [1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")
def test_a_word_footnote_is_retrieved_with_the_sentence_that_references_it(rolled_back_db):
    body = (
        para("Escalation", "Heading1") + "<w:p><w:r><w:t>A SEV1 incident is acknowledged within 30 minutes.</w:t></w:r>"
        '<w:r><w:footnoteReference w:id="1"/></w:r></w:p>'
    )
    notes = (
        '<w:footnote w:id="1"><w:p><w:r><w:t>During the holiday freeze: within 10 minutes.</w:t></w:r></w:p>'
        "</w:footnote>"
    )
    row = ingest(rolled_back_db, "runbook.docx", make_docx(body, footnotes=notes))
    assert row["ingest_status"] == "indexed", row
    hit = retrieve(rolled_back_db, "SEV1 holiday freeze", k=1, mode="lexical", namespace="files")[0]
    assert "acknowledged within 30 minutes. [footnote 1: During the holiday freeze" in hit["content"]


@pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")
def test_pdf_bookmarks_whose_titles_differ_from_the_printed_headings_give_the_stored_section_paths(rolled_back_db):
    # headings printed in body type, so only the outline can say they are headings; its titles
    # differ from the print: a number dropped or written "1.", other case, a title that only starts
    # the printed line
    pages = [
        [
            ("1 Installing the agent", 11, 760),
            ("Install the agent with apt install nodebridge-agent on every bridge node.", 11, 740),
        ],
        [("2 Certificates", 11, 760), ("Certificates are issued by the internal CA of each site.", 11, 740)],
        [
            ("2.1. Renewal window", 11, 760),
            ("The renewal window opens 21 days before a certificate expires.", 11, 740),
        ],
        [
            ("Appendix A  Glossary of terms", 11, 760),
            ("Bridge node: a host that forwards traffic between two sites.", 11, 740),
        ],
    ]
    outline = [
        ("1. Installing the agent", 1, 0),
        ("Certificates", 1, 1),
        ("2.1 Renewal Window", 2, 2),
        ("Appendix A", 1, 3),
    ]
    row = ingest(rolled_back_db, "bridge-manual.pdf", add_outline(draw_pdf(pages), outline))
    assert row["ingest_status"] == "indexed", row
    got = {c["content"]: (c["section_path"], c["page_start"]) for c in chunks(rolled_back_db, row["document_id"])}
    assert got == {
        "Install the agent with apt install nodebridge-agent on every bridge node.": (["1 Installing the agent"], 1),
        "Certificates are issued by the internal CA of each site.": (["2 Certificates"], 2),
        "The renewal window opens 21 days before a certificate expires.": (
            ["2 Certificates", "2.1. Renewal window"],
            3,
        ),
        "Bridge node: a host that forwards traffic between two sites.": (["Appendix A Glossary of terms"], 4),
    }


REGULATION = [
    "第一章 总则",
    "第一条 为规范差旅费报销，制定本细则。",
    "第二章 报销标准",
    "第五条 差旅费按下列标准报销：",
    "（一）交通",
    "乘坐高铁可乘坐二等座，飞机一律乘坐经济舱。",
    "（二）住宿",
    "住宿费每晚不超过四百五十元。",
    "第六条 超标准部分由个人承担。",
]


def regulation_files() -> dict[str, bytes]:
    """The regulation typed without heading styles or tags, its title set apart, in each format; and
    tagged in part (chapters and items as headings, articles as text) in HTML and Word."""
    html = "<html><body><h1>差旅费报销细则</h1>" + "".join(f"<p>{line}</p>" for line in REGULATION) + "</body></html>"

    def tag(line: str) -> str:
        return "h2" if line[2:3] == "章" else "h3" if line[:1] == "（" else "p"

    def style(line: str) -> str:
        return "Heading1" if line[2:3] == "章" else "Heading2" if line[:1] == "（" else ""

    tagged = "<h1>差旅费报销细则</h1>" + "".join(f"<{tag(line)}>{line}</{tag(line)}>" for line in REGULATION)
    title = (
        '<w:p><w:pPr><w:jc w:val="center"/></w:pPr><w:r><w:rPr><w:b/><w:sz w:val="36"/></w:rPr>'
        "<w:t>差旅费报销细则</w:t></w:r></w:p>"
    )
    pdf = [("差旅费报销细则", 18, 780)] + [(line, 11, 740 - 20 * i) for i, line in enumerate(REGULATION)]
    return {
        "细则.docx": make_docx(title + "".join(para(line) for line in REGULATION)),
        "细则.pdf": write_pdf([pdf]),
        "细则.html": html.encode(),
        "细则-tagged.html": tagged.encode(),
        "细则-styled.docx": make_docx(title + "".join(para(line, style(line)) for line in REGULATION)),
    }


@pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv")
@pytest.mark.parametrize("name", ["细则.docx", "细则.pdf", "细则.html", "细则-tagged.html", "细则-styled.docx"])
def test_chapters_articles_and_items_nest_as_numbered_in_every_format(rolled_back_db, name):
    row = ingest(rolled_back_db, name, regulation_files()[name])
    assert row["ingest_status"] == "indexed", row
    got = [(c["section_path"], c["content"]) for c in chunks(rolled_back_db, row["document_id"])]
    root = ["差旅费报销细则"]
    assert got == [
        (root + ["第一章 总则", "第一条"], "第一条 为规范差旅费报销，制定本细则。"),
        (root + ["第二章 报销标准", "第五条"], "第五条 差旅费按下列标准报销："),
        (root + ["第二章 报销标准", "第五条", "（一）交通"], "乘坐高铁可乘坐二等座，飞机一律乘坐经济舱。"),
        (root + ["第二章 报销标准", "第五条", "（二）住宿"], "住宿费每晚不超过四百五十元。"),
        (root + ["第二章 报销标准", "第六条"], "第六条 超标准部分由个人承担。"),
    ]
