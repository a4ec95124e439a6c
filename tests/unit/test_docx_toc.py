"""A Word table of contents is not indexed: it repeats the headings with their page numbers, so it
would be a chunk of every heading and a false match for each. Word writes it three ways -- a TOC
field (``fldChar`` begin, `` TOC \\o "1-3" ``, separate, the entries, end), a content control whose
document part gallery is "Table of Contents", and paragraphs styled "toc 1" ... "toc 9" -- and
the field's end often shares its paragraph with the first real heading, which stays. Each test
writes its DOCX package from XML (tests/filebuild.py); the parser runs in its child process, in the
server's Python, as in the database."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON, make_docx, para
from pgkb_plpy import parsers
from pgkb_plpy.chunker import chunk_document

PACKAGE = str(Path(__file__).parents[2] / "plpython")
pytestmark = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


def parse_bytes(data: bytes, name: str) -> parsers.ParsedFile:
    return parsers.parse_isolated(data, name, python=str(SERVER_PYTHON), package_path=PACKAGE)


_W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
#: Word's built-in styles as a document names them: the TOC entry styles and the contents' heading.
STYLES = f"""<w:styles {_W_NS}>
<w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/><w:basedOn w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="heading 2"/><w:basedOn w:val="Heading1"/></w:style>
<w:style w:type="paragraph" w:styleId="TOCHeading"><w:name w:val="TOC Heading"/><w:basedOn w:val="Heading1"/></w:style>
<w:style w:type="paragraph" w:styleId="10"><w:name w:val="toc 1"/><w:basedOn w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="20"><w:name w:val="toc 2"/><w:basedOn w:val="Normal"/></w:style>
</w:styles>"""


def docx(body: str) -> bytes:
    """A DOCX of ``body`` with Word's TOC styles (ids as a Chinese Word names them: "10", "20")."""
    source = zipfile.ZipFile(io.BytesIO(make_docx(body)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in source.namelist():
            z.writestr(name, STYLES if name == "word/styles.xml" else source.read(name))
    return out.getvalue()


def run(text: str) -> str:
    return f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>'


def field_char(kind: str) -> str:
    return f'<w:r><w:fldChar w:fldCharType="{kind}"/></w:r>'


def instruction(text: str) -> str:
    return f'<w:r><w:instrText xml:space="preserve">{text}</w:instrText></w:r>'


def entry(text: str, page: int, anchor: str) -> str:
    """A TOC entry as Word writes it: a hyperlink to the heading, a tab, a PAGEREF field for its page."""
    return (
        f'<w:hyperlink w:anchor="{anchor}" w:history="1">{run(text)}<w:r><w:tab/></w:r>'
        + field_char("begin")
        + instruction(f" PAGEREF {anchor} \\h ")
        + field_char("separate")
        + run(str(page))
        + field_char("end")
        + "</w:hyperlink>"
    )


def styled(style: str, inner: str) -> str:
    return f'<w:p><w:pPr><w:pStyle w:val="{style}"/></w:pPr>{inner}</w:p>'


def toc_field(entries: list[tuple[str, int]], end_with: str = "", end_style: str = "Heading1") -> str:
    """A TOC field over paragraphs styled "toc 1": it begins in the first entry's paragraph and ends
    in a paragraph of its own, or (``end_with``) at the start of the heading that follows it."""
    paragraphs = []
    for k, (text, page) in enumerate(entries):
        start = (
            field_char("begin") + instruction(' TOC \\o "1-3" \\h \\z \\u ') + field_char("separate") if k == 0 else ""
        )
        paragraphs.append(styled("10", start + entry(text, page, f"_Toc{k}")))
    paragraphs.append(styled(end_style, field_char("end") + (run(end_with) if end_with else "")))
    return "".join(paragraphs)


BODY = (
    styled("Heading1", run("Scope"))
    + para("This policy applies to every employee who travels on company business.")
    + styled("Heading1", run("Approval"))
    + para("Managers approve trips before any booking is made.")
)
ENTRIES = [("Introduction", 1), ("Scope", 2), ("Approval", 3)]


def _no_toc_left(text: str) -> None:
    assert "PAGEREF" not in text and "TOC" not in text
    assert not any(line.rstrip().endswith((" 1", " 2", " 3")) for line in text.split("\n")), text


def test_a_docx_table_of_contents_field_is_not_indexed():
    parsed = parse_bytes(docx(para("Travel policy") + toc_field(ENTRIES) + BODY), "policy.docx")
    _no_toc_left(parsed.text)
    assert parsed.text.count("Scope") == 1 and parsed.text.count("Approval") == 1
    paths = [c.section_path for c in chunk_document(parsed.text, parsed.title)]
    assert ["Scope"] in paths and ["Approval"] in paths
    assert not any("Introduction" in c.content for c in chunk_document(parsed.text, parsed.title))


def test_the_heading_that_shares_its_paragraph_with_the_end_of_the_toc_field_is_kept():
    parsed = parse_bytes(docx(toc_field(ENTRIES, end_with="Introduction") + BODY), "policy.docx")
    _no_toc_left(parsed.text)
    assert parsed.text.startswith("# Introduction\n\n# Scope")


def test_text_after_the_end_of_the_toc_field_in_a_toc_styled_paragraph_is_kept():
    parsed = parse_bytes(docx(toc_field(ENTRIES, end_with="Read this first.", end_style="10") + BODY), "p.docx")
    _no_toc_left(parsed.text)
    assert parsed.text.startswith("Read this first.\n\n# Scope")


def test_a_table_of_contents_content_control_is_not_indexed():
    control = (
        '<w:sdt><w:sdtPr><w:docPartObj><w:docPartGallery w:val="Table of Contents"/><w:docPartUnique/>'
        "</w:docPartObj></w:sdtPr><w:sdtContent>"
        + para("目录")  # the control's own heading, typed without the TOC Heading style
        + toc_field(ENTRIES, end_style="Normal")
        + "</w:sdtContent></w:sdt>"
    )
    parsed = parse_bytes(docx(control + BODY), "policy.docx")
    _no_toc_left(parsed.text)
    assert "目录" not in parsed.text
    assert parsed.text.startswith("# Scope")


def test_paragraphs_styled_as_toc_entries_without_a_field_are_not_indexed():
    typed = styled("TOCHeading", run("Contents")) + "".join(
        styled("10" if k % 2 == 0 else "20", run(f"{text}\t{page}")) for k, (text, page) in enumerate(ENTRIES)
    )
    parsed = parse_bytes(docx(typed + BODY), "policy.docx")
    _no_toc_left(parsed.text)
    assert "Contents" not in parsed.text and "Introduction" not in parsed.text
    assert parsed.text.startswith("# Scope")


def test_other_fields_keep_their_results():
    date = field_char("begin") + instruction(" DATE \\@ yyyy-MM-dd ") + field_char("separate") + run("2024-05-01")
    parsed = parse_bytes(docx(para("Issued") + f"<w:p>{date}{field_char('end')}</w:p>" + BODY), "p.docx")
    assert "2024-05-01" in parsed.text


def test_a_toc_field_without_its_end_hides_nothing():
    broken = styled("Normal", field_char("begin") + instruction(" TOC \\o ") + field_char("separate") + run("Intro 1"))
    parsed = parse_bytes(docx(broken + BODY), "damaged.docx")
    assert "Managers approve trips" in parsed.text and "# Approval" in parsed.text


def test_a_toc_field_written_in_one_run_with_its_placeholder_is_not_indexed():
    # pandoc and python-docx scripts write the whole field in one run, Word's update prompt as its result
    one_run = (
        '<w:p><w:r><w:fldChar w:fldCharType="begin" w:dirty="true"/>'
        '<w:instrText xml:space="preserve">TO</w:instrText>'
        '<w:instrText xml:space="preserve">C \\o "1-3" \\h</w:instrText>'
        '<w:fldChar w:fldCharType="separate"/><w:t>Right-click to update the table of contents.</w:t>'
        '<w:fldChar w:fldCharType="end"/><w:t xml:space="preserve"> Read this first.</w:t></w:r></w:p>'
    )
    parsed = parse_bytes(docx(one_run + BODY), "pandoc.docx")
    assert "Right-click" not in parsed.text
    assert parsed.text.startswith("Read this first.\n\n# Scope")
