"""Tables in real PDFs: ruled tables read from their rulings, a table broken by page breaks read
as one table with its header, every row as wide as the header. The expected tables of the ruled
files are pdfplumber's "lines" reading checked by eye (scripts/pdf_tables_expected.py writes
them); the mixed-rulings file's tables are written out below. Sources and licences: the fixtures
folder's README.md. Run this file as a script for the figures in docs/INGEST.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON
from pgkb_plpy import parsers

FILES = Path(__file__).resolve().parents[1] / "fixtures" / "files" / "tables"
PACKAGE = str(Path(__file__).resolve().parents[2] / "plpython")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")
_CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")


def _expected() -> dict[str, list[list[list[str]]]]:
    ruled = json.loads((FILES / "expected.json").read_text(encoding="utf-8"))
    out = {name: [table["rows"] for table in tables] for name, tables in ruled.items()}
    # four 3 x 3 tables: full rulings, no horizontal rulings, no vertical rulings, rulings only
    # around the header and the body
    out["mixed-rulings.pdf"] = [
        [[f"T{t}-C{c}" for c in range(3)]]
        + [[f"T{t}-{r}{c}" + ("-last" if r == 2 else "") for c in range(3)] for r in range(3)]
        for t in range(4)
    ]
    return out


def parsed_tables(name: str) -> list[list[list[str]]]:
    """The Markdown tables of a fixture parsed as in the database, as rows of cells."""
    text = parsers.parse_isolated(
        (FILES / name).read_bytes(), name, python=str(SERVER_PYTHON), package_path=PACKAGE
    ).text
    tables = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if len(lines) >= 2 and all(line.startswith("|") for line in lines) and set(lines[1]) <= set("|-: "):
            rows = [lines[0], *lines[2:]]
            tables.append(
                [[cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT_RE.split(row)[1:-1]] for row in rows]
            )
    return tables


def measure(name: str, expected: list[list[list[str]]]) -> dict:
    """Per file: cells right (of the expected tables' cells, each table matched to the parsed table
    holding most of its rows), headers right, and expected tables whose rows are in one table."""
    tables = parsed_tables(name)
    cells = right = headers = whole = 0
    for want in expected:
        found = [t for t in tables if any(row in t[1:] for row in want[1:])]
        got = max(found, key=lambda t: sum(row in t for row in want), default=[])
        headers += bool(got) and got[0] == want[0]
        whole += len(found) == 1
        for r, row in enumerate(want):
            for c, cell in enumerate(row):
                cells += 1
                right += r < len(got) and c < len(got[r]) and got[r][c] == cell and len(got[r]) == len(row)
    return {"tables": len(expected), "cells": cells, "right": right, "headers": headers, "one_table": whole}


EXPECTED = _expected()


@needs_server_venv
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ruled_tables_read_as_printed_with_95_percent_of_cells_right(name):
    m = measure(name, EXPECTED[name])
    assert m["right"] >= 0.95 * m["cells"], m


@needs_server_venv
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_table_keeps_its_header_and_is_one_table_across_pages(name):
    m = measure(name, EXPECTED[name])
    assert m["headers"] == m["tables"] and m["one_table"] == m["tables"], m


@needs_server_venv
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_row_of_a_table_has_as_many_cells_as_its_header(name):
    for table in parsed_tables(name):
        assert {len(row) for row in table} == {len(table[0])}, table[0]


def test_a_header_repeated_on_the_next_page_is_not_a_row():
    from pgkb_plpy.parsers.pdf import _join_pages

    page1 = "Table 3 : Parts\n\n| No | Item |\n|---|---|\n| 1 | Bolt |"
    page2 = "Table 3 : Parts (continued)\n\n| No | Item |\n|---|---|\n| 2 | Nut |\n\nAfter."
    text, starts = _join_pages([page1, page2])
    assert text == "Table 3 : Parts\n\n| No | Item |\n|---|---|\n| 1 | Bolt |\n| 2 | Nut |\n\nAfter."
    assert text[starts[1] :].startswith("| 2 | Nut |")


def test_a_table_broken_without_a_repeated_header_keeps_its_first_row_on_the_next_page():
    from pgkb_plpy.parsers.pdf import _join_pages

    text, _ = _join_pages(["| No | Item |\n|---|---|\n| 1 | Bolt |", "| 2 | Nut |\n|---|---|\n| 3 | Pin |"])
    assert text == "| No | Item |\n|---|---|\n| 1 | Bolt |\n| 2 | Nut |\n| 3 | Pin |"


def test_tables_of_other_widths_on_the_next_page_stay_apart():
    from pgkb_plpy.parsers.pdf import _join_pages

    text, starts = _join_pages(["| a | b |\n|---|---|\n| 1 | 2 |", "| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |"])
    assert text.count("\n|---") == 2 and starts[1] == text.index("| a | b | c |")


if __name__ == "__main__":  # figures for docs/INGEST.md
    total = {"tables": 0, "cells": 0, "right": 0, "headers": 0, "one_table": 0}
    for name in sorted(EXPECTED):
        m = measure(name, EXPECTED[name])
        total = {k: total[k] + m[k] for k in total}
        print(name, m)
    print(
        f"cells right {100 * total['right'] / total['cells']:.1f}% ({total['right']}/{total['cells']}), "
        f"headers right {total['headers']}/{total['tables']}, "
        f"one table per table {total['one_table']}/{total['tables']}"
    )


def test_a_group_heading_row_is_not_cut_from_the_row_it_heads():
    from pgkb_plpy.chunker import chunk_document

    heading = "| | For electronically controlled engines, assembly drawings of: |"
    rows = [f"| {i} | Part number {i} of the engine, drawn and approved |" for i in range(1, 13)]
    table = "\n".join(["| No | Item |", "|---|---|", *rows[:6], heading, *rows[6:]])
    ends = set()
    for budget in range(60, 200, 3):
        for chunk in chunk_document(table, max_tokens=budget, overlap_tokens=0):
            ends.add(chunk.content.rstrip().split("\n")[-1])
    assert heading not in ends and len(ends) > 3


def test_a_table_header_printed_at_the_top_of_every_page_and_its_rows_at_the_edges_are_not_furniture():
    from pgkb_plpy.parsers.pdf import furniture

    pages = [
        ["Engine rules", "No\tItem", *(f"{p}{k}\tPart {p}{k}" for k in range(5)), f"Page {p}"] for p in range(1, 5)
    ]
    drop = furniture(pages)
    assert drop == [{0, len(lines) - 1} for lines in pages]


@needs_server_venv
def test_a_bar_chart_is_not_a_table_and_its_labels_stay_text():
    text = parsers.parse_isolated(
        (FILES / "bar-chart.pdf").read_bytes(), "bar-chart.pdf", python=str(SERVER_PYTHON), package_path=PACKAGE
    ).text
    assert "25%" in text and "TOUS LES JOURS OU PRESQUE" in text
    assert not any("25%" in line for line in text.split("\n") if line.startswith("|"))
