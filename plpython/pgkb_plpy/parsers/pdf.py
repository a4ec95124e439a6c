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
* No text on any page: ``no_text_layer`` (a scan; OCR is not supported). Encrypted: ``encrypted``.
"""

from __future__ import annotations

import re
from collections import Counter

from . import CONTENT_TYPES, MAX_PAGES, ParsedFile, ParseError, format_version, sanitize_text

#: A line set at least this many times the body size is a heading (without an outline).
HEADING_SIZE_RATIO = 1.2
#: Longest line (characters) that can be a heading.
HEADING_MAX_CHARS = 80
#: Heading levels taken from font sizes (the largest sizes).
HEADING_LEVELS = 3

_CJK_END_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]$")
_CJK_START_RE = re.compile(r"^[\u3400-\u9fff\uf900-\ufaff\uff08\u201c]")
_PUNCT_END = tuple("。！？；：.!?;:")


def _key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _page_lines(textpage, raw) -> list[tuple[str, float]]:
    """(line text, largest font size in it) of one page, in reading order."""
    lines: list[tuple[str, float]] = []
    chars: list[str] = []
    size = 0.0
    for i in range(textpage.count_chars()):
        code = raw.FPDFText_GetUnicode(textpage, i)
        ch = chr(code) if 0 < code < 0x110000 else ""
        if ch in ("\r", "\n"):
            if ch == "\n":
                lines.append(("".join(chars).strip(), size))
                chars, size = [], 0.0
            continue
        if not raw.FPDFText_IsGenerated(textpage, i) or ch == " ":
            chars.append(ch)
        if ch.strip():
            size = max(size, raw.FPDFText_GetFontSize(textpage, i))
    if chars:
        lines.append(("".join(chars).strip(), size))
    return [(t, s) for t, s in lines if t]


def parse_pdf(data: bytes) -> ParsedFile:
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
        if pages > MAX_PAGES:
            raise ParseError("too_many_pages", f"the PDF has {pages} pages; the limit is {MAX_PAGES}")
        outline: dict[int, list[tuple[str, int]]] = {}
        for bookmark in pdf.get_toc(max_depth=6):
            title = " ".join((bookmark.get_title() or "").split())
            dest = bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            if title and index is not None and 0 <= index < pages:
                outline.setdefault(index, []).append((title, bookmark.level + 1))
        page_lines: list[list[tuple[str, float]]] = []
        for index in range(pages):
            page = pdf[index]
            textpage = page.get_textpage()
            try:
                page_lines.append(_page_lines(textpage, raw))
            finally:
                textpage.close()
                page.close()
        title = (pdf.get_metadata_value("Title") or "").strip() or None
    finally:
        pdf.close()

    if not any(page_lines):
        raise ParseError("no_text_layer", "PDF has no text layer (scanned?): OCR is not supported")

    sizes: Counter[float] = Counter()
    for lines in page_lines:
        for text, size in lines:
            sizes[round(size, 1)] += len(text)
    body_size = sizes.most_common(1)[0][0] if sizes else 0.0
    heading_sizes = sorted({s for s in sizes if body_size and s >= body_size * HEADING_SIZE_RATIO}, reverse=True)[
        :HEADING_LEVELS
    ]
    level_of_size = {s: i + 1 for i, s in enumerate(heading_sizes)}

    pieces: list[str] = []
    for index, lines in enumerate(page_lines):
        marks = {_key(t): lv for t, lv in outline.get(index, [])}
        widest = max((len(t) for t, _ in lines), default=0)
        blocks: list[str] = []
        paragraph: list[str] = []
        for text, size in lines:
            level = marks.get(_key(text)) if marks else None
            if level is None and not outline and len(text) <= HEADING_MAX_CHARS and not text.endswith(_PUNCT_END):
                level = level_of_size.get(round(size, 1))
            if level is not None:
                if paragraph:
                    blocks.append("\n".join(paragraph))
                    paragraph = []
                blocks.append("#" * min(level, 6) + " " + text)
                continue
            if (
                paragraph
                and _CJK_END_RE.search(paragraph[-1])
                and _CJK_START_RE.match(text)
                and len(paragraph[-1]) >= 0.8 * widest
            ):
                paragraph[-1] += text  # a Chinese line broken at the page's edge
            else:
                paragraph.append(text)
        if paragraph:
            blocks.append("\n".join(paragraph))
        pieces.append(sanitize_text("\n\n".join(blocks)))
    # pages joined by a blank line; page_starts[n] is where page n + 1 starts
    page_starts, pos = [], 0
    for piece in pieces:
        page_starts.append(pos)
        pos += len(piece) + 2
    text = "\n\n".join(pieces)
    return ParsedFile(
        "pdf",
        text,
        title,
        CONTENT_TYPES["pdf"],
        f"pypdfium2 {PYPDFIUM_INFO} (pdfium {PDFIUM_INFO})",
        format_version("pdf"),
        page_starts,
    )
