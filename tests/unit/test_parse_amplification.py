"""Issue 42, item 6: a few KB must not become millions of characters of text (and thousands of
chunks and vectors in the shared index) because a parser repeats text. The rule
(:class:`pgkb_plpy.parsers.TextBudget`): a file yields at most ``file_max_expansion_ratio``
characters of text per byte of the file, counted on the text the parser produces -- an XLSX shared
string at every cell that uses it, a DOCX cell merged down rows in every row, a DOCX note at every
reference, an HTML cell spanning rows in every row -- and past it the file is refused as
``zip_bomb`` naming the setting and where the text ran over. OOXML formats parse in the child
process with the server venv (lxml); HTML and the budget itself in this process."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import pytest
from filebuild import make_docx, make_pptx, para
from pgkb_plpy import parsers
from pgkb_plpy.parsers import ParseError, TextBudget, parse_bytes

PACKAGE = str(Path(parsers.__file__).resolve().parents[2])
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")

_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
LIMIT = "; the limit file_max_expansion_ratio is 100 (kb.settings)"


def words(chars: int) -> str:
    return ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]


def shared_string_xlsx(strings: list[str], cells: list[int]) -> bytes:
    """A workbook whose one sheet has a row per entry of ``cells``: column A the shared string of
    that index."""
    rows = "".join(f'<row r="{r}"><c r="A{r}" t="s"><v>{i}</v></c></row>' for r, i in enumerate(cells, 1))
    parts = {
        "[Content_Types].xml": "<Types/>",
        "xl/workbook.xml": f'<workbook xmlns="{_S}" xmlns:r="{_REL}"><sheets>'
        '<sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<Relationships xmlns="{_PKG}"><Relationship Id="rId1" '
        f'Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>',
        "xl/sharedStrings.xml": f'<sst xmlns="{_S}">' + "".join(f"<si><t>{s}</t></si>" for s in strings) + "</sst>",
        "xl/worksheets/sheet1.xml": f'<worksheet xmlns="{_S}"><sheetData>{rows}</sheetData></worksheet>',
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, xml in parts.items():
            archive.writestr(name, xml)
    return out.getvalue()


def child(data: bytes, name: str, **limits) -> parsers.ParsedFile:
    return parsers.parse_isolated(
        data, name, python=str(SERVER_PYTHON), package_path=PACKAGE, limits=limits or None, timeout_s=60
    )


def refused(data: bytes, name: str) -> tuple[str, float]:
    """The error of a file the child refuses, and how long it took."""
    started = time.monotonic()
    with pytest.raises(ParseError) as caught:
        parsed = child(data, name)
        pytest.fail(f"{name}: {len(data)} bytes parsed into {len(parsed.text)} characters")
    return str(caught.value), time.monotonic() - started


# ------------------------------------------------------------------------------ the budget


def test_the_budget_is_the_expansion_ratio_in_characters_per_byte_and_names_the_setting_and_the_place():
    parsers.set_limits(None)
    budget = TextBudget(50, "XLSX")
    budget.take(5000)  # exactly 100 characters a byte: allowed
    with pytest.raises(ParseError) as caught:
        budget.take(1, lambda: "sheet 'S', cell A2")
    assert str(caught.value) == (
        "zip_bomb: the XLSX would yield more than 100 characters of text per byte of the file "
        "(more than 5000 characters from 50 bytes), at sheet 'S', cell A2" + LIMIT
    )
    parsers.set_limits({"file_max_expansion_ratio": 1000})
    try:
        TextBudget(50, "XLSX").take(50_000)  # the setting decides
    finally:
        parsers.set_limits(None)


def test_plain_text_never_expands():
    text = ("一行中文，一行英文 and a line of English.\n" * 2000).encode()
    assert parse_bytes(text, "a.txt").text.startswith("一行中文")


# ------------------------------------------------------------------------------------ XLSX


@needs_server_venv
def test_an_xlsx_whose_one_shared_string_fills_500_cells_is_refused_at_the_cell_past_the_limit():
    crafted = shared_string_xlsx([words(10_000)], [0] * 500)  # issue 42: 5 M characters from a few KB
    assert len(crafted) < 4096
    error, seconds = refused(crafted, "amplified.xlsx")
    assert error.startswith("zip_bomb: the XLSX would yield more than 100 characters of text per byte"), error
    # stopped at the first cell past the limit, not after expanding all 500
    first_past = len(crafted) * 100 // 10_000 + 1
    assert (
        f"at sheet 'Data', cell A{first_past}: the shared string at index 0 (10000 characters) "
        f"repeated in {first_past} cells" + LIMIT
    ) in error, error
    assert seconds < 5


@needs_server_venv
def test_the_crafted_xlsx_parses_when_an_admin_raises_file_max_expansion_ratio():
    crafted = shared_string_xlsx([words(10_000)], [0] * 500)
    assert len(child(crafted, "amplified.xlsx", file_max_expansion_ratio=10_000).text) > 5_000_000


@needs_server_venv
def test_a_workbook_repeating_boilerplate_down_a_long_column_is_within_the_limit():
    # a denormalised export: one of five 300-character terms in each of 3,000 rows (about 30
    # characters of text per byte, the most measured for an honest workbook: docs/INGEST.md)
    terms = [f"Terms {k}: " + words(290) for k in range(5)]
    data = shared_string_xlsx(terms, [k % 5 for k in range(3000)])
    text = child(data, "export.xlsx").text
    assert len(text) > 10 * len(data) and text.count("Terms 4:") == 600


# ------------------------------------------------------------------------------------ DOCX


def _cell(text: str = "", merge: str = "") -> str:
    restart = ' w:val="restart"' if merge == "restart" else ""
    pr = f"<w:tcPr><w:vMerge{restart}/></w:tcPr>" if merge else ""
    run = f"<w:r><w:t>{text}</w:t></w:r>" if text else ""
    return f"<w:tc>{pr}<w:p>{run}</w:p></w:tc>"


@needs_server_venv
def test_a_docx_cell_merged_down_500_rows_is_refused_at_the_row_past_the_limit():
    rows = f"<w:tr>{_cell('Clause')}{_cell('Note')}</w:tr>"
    rows += f"<w:tr>{_cell(words(10_000), 'restart')}{_cell('n')}</w:tr>"
    rows += f"<w:tr>{_cell(merge='continue')}{_cell()}</w:tr>" * 500
    data = make_docx(f"<w:tbl>{rows}</w:tbl>")
    error, seconds = refused(data, "merged.docx")
    assert error.startswith("zip_bomb: the DOCX would yield more than 100 characters of text per byte"), error
    assert "at the body's block 1 (a table), row " in error and ": a cell merged down rows repeats its text" in error
    assert error.endswith(LIMIT) and seconds < 5


@needs_server_venv
def test_a_docx_footnote_referenced_500_times_is_refused():
    refs = '<w:r><w:footnoteReference w:id="1"/></w:r>' * 500
    body = f"<w:p><w:r><w:t>See the note.</w:t></w:r>{refs}</w:p>"
    notes = f'<w:footnote w:id="1"><w:p><w:r><w:t>{words(10_000)}</w:t></w:r></w:p></w:footnote>'
    error, _ = refused(make_docx(body, footnotes=notes), "noted.docx")
    assert "at footnote 1 (referenced " in error and error.endswith(LIMIT), error


@needs_server_venv
def test_docx_footnotes_referencing_each_other_twice_are_stopped_before_they_double_sixteen_times():
    depth = 16  # 2**16 readings of the last note: 6.5 M characters from about 2 KB
    notes = "".join(
        f'<w:footnote w:id="{k}"><w:p><w:r><w:t>n{k}</w:t></w:r>'
        f'<w:r><w:footnoteReference w:id="{k + 1}"/></w:r><w:r><w:footnoteReference w:id="{k + 1}"/></w:r>'
        "</w:p></w:footnote>"
        for k in range(1, depth)
    )
    notes += f'<w:footnote w:id="{depth}"><w:p><w:r><w:t>{words(100)}</w:t></w:r></w:p></w:footnote>'
    body = '<w:p><w:r><w:t>Start.</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r></w:p>'
    error, seconds = refused(make_docx(body, footnotes=notes), "chain.docx")
    assert error.startswith("zip_bomb: the DOCX would yield") and f"at footnote {depth} (referenced" in error, error
    assert seconds < 5


@needs_server_venv
def test_an_ordinary_docx_is_untouched():
    data = make_docx("".join(para(f"Paragraph {k}: {words(200)}") for k in range(50)))
    assert child(data, "ordinary.docx").text.count("Paragraph") == 50


# ------------------------------------------------------------------------------------ PPTX


@needs_server_venv
def test_a_pptx_slide_of_highly_compressible_text_under_the_zip_check_is_refused():
    # one slide part of 900 KB, under the 1 MiB a zip member needs before its expansion is checked
    data = make_pptx([("Title", [words(900_000)], "")])
    assert len(data) < 9000
    error, _ = refused(data, "deck.pptx")
    assert error.startswith("zip_bomb: the PPTX would yield") and ", at slide 1" + LIMIT in error, error


# ------------------------------------------------------------------------------------ HTML


def test_an_html_cell_spanning_a_thousand_rows_is_refused_at_the_row_past_the_limit():
    page = (
        f'<html><body><table><tr><th>Clause</th></tr><tr><td rowspan="1000">{words(10_000)}</td></tr>'
        + "<tr></tr>" * 999
        + "</table></body></html>"
    ).encode()
    started = time.monotonic()
    with pytest.raises(ParseError) as caught:
        parse_bytes(page, "spans.html")
    error = str(caught.value)
    assert error.startswith("zip_bomb: the HTML would yield more than 100 characters of text per byte"), error
    assert "at the page's block 1 (a table), row " in error and error.endswith(LIMIT), error
    assert time.monotonic() - started < 5


def test_an_html_table_with_spans_is_within_the_limit():
    rows = "".join(f"<tr><td>{k}</td><td>{words(40)}</td></tr>" for k in range(200))
    page = f'<table><tr><th colspan="2">Items</th></tr><tr><td rowspan="3">x</td></tr>{rows}</table>'.encode()
    assert parse_bytes(page, "t.html").text.count("lorem ipsum") == 400
