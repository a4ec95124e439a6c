"""The content decides a file's format whenever it is one pgkb reads; a name or declared content type
decides only among the text formats and refuses only what the bytes confirm (a legacy Office file).
Detection in this process; parsing through the child process with the server venv's interpreter
(pypdfium2, python-docx, Pillow, tesseract) importing this working tree's pgkb_plpy; the folder
loader's choice of files through the same sniffing (pgkb_plpy.parsers.formats)."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
from pgkb_plpy import parsers
from pgkb_plpy.parsers import ParseError, detect, formats, parse_bytes

from harness import loader

FIXTURES = Path(__file__).parents[1] / "fixtures" / "files"
PACKAGE = str(Path(__file__).parents[2] / "plpython")
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")
DOCX = (FIXTURES / "policy-en.docx").read_bytes()
#: A real legacy Excel workbook (an OLE container), from xlrd's test samples.
REAL_XLS = (FIXTURES / "sniffing" / "ragged.xls").read_bytes()
WORD_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
#: The start of what Excel writes for "Save as Web Page", which exports name .xls.
EXCEL_HTML = b"""<html xmlns:o="urn:schemas-microsoft-com:office:office"
xmlns:x="urn:schemas-microsoft-com:office:excel" xmlns="http://www.w3.org/TR/REC-html40">
<head><meta http-equiv=Content-Type content="text/html; charset=utf-8"><meta name=ProgId content=Excel.Sheet>
<title>Travel budget</title></head><body>
<table border=0 cellpadding=0 cellspacing=0><tr><td>Item</td><td>Cost</td></tr>
<tr><td>Travel</td><td>1200</td></tr><tr><td>Rent</td><td>900</td></tr></table></body></html>"""

#: The first bytes of a PNG: what the loader sniffs.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 64
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


def isolated(data: bytes, name: str, content_type: str | None = None, **kw) -> parsers.ParsedFile:
    return parsers.parse_isolated(data, name, content_type, python=str(SERVER_PYTHON), package_path=PACKAGE, **kw)


def kinds(parsed: parsers.ParsedFile) -> list[str]:
    return [w["kind"] for w in parsed.warnings]


def sniffing_table():
    """scripts/sniffing_table.py, the measurement docs/INGEST.md reports."""
    path = Path(__file__).parents[2] / "scripts" / "sniffing_table.py"
    spec = importlib.util.spec_from_file_location("sniffing_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ what decides


@pytest.mark.parametrize("content_type", [None, WORD_TYPE, "application/msword", "application/octet-stream"])
@pytest.mark.parametrize("name", ["minutes.doc", "minutes.docx", "minutes.pdf", "minutes.xls", "minutes"])
def test_a_real_docx_is_a_docx_whatever_its_name_or_declared_type(name, content_type):
    assert detect(DOCX, name, content_type) == "docx"


@needs_server_venv
def test_a_docx_named_doc_is_parsed_as_the_docx_it_is_and_the_name_is_shown_not_silently_overruled():
    right = isolated(DOCX, "policy.docx")
    named_doc = isolated(DOCX, "policy.doc", "application/msword")
    assert named_doc.format == "docx" and named_doc.text == right.text and named_doc.text
    assert kinds(named_doc)[0] == "name_mismatch" and "name_mismatch" not in kinds(right)
    assert "application/msword" in named_doc.warnings[0]["message"]
    assert "a DOCX (Word) file" in named_doc.warnings[0]["message"]


@pytest.mark.parametrize("name", ["budget.xls", "budget.xlsx", "budget", "budget.html"])
def test_an_html_export_named_xls_is_read_as_html(name):
    assert detect(EXCEL_HTML, name) == "html"
    parsed = parse_bytes(EXCEL_HTML, name)
    assert "Travel" in parsed.text and "1200" in parsed.text
    assert ("name_mismatch" in kinds(parsed)) == (name not in ("budget", "budget.html"))


@pytest.mark.parametrize(
    "name,content_type,said",
    [
        ("budget.xls", None, "(named 'budget.xls')"),
        ("budget.xlsx", None, "(OLE content)"),
        ("budget", None, "(OLE content)"),
        ("budget.pdf", "application/vnd.ms-excel", "(content type 'application/vnd.ms-excel')"),
        ("budget.doc", None, "(OLE content)"),  # the workbook's streams outweigh a wrong legacy name
    ],
)
def test_a_real_legacy_xls_is_refused_by_its_content_naming_the_format_to_save_it_as(name, content_type, said):
    with pytest.raises(ParseError) as caught:
        detect(REAL_XLS, name, content_type)
    assert caught.value.kind == "unsupported_format"
    assert (
        str(caught.value)
        == f"unsupported_format: a legacy Excel .xls workbook {said} is not supported: save it as .xlsx"
    )


@pytest.mark.parametrize(
    "data,name,fmt",
    [
        (b"{\\rtf1\\ansi\\deff0 {\\fonttbl {\\f0 Times;}} Minutes of the meeting.}", "minutes.doc", "rtf"),
        (b'<?xml version="1.0"?>\n<?mso-application progid="Excel.Sheet"?>\n<Workbook/>', "budget.xls", "xls"),
        (b"PK\x03\x04" + b"\x00" * 100, "minutes.doc", "doc"),  # no document inside: the name says which
    ],
)
def test_legacy_content_that_is_not_ole_is_refused_naming_the_format_to_save_it_as(data, name, fmt):
    with pytest.raises(ParseError, match=rf"save it as \.{formats.LEGACY_FORMATS[fmt]}$") as caught:
        detect(data, name)
    assert caught.value.kind == "unsupported_format" and formats.FORMAT_BY_NAME[fmt].human in str(caught.value)


def test_text_under_a_binary_format_s_name_is_read_as_text_and_the_name_is_shown():
    parsed = parse_bytes(b"Refunds take 14 days.\n", "refunds.pdf")
    assert parsed.format == "text" and parsed.text == "Refunds take 14 days."
    assert parsed.warnings[0]["kind"] == "name_mismatch"
    assert parsed.warnings[0]["message"] == "'refunds.pdf' says a PDF but the content is text: read as such"


@pytest.mark.parametrize(
    "data,sniffed",
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3", "pdf"),
        (b"\r\n%PDF-1.4\n", "pdf"),
        (b"\x00\x05\x16\x07 MacBinary junk %PDF-1.3\n", "pdf"),
        (b"# The PDF header\n\nA file starts with\n%PDF-1.7\n", "text"),
    ],
)
def test_a_pdf_header_counts_at_the_start_or_after_binary_junk_never_inside_text(data, sniffed):
    assert formats.sniff(data) == sniffed


def test_among_text_formats_the_name_decides_as_before():
    assert detect(b"<p>a txt that holds html</p>", "a.txt") == "text"
    assert detect(b"# Title\n\n<html>", "a.md") == "markdown"
    assert detect(b"<html><body>x</body></html>", "page.md") == "markdown"


@pytest.mark.parametrize("name", ["report.pdf", "report.docx", "report.txt", "report", "scan.png"])
@pytest.mark.parametrize("content_type", [None, "application/pdf", WORD_TYPE])
def test_an_empty_file_is_reported_empty_before_its_type_is_looked_at(name, content_type):
    with pytest.raises(ParseError) as caught:
        detect(b"", name, content_type)
    assert str(caught.value) == "empty: the file is empty (0 bytes)"
    with pytest.raises(ParseError, match="^empty: the file is empty"):
        parsers.parse_isolated(b"", name, content_type)
    stored = parsers.parse_file(b"", name, content_type)
    assert stored["error_kind"] == "empty" and stored["format"] is None


# ------------------------------------------------------------------------------ images


def _scan(kind: str) -> bytes:
    return sniffing_table().rendered_image(kind, ["Receipts are kept for seven years.", "Claims close in 90 days."])


@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
@pytest.mark.parametrize("name", ["scan.pdf", "scan", "scan.png", "scan.docx"])
def test_an_image_is_an_image_whatever_its_name(kind, name):
    assert detect(_scan(kind), name) == "image"
    assert detect(_scan(kind), name, "application/pdf") == "image"


@needs_server_venv
@pytest.mark.parametrize("kind,content_type", [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_an_image_named_pdf_is_read_by_ocr_when_ocr_runs_and_waits_for_it_otherwise(kind, content_type):
    data = _scan(kind)
    waiting = isolated(data, "scan.pdf")
    assert waiting.format == "image" and waiting.text == "" and waiting.ocr["pending_pages"] == [1]
    assert kinds(waiting) == ["name_mismatch", "ocr_pending"] and waiting.content_type == content_type
    read = isolated(data, "scan.pdf", ocr="run")
    assert "Receipts are kept for seven years." in read.text and "90 days" in read.text
    assert read.page_starts == [0] and read.ocr["status"] == "done" and read.ocr["pages"][0]["confidence"] > 80
    assert "OCR tesseract" in read.parser and read.parser_version == f"image/{formats.FORMAT_VERSIONS['image']}"
    with pytest.raises(ParseError) as off:
        isolated(data, "scan.pdf", ocr="off")
    assert str(off.value) == "no_text_layer: an image is read by OCR only, and OCR is off"


@needs_server_venv
def test_a_damaged_image_is_corrupt_and_a_huge_one_is_refused_before_it_is_decoded():
    with pytest.raises(ParseError, match="^corrupt: not a readable image"):
        isolated(_scan("PNG")[:60], "scan.png")
    from PIL import Image

    out = io.BytesIO()
    Image.new("1", (12_000, 12_000), 1).save(out, "PNG")  # a few kilobytes, 144 megapixels
    with pytest.raises(ParseError, match="^too_large: the image is 12000x12000 pixels"):
        isolated(out.getvalue(), "huge.png")


# ------------------------------------------------------------------------------ the loader


def test_gb18030_text_is_decoded_by_the_loader_as_the_database_decodes_it(tmp_path):
    text = (FIXTURES / "handbook-zh.txt").read_text("utf-8")
    path = tmp_path / "handbook.txt"
    path.write_bytes(text.encode("gb18030"))
    loaded = loader.read_document(path, "handbook.txt", None)
    assert loaded.body.replace("\r\n", "\n").strip() == parse_bytes(path.read_bytes(), "handbook.txt").text
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("Refunds take 14 days.\n".encode("utf-16"))
    assert loader.read_document(utf16, "utf16.txt", None).body == "Refunds take 14 days.\n"


@pytest.mark.parametrize(
    "name,data,route",
    [
        ("minutes.doc", DOCX, "send"),
        ("minutes", DOCX, "send"),
        ("minutes.md", DOCX, "send"),
        ("budget.xls", EXCEL_HTML, "send"),
        ("page.md", EXCEL_HTML, "read"),  # text formats: the name decides
        ("notes.md", b"# Notes\n\ntext\n", "read"),
        ("notes.txt", "第一章 总则".encode("gb18030"), "read"),
        ("budget.xls", REAL_XLS, "legacy_format"),
        ("budget", REAL_XLS, "legacy_format"),
        ("minutes.doc", b"{\\rtf1\\ansi Minutes.}", "legacy_format"),
        ("scan.pdf", PNG, "send"),  # a scan saved under a document's name
        ("figure.png", PNG, "image"),  # a folder's image is a figure of its documents
        ("figure", PNG, "image"),
        ("Makefile", b"all:\n\techo\n", "unknown_extension"),
        ("tool.bin", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", "unknown_extension"),
        ("archive.zip", b"PK\x05\x06" + b"\x00" * 18, "unknown_extension"),
    ],
)
def test_the_loader_chooses_files_by_their_content_as_the_database_reads_them(tmp_path, name, data, route):
    path = tmp_path / name
    path.write_bytes(data)
    assert loader.route(path)[0] == route
    if route == "legacy_format":
        assert loader.route(path)[1].endswith("save it as .xlsx" if "xls" in name or name == "budget" else ".docx")


@pytest.mark.parametrize("name,data", [("minutes.doc", DOCX), ("budget.xls", EXCEL_HTML), ("x.xls", REAL_XLS)])
def test_the_loader_sniffs_a_file_as_the_database_sniffs_its_bytes(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    assert formats.sniff_path(path) == formats.sniff_bytes(data)


# ------------------------------------------------------------------------------ measured


@needs_server_venv
def test_every_supported_format_is_read_alike_under_its_right_name_a_wrong_name_and_no_name():
    import subprocess

    done = subprocess.run(
        [str(SERVER_PYTHON), str(Path(__file__).parents[2] / "scripts" / "sniffing_table.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    formats_measured = {line.split("|")[1].strip() for line in done.stdout.splitlines()[2:] if line.startswith("| ")}
    assert formats_measured == {f.name for f in formats.FORMATS if f.supported}
    assert " NO " not in done.stdout
