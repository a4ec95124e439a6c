"""PDF to text with pypdfium2 (PDFium's text layer; chosen over pypdf and pdfminer.six by the
measurement in docs/INGEST.md: the fastest by far, and the best Chinese text).

* Text comes page by page; ``page_starts[n]`` is where page ``n + 1`` starts in the text.
* Headings: the document outline (bookmarks) when it has one -- a line of a bookmarked page whose
  text is the bookmark's title becomes a heading of the bookmark's level; otherwise font sizes --
  a short line set clearly larger than the body text (at least ``HEADING_SIZE_RATIO`` times the
  most common size) becomes a heading, the largest size level 1. Numbered lines (第一章, 1.1 ...)
  are left to the chunker, which sees them in every format.
* A line of Chinese text that fills the width of the page and runs on into the next is joined
  to it without a space (PDF breaks lines where the page ends, not where the sentence does): it ends
  where a sentence cannot (Han, an opening bracket or quote, 、，) and the next starts with Han or
  Chinese punctuation (，。）》 ...), but not with numbering (第X条, 一、, （一）), which starts its own
  line (:func:`_runs_on`).
* A Chinese official document's header on its first page (版头: the issuer's red line, document
  number, signer, date; :func:`pgkb_plpy.parsers.official_header_lines`) is text, never a heading, and
  its size sets no heading level; the title under it (:func:`pgkb_plpy.parsers.official_title_lines`,
  its wrapped lines joined) is the level-1 heading and the document's title when the metadata has
  none (a metadata title that is a header line is dropped).
* Page furniture is dropped before anything else (:func:`furniture`): a line at the top or bottom
  of a page (its first or last ``EDGE_LINES``) that repeats, digits ignored, at an edge of most
  pages (or of ``RUN_PAGES`` pages within a few pages: a chapter's running header; or, when it is a
  page's first or last line and starts or ends with a page number, of two pages); a number-only
  line at an edge ("12", "- 3 -", "Page 3 of 10", "iv", "第 3 页"); table-of-contents pages (lines
  ending in dot leaders and a page number, or a "Contents"/"目录" page of lines ending in numbers)
  and index pages ("Index"/"索引" and its continuation pages of lines ending in page numbers).
* Tables drawn with rulings are read from the rulings (:func:`_ruled_tables`): columns where the
  vertical lines stand, rows between the horizontal ones, a cell the text inside its box, a
  header over several rows as one; the table stands where its caption leaves it. A table that ends
  a page and one that starts the next with as many columns are one table, the header printed again
  on the next page dropped (:func:`_join_pages`); a table's row or repeated header is never page
  furniture (:func:`_table_line`).
* Other tables: two or more lines with column gaps (a gap over ``CELL_GAP`` times the font size), with
  the lines of their wrapped cells, become a Markdown table (:func:`_table`): the columns are the
  x extents of the parts of the fullest lines, each part goes to its column by position (an empty
  cell stays empty), a line with nothing in the first column continues the row above (a cell
  wrapped over two lines joins its row), and a cell drawn after the wrapped lines of the cell
  before it rejoins its row (``REJOIN_LINES``). Parts that overlap into one column are text.
* Literal text stays text: every line that is not a heading is escaped
  (:func:`pgkb_plpy.parsers.escape_line`), so a "# comment" or "| x" in the PDF is no structure.
* Outline titles match printed lines loosely (letters and digits only; a title that starts the
  line, or the line without its number); each title heads the one line of its page it matches
  best, so a sentence that starts with a title's words stays text. A heading numbered
  ``3``/``3.1``/``3.1.2`` takes the level of its number's depth, so headings nest as printed
  whatever their font sizes.
* A junk metadata title ("untitled", "Microsoft Word - x.docx") is dropped (:func:`clean_title`).
* A page without text that holds an image is a scan: ``ocr="defer"`` lists it as pending
  (``ocr["pending_pages"]``, a warning ``ocr_pending``; the database's worker parses again with
  ``ocr="run"``), ``ocr="run"`` reads it with tesseract (:mod:`.ocr`) up to ``ocr_max_pages`` pages,
  recording each page's confidence in ``ocr["pages"]`` (``ocr_unreadable`` when it read nothing
  or under ``MIN_CONFIDENCE``, ``ocr_limit`` past the limit, ``ocr_failed`` for a page tesseract fails
  on); the OCR'd lines are normalised and their chapter and article markers checked along the
  document (:func:`.ocr.repair_divisions`) before each page's lines are joined into paragraphs, and a
  document that starts with a scan is titled by its first heading-like OCR line (:func:`.ocr.title_of`,
  not a 红头 header). A page with neither text nor image:
  ``no_text``. No text at all and no OCR: ``no_text_layer``. Encrypted: ``encrypted``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from ..vocabulary import HAN_COMPATIBILITY, HAN_UNIFIED, YIJING_HEXAGRAMS
from . import (
    CONTENT_TYPES,
    LIMITS,
    ParsedFile,
    ParseError,
    clean_title,
    escape_line,
    format_version,
    join_title_lines,
    limit_message,
    nest_by_numbers,
    numbered_lines_divide,
    official_header,
    official_header_lines,
    official_title,
    official_title_lines,
    sanitize_text,
)

#: A line set at least this many times the body size is a heading (without an outline).
HEADING_SIZE_RATIO = 1.2
#: Longest line (characters) that can be a heading.
HEADING_MAX_CHARS = 80
#: Heading levels taken from font sizes (the largest sizes).
HEADING_LEVELS = 3

#: A gap wider than this many times the font size between two words of a line is a column boundary.
CELL_GAP = 1.5
#: Lines at the top and at the bottom of a page where running headers, footers and numbers are looked for.
EDGE_LINES = 3
#: A line repeated at the edges of this many pages within RUN_WINDOW pages is a running header too.
RUN_PAGES = 3
RUN_WINDOW = 6

_NUMBER_ONLY_RE = re.compile(
    r"^[\s\-–—.·•|(\[]*(?:page|p\.|pp\.|seite|第)?\s*(?:\d{1,5}|[ivxlcdm]{1,7})\s*"
    r"(?:(?:of|/|／|von)\s*\d{1,5})?\s*(?:页|頁)?[\s\-–—.·•|)\]]*$",
    re.IGNORECASE,
)
_LEADER_RE = re.compile(r"(?:[.．·•…_]\s*){3,}\s*(?:\d{1,5}|[ivxlcdm]{1,7})$", re.IGNORECASE)
_ENDS_NUMBER_RE = re.compile(r"(?:^|\s|[,，])(?:\d{1,5}|[ivxlcdm]{1,7})(?:\s*[-–]\s*\d{1,5})?$", re.IGNORECASE)
_TOC_TITLE_RE = re.compile(r"^(?:table of )?contents$|^目\s*录$|^目\s*次$|^inhalt(?:sverzeichnis)?$", re.IGNORECASE)
_INDEX_TITLE_RE = re.compile(r"^(?:\d+\s+|[a-z]\s+)?(?:general |concept |function )?index$|^索\s*引$", re.IGNORECASE)
_NUMBERED_RE = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,4})\.?(?:\s+|$)")
_PAGE_NUMBER_END_RE = re.compile(r"^\d{1,5}\s|\s\d{1,5}$")
_EDGE_DIGITS_RE = re.compile(r"\d+")

#: Chinese lines broken at the page edge (or a cell wrapped over lines) join without a space: one
#: ends where a sentence cannot end -- a Han character, an opening bracket or quote, a comma (、，) --
#: and the next starts with a Han character or any Chinese punctuation (，。、；：）」》 open a line
#: only when the line before runs on). The hexagram symbols sit between the Han blocks and are taken
#: along (U+3400-U+9FFF as one run).
_HAN_RUN = HAN_UNIFIED + YIJING_HEXAGRAMS + HAN_COMPATIBILITY
#: Where Chinese punctuation is: CJK symbols and punctuation, the vertical, compatibility and small
#: forms, the full-width forms, and the dashes, curly quotes and ellipsis Chinese shares with Latin.
_CJK_PUNCTUATION_BLOCKS = (
    (0x3000, 0x303F),
    (0xFE10, 0xFE1F),
    (0xFE30, 0xFE6F),
    (0xFF00, 0xFF65),
    (0x2014, 0x2015),
    (0x2018, 0x201F),
    (0x2026, 0x2026),
)
_CJK_PUNCTUATION = [
    ch
    for first, last in _CJK_PUNCTUATION_BLOCKS
    for ch in map(chr, range(first, last + 1))
    if unicodedata.category(ch).startswith("P")
]
#: Punctuation after which a sentence goes on: opening brackets and quotes, and the commas.
_CJK_OPEN = "".join(
    ch for ch in _CJK_PUNCTUATION if unicodedata.category(ch) in ("Ps", "Pi") or "COMMA" in unicodedata.name(ch, "")
)
_CJK_END_RE = re.compile(f"[{_HAN_RUN}{re.escape(_CJK_OPEN)}]$")
_CJK_START_RE = re.compile(f"^[{_HAN_RUN}{re.escape(''.join(_CJK_PUNCTUATION))}]")
_PUNCT_END = tuple("。！？；：.!?;:")


def _key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


#: A line drawn after lines below it, at the height of one of the last ``REJOIN_LINES`` lines and to
#: its right, continues that line (a table drawn cell by cell: the next cell of a row comes after
#: the wrapped lines of the cell before it).
REJOIN_LINES = 6

Segment = tuple[float, float]  # x where a cell's (or a line's) text starts and ends


#: A glyph at most this many times the size of the one before it, set at least SUPERSCRIPT_RISE times
#: that size above its baseline, is a superscript.
SUPERSCRIPT_SIZE = 0.8
SUPERSCRIPT_RISE = 0.2


def _superscript_starts(textpage, raw, count: int) -> set[int]:
    """Indices of the characters that start a superscript right after a letter or digit (a footnote
    mark "format¹", a power "2³¹"): the text writes them "format^1", "2^31", so the mark does not
    glue to the word ("format1") and the word is still found. Baselines are read only where the
    size drops, so the pass costs little more than one font size a character."""
    import ctypes

    x, y = ctypes.c_double(), ctypes.c_double()

    def baseline(i: int) -> float:
        raw.FPDFText_GetCharOrigin(textpage, i, ctypes.byref(x), ctypes.byref(y))
        return y.value

    starts: set[int] = set()
    # the previous visible character: (is a letter or digit, size, index), and a superscript's
    # (size, baseline) while one runs
    previous: tuple[bool, float, int] | None = None
    running: tuple[float, float] | None = None
    for i in range(count):
        code = raw.FPDFText_GetUnicode(textpage, i)
        ch = chr(code) if 0 < code < 0x110000 else " "
        if not ch.strip():
            previous, running = None, None
            continue
        size = raw.FPDFText_GetFontSize(textpage, i)
        if running is not None and size <= running[0] * 1.05 and abs(baseline(i) - running[1]) < 0.1:
            continue  # the superscript goes on
        running = None
        if previous is not None and previous[0] and size <= SUPERSCRIPT_SIZE * previous[1]:
            here = baseline(i)
            if here - baseline(previous[2]) >= SUPERSCRIPT_RISE * previous[1]:
                starts.add(i)
                running = (size, here)
        previous = (ch.isalnum(), size, i)
    return starts


def _page_lines(textpage, raw) -> list[tuple[str, float, list[Segment]]]:
    """(line text, largest font size in it, segments) of one page, in reading order. A space PDFium
    generated for a gap wider than ``CELL_GAP`` times the font size becomes a tab: a column
    boundary; the segments are the x extents of the tab-separated parts."""
    import ctypes

    count = textpage.count_chars()
    box = [ctypes.c_double() for _ in range(4)]
    refs = [ctypes.byref(b) for b in box]
    origin = [ctypes.c_double(), ctypes.c_double()]
    origin_refs = [ctypes.byref(o) for o in origin]

    def edge(i: int, right: bool) -> float | None:
        if not raw.FPDFText_GetCharBox(textpage, i, *refs):
            return None
        return box[1].value if right else box[0].value

    # raw lines as PDFium breaks them: [segments [x0, x1, chars], size, y of the baseline]
    raw_lines: list[tuple[list[list], float, float]] = []
    segments: list[list] = []
    current: list | None = None  # the open segment: [x0, x1, chars]
    last = -1  # index of the open segment's last visible character
    size, y = 0.0, 0.0

    def close() -> None:
        nonlocal current, last
        if current is not None and "".join(current[2]).strip():
            right = edge(last, True) if last >= 0 else None
            current[1] = right if right is not None else current[0]
            segments.append(current)
        current, last = None, -1

    raised = _superscript_starts(textpage, raw, count)
    for i in range(count):
        code = raw.FPDFText_GetUnicode(textpage, i)
        ch = chr(code) if 0 < code < 0x110000 else ""
        if ch in ("\r", "\n"):
            if ch == "\n":
                close()
                if segments:
                    raw_lines.append((segments, size, y))
                segments, size = [], 0.0
            continue
        generated = raw.FPDFText_IsGenerated(textpage, i)
        if generated and ch == " " and current is not None and 0 < i < count - 1:
            left, right = edge(i - 1, True), edge(i + 1, False)
            gap = right - left if left is not None and right is not None else 0.0
            if size and gap > CELL_GAP * size:
                close()
            else:
                current[2].append(" ")
        elif not generated or ch == " ":
            if ch.strip():
                if current is None:
                    raw.FPDFText_GetCharOrigin(textpage, i, *origin_refs)
                    current = [origin[0].value, origin[0].value, []]
                    y = origin[1].value if not segments else y
                current[2].append("^" + ch if i in raised else ch)
                last = i
                size = max(size, raw.FPDFText_GetFontSize(textpage, i))
            elif current is not None:
                current[2].append(ch)
    close()
    if segments:
        raw_lines.append((segments, size, y))

    # a cell drawn after the wrapped lines of the cell before it rejoins its row
    lines: list[tuple[list[list], float, float]] = []
    for segs, sz, base in raw_lines:
        for back in range(len(lines) - 1, max(-1, len(lines) - 1 - REJOIN_LINES), -1):
            row, row_size, row_y = lines[back]
            tol = 0.25 * max(sz, row_size, 1.0)
            between = lines[back + 1 :]
            if (
                between
                and abs(row_y - base) <= tol
                and segs[0][0] >= row[-1][1]
                and all(row_y - 6 * row_size < other_y < row_y - tol for _, _, other_y in between)
            ):
                lines[back] = (row + segs, max(row_size, sz), row_y)
                break
        else:
            lines.append((segs, sz, base))
    # the lines inside a ruled table's box give way to the table, set after the last line above it
    # in its x range (its caption, drawn before or after it), else first: the page's reading order
    tables = _ruled_tables(textpage, raw) if hasattr(textpage, "page") else []
    tables = [table for table in tables if not _rulings_miss_columns(table, lines)]
    sizes: dict[int, float] = {}
    out = []
    for segs, sz, base in lines:
        t = _table_at(tables, segs, base)
        if t is None:
            text = "\t".join("".join(seg[2]).strip() for seg in segs)
            out.append((text, sz, [(seg[0], seg[1]) for seg in segs], base))
        else:
            sizes[t] = min(sizes.get(t, sz), sz)
    for t, ((left, _, right, top), rows, _) in sorted(enumerate(tables), key=lambda item: item[1][0][3]):
        if t in sizes:
            above = [k for k, e in enumerate(out) if e[3] > top and e[2][0][0] < right and e[2][-1][1] > left]
            at = above[-1] + 1 if above else 0
            out.insert(at, (_markdown_table(rows), sizes[t], [(left, right)], top))
    return [entry[:3] for entry in out]


def _table_end(entries: list[tuple[str, float, list[Segment]]], i: int) -> int:
    """Where the table whose first line is ``entries[i]`` (a line with column gaps) ends: the lines
    after it with column gaps, and the lines of one part that start where a part of a line above
    starts, right of the first column (a cell wrapped over several lines)."""
    first = entries[i][2][0][0]
    starts = [x0 for x0, _ in entries[i][2]]
    j = i + 1
    while j < len(entries):
        text, size, segs = entries[j]
        tol = max(size, 1.0)
        if segs[0][0] < first - tol:
            break
        if "\t" not in text and not (segs[0][0] > first + tol and any(abs(segs[0][0] - x) <= tol for x in starts)):
            break
        starts += [x0 for x0, _ in segs]
        j += 1
    return j


def _table(entries: list[tuple[str, float, list[Segment]]]) -> str | None:
    """The lines of a table as a Markdown table: columns are the x extents of the parts of the lines
    with the most parts (merged where they overlap); each part goes to the first column that does
    not end before it starts, so an empty cell stays empty in its column; a line with nothing in the
    first column continues the row above (a wrapped cell joins its row). First row the header.
    None when the parts overlap into fewer than two columns (justified text, not a table)."""
    full = max(len(segs) for _, _, segs in entries)
    tol = 0.5 * max(size for _, size, _ in entries)
    columns: list[list[float]] = []
    for x0, x1 in sorted(seg for _, _, segs in entries if len(segs) == full for seg in segs):
        if columns and x0 <= columns[-1][1] + tol:
            columns[-1][1] = max(columns[-1][1], x1)
        else:
            columns.append([x0, x1])
    if len(columns) < 2:
        return None
    rows: list[list[str]] = []
    for text, _, segs in entries:
        if not rows or segs[0][0] <= columns[0][1] + tol:
            rows.append([""] * len(columns))
        row = rows[-1]
        for (x0, _), cell in zip(segs, text.split("\t"), strict=True):
            c = next((k for k, (_, end) in enumerate(columns) if x0 <= end + tol), len(columns) - 1)
            joint = "" if _CJK_END_RE.search(row[c]) and _CJK_START_RE.match(cell) else " "
            row[c] = row[c] + joint + cell if row[c] else cell
    table = ["| " + " | ".join(escape_cell(c) for c in row) + " |" for row in rows]
    table.insert(1, "|" + "---|" * len(columns))
    return "\n".join(table)


#: Rulings within this many points of each other are one line, and a line ending this close to
#: another meets it.
RULE_SNAP = 2.0
#: The shortest drawn segment (points) taken as a ruling; a page with more segments than
#: ``RULE_MAX`` is a drawing, not a table page, and is read by text positions only.
RULE_MIN = 4.0
RULE_MAX = 3000

Rule = tuple[float, float, float]  # position across, start and end along (points)


def _rulings(page, raw) -> tuple[list[Rule], list[Rule]]:
    """The horizontal (y, x0, x1) and vertical (x, y0, y1) straight segments drawn on a page: the
    edges of its paths (a thin filled rectangle, a stroked line, a cell's box), in page space."""
    import ctypes

    horizontal: list[Rule] = []
    vertical: list[Rule] = []
    fx, fy = ctypes.c_float(), ctypes.c_float()
    matrix = raw.FS_MATRIX()

    def add(p: tuple[float, float], q: tuple[float, float]) -> None:
        if abs(p[1] - q[1]) <= 0.5 and abs(p[0] - q[0]) >= RULE_MIN:
            horizontal.append(((p[1] + q[1]) / 2, min(p[0], q[0]), max(p[0], q[0])))
        elif abs(p[0] - q[0]) <= 0.5 and abs(p[1] - q[1]) >= RULE_MIN:
            vertical.append(((p[0] + q[0]) / 2, min(p[1], q[1]), max(p[1], q[1])))

    def walk(objects, outer: tuple[float, ...]) -> None:
        for obj in objects:
            if len(horizontal) + len(vertical) > RULE_MAX:
                return
            kind = raw.FPDFPageObj_GetType(obj)
            if kind not in (raw.FPDF_PAGEOBJ_PATH, raw.FPDF_PAGEOBJ_FORM):
                continue
            m = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
            if raw.FPDFPageObj_GetMatrix(obj, matrix):
                m = (matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f)
            a, b, c, d, e, f = outer  # this object's space to the page: m, then outer
            m = (
                m[0] * a + m[1] * c,
                m[0] * b + m[1] * d,
                m[2] * a + m[3] * c,
                m[2] * b + m[3] * d,
                m[4] * a + m[5] * c + e,
                m[4] * b + m[5] * d + f,
            )
            if kind == raw.FPDF_PAGEOBJ_FORM:
                count = raw.FPDFFormObj_CountObjects(obj)
                walk((raw.FPDFFormObj_GetObject(obj, i) for i in range(count)), m)
                continue
            start = last = None
            for i in range(raw.FPDFPath_CountSegments(obj)):
                seg = raw.FPDFPath_GetPathSegment(obj, i)
                raw.FPDFPathSegment_GetPoint(seg, fx, fy)
                point = (m[0] * fx.value + m[2] * fy.value + m[4], m[1] * fx.value + m[3] * fy.value + m[5])
                kind_of = raw.FPDFPathSegment_GetType(seg)
                if kind_of == raw.FPDF_SEGMENT_MOVETO or last is None:
                    start = point
                elif kind_of == raw.FPDF_SEGMENT_LINETO:
                    add(last, point)
                last = point
                if raw.FPDFPathSegment_GetClose(seg) and start is not None:
                    add(point, start)
                    last = start

    count = raw.FPDFPage_CountObjects(page.raw)
    walk((raw.FPDFPage_GetObject(page.raw, i) for i in range(count)), (1.0, 0.0, 0.0, 1.0, 0.0, 0.0))
    if len(horizontal) + len(vertical) > RULE_MAX:
        return [], []
    return _merge_rules(horizontal), _merge_rules(vertical)


def _merge_rules(rules: list[Rule]) -> list[Rule]:
    """Rulings at one position (within ``RULE_SNAP``) that touch or overlap along it, as one."""
    out: list[Rule] = []
    group: list[Rule] = []
    for rule in [*sorted(rules), None]:
        if rule is not None and group and rule[0] - group[0][0] <= RULE_SNAP:
            group.append(rule)
            continue
        if group:
            at = sum(r[0] for r in group) / len(group)
            spans: list[list[float]] = []
            for _, a0, a1 in sorted(group, key=lambda r: r[1]):
                if spans and a0 <= spans[-1][1] + RULE_SNAP:
                    spans[-1][1] = max(spans[-1][1], a1)
                else:
                    spans.append([a0, a1])
            out += [(at, a0, a1) for a0, a1 in spans]
        group = [rule] if rule is not None else []
    return out


def _clusters(values: list[float]) -> list[float]:
    """Positions within ``RULE_SNAP`` of the one before them as one (their mean), ascending."""
    out: list[list[float]] = []
    for v in sorted(values):
        if out and v - out[-1][-1] <= RULE_SNAP:
            out[-1].append(v)
        else:
            out.append([v])
    return [sum(c) / len(c) for c in out]


def _grids(horizontal: list[Rule], vertical: list[Rule]) -> list[tuple[list[Rule], list[Rule]]]:
    """The rulings of a page as groups of lines that meet (horizontal and vertical lines that cross
    or touch within ``RULE_SNAP``): each group with two rows and two columns is a table's grid."""
    lines = [("h", r) for r in horizontal] + [("v", r) for r in vertical]
    parent = list(range(len(lines)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    nh = len(horizontal)
    for i, (y, x0, x1) in enumerate(horizontal):
        for j, (x, y0, y1) in enumerate(vertical):
            if x0 - RULE_SNAP <= x <= x1 + RULE_SNAP and y0 - RULE_SNAP <= y <= y1 + RULE_SNAP:
                parent[find(i)] = find(nh + j)
    groups: dict[int, tuple[list[Rule], list[Rule]]] = {}
    for i, (kind, rule) in enumerate(lines):
        group = groups.setdefault(find(i), ([], []))
        group[0 if kind == "h" else 1].append(rule)
    return [g for g in groups.values() if g[0] and g[1]]


def _ruled_tables(textpage, raw) -> list[tuple[tuple[float, float, float, float], list[list[str]]]]:
    """The tables drawn with rulings on a page: (left, bottom, right, top) and rows of cells. The
    columns are where vertical rulings stand (and the ends of the horizontal ones), the rows lie
    between horizontal rulings; a cell is the text inside its box, set in its first column when
    a missing ruling merges it over several (a group heading spans the row, its other cells
    empty). Rows and columns with no text are left out; fewer than two of either, or neither the
    first row nor the first column half filled (a chart), is no table. A rotated page (its rows
    run up the page as drawn) is left to the text positions."""
    if textpage.page.get_rotation() % 360:
        return []
    horizontal, vertical = _rulings(textpage.page, raw)
    tables = []
    for hs, vs in _grids(horizontal, vertical):
        xs = _clusters([x for x, _, _ in vs] + [min(x0 for _, x0, _ in hs), max(x1 for _, _, x1 in hs)])
        ys = _clusters([y for y, _, _ in hs] + [min(y0 for _, y0, _ in vs), max(y1 for _, _, y1 in vs)])
        if len(xs) < 3 or len(ys) < 3:
            continue
        down = ys[::-1]  # row r lies between down[r] (its top) and down[r + 1]
        rows: list[list[str]] = [[""] * (len(xs) - 1) for _ in down[1:]]
        spanned: set[tuple[int, int]] = set()
        spans: list[list[tuple[int, int]]] = []  # each row's cells as (first column, column after)
        divided: dict[int, list[list[str]]] = {}  # rows printed in one ruled row, by that row
        for r in range(len(rows)):
            ends = set()
            mid = (down[r] + down[r + 1]) / 2
            bounds = [0] + [
                k
                for k, x in enumerate(xs[1:-1], 1)
                if any(abs(vx - x) <= RULE_SNAP and y0 - RULE_SNAP <= mid <= y1 + RULE_SNAP for vx, y0, y1 in vs)
            ]
            bounds.append(len(xs) - 1)
            spans.append(list(zip(bounds, bounds[1:], strict=False)))
            for k0, k1 in spans[-1]:
                if (r, k0) in spanned:
                    continue
                # a cell with no ruling under it runs on into the row below (merged down)
                x = (xs[k0] + xs[k1]) / 2
                end = r + 1
                while end < len(rows) and not any(
                    abs(hy - down[end]) <= RULE_SNAP and x0 - RULE_SNAP <= x <= x1 + RULE_SNAP for hy, x0, x1 in hs
                ):
                    spanned.add((end, k0))
                    end += 1
                ends.add(end)
                rows[r][k0] = textpage.get_text_bounded(xs[k0], down[end], xs[k1], down[r])
            if r and len(ends) == 1 and not any((r, k0) in spanned for k0, _ in spans[-1]):
                end = ends.pop()
                cuts = _label_cuts(textpage, (xs[0], xs[spans[-1][0][1]], xs[-1]), down[r], down[end])
                if cuts:
                    divided[r] = _numbered_rows(textpage, xs, spans[-1], [down[r], *cuts, down[end]])
        pieces = [(row, spans[r]) for r in range(len(rows)) for row in divided.get(r) or [rows[r]]]
        pieces = [(row, sp) for row, sp in pieces if any(text.strip() for text in row)]
        if not pieces:
            continue
        depth, header = _header([row for row, _ in pieces], [sp for _, sp in pieces])
        rows = [header] + [split for row, _ in pieces[depth:] for split in _unruled_rows(row)]
        keep = [k for k in range(len(xs) - 1) if any(row[k] for row in rows)]
        rows = [[row[k] for k in keep] for row in rows]
        # a table names its columns or its rows; a chart's bars and grid lines hold a label here and
        # there (a staircase of one value per row)
        named = 2 * sum(1 for cell in rows[0] if cell) >= len(keep) or 2 * sum(1 for row in rows if row[0]) >= len(rows)
        if len(rows) >= 2 and len(keep) >= 2 and named:
            tables.append(((xs[0], ys[0], xs[-1], ys[-1]), rows, xs))
    return tables


def _label_cuts(textpage, x: tuple[float, float, float], top: float, bottom: float) -> list[float]:
    """Where a ruled row (``x``: its left edge, its first cell's right edge, its right edge) divides
    when it holds rows printed without rulings between them: its first column holds two or more
    short numbers (``21``, ``22``, ``23``; ``4.1``) on lines of their own, and the row divides midway between
    each label's line and the line above it, so a line over the first label (a group heading) is a
    row of its own. No cuts otherwise."""
    left, label_right, right = x
    lines: list[list[float]] = []  # [bottom, top] of each printed line of the row
    for i in range(textpage.count_rects()):
        x0, y0, x1, y1 = textpage.get_rect(i)
        if x1 <= left or x0 >= right or not bottom <= (y0 + y1) / 2 <= top:
            continue
        line = next((ln for ln in lines if abs(ln[0] + ln[1] - y0 - y1) <= y1 - y0), None)
        if line is None:
            lines.append([y0, y1])
        else:
            line[0], line[1] = min(line[0], y0), max(line[1], y1)
    lines.sort(key=lambda ln: -ln[1])
    labels = [(i, textpage.get_text_bounded(left, b, label_right, t)) for i, (b, t) in enumerate(lines)]
    labels = [(i, "".join(text.split())) for i, text in labels if text.strip()]
    if len(labels) < 2 or any(len(text) > 6 or not any(ch.isdigit() for ch in text) for _, text in labels):
        return []
    cuts = [(lines[i][1] + lines[i - 1][0]) / 2 for i, _ in labels if i > 0]
    # a cut runs between printed lines, never through one
    if any(lines[i][0] < cut < lines[i][1] for cut in cuts for i in range(len(lines))):
        return []
    return cuts


def _numbered_rows(textpage, xs: list[float], cells: list[tuple[int, int]], edges: list[float]) -> list[list[str]]:
    """A ruled row divided at ``edges`` (heights, top down) into rows of its cells' texts, when
    every part but the first is numbered in the first column and the first is numbered too or a
    heading in the cell beside it; else nothing (the row stays whole)."""
    parts = []
    for top, bottom in zip(edges, edges[1:], strict=False):
        row = [""] * (len(xs) - 1)
        for k0, k1 in cells:
            row[k0] = textpage.get_text_bounded(xs[k0], bottom, xs[k1], top)
        parts.append(row)
    heading = [k for k, text in enumerate(parts[0]) if text.strip()] == [cells[0][1]]
    return parts if all(p[0].strip() for p in parts[1:]) and (parts[0][0].strip() or heading) else []


def _header(rows: list[list[str]], spans: list[list[tuple[int, int]]]) -> tuple[int, list[str]]:
    """How many of a ruled table's first rows are its header, and the header as one row: while a
    header cell spans columns that the row below names one by one ("Production" over "Kharif",
    "Rabi"), that row is header too, and each column is named by the cells above it in turn
    ("Production Kharif")."""
    texts = [[_cell_text(_cell_lines(text)) for text in row] for row in rows]
    depth = 1
    while depth < min(len(rows), 4) and any(
        k1 - k0 >= 2 and texts[depth - 1][k0] and sum(1 for k in range(k0, k1) if texts[depth][k]) >= 2
        for k0, k1 in spans[depth - 1]
    ):
        depth += 1
    if depth == 1:
        return 1, texts[0]
    header = []
    for k in range(len(texts[0])):
        parts: list[str] = []
        for r in range(depth):
            k0 = next(a for a, b in spans[r] if a <= k < b)
            if texts[r][k0] and (not parts or parts[-1] != texts[r][k0]):
                parts.append(texts[r][k0])
        header.append(" ".join(parts))
    return depth, header


def _cell_lines(text: str) -> list[str]:
    """A cell's printed lines (a word hyphenated at a line's end, which PDFium marks, made whole)."""
    text = text.replace("\x02\r\n", "").replace("\x02", "")
    return [" ".join(line.split()) for line in text.replace("\r", "\n").split("\n") if line.strip()]


def _cell_text(lines: list[str]) -> str:
    """A cell's lines as one line: joined by a space, or by nothing between Chinese lines."""
    out = ""
    for line in lines:
        joint = "" if _CJK_END_RE.search(out) and _CJK_START_RE.match(line) else " "
        out = out + joint + line if out else line
    return out


def _unruled_rows(row: list[str]) -> list[list[str]]:
    """A ruled row (its cells' text) as the rows printed in it: when two or more cells hold the same
    number of lines and the others none, line n of each is row n (a table ruled only around its
    body); otherwise one row, each cell's lines joined."""
    cells = [_cell_lines(text) for text in row]
    counts = {len(lines) for lines in cells if lines}
    if len(counts) == 1 and sum(1 for lines in cells if lines) >= 2 and (n := counts.pop()) >= 2:
        return [[lines[i] if lines else "" for lines in cells] for i in range(n)]
    return [[_cell_text(lines) for lines in cells]]


def _markdown_table(rows: list[list[str]]) -> str:
    """Rows of cells as a Markdown table, the first row its header."""
    table = ["| " + " | ".join(escape_cell(c) for c in row) + " |" for row in rows]
    table.insert(1, "|" + "---|" * len(rows[0]))
    return "\n".join(table)


def _rulings_miss_columns(table: tuple, lines: list) -> bool:
    """Whether most of the printed lines in a ruled table's box part, by column gaps, within one
    ruled column: its rulings leave out columns its text has (rules between rows only, say), and
    the column gaps read it better."""
    (left, bottom, right, top), _, xs = table
    inside = [
        segs for segs, _, base in lines if bottom - 1 <= base <= top + 1 and segs[0][0] < right and segs[-1][1] > left
    ]

    def column(x: float) -> int:
        return sum(1 for edge in xs[1:-1] if x >= edge)

    parted = sum(
        1 for segs in inside if any(column(a[0]) == column(b[0]) for a, b in zip(segs, segs[1:], strict=False))
    )
    return 2 * parted > len(inside)


def _table_at(tables: list, segs: list, base: float) -> int | None:
    """Which ruled table's box a line (its parts and baseline) lies in, or None."""
    for t, ((left, bottom, right, top), *_) in enumerate(tables):
        if bottom - 1 <= base <= top + 1 and segs[0][0] < right and segs[-1][1] > left:
            return t
    return None


def _paragraph_blocks(entries: list[tuple[str, float, list[Segment]]]) -> list[str]:
    """The lines of a paragraph as blocks: runs of two or more lines with column gaps (and the
    wrapped lines of their cells) as Markdown tables, the other lines escaped text."""
    out: list[str] = []
    plain: list[str] = []
    i = 0
    while i < len(entries):
        if "\n" in entries[i][0]:  # a ruled table (:func:`_ruled_tables`), already Markdown
            if plain:
                out.append("\n".join(plain))
                plain = []
            out.append(entries[i][0])
            i += 1
            continue
        if "\t" in entries[i][0]:
            j = _table_end(entries, i)
            table = _table(entries[i:j]) if sum(1 for text, _, _ in entries[i:j] if "\t" in text) >= 2 else None
            if table is not None:
                if plain:
                    out.append("\n".join(plain))
                    plain = []
                out.append(table)
                i = j
                continue
        plain.append(escape_line(entries[i][0].replace("\t", " ")))
        i += 1
    if plain:
        out.append("\n".join(plain))
    return out


def escape_cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _edge_key(text: str) -> str:
    """A line as running headers are compared: digits ignored, letters case-folded."""
    return " ".join(_EDGE_DIGITS_RE.sub("", text).casefold().split())


def _edges(count: int) -> range | list[int]:
    if count <= 2 * EDGE_LINES:
        return range(count)
    return [*range(EDGE_LINES), *range(count - EDGE_LINES, count)]


def _toc_or_index_page(texts: list[str], previous_index: bool) -> str | None:
    """ "toc" or "index" when a page's lines (furniture removed) are a table of contents or an index."""
    if not texts:
        return None
    body = texts[1:] if len(texts) > 1 else texts
    leaders = sum(1 for t in texts if _LEADER_RE.search(t))
    numbered_ends = sum(1 for t in body if _ENDS_NUMBER_RE.search(t))
    if len(texts) >= 3 and leaders >= 0.5 * len(texts):
        return "toc"
    if _TOC_TITLE_RE.match(texts[0]) and (leaders or numbered_ends >= 0.5 * len(body)):
        return "toc"
    if (_INDEX_TITLE_RE.match(texts[0]) or previous_index) and len(body) >= 3 and numbered_ends >= 0.6 * len(body):
        return "index"
    return None


def _table_line(lines: list[str], i: int) -> bool:
    """A line with column gaps next to a line with as many: a table's row, or its header printed
    again at the top of a page (which the table keeps, :func:`_join_pages`), not page furniture
    (running headers are compared digits ignored, so "12  Bolt" on one page is "14  Bolt" on the
    next). A ruled table (one entry of several lines, :func:`_ruled_tables`) is never furniture."""
    if "\n" in lines[i]:
        return True
    gaps = lines[i].count("\t")
    return bool(gaps) and any(0 <= j < len(lines) and lines[j].count("\t") == gaps for j in (i - 1, i + 1))


def furniture(page_lines: list[list[str]], keep: list[set[int]] | None = None) -> list[set[int]]:
    """The indexes of the furniture lines of each page (see the module docstring); ``keep`` holds
    lines never dropped (outline headings, lines in heading type)."""
    pages = len(page_lines)
    keep = keep or [set() for _ in page_lines]
    drop: list[set[int]] = [set() for _ in page_lines]
    seen: dict[str, list[int]] = {}
    numbered: dict[str, int] = {}  # first or last lines that carry a page number, by key
    for p, lines in enumerate(page_lines):
        keys = set()
        for i in {0, len(lines) - 1} - keep[p] if lines else ():
            if _PAGE_NUMBER_END_RE.search(lines[i]):
                numbered[_edge_key(lines[i])] = numbered.get(_edge_key(lines[i]), 0) + 1
        for i in _edges(len(lines)):
            if i in keep[p]:
                continue
            if _NUMBER_ONLY_RE.match(lines[i]):
                drop[p].add(i)
                continue
            key = _edge_key(lines[i])
            if key and any(ch.isalnum() for ch in key):
                keys.add(key)
        for key in keys:
            seen.setdefault(key, []).append(p)
    repeated = set()
    for key, on in seen.items():
        if pages >= 2 and len(on) >= max(2, (pages + 1) // 2):
            repeated.add(key)
        elif any(on[k + RUN_PAGES - 1] - on[k] < RUN_WINDOW for k in range(len(on) - RUN_PAGES + 1)):
            repeated.add(key)
    repeated |= {key for key, count in numbered.items() if count >= 2 and any(ch.isalpha() for ch in key)}
    previous_index = False
    for p, lines in enumerate(page_lines):
        for i in _edges(len(lines)):
            if i not in keep[p] and _edge_key(lines[i]) in repeated and not _table_line(lines, i):
                drop[p].add(i)
        rest = [t for i, t in enumerate(lines) if i not in drop[p]]
        kind = _toc_or_index_page(rest, previous_index)
        previous_index = kind == "index"
        if kind:
            drop[p] = set(range(len(lines)))
    return drop


#: A heading's section number: "3", "3.1.2", "A.1", "Appendix A", "附录A" (group 1: an appendix's
#: number, group 2: the others).
_SECTION_NUMBER_RE = re.compile(
    r"^(?:(?i:appendix|annex)\s*|附\s*[录錄]\s*)([A-Z]|\d{1,2})(?![A-Za-z0-9])[.:：]?(?:\s+|$)"
    r"|^([A-Z](?:\.\d{1,2}){1,4}|\d{1,2}(?:\.\d{1,2}){0,4})\.?(?:\s+|$)"
)
_APPENDIX_WORD_RE = re.compile(r"^(?i:appendix|annex)\s+|^附\s*[录錄]\s*")
#: Back matter: a heading of the document (level 1), never a subsection of its last section.
_BACK_MATTER_RE = re.compile(
    r"^(?:references|bibliography|acknowledge?ments?|appendices|参考文献|致\s*谢)$|^(?:appendix|annex)\b|^附\s*[录錄]",
    re.IGNORECASE,
)


def _outline_match(title_key: str, text: str) -> int:
    """How well a printed line matches an outline title (letters and digits only): 3 the same, 2
    the same without their numbers (or without the word "Appendix": "Appendix A Copying" is the
    outline's "A Copying"), 1 a title of 8+ characters that starts the line (or the line that starts
    the title) when the line does not end like a sentence; 0 no match, nor for a line that ends
    like a clause or a list item ("— numeric expressions;")."""
    if text.rstrip().endswith((",", ";", "，", "；", "、")):
        return 0
    key = _key(text)
    if key == title_key:
        return 3
    bare = _key(_SECTION_NUMBER_RE.sub("", text))
    if bare and bare in (title_key, _key(_NUMBERED_RE.sub("", title_key))):
        return 2
    if _key(_APPENDIX_WORD_RE.sub("", text)) == title_key:
        return 2
    if (
        len(title_key) >= 8
        and len(key) >= 8
        and (key.startswith(title_key) or title_key.startswith(key))
        and not text.rstrip().endswith(_PUNCT_END)
    ):
        return 1
    return 0


def _outline_level(marks: dict[str, int], text: str) -> int | None:
    """The outline level of a printed line matched loosely (:func:`_outline_match`), or None."""
    best = max(((_outline_match(title_key, text), level) for title_key, level in marks.items()), default=(0, None))
    return best[1] if best[0] else None


def _outline_lines(marks: dict[str, int], texts: list[str]) -> dict[int, int]:
    """{line index: outline level} of a page: each outline title of the page heads one line, the one
    it matches best (the first of equals), so a sentence starting with a title's words stays text."""
    found: dict[int, int] = {}
    for title_key, level in marks.items():
        best, where = 0, None
        for i, text in enumerate(texts):
            score = _outline_match(title_key, text) if i not in found else 0
            if score > best:
                best, where = score, i
        if where is not None:
            found[where] = level
    return found


def _number_depth(text: str) -> int | None:
    """The level a heading's own text gives it: its number's depth (3 > 3.1 > 3.1.2, A.1 under
    "Appendix A"), 1 for back matter (References, Acknowledgements, Appendix A, 参考文献, 致谢)."""
    text = " ".join(text.split())
    if _BACK_MATTER_RE.match(text):
        return 1
    m = _SECTION_NUMBER_RE.match(text)
    return m.group(2).count(".") + 1 if m and m.group(2) else None


def _warning(page: int, kind: str, message: str) -> dict:
    return {"page": page, "kind": kind, "message": message}


def _has_image(page, raw) -> bool:
    return any(True for _ in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=3))


def _ocr_title(lines: list[str]) -> str | None:
    """The title of a document that starts with a scan: its first heading-like OCR line."""
    from . import ocr as ocr_engine

    return clean_title(ocr_engine.title_of(lines))


def _ocr_pages(pdf, scanned: list[int], ocr: str, warnings: list[dict]) -> tuple[dict | None, dict[int, list[str]]]:
    """OCR of the image-only pages ``scanned`` (0-based) as ``ocr`` says: (provenance, lines by page)."""
    from . import ocr as ocr_engine

    if not scanned:
        return None, {}
    if ocr == "off":
        for index in scanned:
            warnings.append(
                {"page": index + 1, "kind": "ocr_off", "message": f"page {index + 1} is an image; OCR is off"}
            )
        return {"status": "off", "pending_pages": []}, {}
    try:
        name = ocr_engine.engine()
    except ocr_engine.OcrUnavailable as exc:
        for index in scanned:
            warnings.append(
                {
                    "page": index + 1,
                    "kind": "ocr_unavailable",
                    "message": f"page {index + 1} is an image; OCR is not available: {exc}",
                }
            )
        return {"status": "unavailable", "unavailable": str(exc), "pending_pages": []}, {}
    limit = LIMITS["ocr_max_pages"]
    allowed, beyond = scanned[:limit], scanned[limit:]
    for index in beyond:
        warnings.append(
            {
                "page": index + 1,
                "kind": "ocr_limit",
                "message": limit_message(f"page {index + 1} is an image not read by OCR", "ocr_max_pages"),
            }
        )
    if ocr == "defer":
        for index in allowed:
            warnings.append(
                {
                    "page": index + 1,
                    "kind": "ocr_pending",
                    "message": f"page {index + 1} is an image: OCR pending (pgkb worker)",
                }
            )
        return {"status": "pending", "engine": name, "pending_pages": [i + 1 for i in allowed]}, {}
    read, pages = _ocr_read(pdf, allowed, warnings, ocr_engine)
    return {"status": "done", "engine": name, "pages": pages, "pending_pages": []}, _ocr_text(read, ocr_engine)


def _ocr_read(pdf, allowed: list[int], warnings: list[dict], ocr_engine) -> tuple[dict[int, list], list[dict]]:
    """The OCR lines of the pages ``allowed`` (0-based), and each page's record; a page OCR fails on
    (tesseract's error) is warned about (``ocr_failed``) and the others are read."""
    read: dict[int, list] = {}
    pages = []
    languages = ocr_engine.LANGUAGES
    for index in allowed:
        page = pdf[index]
        try:
            lines, confidence, languages = ocr_engine.read_page(page, languages)
        except Exception as exc:  # noqa: BLE001 - tesseract's errors (TesseractError, OSError) fail one page
            warnings.append(_warning(index + 1, "ocr_failed", f"page {index + 1}: OCR failed: {exc}"[:500]))
            continue
        finally:
            page.close()
        chars = sum(len(line.text) for line in lines)
        pages.append({"page": index + 1, "confidence": round(confidence, 1), "chars": chars, "languages": languages})
        if not any(ch.isalnum() for line in lines for ch in line.text) or confidence < ocr_engine.MIN_CONFIDENCE:
            warnings.append(
                _warning(
                    index + 1,
                    "ocr_unreadable",
                    f"page {index + 1}: OCR could not read it (confidence {confidence:.0f}, {chars} characters)",
                )
            )
        read[index] = lines
    return read, pages


def _ocr_text(read: dict[int, list], ocr_engine) -> dict[int, list[str]]:
    """Each OCR'd page's paragraphs: the document's chapter and article markers repaired along their
    sequence (across pages), then each page's lines joined into paragraphs."""
    order = sorted(read)
    flat = [line for index in order for line in read[index]]
    repaired = iter(ocr_engine.repair_divisions([line.text for line in flat]))
    return {index: ocr_engine.rejoin([line._replace(text=next(repaired)) for line in read[index]]) for index in order}


def _text_by_size(page_lines: list[list[tuple[str, float, list[Segment]]]]) -> Counter[float]:
    """Characters of text at each font size (rounded to 0.1 pt) over all pages."""
    sizes: Counter[float] = Counter()
    for lines in page_lines:
        for text, size, _ in lines:
            sizes[round(size, 1)] += len(text)
    return sizes


_CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")
_DELIMITER_RE = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")


def _table_rows(block: str) -> list[str] | None:
    """The lines of a Markdown table (header, delimiter, rows), or None when ``block`` is not one."""
    lines = block.split("\n")
    if len(lines) < 2 or not _DELIMITER_RE.match(lines[1]):
        return None
    return lines if all(line.startswith("|") and line.endswith("|") for line in lines) else None


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SPLIT_RE.split(row)[1:-1]]


def _continuation(text: str, piece: str) -> tuple[str, str] | None:
    """When ``text`` ends with a table and the page ``piece`` starts with one of as many columns,
    the page's table continues it: (its rows, the rest of the page). The continued table's first
    row is dropped when it repeats the header (a header printed on every page) and kept as a row
    when it does not (a table broken by the page without a repeated header). A caption printed
    again over the continued table (the line before the table, "(continued)" or not) is dropped."""
    blocks = text.rsplit("\n\n", 2)
    before = _table_rows(blocks[-1])
    first, _, rest = piece.partition("\n\n")
    caption = _key(blocks[-2].rsplit("\n", 1)[-1]) if len(blocks) > 1 else ""
    if caption and "\n" not in first and _key(first).startswith(caption):
        first, _, rest = rest.partition("\n\n")
    after = _table_rows(first)
    if before is None or after is None or len(_cells(after[0])) != len(_cells(before[0])):
        return None
    rows = after[2:] if _cells(after[0]) == _cells(before[0]) else [after[0], *after[2:]]
    return "\n".join(rows), rest


def _join_pages(pieces: list[str]) -> tuple[str, list[int]]:
    """The pages' texts joined by a blank line, and where each page starts in it (page_starts[n]:
    page n + 1). A table broken by a page break is one table (:func:`_continuation`): the page
    starts at its first continued row."""
    text, page_starts = "", []
    for piece in pieces:
        joined = _continuation(text, piece) if text else None
        if joined is not None and joined[0]:
            rows, rest = joined
            page_starts.append(len(text) + 1)
            text += "\n" + rows + ("\n\n" + rest if rest else "")
            continue
        if page_starts:
            text += "\n\n"
        page_starts.append(len(text))
        text += piece
    return text, page_starts


def _runs_on(previous: str, text: str, widest: int) -> bool:
    """Whether Chinese line ``text`` goes on the paragraph whose last line is ``previous`` (PDF breaks
    lines where the page ends, not where the sentence does): ``previous`` fills the page (at least
    80 % of the characters of its widest line) and ends where a sentence cannot, and ``text`` starts
    with a Han character or Chinese punctuation (:data:`_CJK_END_RE`, :data:`_CJK_START_RE`) but not
    with numbering -- 第X条, 一、, （一）, （1） start an article or an item of their own."""
    from ..chunker import _marker

    return (
        "\t" not in previous + text
        and bool(_CJK_END_RE.search(previous))
        and bool(_CJK_START_RE.match(text))
        and len(previous) >= 0.8 * widest
        and _marker(text) is None
    )


def _page_blocks(
    lines: list[tuple[str, float, list[Segment]]],
    levels: dict[int, int],
    level_of_size: dict[float, int],
    header: set[int],
    title: range | None,
) -> list[str]:
    """A page's lines as blocks: headings (the outline's ``levels`` of its lines, else
    ``level_of_size``; a number's depth wins), paragraphs with their Chinese lines joined
    (:func:`_runs_on`) and tables. The lines of a red header (``header``) stay text; the lines of the
    title under it (``title``) are one level-1 heading."""
    widest = max((len(t) for t, _, _ in lines), default=0)
    blocks: list[str] = []
    paragraph: list[tuple[str, float, list[Segment]]] = []
    for i, (text, size, segs) in enumerate(lines):
        level = None if i in header else levels.get(i)
        if level is None and i not in header and len(text) <= HEADING_MAX_CHARS and not text.endswith(_PUNCT_END):
            level = level_of_size.get(round(size, 1))
        if title is not None and i in title:
            if i != title.start:
                continue
            level, text = 1, join_title_lines([lines[k][0] for k in title])
        if level is not None:
            depth = _number_depth(text)
            if depth is not None:
                level = depth  # 3 > 3.1 > 3.1.2 as printed, whatever the sizes or the outline say
            blocks += _paragraph_blocks(paragraph)
            paragraph = []
            blocks.append("#" * min(level, 6) + " " + " ".join(text.split()))
        elif paragraph and _runs_on(paragraph[-1][0], text, widest):
            paragraph[-1] = (paragraph[-1][0] + text, paragraph[-1][1], paragraph[-1][2])
        else:
            paragraph.append((text, size, segs))
    return blocks + _paragraph_blocks(paragraph)


def parse_pdf(data: bytes, ocr: str = "defer") -> ParsedFile:
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw
    from pypdfium2.version import PDFIUM_INFO, PYPDFIUM_INFO

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise ParseError("encrypted", "the PDF is encrypted (password-protected); remove the password") from None
        raise ParseError("corrupt", f"not a readable PDF (damaged or truncated?): {message}") from None
    try:
        pages = len(pdf)
        if pages > LIMITS["file_max_pages"]:
            raise ParseError("too_many_pages", limit_message(f"the PDF has {pages} pages", "file_max_pages"))
        outline: dict[int, dict[str, int]] = {}
        for bookmark in pdf.get_toc(max_depth=6):
            title = " ".join((bookmark.get_title() or "").split())
            dest = bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            if title and index is not None and 0 <= index < pages:
                outline.setdefault(index, {}).setdefault(_key(title), bookmark.level + 1)
        page_lines: list[list[tuple[str, float, list[Segment]]]] = []
        warnings: list[dict] = []
        scanned: list[int] = []
        for index in range(pages):
            page = pdf[index]
            textpage = page.get_textpage()
            try:
                page_lines.append(_page_lines(textpage, raw))
                if not page_lines[-1]:
                    if _has_image(page, raw):
                        scanned.append(index)
                    else:
                        warnings.append(
                            {"page": index + 1, "kind": "no_text", "message": f"page {index + 1} has no text"}
                        )
            finally:
                textpage.close()
                page.close()
        title = clean_title(pdf.get_metadata_value("Title"))
        if title is not None and official_header(title):
            title = None  # a red header's line (issuer, document number) names no document
        ocr_record, ocr_lines = _ocr_pages(pdf, scanned, ocr, warnings)
        if title is None and ocr_lines and not any(page_lines[: min(ocr_lines) + 1]):
            title = _ocr_title(ocr_lines[min(ocr_lines)])
    finally:
        pdf.close()

    if not any(page_lines) and not ocr_lines:
        # a scan awaiting OCR (defer), or nothing to read: parse_bytes decides which
        return ParsedFile(
            "pdf",
            "",
            title,
            CONTENT_TYPES["pdf"],
            f"pypdfium2 {PYPDFIUM_INFO} (pdfium {PDFIUM_INFO})",
            format_version("pdf"),
            None,
            warnings,
            ocr_record,
        )

    # outline headings of each page (never furniture), then the furniture itself
    levels: list[dict[int, int]] = []
    for index, lines in enumerate(page_lines):
        levels.append(_outline_lines(outline.get(index, {}), [text for text, _, _ in lines]))
    all_sizes = _text_by_size(page_lines)
    large = all_sizes.most_common(1)[0][0] * HEADING_SIZE_RATIO if all_sizes else 0.0
    keep = [
        set(found) | {i for i, (_, size, _) in enumerate(lines) if large and size >= large}
        for found, lines in zip(levels, page_lines, strict=True)
    ]
    drop = furniture([[t for t, _, _ in lines] for lines in page_lines], keep)
    page_lines = [[ln for i, ln in enumerate(lines) if i not in drop[p]] for p, lines in enumerate(page_lines)]
    levels = [
        {i - sum(1 for d in drop[p] if d < i): lv for i, lv in found.items() if i not in drop[p]}
        for p, found in enumerate(levels)
    ]

    # a Chinese official document's red header (issuer, document number, date) is text, never a
    # heading, and its size sets no heading level; the title under it is the level-1 heading
    opening = next((p for p, lines in enumerate(page_lines) if lines), 0)
    first_texts = [text for text, _, _ in page_lines[opening]] if page_lines else []
    header = set(range(official_header_lines(first_texts)))
    title_lines = official_title_lines(first_texts)
    if title is None and title_lines is not None:
        title = official_title(first_texts)
    sizes = _text_by_size(
        [[ln for i, ln in enumerate(page_lines[opening]) if i not in header], *page_lines[opening + 1 :]]
    )
    body_size = sizes.most_common(1)[0][0] if sizes else 0.0
    heading_sizes = sorted({s for s in sizes if body_size and s >= body_size * HEADING_SIZE_RATIO}, reverse=True)[
        :HEADING_LEVELS
    ]
    level_of_size = {} if outline else {s: i + 1 for i, s in enumerate(heading_sizes)}

    pieces: list[str] = []
    for index, lines in enumerate(page_lines):
        first = index == opening
        blocks = _page_blocks(
            lines, levels[index], level_of_size, header if first else set(), title_lines if first else None
        )
        if index in ocr_lines:
            blocks.append("\n".join(escape_line(line) for line in ocr_lines[index]))
        pieces.append(sanitize_text("\n\n".join(blocks)))
    if numbered_lines_divide("\n".join(pieces)):
        pieces = [nest_by_numbers(piece) for piece in pieces]
    text, page_starts = _join_pages(pieces)
    parser = f"pypdfium2 {PYPDFIUM_INFO} (pdfium {PDFIUM_INFO})"
    if ocr_record and ocr_record.get("pages"):
        # every passage's provenance names its parser: text read by OCR says so, with its confidence
        read = ", ".join(f"p. {p['page']} confidence {p['confidence']:.0f}" for p in ocr_record["pages"][:20])
        more = f" and {len(ocr_record['pages']) - 20} more" if len(ocr_record["pages"]) > 20 else ""
        parser += f"; OCR {ocr_record['engine']}: {read}{more}"
    return ParsedFile(
        "pdf",
        text,
        title,
        CONTENT_TYPES["pdf"],
        parser,
        format_version("pdf"),
        page_starts,
        warnings,
        ocr_record,
    )
