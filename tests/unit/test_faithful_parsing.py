"""Faithful parsing of real files: page furniture out, literal text kept as text, every word of a
Word file in, spans and chrome of HTML placed right. Each test builds the file it checks: PDFs are
drawn with PDFium (pypdfium2 of the server venv, in a child process), DOCX packages are written
from their XML here, and the parsers run in their child process as in the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON, draw_pdf, list_para, make_docx, numbered_list, para
from pgkb_plpy import parsers
from pgkb_plpy.chunker import chunk_document
from pgkb_plpy.parsers.html import html_to_text

PACKAGE = str(Path(__file__).parents[2] / "plpython")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


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


@needs_server_venv
def test_a_pdf_table_keeps_its_columns_as_a_markdown_table():
    rows = [("Code", "Meaning", "Action"), ("NB-7702", "Certificate rotation failed", "Inspect the CA")]
    lines = [("Error codes of the agent.", 11, 780)]
    for r, row in enumerate(rows):
        lines += [(cell, 11, 740 - 20 * r, 50 + 170 * c) for c, cell in enumerate(row)]
    text = parse(draw_pdf([lines]), "codes.pdf").text
    assert text.split("\n") == [
        "Error codes of the agent.",
        "",
        "| Code | Meaning | Action |",
        "|---|---|---|",
        "| NB-7702 | Certificate rotation failed | Inspect the CA |",
    ]


def table_lines(rows: list[tuple], top: float = 740, step: float = 16) -> list[tuple]:
    """Lines of a table drawn in three columns at x 50, 200 and 380; a cell may be None (empty) or
    a list of lines (wrapped in its column, each line one step lower)."""
    lines, y = [], top
    for row in rows:
        height = 1
        for c, cell in enumerate(row):
            for k, text in enumerate([cell] if isinstance(cell, str) else cell or []):
                lines.append((text, 11, y - step * k, (50, 200, 380)[c]))
                height = max(height, k + 1)
        y -= step * height + 4
    return lines


@needs_server_venv
def test_an_empty_pdf_table_cell_stays_empty_in_its_column():
    rows = [
        ("Code", "Meaning", "Action"),
        ("NB-7701", None, "Check the firewall"),
        ("NB-7702", "Certificate rotation failed", None),
        ("NB-7703", "Disk almost full", "Free space"),
    ]
    text = parse(draw_pdf([[("Error codes.", 11, 780)] + table_lines(rows)]), "codes.pdf").text
    assert text.split("\n")[2:] == [
        "| Code | Meaning | Action |",
        "|---|---|---|",
        "| NB-7701 |  | Check the firewall |",
        "| NB-7702 | Certificate rotation failed |  |",
        "| NB-7703 | Disk almost full | Free space |",
    ]


@needs_server_venv
def test_a_pdf_table_cell_wrapped_over_two_lines_joins_its_row():
    rows = [
        ("Code", "Meaning", "Action"),
        ("NB-7702", ["Certificate rotation", "failed after renewal"], ["Inspect the", "CA bundle"]),
        ("NB-7703", "Disk almost full", "Free space"),
    ]
    lines = [("Error codes.", 11, 780)] + table_lines(rows) + [("Call the on-call engineer if unsure.", 11, 600)]
    text = parse(draw_pdf([lines]), "codes.pdf").text
    assert text.split("\n") == [
        "Error codes.",
        "",
        "| Code | Meaning | Action |",
        "|---|---|---|",
        "| NB-7702 | Certificate rotation failed after renewal | Inspect the CA bundle |",
        "| NB-7703 | Disk almost full | Free space |",
        "",
        "Call the on-call engineer if unsure.",
    ]


# ------------------------------------------------------------------------------------------ DOCX


@needs_server_venv
def test_a_footnote_is_attached_where_it_is_referenced():
    body = (
        para("Escalation", "Heading1") + "<w:p><w:r><w:t>A SEV1 incident is acknowledged within 30 minutes.</w:t></w:r>"
        '<w:r><w:footnoteReference w:id="2"/></w:r>'
        '<w:r><w:t xml:space="preserve"> Then page the lead.</w:t></w:r></w:p>'
    )
    notes = (
        '<w:footnote w:id="2"><w:p><w:r><w:footnoteRef/></w:r>'
        "<w:r><w:t>On weekends: 15 minutes.</w:t></w:r></w:p></w:footnote>"
    )
    parsed = parse(make_docx(body, footnotes=notes), "runbook.docx")
    assert "within 30 minutes. [footnote 1: On weekends: 15 minutes.] Then page the lead." in parsed.text
    assert "____" not in parsed.text


@needs_server_venv
def test_an_endnote_is_attached_where_it_is_referenced():
    body = '<w:p><w:r><w:t>Keys rotate yearly.</w:t></w:r><w:r><w:endnoteReference w:id="1"/></w:r></w:p>'
    notes = '<w:endnote w:id="1"><w:p><w:r><w:t>Root keys every five years.</w:t></w:r></w:p></w:endnote>'
    parsed = parse(make_docx(body, endnotes=notes), "keys.docx")
    assert "Keys rotate yearly. [endnote 1: Root keys every five years.]" in parsed.text


@needs_server_venv
def test_tracked_insertions_are_kept_and_tracked_deletions_dropped():
    body = (
        '<w:p><w:r><w:t xml:space="preserve">Backups are kept for </w:t></w:r>'
        '<w:del w:id="1" w:author="a"><w:r><w:delText>7</w:delText></w:r></w:del>'
        '<w:ins w:id="2" w:author="a"><w:r><w:t>35</w:t></w:r></w:ins>'
        '<w:r><w:t xml:space="preserve"> days.</w:t></w:r></w:p>'
    )
    assert parse(make_docx(body), "backup.docx").text == "Backups are kept for 35 days."


@needs_server_venv
def test_content_controls_keep_their_text_and_placeholders_are_dropped():
    body = (
        '<w:sdt><w:sdtPr><w:alias w:val="Owner"/></w:sdtPr><w:sdtContent>'
        + para("The owner of the service is the platform team.")
        + "</w:sdtContent></w:sdt>"
        '<w:p><w:r><w:t xml:space="preserve">Region: </w:t></w:r>'
        "<w:sdt><w:sdtPr/><w:sdtContent><w:r><w:t>eu-west-1</w:t>"
        "</w:r></w:sdtContent></w:sdt></w:p>"
        "<w:sdt><w:sdtPr><w:showingPlcHdr/></w:sdtPr><w:sdtContent>"
        + para("Click here to enter text.")
        + "</w:sdtContent></w:sdt>"
    )
    text = parse(make_docx(body), "service.docx").text
    assert "The owner of the service is the platform team." in text
    assert "Region: eu-west-1" in text
    assert "Click here" not in text


@needs_server_venv
def test_a_text_box_is_read_once_after_its_paragraph():
    box = (
        "<w:txbxContent><w:p><w:r><w:t>Never restart the primary during business hours.</w:t></w:r></w:p>"
        "</w:txbxContent>"
    )
    body = (
        '<w:p><w:r><w:t>Warning below.</w:t></w:r><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing>'
        f'<wps:wsp xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"><wps:txbx>{box}'
        "</wps:txbx></wps:wsp></w:drawing></mc:Choice><mc:Fallback><w:pict><v:textbox "
        f'xmlns:v="urn:schemas-microsoft-com:vml">{box}</v:textbox></w:pict></mc:Fallback></mc:AlternateContent>'
        "</w:r></w:p>"
    )
    text = parse(make_docx(body), "warning.docx").text
    assert text == "Warning below.\n\nNever restart the primary during business hours."


@needs_server_venv
def test_a_hash_or_pipe_typed_in_word_stays_text():
    body = para("Pool", "Heading1") + para("# Set the pool size to 20") + para("| not | a table") + para("- not a list")
    parsed = parse(make_docx(body), "pool.docx")
    chunks = chunk_document(parsed.text, parsed.title)
    assert [c.section_path for c in chunks] == [["Pool"]]
    assert "Set the pool size to 20" in chunks[0].content


@needs_server_venv
def test_merged_word_cells_sit_in_their_columns():
    def cell(text: str, pr: str = "") -> str:
        return f"<w:tc><w:tcPr>{pr}</w:tcPr>{para(text)}</w:tc>"

    body = (
        "<w:tbl><w:tr>"
        + cell("Code")
        + cell("Meaning")
        + cell("Action")
        + "</w:tr><w:tr>"
        + cell("NB-7702", '<w:vMerge w:val="restart"/>')
        + cell("Certificate rotation failed", '<w:gridSpan w:val="2"/>')
        + "</w:tr><w:tr>"
        + cell("", "<w:vMerge/>")
        + cell("Expired CA")
        + cell("Inspect the CA")
        + "</w:tr></w:tbl>"
    )
    text = parse(make_docx(body), "codes.docx").text
    assert text.split("\n") == [
        "| Code | Meaning | Action |",
        "|---|---|---|",
        "| NB-7702 | Certificate rotation failed |  |",
        "| NB-7702 | Expired CA | Inspect the CA |",
    ]


@needs_server_venv
def test_a_numbered_word_list_item_stays_a_list_item_and_never_heads_a_section():
    numbering = numbered_list(1, "decimal", "%1.") + numbered_list(2, "chineseCounting", "%1、")
    body = (
        para("Setup", "Heading1")
        + list_para("Install the agent", 1)
        + para("The package is signed.")
        + list_para("检查配置", 2)
        + list_para("重启服务", 2)
        + '<w:p><w:pPr><w:pStyle w:val="ListParagraph"/></w:pPr><w:r><w:t>2) Check the log</w:t></w:r></w:p>'
        + para("Done.")
    )
    parsed = parse(make_docx(body, numbering=numbering), "setup.docx")
    assert "- 1. Install the agent" in parsed.text and "- 一、检查配置\n- 二、重启服务" in parsed.text
    chunks = chunk_document(parsed.text, parsed.title)
    assert [c.section_path for c in chunks] == [["Setup"]]
    assert "2) Check the log" in chunks[0].content


@needs_server_venv
def test_word_numbering_of_chapters_and_articles_still_heads_its_sections():
    numbering = numbered_list(1, "chineseCounting", "第%1章") + numbered_list(2, "chineseCounting", "第%1条")
    body = list_para("总则", 1, "Normal") + list_para("为规范差旅费报销，制定本细则。", 2, "Normal")
    parsed = parse(make_docx(body, numbering=numbering), "细则.docx")
    paths = [c.section_path for c in chunk_document(parsed.text, "细则")]
    assert paths == [["细则", "第一章 总则", "第一条"]]


def styled_para(text: str, ppr: str = "", rpr: str = "") -> str:
    """A paragraph with direct formatting: ``ppr`` (e.g. centred) and ``rpr`` (bold, size) of its run."""
    return f'<w:p><w:pPr>{ppr}</w:pPr><w:r><w:rPr>{rpr}</w:rPr><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


@needs_server_venv
@pytest.mark.parametrize(
    "ppr,rpr",
    [('<w:jc w:val="center"/>', ""), ("", "<w:b/>"), ("", '<w:sz w:val="36"/>')],
    ids=["centred", "bold", "larger"],
)
def test_an_unstyled_centred_bold_or_larger_first_line_is_the_document_title(ppr, rpr):
    body = (
        styled_para("差旅费报销细则", ppr, rpr)
        + para("第一章 总则")
        + para("第一条 为规范差旅费报销，制定本细则。")
        + para("第二章 报销标准")
        + para("第五条 住宿费每晚不超过四百五十元。")
    )
    parsed = parse(make_docx(body), "细则.docx")
    assert parsed.title == "差旅费报销细则"
    paths = [c.section_path for c in chunk_document(parsed.text, parsed.title)]
    assert paths == [["差旅费报销细则", "第一章 总则", "第一条"], ["差旅费报销细则", "第二章 报销标准", "第五条"]]


@needs_server_venv
@pytest.mark.parametrize(
    "first",
    [
        para("Expense policy"),  # set like the body: nothing marks it as a title
        styled_para("Claims are paid monthly. Submit them by the 5th.", "", "<w:b/>"),  # a sentence
        styled_para("第一章 总则", '<w:jc w:val="center"/>', "<w:b/>"),  # a numbered division heads its own
    ],
    ids=["plain", "sentence", "numbered"],
)
def test_a_first_line_that_is_plain_a_sentence_or_numbered_is_not_made_the_title(first):
    parsed = parse(make_docx(first + para("第二条 本细则适用于全体员工因公出差。")), "x.docx")
    assert parsed.title is None
    assert not parsed.text.startswith("#")


@needs_server_venv
def test_the_example_regulation_typed_without_styles_has_its_title_at_the_root_of_every_path():
    data = (Path(__file__).parents[2] / "examples" / "files" / "差旅费报销细则.docx").read_bytes()
    parsed = parse(data, "差旅费报销细则.docx")
    assert parsed.title == "差旅费报销细则"
    chunks = chunk_document(parsed.text, parsed.title)
    assert all(c.section_path[:1] == ["差旅费报销细则"] and len(c.section_path) >= 2 for c in chunks)
    assert "差旅费报销细则" not in [c.content for c in chunks]


# ------------------------------------------------------------------------------------------ HTML

WIKI_PAGE = """<!doctype html><html><head><title>Connection pools - Ops Wiki</title></head><body>
<div class="cookie-banner"><p>We use cookies to improve your experience. Accept all cookies?</p></div>
<div class="top"><a href="/">Home</a> <a href="/docs">Docs</a> <a href="/blog">Blog</a> <a href="/about">About</a></div>
<div id="content"><h1>Connection pools</h1>
<p>Every service reaches the database through a connection pool. The pool keeps a fixed number of
connections open and lends them to requests, which avoids the cost of a new connection per request.</p>
<p># Set the pool size to twice the number of cores.</p>
<p>When the pool is exhausted, requests wait up to five seconds for a connection, then fail with a
clear error naming the pool. Raise the size only after checking the database's connection limit.</p>
</div>
<div class="sidebar"><p>Popular pages</p>
<ul><li><a href="/a">Vacuum</a></li><li><a href="/b">Backups</a></li></ul></div>
<div class="comments"><p>Great article, thanks! Is this still valid for the old cluster?</p></div>
<div class="site-footer"><p>Copyright 2026 Ops Wiki. All rights reserved.</p></div>
</body></html>"""


def test_a_div_cookie_banner_navbar_sidebar_comments_and_footer_are_not_indexed():
    text, title = html_to_text(WIKI_PAGE)
    for chrome in ("cookies", "Home", "Popular pages", "Great article", "Copyright"):
        assert chrome not in text, chrome
    assert "The pool keeps a fixed number" in text and "Raise the size only" in text
    assert title == "Connection pools"  # the h1: the <title> only adds the site name


def test_a_hash_in_an_html_paragraph_stays_text():
    text, title = html_to_text(WIKI_PAGE)
    chunks = chunk_document(text, title)
    assert {tuple(c.section_path) for c in chunks} == {("Connection pools",)}
    assert any("Set the pool size to twice the number of cores." in c.content for c in chunks)


def test_html_rowspan_and_colspan_cells_sit_in_their_columns():
    html = """<table><tr><th>Code</th><th>Meaning</th><th>Action</th></tr>
    <tr><td rowspan="2">NB-7702</td><td colspan="2">Certificate rotation failed</td></tr>
    <tr><td>Expired CA</td><td>Inspect the CA</td></tr></table>"""
    assert html_to_text(html)[0].split("\n") == [
        "| Code | Meaning | Action |",
        "|---|---|---|",
        "| NB-7702 | Certificate rotation failed |  |",
        "| NB-7702 | Expired CA | Inspect the CA |",
    ]


def test_an_unclosed_list_item_inside_dropped_chrome_does_not_drop_the_rest_of_the_page():
    html = '<div class="navbar"><ul><li><a href="/">Home<li><a href="/x">Docs</ul></div><p>The content stays.</p>'
    assert html_to_text(html)[0] == "The content stays."


def test_everything_inside_the_main_element_is_kept_and_what_lies_outside_it_is_dropped():
    html = (
        "<body><div>Site banner text of the company</div><main><h1>Leave</h1>"
        "<p>Sick leave of more than three days needs a note from a doctor, sent to HR within a week.</p>"
        "<ul><li>Annual leave: five days</li></ul></main><div>Unrelated trailing box</div></body>"
    )
    assert html_to_text(html)[0] == (
        "# Leave\n\nSick leave of more than three days needs a note from a doctor, sent to HR within a week."
        "\n\n- Annual leave: five days"
    )


def test_the_wrappers_of_the_main_content_are_kept_and_their_other_children_dropped():
    html = (
        '<body><div class="page"><div class="article-body"><h1>值班</h1><p>值班工程师每周一上午十点在值班群内交接，'
        "交接内容包括未关闭的故障和待办变更。</p></div><div>你可能还想看：其他文章</div></div></body>"
    )
    assert (
        html_to_text(html)[0]
        == "# 值班\n\n值班工程师每周一上午十点在值班群内交接，交接内容包括未关闭的故障和待办变更。"
    )


def test_tagged_numbered_headings_keep_their_tags_when_no_untagged_line_is_numbered():
    html = "<h2>第一章 总则</h2><h3>概述</h3><p>本细则规范差旅费报销。</p><h3>（一）范围</h3><p>全体员工。</p>"
    text = html_to_text(html)[0]
    assert text.split("\n\n")[:2] == ["## 第一章 总则", "### 概述"] and "### （一）范围" in text


def test_outline_titles_match_printed_headings_loosely():
    from pgkb_plpy.parsers.pdf import _key, _outline_level

    marks = {_key("Appendix A"): 1, _key("4.2 Logs"): 2, _key("Certificates"): 1}
    assert _outline_level(marks, "Appendix A  Glossary of terms") == 1  # the title starts the line
    assert _outline_level(marks, "4.2. Logs") == 2  # the same letters and digits
    assert _outline_level(marks, "3 Certificates") == 1  # the line without its number
    assert _outline_level(marks, "The agent writes logs hourly.") is None


def test_numbered_licence_clauses_in_body_type_stay_text():
    from pgkb_plpy.parsers.pdf import furniture

    lines = ["0. Definitions.", "1. You may copy the program.", "2. You may not sell it."]
    assert furniture([lines]) == [set()]
    chunks = chunk_document("\n".join(lines), "Licence")
    assert [c.section_path for c in chunks] == [["Licence"]]
