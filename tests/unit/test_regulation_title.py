"""A Chinese official document (公文, GB/T 9704) opens with its header (版头): the issuer's red line
(江川市人民政府办公厅文件), the document number (江政办发〔2023〕12号), sometimes the signer, a date, a
secrecy or urgency mark. Those lines name the issuer and the filing, not the document: its title is
the line under them (关于印发……的通知, 江川市公共数据管理办法), wrapped over two lines as often as not.
Text, DOCX and PDF choose the title by one rule (pgkb_plpy.parsers.official_title_lines); the header
stays in the text, but is neither the title nor a heading at the root of every section path.
Documents without such a header are titled as before."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON, make_docx, para, write_pdf
from pgkb_plpy import parsers
from pgkb_plpy.chunker import chunk_document
from pgkb_plpy.parsers import official_header, official_title

PACKAGE = str(Path(__file__).parents[2] / "plpython")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")

NOTICE = [
    "江川市人民政府办公厅文件",
    "",
    "江政办发〔2023〕12号",
    "",
    "关于印发《江川市公共数据管理办法》的通知",
    "",
    "各区人民政府，市政府各部门：",
    "《江川市公共数据管理办法》已经市政府同意，现印发给你们，请认真贯彻执行。",
    "",
    "江川市人民政府办公厅",
    "2023年5月12日",
]
TITLE = "关于印发《江川市公共数据管理办法》的通知"


def parse(data: bytes, name: str) -> parsers.ParsedFile:
    return parsers.parse_isolated(data, name, python=str(SERVER_PYTHON), package_path=PACKAGE)


def roots(parsed: parsers.ParsedFile) -> set[str]:
    return {c.section_path[0] for c in chunk_document(parsed.text, parsed.title) if c.section_path}


# ------------------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    "line",
    [
        "江川市人民政府办公厅文件",
        "江 川 市 人 民 政 府 文 件",  # letter-spaced as printed
        "中共江川市委办公室 江川市人民政府办公室文件",
        "江政办发〔2023〕12号",
        "江财发[2024]3号　　签发人：张三",
        "签发人：李四",
        "2023年5月12日",
        "二〇二三年五月十二日",
        "机密★1年",
        "特急",
    ],
)
def test_a_red_header_line_is_a_header_line(line):
    assert official_header(line)


@pytest.mark.parametrize(
    "line",
    [
        "关于印发《江川市公共数据管理办法》的通知",
        "江川市公共数据管理办法",
        "江川市体育中心改造项目招标文件",  # a tender's title ends in 文件 without being a red header
        "根据江政办发〔2023〕12号文件，现将有关事项通知如下。",  # a sentence that cites a number
        "Annual report 2023",
    ],
)
def test_a_title_or_a_sentence_is_no_header_line(line):
    assert not official_header(line)


def test_a_regulation_is_titled_by_the_line_under_its_red_header():
    assert official_title(NOTICE) == TITLE


def test_a_title_wrapped_over_lines_under_the_header_is_one_title():
    lines = [
        "江川市人民政府文件",
        "江政发〔2024〕3号",
        "江川市人民政府关于印发《江川市促进数字经济",
        "高质量发展若干措施》的通知",
    ]
    assert official_title(lines) == "江川市人民政府关于印发《江川市促进数字经济高质量发展若干措施》的通知"
    lines = ["江川市人民政府文件", "江政发〔2024〕12号", "江川市公共数据管理办法", "（试行）", "第一章　总则"]
    assert official_title(lines) == "江川市公共数据管理办法（试行）"
    lines = [
        "江川市财政局",
        "江川市人力资源和社会保障局 文件",
        "江财发〔2023〕8号",
        "关于进一步做好",
        "就业补贴工作的通知",
    ]
    assert official_title(lines) == "关于进一步做好就业补贴工作的通知"


def test_secrecy_urgency_signer_and_date_lines_are_passed_over():
    lines = [
        "000123",
        "机密★1年",
        "特急",
        "江川市人民政府办公厅文件",
        "签发人：张三",
        "2023年5月12日",
        "关于表扬2022年度先进集体的通报",
    ]
    assert official_title(lines) == "关于表扬2022年度先进集体的通报"


def test_a_document_without_a_red_header_is_not_titled_by_this_rule():
    assert official_title(["员工手册", "第一章 总则"]) is None
    assert official_title(["江川市体育中心改造项目招标文件", "项目编号：ZB-2023-01"]) is None
    assert official_title(["江川市人民政府文件", "第一条　为了规范公共数据管理，制定本办法。"]) is None


# -------------------------------------------------------------------------------------- text


def test_a_text_regulation_is_titled_by_its_name_not_by_its_red_header():
    parsed = parsers.parse_bytes("\n".join(NOTICE).encode(), "notice.txt")
    assert parsed.title == TITLE
    assert parsed.text.startswith("江川市人民政府办公厅文件")  # the header stays text


def test_a_markdown_red_header_heading_is_not_the_title():
    body = "# 江川市人民政府文件\n\n江政发〔2024〕12号\n\n# 江川市公共数据管理办法\n\n第一条　为了规范公共数据管理。"
    assert parsers.parse_bytes(body.encode(), "rule.md").title == "江川市公共数据管理办法"


def test_a_text_without_a_red_header_keeps_its_first_heading_as_title():
    assert parsers.parse_bytes(b"# Leave policy\n\nText.", "a.md").title == "Leave policy"
    assert parsers.parse_bytes("员工手册\n\n第一章 总则".encode(), "a.txt").title is None


# -------------------------------------------------------------------------------------- DOCX


def centred(text: str, size: int = 32, bold: bool = False) -> str:
    bold_xml = "<w:b/>" if bold else ""
    return (
        f'<w:p><w:pPr><w:jc w:val="center"/></w:pPr><w:r><w:rPr>{bold_xml}<w:sz w:val="{size}"/></w:rPr>'
        f'<w:t xml:space="preserve">{text}</w:t></w:r></w:p>'
    )


def with_core_title(data: bytes, title: str) -> bytes:
    """``data`` (a DOCX) with ``title`` in its core properties, as Word fills it from the first line."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in source.namelist():
            z.writestr(name, source.read(name))
        z.writestr(
            "docProps/core.xml",
            '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></cp:coreProperties>',
        )
    return out.getvalue()


NOTICE_DOCX = (
    centred("江川市人民政府办公厅文件", 72, bold=True)
    + centred("江政办发〔2023〕12号")
    + centred(TITLE, 44, bold=True)
    + para("各区人民政府，市政府各部门：")
    + para("《江川市公共数据管理办法》已经市政府同意，现印发给你们，请认真贯彻执行。")
    + para("第一条　为了规范公共数据管理，制定本办法。")
    + para("第二条　本办法适用于本市行政区域内的公共数据。")
)


@needs_server_venv
def test_a_docx_regulation_is_titled_by_its_name_not_by_its_red_header():
    parsed = parse(with_core_title(make_docx(NOTICE_DOCX), "江川市人民政府办公厅文件"), "notice.docx")
    assert parsed.title == TITLE
    assert parsed.text.startswith(f"江川市人民政府办公厅文件\n\n江政办发〔2023〕12号\n\n# {TITLE}\n\n")
    assert roots(parsed) == {TITLE}


@needs_server_venv
def test_a_docx_red_header_set_in_a_table_is_passed_over_too():
    cell = '<w:tc><w:p><w:r><w:t xml:space="preserve">{}</w:t></w:r></w:p></w:tc>'
    table = (
        "<w:tbl><w:tr>"
        + cell.format("江川市财政局")
        + cell.format("文件")
        + "</w:tr><w:tr>"
        + cell.format("江川市人力资源和社会保障局")
        + cell.format("")
        + "</w:tr></w:tbl>"
    )
    body = table + centred("江财发〔2023〕8号") + centred("关于进一步做好就业补贴工作的通知", 44, bold=True)
    parsed = parse(make_docx(body + para("各区财政局：") + para("现将有关事项通知如下。")), "joint.docx")
    assert parsed.title == "关于进一步做好就业补贴工作的通知"
    assert "# 关于进一步做好就业补贴工作的通知" in parsed.text


@needs_server_venv
def test_a_docx_without_a_red_header_keeps_its_first_line_title():
    parsed = parse(
        make_docx(centred("差旅费报销细则", 36, bold=True) + para("第一条 为规范差旅费报销，制定本细则。")), "a.docx"
    )
    assert parsed.title == "差旅费报销细则"


# --------------------------------------------------------------------------------------- PDF

NOTICE_PDF = [
    ("江川市人民政府办公厅文件", 36, 760, 80),
    ("江政办发〔2023〕12号", 16, 700, 220),
    ("关于印发《江川市公共数据管理办法（试行）》的", 22, 640, 50),
    ("通知", 22, 615, 270),
    ("各区人民政府，市政府各部门：", 16, 580),
    ("《江川市公共数据管理办法（试行）》已经市政府同意，现印发给你们，请认真", 16, 560),
    ("贯彻执行。", 16, 540),
    ("江川市人民政府办公厅", 16, 500, 350),
    ("2023年5月12日", 16, 480, 360),
    ("第一条　为了规范公共数据管理，制定本办法。", 16, 440),
    ("第二条　本办法适用于本市行政区域内的公共数据。", 16, 420),
]


@needs_server_venv
def test_a_pdf_regulation_is_titled_by_its_name_not_by_its_red_header():
    parsed = parse(write_pdf([NOTICE_PDF]), "notice.pdf")
    title = "关于印发《江川市公共数据管理办法（试行）》的通知"
    assert parsed.title == title
    # the header's large red line is text, not a heading; the title's two lines are one heading
    assert parsed.text.startswith(f"江川市人民政府办公厅文件\n江政办发〔2023〕12号\n\n# {title}\n\n")
    assert roots(parsed) == {title}


@needs_server_venv
def test_a_pdf_without_a_red_header_keeps_its_headings_by_size():
    page = [("江川市公共数据管理办法", 22, 760, 150), ("第一条　为了规范公共数据管理，制定本办法。", 16, 700)]
    parsed = parse(write_pdf([page]), "rule.pdf")
    assert parsed.title is None
    assert parsed.text.startswith("# 江川市公共数据管理办法\n\n")
