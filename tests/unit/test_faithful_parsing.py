"""Faithful parsing of real files: page furniture out, literal text kept as text, every word of a
Word file in, spans and chrome of HTML placed right. Each test builds the file it checks: PDFs are
drawn with PDFium (pypdfium2 of the server venv, in a child process), DOCX packages are written
from their XML here, and the parsers run in their child process as in the database."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from pgkb_plpy import parsers
from pgkb_plpy.chunker import chunk_document
from pgkb_plpy.parsers.html import html_to_text

PACKAGE = str(Path(__file__).parents[2] / "plpython")
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")

_DRAW_PDF = r"""
import ctypes, io, json, sys
import pypdfium2 as pdfium, pypdfium2.raw as raw
spec = json.load(sys.stdin)
pdf = pdfium.PdfDocument.new()
for lines in spec["pages"]:
    page = pdf.new_page(595, 842)
    for text, size, y in lines:
        obj = raw.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", size)
        buf = ctypes.create_string_buffer((text + "\x00").encode("utf-16-le"))
        raw.FPDFText_SetText(obj, ctypes.cast(buf, ctypes.POINTER(raw.FPDF_WCHAR)))
        raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 50, y)
        raw.FPDFPage_InsertObject(page.raw, obj)
    raw.FPDFPage_GenerateContent(page.raw)
out = io.BytesIO()
pdf.save(out)
sys.stdout.buffer.write(out.getvalue())
"""


def draw_pdf(pages: list[list[tuple[str, float, float]]]) -> bytes:
    """A PDF whose page n holds the lines (text, font size, y from the bottom) of ``pages[n]``."""
    done = subprocess.run(
        [str(SERVER_PYTHON), "-c", _DRAW_PDF], input=json.dumps({"pages": pages}).encode(), capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def parse(data: bytes, name: str) -> parsers.ParsedFile:
    return parsers.parse_isolated(data, name, python=str(SERVER_PYTHON), package_path=PACKAGE)


def manual_pages(n: int = 8) -> list[list[tuple[str, float, float]]]:
    """A manual: a contents page, then chapters with a running header, a footer and page numbers."""
    pages = [
        [
            ("Contents", 14, 780),
            ("1 Installing the agent ........ 2", 11, 760),
            ("2 Rotating certificates ........ 3", 11, 740),
            ("2.1 Renewal window ........ 3", 11, 720),
        ]
    ]
    for p in range(2, n + 1):
        pages.append(
            [
                (f"ACME Agent Manual - revision {p % 3}", 9, 810),
                (f"{p} Chapter about topic {chr(64 + p)}", 18, 760),
                (f"{p}.1 Details of topic {chr(64 + p)}", 14, 730),
                (f"The agent stores topic {chr(64 + p)} settings in the file number {p * 11}.", 11, 700),
                (f"Operators review topic {chr(64 + p)} before every release.", 11, 680),
                ("Confidential - ACME Corp", 9, 45),
                (f"- {p} -", 9, 30),
            ]
        )
    return pages


@needs_server_venv
def test_a_running_header_repeated_on_most_pages_is_not_indexed():
    parsed = parse(draw_pdf(manual_pages()), "manual.pdf")
    assert "ACME Agent Manual" not in parsed.text
    assert "Confidential" not in parsed.text
    chunks = chunk_document(parsed.text, parsed.title)
    assert chunks and not any("ACME Agent Manual" in c.content for c in chunks)
    assert "settings in the file number 22." in parsed.text


@needs_server_venv
def test_number_only_lines_at_page_edges_are_not_indexed():
    parsed = parse(draw_pdf(manual_pages()), "manual.pdf")
    for chunk in chunk_document(parsed.text, parsed.title):
        assert any(ch.isalpha() for ch in chunk.content), chunk.content
    assert "- 3 -" not in parsed.text and "\n3\n" not in parsed.text


@needs_server_venv
def test_a_table_of_contents_page_is_not_indexed_but_its_page_still_counts():
    parsed = parse(draw_pdf(manual_pages()), "manual.pdf")
    assert "........" not in parsed.text and "Contents" not in parsed.text
    assert len(parsed.page_starts) == 8


@needs_server_venv
def test_an_index_page_of_terms_and_page_numbers_is_not_indexed():
    pages = manual_pages(4) + [
        [("Index", 14, 780), ("agent, 2, 3", 11, 760), ("certificate, 3", 11, 740), ("renewal window, 3, 4", 11, 720)]
    ]
    parsed = parse(draw_pdf(pages), "manual.pdf")
    assert "renewal window, 3" not in parsed.text
    assert "Index" not in parsed.text


@needs_server_venv
def test_no_chunk_of_a_pdf_is_made_only_of_furniture():
    parsed = parse(draw_pdf(manual_pages(12)), "manual.pdf")
    furniture = ("ACME Agent Manual", "Confidential", "Contents", "........")
    for chunk in chunk_document(parsed.text, parsed.title):
        text = chunk.content
        for piece in furniture:
            text = text.replace(piece, "")
        assert sum(ch.isalpha() for ch in text) >= 20, chunk.content


@needs_server_venv
def test_a_shell_comment_in_a_pdf_stays_text_and_never_heads_a_section():
    pages = [
        [
            ("1 Overview", 18, 760),
            ("# generated file - DO NOT EDIT!", 11, 730),
            ("| column a | column b |", 11, 710),
            ("- not a list item", 11, 690),
            ("The spec starts here.", 11, 670),
        ],
        [("2 Details", 18, 760), ("More of the spec.", 11, 730)],
    ]
    parsed = parse(draw_pdf(pages), "spec.pdf")
    chunks = chunk_document(parsed.text, parsed.title)
    assert [c.section_path for c in chunks] == [["1 Overview"], ["2 Details"]]
    assert "DO NOT EDIT!" in chunks[0].content


@needs_server_venv
def test_numbered_headings_in_heading_type_nest_by_their_numbers():
    pages = [
        [
            ("3 Utilities", 16, 760),
            ("Intro to utilities: small programs that copy, move and list the files of a project.", 11, 740),
            ("3.1 Copying", 16, 720),
            ("How to copy.", 11, 700),
            ("3.1.2 Copying many files", 16, 680),
            ("Use a glob.", 11, 660),
            ("3.2 Moving", 16, 640),
            ("How to move.", 11, 620),
        ]
    ]
    parsed = parse(draw_pdf(pages), "utilities.pdf")
    paths = {c.content: c.section_path for c in chunk_document(parsed.text, parsed.title, max_tokens=40)}
    assert paths["Use a glob."] == ["3 Utilities", "3.1 Copying", "3.1.2 Copying many files"]
    assert paths["How to move."] == ["3 Utilities", "3.2 Moving"]


@needs_server_venv
def test_headings_come_from_font_sizes_when_there_is_no_outline():
    pages = [
        [
            ("Getting started", 20, 760),
            ("Read this first.", 11, 740),
            ("Requirements", 15, 720),
            ("A computer with two cores.", 11, 700),
        ]
    ]
    parsed = parse(draw_pdf(pages), "guide.pdf")
    paths = {c.content: c.section_path for c in chunk_document(parsed.text, parsed.title)}
    assert paths["A computer with two cores."] == ["Getting started", "Requirements"]


@pytest.mark.parametrize("junk", ["untitled", "(anonymous)", "Microsoft Word - policy.docx", "report.pdf", "  "])
def test_a_junk_document_title_is_dropped_from_paths(junk):
    assert parsers.clean_title(junk) is None
    assert parsers.clean_title("Expense policy") == "Expense policy"
