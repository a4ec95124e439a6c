"""XLSX (Excel) workbooks to the chunker's Markdown: each visible worksheet a ``#`` heading (its
name, so the sheet is in every chunk's section path) over one Markdown table of its rows.

* Rows: the sheet's non-empty rows in order; the first one is the header (the chunker repeats it at
  the start of every chunk a long table is split into: a chunk is a block of rows with its header).
* Merged cells: a range merged down rows gives its value to every row it spans (the group or approver
  of each row); leading rows of one value in a wider sheet (a title, merged across or not) are lines
  above the table, not its header; a header row with ranges merged across columns over a second row is
  one header of both (``Q1 / Plan``).
* Columns: from the first to the last column that holds a value anywhere in the sheet.
* Cells: shared and inline strings, numbers as stored, booleans ``TRUE``/``FALSE``, formulas by
  their cached value, dates (a number in a date format) as ``YYYY-MM-DD`` (``YYYY-MM-DD HH:MM``
  with a time); a ``|`` is escaped, line breaks become spaces.
* Left out, with a warning each: chart sheets (``table_not_parsed``), sheets without a value
  (``empty_sheet``). Hidden sheets are left out silently (the workbook hides them from readers).

Read with lxml from the package's XML (:mod:`.ooxml`: zip-bomb checks, no entities, no network).
The text is counted cell by cell against :class:`~pgkb_plpy.parsers.TextBudget` (a shared string
counts at every cell that uses it): a few KB whose one long shared string fills thousands of cells
are refused at the first cell past ``file_max_expansion_ratio`` characters per byte of the file.
"""

from __future__ import annotations

import datetime as dt
import re

from . import (
    CONTENT_TYPES,
    FORMAT_BY_NAME,
    ParsedFile,
    TextBudget,
    clean_title,
    escape_line,
    format_version,
    ooxml,
    sanitize_text,
)

S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_WHAT = "XLSX"
_MAIN_PART = FORMAT_BY_NAME["xlsx"].main_part
#: Built-in number formats that are dates or times (ECMA-376 18.8.30).
_DATE_FORMAT_IDS = frozenset({14, 15, 16, 17, 18, 19, 20, 21, 22, 45, 46, 47})
_DATE_CODE_RE = re.compile(r"[dmyhs]", re.IGNORECASE)
_CELL_REF_RE = re.compile(r"^([A-Z]+)(\d+)$")
_RANGE_RE = re.compile(r"^([A-Z]+\d+):([A-Z]+\d+)$")


def _column(ref: str) -> int:
    letters = _CELL_REF_RE.match(ref or "")
    if not letters:
        return -1
    n = 0
    for ch in letters.group(1):
        n = n * 26 + ord(ch) - 64
    return n - 1


def _text_of(el) -> str:
    """The text of a string item (``si`` or ``is``): its ``t`` runs, phonetic runs left out."""
    return "".join(t.text or "" for t in el.iter(S + "t") if t.getparent().tag != S + "rPh")


def _date_styles(archive) -> set[int]:
    """Indexes of the cell formats (``s`` of a cell) that show a date or time."""
    root = ooxml.read_xml(archive, "xl/styles.xml", _WHAT)
    if root is None:
        return set()
    custom = {}
    for fmt in root.iter(S + "numFmt"):
        code = re.sub(r'"[^"]*"|\[[^\]]*\]|\\.', "", fmt.get("formatCode") or "")
        custom[int(fmt.get("numFmtId") or -1)] = bool(_DATE_CODE_RE.search(code))
    xfs = root.find(S + "cellXfs")
    out = set()
    for i, xf in enumerate(xfs if xfs is not None else []):
        fid = int(xf.get("numFmtId") or 0)
        if fid in _DATE_FORMAT_IDS or custom.get(fid):
            out.add(i)
    return out


def _date(value: str) -> str:
    try:
        serial = float(value)
    except ValueError:
        return value
    moment = dt.datetime(1899, 12, 30) + dt.timedelta(days=serial)
    return moment.strftime("%Y-%m-%d %H:%M" if serial % 1 else "%Y-%m-%d")


def _cell_value(c, shared: list[str], date_styles: set[int]) -> str:
    kind = c.get("t", "n")
    v = c.find(S + "v")
    if kind == "inlineStr":
        inline = c.find(S + "is")
        return _text_of(inline) if inline is not None else ""
    if v is None or v.text is None:
        return ""
    if kind == "s":
        try:
            return shared[int(v.text)]
        except (ValueError, IndexError):
            return ""
    if kind == "b":
        return "TRUE" if v.text.strip() == "1" else "FALSE"
    if kind == "n" and int(c.get("s") or 0) in date_styles:
        return _date(v.text)
    text = v.text
    if kind == "n" and re.fullmatch(r"-?\d+\.0+", text):
        text = text.split(".")[0]
    return text


def _shared_uses(root, upto, index: str) -> int:
    """How many cells of worksheet ``root``, up to cell ``upto``, show the shared string ``index``."""
    uses = 0
    for c in root.iter(S + "c"):
        uses += c.get("t") == "s" and (c.findtext(S + "v") or "").strip() == index
        if c is upto:
            return uses
    return uses


def _where(root, c, name: str, shared: list[str]) -> str:
    """Where cell ``c`` is, for an error; a shared string with how many cells repeated it so far."""
    where = f"sheet {name!r}, cell {c.get('r') or '?'}"
    if c.get("t") != "s":
        return where
    index = (c.findtext(S + "v") or "").strip()
    return (
        f"{where}: the shared string at index {index} ({len(shared[int(index)])} characters) "
        f"repeated in {_shared_uses(root, c, index)} cells"
    )


def _sheet_rows(
    root, name: str, shared: list[str], date_styles: set[int], budget: TextBudget
) -> list[tuple[int, dict[int, str]]]:
    """The non-empty rows of a worksheet as (row number, column -> cell text), each cell's text counted
    against ``budget`` where it is produced (a shared string at each use)."""
    rows: list[tuple[int, dict[int, str]]] = []
    number = 0
    for row in root.iter(S + "row") if root is not None else []:
        number = int(row.get("r")) if (row.get("r") or "").isdigit() else number + 1
        cells: dict[int, str] = {}
        position = -1
        for c in row.iter(S + "c"):
            column = _column(c.get("r") or "")
            position = column if column >= 0 else position + 1
            value = ooxml.cell_text(_cell_value(c, shared, date_styles))
            if value:
                cells[position] = value
                budget.used += len(value)  # budget.take, inlined: the loop runs once a cell
                if budget.used > budget.limit:
                    raise budget.exceeded(_where(root, c, name, shared))
        if cells:
            rows.append((number, cells))
    return rows


def _merged_ranges(root) -> list[tuple[int, int, int, int]]:
    """Each merged range of a worksheet as (first row, first column, last row, last column): rows as
    numbered in the sheet, columns from 0."""
    ranges = []
    for merged in root.iter(S + "mergeCell") if root is not None else []:
        found = _RANGE_RE.match(merged.get("ref") or "")
        if found:
            (c1, r1), (c2, r2) = (_CELL_REF_RE.match(ref).groups() for ref in found.groups())
            ranges.append((int(r1), _column(c1 + r1), int(r2), _column(c2 + r2)))
    return ranges


def _layout(rows: list[tuple[int, dict[int, str]]], merged: list[tuple[int, int, int, int]]) -> tuple[list[str], list]:
    """A sheet's title lines and its table (header first), merged cells read as the module says."""
    by_number = dict(rows)
    for r1, c1, r2, _ in merged:  # a value merged down rows belongs to each of them
        value = by_number.get(r1, {}).get(c1)
        for number in range(r1 + 1, r2 + 1) if value else ():
            if number in by_number:
                by_number[number].setdefault(c1, value)
    numbers = [number for number, _ in rows]
    wide = len({c for cells in by_number.values() for c in cells}) > 1
    titles = []
    while wide and len(numbers) > 1 and len(by_number[numbers[0]]) == 1:
        titles.append(next(iter(by_number.pop(numbers.pop(0)).values())))
    ordered = [by_number[n] for n in numbers]
    across = [(c1, c2) for r1, c1, _, c2 in merged if r1 == numbers[0] and c2 > c1]
    if across and len(ordered) > 1:  # a group header over a second header row: one header of both
        top = dict(ordered[0])
        for c1, c2 in across:
            for column in range(c1 + 1, c2 + 1) if top.get(c1) else ():
                top.setdefault(column, top[c1])
        columns = set(top) | set(ordered[1])
        header = {c: " / ".join(dict.fromkeys(v for v in (top.get(c), ordered[1].get(c)) if v)) for c in columns}
        ordered = [header, *ordered[2:]]
    first = min(min(r) for r in ordered)
    last = max(max(r) for r in ordered)
    return titles, [[r.get(col, "") for col in range(first, last + 1)] for r in ordered]


def parse_xlsx(data: bytes) -> ParsedFile:
    archive = ooxml.check_zip(data, _WHAT, _MAIN_PART, "an Excel workbook")
    workbook = ooxml.read_xml(archive, _MAIN_PART, _WHAT)
    rels = ooxml.relationships(archive, _MAIN_PART, _WHAT)
    strings_root = ooxml.read_xml(archive, "xl/sharedStrings.xml", _WHAT)
    shared = [_text_of(si) for si in strings_root.iter(S + "si")] if strings_root is not None else []
    date_styles = _date_styles(archive)
    budget = TextBudget(len(data), _WHAT)
    warnings: list[dict] = []
    blocks: list[str] = []
    sheets = workbook.find(S + "sheets")
    for sheet in sheets if sheets is not None else []:
        name = " ".join((sheet.get("name") or "").split()) or "Sheet"
        if sheet.get("state") in ("hidden", "veryHidden"):
            continue
        target, rel_type = rels.get(sheet.get(ooxml.R + "id") or "", ("", ""))
        if rel_type != "worksheet":
            warnings.append(
                {
                    "page": None,
                    "kind": "table_not_parsed",
                    "message": f"sheet {name!r} is a {rel_type or 'missing part'}, not a table of cells: not indexed",
                }
            )
            continue
        root = ooxml.read_xml(archive, target, _WHAT)
        rows = _sheet_rows(root, name, shared, date_styles, budget)
        if not rows:
            warnings.append({"page": None, "kind": "empty_sheet", "message": f"sheet {name!r} has no values"})
            continue
        titles, table = _layout(rows, _merged_ranges(root))
        blocks.append(f"# {escape_line(name)}")
        blocks.extend(escape_line(title) for title in titles)
        blocks.append(ooxml.markdown_table(table))
    title = clean_title(ooxml.core_title(archive, _WHAT))
    return ParsedFile(
        "xlsx",
        sanitize_text("\n\n".join(blocks)),
        title,
        CONTENT_TYPES["xlsx"],
        "pgkb ooxml (lxml)",
        format_version("xlsx"),
        warnings=warnings,
    )
