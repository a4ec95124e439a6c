"""PPTX (PowerPoint) presentations to the chunker's Markdown: each slide a ``#`` heading (its
title placeholder's text, else ``Slide N``) over its text in reading order, then its speaker notes.

* Text: every shape's paragraphs in the slide's shape order (groups included); the subtitle and
  body placeholders, text boxes and table cells; a paragraph indented (``lvl`` > 0) or bulleted in
  a body placeholder becomes a ``-`` list item, nested by its level.
* Tables (``a:tbl``): Markdown tables, the first row the header.
* Speaker notes: the notes slide's body, after the slide's text as ``Notes: ...``.
* Left out: slide numbers, dates and footers (placeholders ``sldNum``, ``dt``, ``ftr``), pictures,
  charts (a ``table_not_parsed`` warning names the slide of a chart, whose data is not read).
* Pages: ``page_starts`` has one entry per slide, so chunks carry the slides they come from as
  ``page_start``/``page_end``.

Read with lxml from the package's XML (:mod:`.ooxml`: zip-bomb checks, no entities, no network);
each slide's text counted against :class:`~pgkb_plpy.parsers.TextBudget` as it is read.
"""

from __future__ import annotations

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

P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_CHART_URI = "http://schemas.openxmlformats.org/drawingml/2006/chart"
_WHAT = "PPTX"
_MAIN_PART = FORMAT_BY_NAME["pptx"].main_part
_TITLE_TYPES = ("title", "ctrTitle")
_FURNITURE_TYPES = ("sldNum", "dt", "ftr", "hdr", "sldImg")


def _paragraphs(tx_body) -> list[tuple[str, int]]:
    """(text, level) of each non-empty paragraph of a text body."""
    out = []
    for p in tx_body.iter(A + "p"):
        parts = []
        for el in p.iter(A + "t", A + "br"):
            parts.append(" " if el.tag == A + "br" else el.text or "")
        text = " ".join("".join(parts).split())
        if text:
            ppr = p.find(A + "pPr")
            level = int(ppr.get("lvl") or 0) if ppr is not None else 0
            out.append((text, level))
    return out


def _placeholder(sp) -> str | None:
    ph = sp.find(f"{P}nvSpPr/{P}nvPr/{P}ph")
    if ph is None:
        return None
    return ph.get("type", "body")


def _shapes(tree):
    """The shapes of a shape tree in order, groups opened."""
    for child in tree:
        if child.tag == P + "grpSp":
            yield from _shapes(child)
        elif child.tag in (P + "sp", P + "graphicFrame"):
            yield child


def _table(frame) -> str | None:
    tbl = frame.find(f".//{A}tbl")
    if tbl is None:
        return None
    rows = []
    for tr in tbl.iter(A + "tr"):
        cells = []
        for tc in tr.iter(A + "tc"):
            body = tc.find(A + "txBody")
            cells.append(ooxml.cell_text(" ".join(t for t, _ in _paragraphs(body)) if body is not None else ""))
        if any(cells):
            rows.append(cells)
    return ooxml.markdown_table(rows) if rows else None


def _slide(archive, part: str, number: int, warnings: list[dict]) -> str:
    root = ooxml.read_xml(archive, part, _WHAT)
    tree = root.find(f"{P}cSld/{P}spTree") if root is not None else None
    title = None
    blocks: list[str] = []
    for shape in _shapes(tree if tree is not None else []):
        if shape.tag == P + "graphicFrame":
            table = _table(shape)
            if table:
                blocks.append(table)
            elif shape.find(f".//{A}graphicData[@uri='{_CHART_URI}']") is not None:
                warnings.append(
                    {
                        "page": number,
                        "kind": "table_not_parsed",
                        "message": f"slide {number}: a chart's data is not read",
                    }
                )
            continue
        kind = _placeholder(shape)
        body = shape.find(P + "txBody")
        if body is None or kind in _FURNITURE_TYPES:
            continue
        paragraphs = _paragraphs(body)
        if kind in _TITLE_TYPES and title is None:
            title = " ".join(t for t, _ in paragraphs) or None
            continue
        lines = []
        for text, level in paragraphs:
            if kind == "body" or level > 0:
                lines.append("  " * level + "- " + text)
            else:
                lines.append(escape_line(text))
        if lines:
            blocks.append("\n".join(lines))
    for target, rel_type in ooxml.relationships(archive, part, _WHAT).values():
        if rel_type != "notesSlide":
            continue
        notes = ooxml.read_xml(archive, target, _WHAT)
        ntree = notes.find(f"{P}cSld/{P}spTree") if notes is not None else None
        texts = []
        for shape in _shapes(ntree if ntree is not None else []):
            body = shape.find(P + "txBody")
            if body is not None and _placeholder(shape) == "body":
                texts += [t for t, _ in _paragraphs(body)]
        if texts:
            blocks.append("Notes: " + " ".join(texts))
    heading = f"# {escape_line(title) if title else f'Slide {number}'}"
    return sanitize_text("\n\n".join([heading, *blocks]))


def parse_pptx(data: bytes) -> ParsedFile:
    archive = ooxml.check_zip(data, _WHAT, _MAIN_PART, "a PowerPoint presentation")
    presentation = ooxml.read_xml(archive, _MAIN_PART, _WHAT)
    rels = ooxml.relationships(archive, _MAIN_PART, _WHAT)
    warnings: list[dict] = []
    pieces: list[str] = []
    budget = TextBudget(len(data), _WHAT)
    ids = presentation.find(P + "sldIdLst")
    for number, sld in enumerate(ids if ids is not None else [], start=1):
        target, rel_type = rels.get(sld.get(ooxml.R + "id") or "", ("", ""))
        if rel_type != "slide":
            continue
        pieces.append(_slide(archive, target, number, warnings))
        budget.take(len(pieces[-1]), f"slide {number}")
    page_starts, pos = [], 0
    for piece in pieces:
        page_starts.append(pos)
        pos += len(piece) + 2
    return ParsedFile(
        "pptx",
        "\n\n".join(pieces),
        clean_title(ooxml.core_title(archive, _WHAT)),
        CONTENT_TYPES["pptx"],
        "pgkb ooxml (lxml)",
        format_version("pptx"),
        page_starts or None,
        warnings=warnings,
    )
