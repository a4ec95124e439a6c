"""PDF to text with pypdfium2 (PDFium's text layer; chosen over pypdf and pdfminer.six by the
measurement in docs/INGEST.md: the fastest by far, and the best Chinese text).

* Text comes page by page; ``page_starts[n]`` is where page ``n + 1`` starts in the text.
* Headings: the document outline (bookmarks) when it has one -- a line of a bookmarked page whose
  text is the bookmark's title becomes a heading of the bookmark's level; otherwise font sizes --
  a short line set clearly larger than the body text (at least ``HEADING_SIZE_RATIO`` times the
  most common size) becomes a heading, the largest size level 1. Numbered lines (第一章, 1.1 ...)
  are left to the chunker, which sees them in every format.
* A line of Chinese text that fills the width of the page and runs on into the next is joined
  to it (PDF breaks lines where the page ends, not where the sentence does).
* Page furniture is dropped before anything else (:func:`furniture`): a line at the top or bottom
  of a page (its first or last ``EDGE_LINES``) that repeats, digits ignored, at an edge of most
  pages (or of ``RUN_PAGES`` pages within a few pages: a chapter's running header; or, when it is a
  page's first or last line and starts or ends with a page number, of two pages); a number-only
  line at an edge ("12", "- 3 -", "Page 3 of 10", "iv", "第 3 页"); table-of-contents pages (lines
  ending in dot leaders and a page number, or a "Contents"/"目录" page of lines ending in numbers)
  and index pages ("Index"/"索引" and its continuation pages of lines ending in page numbers).
* Tables: two or more lines with column gaps (a gap over ``CELL_GAP`` times the font size), with
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
  or under ``MIN_CONFIDENCE``, ``ocr_limit`` past the limit). A page with neither text nor image:
  ``no_text``. No text at all and no OCR: ``no_text_layer``. Encrypted: ``encrypted``.
"""

from __future__ import annotations

import re
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
    limit_message,
    nest_by_numbers,
    numbered_lines_divide,
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

#: Chinese lines broken at the page edge (or a cell wrapped over lines) join without a space: one ends
#: in a Han character and the next starts with one, a full-width parenthesis or an opening quote.
#: The hexagram symbols sit between the Han blocks and are taken along (U+3400-U+9FFF as one run).
_HAN_RUN = HAN_UNIFIED + YIJING_HEXAGRAMS + HAN_COMPATIBILITY
_CJK_END_RE = re.compile(f"[{_HAN_RUN}]$")
_CJK_START_RE = re.compile(f"^[{_HAN_RUN}\uff08\u201c]")
_PUNCT_END = tuple("。！？；：.!?;:")


def _key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


#: A line drawn after lines below it, at the height of one of the last ``REJOIN_LINES`` lines and to
#: its right, continues that line (a table drawn cell by cell: the next cell of a row comes after
#: the wrapped lines of the cell before it).
REJOIN_LINES = 6

Segment = tuple[float, float]  # x where a cell's (or a line's) text starts and ends


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
                current[2].append(ch)
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
    out = []
    for segs, sz, _ in lines:
        text = "\t".join("".join(seg[2]).strip() for seg in segs)
        out.append((text, sz, [(seg[0], seg[1]) for seg in segs]))
    return out


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


def _paragraph_blocks(entries: list[tuple[str, float, list[Segment]]]) -> list[str]:
    """The lines of a paragraph as blocks: runs of two or more lines with column gaps (and the
    wrapped lines of their cells) as Markdown tables, the other lines escaped text."""
    out: list[str] = []
    plain: list[str] = []
    i = 0
    while i < len(entries):
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
            if i not in keep[p] and _edge_key(lines[i]) in repeated:
                drop[p].add(i)
        rest = [t for i, t in enumerate(lines) if i not in drop[p]]
        kind = _toc_or_index_page(rest, previous_index)
        previous_index = kind == "index"
        if kind:
            drop[p] = set(range(len(lines)))
    return drop


def _outline_match(title_key: str, text: str) -> int:
    """How well a printed line matches an outline title (letters and digits only): 3 the same, 2
    the same without their numbers, 1 a title of 8+ characters that starts the line (or the line
    that starts the title) when the line does not end like a sentence; 0 no match."""
    key = _key(text)
    if key == title_key:
        return 3
    bare = _key(_NUMBERED_RE.sub("", text))
    if bare and bare in (title_key, _key(_NUMBERED_RE.sub("", title_key))):
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
    m = _NUMBERED_RE.match(text)
    return m.group(1).count(".") + 1 if m else None


def _warning(page: int, kind: str, message: str) -> dict:
    return {"page": page, "kind": kind, "message": message}


def _has_image(page, raw) -> bool:
    return any(True for _ in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=3))


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
    lines_by_page: dict[int, list[str]] = {}
    pages = []
    for index in allowed:
        page = pdf[index]
        try:
            lines, confidence = ocr_engine.read_page(page)
        finally:
            page.close()
        chars = sum(len(line) for line in lines)
        pages.append({"page": index + 1, "confidence": round(confidence, 1), "chars": chars})
        if not any(ch.isalnum() for line in lines for ch in line) or confidence < ocr_engine.MIN_CONFIDENCE:
            warnings.append(
                {
                    "page": index + 1,
                    "kind": "ocr_unreadable",
                    "message": f"page {index + 1}: OCR could not read it "
                    f"(confidence {confidence:.0f}, {chars} characters)",
                }
            )
        lines_by_page[index] = lines
    return {"status": "done", "engine": name, "pages": pages, "pending_pages": []}, lines_by_page


def _text_by_size(page_lines: list[list[tuple[str, float, list[Segment]]]]) -> Counter[float]:
    """Characters of text at each font size (rounded to 0.1 pt) over all pages."""
    sizes: Counter[float] = Counter()
    for lines in page_lines:
        for text, size, _ in lines:
            sizes[round(size, 1)] += len(text)
    return sizes


def _join_pages(pieces: list[str]) -> tuple[str, list[int]]:
    """The pages' texts joined by a blank line, and where each page starts in it (page_starts[n]:
    page n + 1)."""
    page_starts, pos = [], 0
    for piece in pieces:
        page_starts.append(pos)
        pos += len(piece) + 2
    return "\n\n".join(pieces), page_starts


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
        ocr_record, ocr_lines = _ocr_pages(pdf, scanned, ocr, warnings)
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

    sizes = _text_by_size(page_lines)
    body_size = sizes.most_common(1)[0][0] if sizes else 0.0
    heading_sizes = sorted({s for s in sizes if body_size and s >= body_size * HEADING_SIZE_RATIO}, reverse=True)[
        :HEADING_LEVELS
    ]
    level_of_size = {s: i + 1 for i, s in enumerate(heading_sizes)}

    pieces: list[str] = []
    for index, lines in enumerate(page_lines):
        widest = max((len(t) for t, _, _ in lines), default=0)
        blocks: list[str] = []
        paragraph: list[tuple[str, float, list[Segment]]] = []
        for i, (text, size, segs) in enumerate(lines):
            level = levels[index].get(i)
            if level is None and not outline and len(text) <= HEADING_MAX_CHARS and not text.endswith(_PUNCT_END):
                level = level_of_size.get(round(size, 1))
            if level is not None:
                depth = _number_depth(text)
                if depth is not None:
                    level = depth  # 3 > 3.1 > 3.1.2 as printed, whatever the sizes or the outline say
                blocks += _paragraph_blocks(paragraph)
                paragraph = []
                blocks.append("#" * min(level, 6) + " " + " ".join(text.split()))
                continue
            previous = paragraph[-1][0] if paragraph else ""
            if (
                previous
                and "\t" not in previous + text
                and _CJK_END_RE.search(previous)
                and _CJK_START_RE.match(text)
                and len(previous) >= 0.8 * widest
            ):
                paragraph[-1] = (
                    previous + text,
                    paragraph[-1][1],
                    paragraph[-1][2],
                )  # a Chinese line broken at the page's edge
            else:
                paragraph.append((text, size, segs))
        blocks += _paragraph_blocks(paragraph)
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
