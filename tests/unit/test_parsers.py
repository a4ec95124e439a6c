"""Unit tests for pgkb_plpy.parsers: detection, text decoding and HTML in this process; PDF and
DOCX through the child process, run with the server venv's interpreter (which has pypdfium2 and
python-docx) importing this working tree's pgkb_plpy."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from pgkb_plpy import parsers
from pgkb_plpy.parsers import ParseError, detect, parse_bytes, sanitize_text
from pgkb_plpy.parsers.docx import check_zip, zh_numeral
from pgkb_plpy.parsers.html import html_to_text

FIXTURES = Path(__file__).parents[1] / "fixtures" / "files"
PACKAGE = str(Path(__file__).parents[2] / "plpython")
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")

needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


def isolated(name: str, **kw) -> parsers.ParsedFile:
    path = FIXTURES / name if (FIXTURES / name).exists() else FIXTURES / "bad" / name
    return parsers.parse_isolated(path.read_bytes(), name, python=str(SERVER_PYTHON), package_path=PACKAGE, **kw)


# ------------------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    "data,name,expected",
    [
        (b"%PDF-1.7\n...", "a.pdf", "pdf"),
        (b"%PDF-1.7\n...", "noext", "pdf"),
        (b"# Title\n\ntext", "a.md", "markdown"),
        (b"plain", "a.txt", "text"),
        (b"<!doctype html><p>x", "page.html", "html"),
        (b"<html><body>x</body></html>", "export", "html"),
        (b"<p>a txt that holds html</p>", "a.txt", "text"),
    ],
)
def test_the_bytes_decide_the_format(data, name, expected):
    assert detect(data, name) == expected


def _ooxml(main_part: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr(main_part, "<x/>")
    return out.getvalue()


@pytest.mark.parametrize("content_type", [None, "", "application/octet-stream", "application/zip"])
@pytest.mark.parametrize(
    "data,expected",
    [
        (b"%PDF-1.7\n...", "pdf"),
        (_ooxml("word/document.xml"), "docx"),
        (_ooxml("xl/workbook.xml"), "xlsx"),
        (_ooxml("ppt/presentation.xml"), "pptx"),
    ],
)
def test_a_generic_or_missing_content_type_leaves_the_format_to_the_content(data, expected, content_type):
    assert detect(data, "upload", content_type) == expected


@pytest.mark.parametrize(
    "name,content_type,ole_stream,message",
    [
        ("a.doc", None, "WordDocument", "a legacy Word .doc file (named 'a.doc')"),
        ("a.xls", None, "Workbook", "a legacy Excel .xls workbook (named 'a.xls')"),
        ("a", "application/vnd.ms-powerpoint", "", "a legacy PowerPoint .ppt presentation (content type"),
        ("upload", "application/octet-stream", "PowerPoint Document", "a legacy PowerPoint .ppt presentation (OLE"),
        ("upload", None, "Workbook", "a legacy Excel .xls workbook (OLE content)"),
    ],
)
def test_legacy_office_files_are_refused_by_name_type_or_content(name, content_type, ole_stream, message):
    data = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + ole_stream.encode("utf-16-le") + b"\x00" * 100
    with pytest.raises(ParseError, match="^unsupported_format") as err:
        detect(data, name, content_type)
    assert str(err.value).startswith("unsupported_format: " + message), str(err.value)
    assert "save it as ." in str(err.value)


def test_ocr_output_loses_the_spaces_between_chinese_characters_only():
    from pgkb_plpy.parsers.ocr import join_cjk

    assert join_cjk("第 一 条 为 规范 公司 管理 , 见 Section 3 的 规定") == "第一条为规范公司管理 , 见 Section 3 的规定"


def test_limits_name_their_setting_and_fall_back_to_the_defaults():
    assert parsers.set_limits({"file_max_pages": 7, "unknown": 1, "ocr_max_pages": None}) == {
        **parsers.DEFAULT_LIMITS,
        "file_max_pages": 7,
    }
    assert parsers.limit_message("the PDF has 9 pages", "file_max_pages") == (
        "the PDF has 9 pages; the limit file_max_pages is 7 (kb.settings)"
    )
    parsers.set_limits(None)
    with pytest.raises(ParseError, match="the limit file_max_bytes is 3 "):
        parse_bytes(b"abcd", "a.txt", limits={"file_max_bytes": 3})
    parsers.set_limits(None)


@pytest.mark.parametrize(
    "data,name,content_type,kind",
    [
        (b"\x00\x01\x02 unknown binary", "report.pdf", None, "type_mismatch"),
        (b"\x00\x01\x02 unknown binary", "x", "application/pdf", "type_mismatch"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "old.doc", None, "unsupported_format"),
        (b"PK\x03\x04" + b"\x00" * 100, "archive.zip", None, "unsupported_format"),
        (b"\x00\x01\x02 unknown binary", "a.bin", "image/png", "type_mismatch"),
    ],
)
def test_a_name_or_type_over_content_that_is_no_document_read_here_is_an_error_naming_both(
    data, name, content_type, kind
):
    with pytest.raises(ParseError) as err:
        detect(data, name, content_type)
    assert err.value.kind == kind


def test_text_decoding_and_sanitising():
    assert parse_bytes("\ufeff# 标题\r\n\r\n正文。".encode(), "a.md").text == "# 标题\n\n正文。"
    assert sanitize_text("a\x00b\x07\r\nc  \n\n\n\nd") == "ab\nc\n\nd"
    gbk = "员工手册第一章总则，本制度适用于全体员工。".encode("gbk")
    assert parse_bytes(gbk, "a.txt").text == "员工手册第一章总则，本制度适用于全体员工。"
    with pytest.raises(ParseError, match="encoding: not valid UTF-8 text"):
        parse_bytes((FIXTURES / "bad" / "gbk-not-utf8.txt").read_bytes(), "x.txt")
    with pytest.raises(ParseError, match="^empty"):
        parse_bytes(b"", "x.txt")


def test_html_headings_lists_tables_and_dropped_chrome():
    text, title = html_to_text(
        "<title>T</title><script>bad()</script><nav>menu</nav><h2>Leave</h2><p>One<br>two</p>"
        "<ol><li>a</li><li>b</li></ol><table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>"
        '<pre><code class="language-sql">SELECT 1;</code></pre><aside>ads</aside>'
    )
    assert title == "T"
    assert text == "## Leave\n\nOne\ntwo\n\n1. a\n2. b\n\n| k | v |\n|---|---|\n| 1 | 2 |\n\n```sql\nSELECT 1;\n```"


def test_chinese_numerals_of_word_numbering():
    assert [zh_numeral(n) for n in (1, 10, 12, 20, 21, 100, 105, 110)] == [
        "一",
        "十",
        "十二",
        "二十",
        "二十一",
        "一百",
        "一百零五",
        "一百一十",
    ]


def test_zip_bomb_is_refused_from_the_directory_alone():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\x00" * (50 * 1024 * 1024))
    with pytest.raises(ParseError, match="^zip_bomb: word/document.xml would expand"):
        check_zip(buffer.getvalue())


# ------------------------------------------------------------------- PDF and DOCX, isolated


@needs_server_venv
def test_pdf_outline_gives_headings_and_pages():
    parsed = isolated("handbook-zh.pdf")
    assert parsed.format == "pdf" and parsed.page_starts == [0]
    # the outline's headings carry Chinese numbers, as do the untagged articles: they nest by number
    from pgkb_plpy.chunker import chunk_document

    paths = [" > ".join(c.section_path) for c in chunk_document(parsed.text, parsed.title)]
    assert "员工手册 > 第二章 考勤管理 > 二、请假规定 > （一）病假" in paths


@needs_server_venv
def test_docx_styles_numbering_and_tables():
    parsed = isolated("policy-en.docx")
    assert parsed.title == "Travel and Expense Policy"
    assert "## 2.2 Hotels" in parsed.text
    assert "| Europe | 180 EUR | 45 EUR |" in parsed.text
    assert "1. Open the expense tool and create a claim." in parsed.text  # Word's numbering written out


@needs_server_venv
@pytest.mark.parametrize(
    "name,kind",
    [
        ("encrypted.pdf", "encrypted"),
        ("truncated.pdf", "corrupt"),
        ("truncated.docx", "corrupt"),
    ],
)
def test_bad_files_fail_in_the_child_with_their_kind(name, kind):
    with pytest.raises(ParseError) as err:
        isolated(name)
    assert err.value.kind == kind


@needs_server_venv
def test_a_scan_is_listed_for_ocr_when_deferred_and_fails_as_no_text_layer_when_ocr_is_off():
    deferred = isolated("scanned.pdf")
    assert deferred.text == "" and deferred.ocr["pending_pages"] == [1]
    assert [w["kind"] for w in deferred.warnings] == ["ocr_pending"]
    with pytest.raises(ParseError, match="^no_text_layer: PDF has no text layer \\(scanned\\?\\) and OCR is off"):
        isolated("scanned.pdf", ocr="off")


@needs_server_venv
def test_the_child_is_bounded_in_time_and_memory():
    with pytest.raises(ParseError, match="^timeout"):
        isolated("policy-en.pdf", timeout_s=0.001)
    with pytest.raises(ParseError) as err:
        isolated("policy-en.pdf", memory_bytes=20 * 1024 * 1024)
    assert err.value.kind in ("out_of_memory", "parser_crashed")


# ------------------------------------------------------------------------------ XLSX, PPTX

_SML = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_OFFICE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def _zip(parts: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, xml in parts.items():
            z.writestr(name, xml)
    return out.getvalue()


def _child(data: bytes, name: str) -> parsers.ParsedFile:
    return parsers.parse_isolated(data, name, python=str(SERVER_PYTHON), package_path=PACKAGE)


@needs_server_venv
def test_xlsx_cells_are_written_as_excel_shows_them_and_hidden_and_chart_sheets_are_left_out():
    rels = (
        f'<Relationships xmlns="{_RELS}">'
        f'<Relationship Id="r1" Type="{_OFFICE_REL}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="r2" Type="{_OFFICE_REL}/worksheet" Target="worksheets/sheet2.xml"/>'
        f'<Relationship Id="r3" Type="{_OFFICE_REL}/chartsheet" Target="chartsheets/sheet1.xml"/></Relationships>'
    )
    sheet = (
        f'<worksheet xmlns="{_SML}"><sheetData>'
        '<row r="1"><c r="B1" t="s"><v>0</v></c><c r="C1" t="s"><v>1</v></c><c r="D1" t="s"><v>2</v></c></row>'
        '<row r="3"><c r="B3" t="s"><v>3</v></c><c r="C3" s="1"><v>45658</v></c><c r="D3" t="b"><v>1</v></c></row>'
        '<row r="4"><c r="B4" t="str"><f>A1</f><v>a|b</v></c><c r="C4"><v>12.0</v></c></row>'
        "</sheetData></worksheet>"
    )
    data = _zip(
        {
            "[Content_Types].xml": "<Types/>",
            "xl/workbook.xml": f'<workbook xmlns="{_SML}" xmlns:r="{_OFFICE_REL}"><sheets>'
            '<sheet name="Q1" r:id="r1"/><sheet name="Secret" state="hidden" r:id="r2"/>'
            '<sheet name="Chart" r:id="r3"/></sheets></workbook>',
            "xl/_rels/workbook.xml.rels": rels,
            "xl/sharedStrings.xml": f'<sst xmlns="{_SML}"><si><t>Item</t></si><si><t>Due</t></si>'
            "<si><t>Paid</t></si><si><r><t>Rent </t></r><r><t>office</t></r></si></sst>",
            "xl/styles.xml": f'<styleSheet xmlns="{_SML}"><cellXfs><xf numFmtId="0"/><xf numFmtId="14"/></cellXfs>'
            "</styleSheet>",
            "xl/worksheets/sheet1.xml": sheet,
            "xl/worksheets/sheet2.xml": sheet.replace("Rent", "Hidden"),
        }
    )
    parsed = _child(data, "q1.xlsx")
    assert parsed.text == (
        "# Q1\n\n| Item | Due | Paid |\n|---|---|---|\n| Rent office | 2025-01-01 | TRUE |\n| a\\|b | 12 |  |"
    )
    assert [(w["kind"], w["page"]) for w in parsed.warnings] == [("table_not_parsed", None)]
    assert parsed.parser_version == parsers.format_version("xlsx") and parsed.content_type.endswith(
        "spreadsheetml.sheet"
    )


@needs_server_venv
def test_pptx_slides_keep_their_order_lists_tables_and_notes_and_leave_out_slide_furniture():
    p, a = (
        "http://schemas.openxmlformats.org/presentationml/2006/main",
        "http://schemas.openxmlformats.org/drawingml/2006/main",
    )
    ns = f'xmlns:p="{p}" xmlns:a="{a}" xmlns:r="{_OFFICE_REL}"'

    def sp(ph: str, *paras: tuple[str, int]) -> str:
        body = "".join(f'<a:p><a:pPr lvl="{lvl}"/><a:r><a:t>{t}</a:t></a:r></a:p>' for t, lvl in paras)
        placeholder = f'<p:ph type="{ph}"/>' if ph else ""
        return f"<p:sp><p:nvSpPr><p:nvPr>{placeholder}</p:nvPr></p:nvSpPr><p:txBody>{body}</p:txBody></p:sp>"

    table = (
        "<p:graphicFrame><a:graphic><a:graphicData><a:tbl>"
        "<a:tr><a:tc><a:txBody><a:p><a:r><a:t>Tier</a:t></a:r></a:p></a:txBody></a:tc>"
        "<a:tc><a:txBody><a:p><a:r><a:t>SLA</a:t></a:r></a:p></a:txBody></a:tc></a:tr>"
        "<a:tr><a:tc><a:txBody><a:p><a:r><a:t>Gold</a:t></a:r></a:p></a:txBody></a:tc>"
        "<a:tc><a:txBody><a:p><a:r><a:t>1 h</a:t></a:r></a:p></a:txBody></a:tc></a:tr>"
        "</a:tbl></a:graphicData></a:graphic></p:graphicFrame>"
    )
    chart = f'<p:graphicFrame><a:graphic><a:graphicData uri="{"http://schemas.openxmlformats.org/drawingml/2006/chart"}"/></a:graphic></p:graphicFrame>'
    slide1 = (
        sp("title", ("Support tiers", 0))
        + f"<p:grpSp>{sp('body', ('Gold', 0), ('24/7 phone', 1))}</p:grpSp>"
        + table
        + sp("sldNum", ("7", 0))
    )
    slide2 = sp("", ("# not a heading", 0)) + chart
    parts = {
        "[Content_Types].xml": "<Types/>",
        "ppt/presentation.xml": f"<p:presentation {ns}><p:sldIdLst>"
        '<p:sldId r:id="r2"/><p:sldId r:id="r1"/></p:sldIdLst></p:presentation>',
        "ppt/_rels/presentation.xml.rels": f'<Relationships xmlns="{_RELS}">'
        f'<Relationship Id="r1" Type="{_OFFICE_REL}/slide" Target="slides/slide1.xml"/>'
        f'<Relationship Id="r2" Type="{_OFFICE_REL}/slide" Target="slides/slide2.xml"/></Relationships>',
        "ppt/slides/slide1.xml": f"<p:sld {ns}><p:cSld><p:spTree>{slide2}</p:spTree></p:cSld></p:sld>",
        "ppt/slides/slide2.xml": f"<p:sld {ns}><p:cSld><p:spTree>{slide1}</p:spTree></p:cSld></p:sld>",
        "ppt/slides/_rels/slide2.xml.rels": f'<Relationships xmlns="{_RELS}">'
        f'<Relationship Id="n" Type="{_OFFICE_REL}/notesSlide" Target="../notesSlides/n1.xml"/></Relationships>',
        "ppt/notesSlides/n1.xml": f"<p:notes {ns}><p:cSld><p:spTree>"
        f"{sp('body', ('Mention the pager.', 0))}</p:spTree></p:cSld></p:notes>",
    }
    parsed = _child(_zip(parts), "tiers.pptx")
    assert parsed.text == (
        "# Support tiers\n\n- Gold\n  - 24/7 phone\n\n| Tier | SLA |\n|---|---|\n| Gold | 1 h |"
        "\n\nNotes: Mention the pager.\n\n# Slide 2\n\n\u2060# not a heading"  # a word joiner keeps it text
    )
    assert parsed.page_starts == [0, parsed.text.index("# Slide 2")]
    assert [(w["kind"], w["page"]) for w in parsed.warnings] == [("table_not_parsed", 2)]


@needs_server_venv
def test_xlsx_merged_cells_fill_the_rows_they_span_a_title_row_stays_above_and_a_two_row_header_is_one():
    def c(ref: str, text: str) -> str:
        return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'

    sheet = (
        f'<worksheet xmlns="{_SML}"><sheetData>'
        f'<row r="1">{c("A1", "Approvals 2025")}</row>'
        f'<row r="2">{c("A2", "Team")}{c("B2", "Q1")}{c("D2", "Approver")}</row>'
        f'<row r="3">{c("B3", "Plan")}{c("C3", "Actual")}</row>'
        f'<row r="4">{c("A4", "Finance")}<c r="B4"><v>10</v></c><c r="C4"><v>12</v></c>{c("D4", "Li Wei")}</row>'
        '<row r="5"><c r="B5"><v>20</v></c><c r="C5"><v>18</v></c></row>'
        "</sheetData><mergeCells>"
        + "".join(f'<mergeCell ref="{r}"/>' for r in ("A1:D1", "A2:A3", "B2:C2", "D2:D3", "A4:A5", "D4:D5"))
        + "</mergeCells></worksheet>"
    )
    data = _zip(
        {
            "[Content_Types].xml": "<Types/>",
            "xl/workbook.xml": f'<workbook xmlns="{_SML}" xmlns:r="{_OFFICE_REL}"><sheets>'
            '<sheet name="Budget" r:id="r1"/></sheets></workbook>',
            "xl/_rels/workbook.xml.rels": f'<Relationships xmlns="{_RELS}">'
            f'<Relationship Id="r1" Type="{_OFFICE_REL}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>',
            "xl/worksheets/sheet1.xml": sheet,
        }
    )
    assert _child(data, "budget.xlsx").text == (
        "# Budget\n\nApprovals 2025\n\n"
        "| Team | Q1 / Plan | Q1 / Actual | Approver |\n|---|---|---|---|\n"
        "| Finance | 10 | 12 | Li Wei |\n| Finance | 20 | 18 | Li Wei |"
    )
