"""DOCX to text with python-docx (chosen over mammoth by the measurement in docs/INGEST.md),
after a zip-bomb check of the archive.

* Paragraphs in document order, tables where they stand (rows ``| a | b |``, header rule after the
  first row, merged cells once), kept whole as table blocks.
* Headings: a paragraph whose style (or a style it is based on) is ``Heading N`` / ``标题 N``, or
  that has an outline level, becomes a ``#`` heading of that level; ``Title`` gives the title
  when the core properties have none.
* Word's automatic numbering is written out (``第一章``, ``1.1``, ``（一）``, ``a)``...) from
  numbering.xml, so numbered headings and paragraphs read as they print; the chunker then takes
  numbered lines as headings as in every other format. Bullets become ``-`` list items.
"""

from __future__ import annotations

import io
import re
import zipfile

from . import (
    CONTENT_TYPES,
    MAX_COMPRESSION_RATIO,
    MAX_UNCOMPRESSED_BYTES,
    MAX_ZIP_MEMBERS,
    ParsedFile,
    ParseError,
    format_version,
    sanitize_text,
)

_HEADING_STYLE_RE = re.compile(r"^(?:heading|标题)\s*([1-9])$", re.IGNORECASE)
_ZH_DIGITS = "零一二三四五六七八九"


def check_zip(data: bytes) -> None:
    """Refuse a zip that is not a readable DOCX or that would expand beyond the limits."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseError("corrupt", f"not a readable DOCX (damaged or truncated zip?): {exc}") from None
    if len(members) > MAX_ZIP_MEMBERS:
        raise ParseError("zip_bomb", f"the DOCX holds {len(members)} files; the limit is {MAX_ZIP_MEMBERS}")
    total = 0
    for info in members:
        if info.flag_bits & 0x1:
            raise ParseError("encrypted", f"the DOCX member {info.filename} is encrypted")
        total += info.file_size
        if info.file_size > 1024 * 1024 and info.file_size > MAX_COMPRESSION_RATIO * max(1, info.compress_size):
            raise ParseError(
                "zip_bomb",
                f"{info.filename} would expand {info.file_size // max(1, info.compress_size)}-fold to "
                f"{info.file_size} bytes (zip bomb?); the limit is {MAX_COMPRESSION_RATIO}-fold",
            )
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ParseError(
            "zip_bomb", f"the DOCX would expand to {total} bytes (zip bomb?); the limit is {MAX_UNCOMPRESSED_BYTES}"
        )
    if "word/document.xml" not in {m.filename for m in members}:
        raise ParseError("corrupt", "the zip has no word/document.xml: not a Word document")


def zh_numeral(n: int) -> str:
    """1 一, 10 十, 12 十二, 20 二十, 105 一百零五 (Word's chineseCounting)."""
    if n <= 0:
        return str(n)
    if n < 10:
        return _ZH_DIGITS[n]
    if n < 20:
        return "十" + (_ZH_DIGITS[n % 10] if n % 10 else "")
    if n < 100:
        return _ZH_DIGITS[n // 10] + "十" + (_ZH_DIGITS[n % 10] if n % 10 else "")
    if n < 1000:
        rest = n % 100
        tail = (
            ""
            if rest == 0
            else ("零" + zh_numeral(rest) if rest < 10 else ("一" if rest < 20 else "") + zh_numeral(rest))
        )
        return _ZH_DIGITS[n // 100] + "百" + tail
    return str(n)


def _roman(n: int) -> str:
    out = []
    for value, letters in (
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ):
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def _format_number(n: int, fmt: str) -> str:
    if fmt in (
        "chineseCounting",
        "chineseCountingThousand",
        "ideographTraditional",
        "taiwaneseCounting",
        "japaneseCounting",
        "chineseLegalSimplified",
    ):
        return zh_numeral(n)
    if fmt == "upperRoman":
        return _roman(n)
    if fmt == "lowerRoman":
        return _roman(n).lower()
    if fmt == "upperLetter":
        return chr(ord("A") + (n - 1) % 26)
    if fmt == "lowerLetter":
        return chr(ord("a") + (n - 1) % 26)
    if fmt == "decimalEnclosedCircle" and 1 <= n <= 20:
        return chr(0x2460 + n - 1)
    if fmt == "none":
        return ""
    return str(n)


class _Numbering:
    """Word's list counters, from numbering.xml: the label of each numbered paragraph."""

    def __init__(self, document, qn) -> None:
        self.qn = qn
        self.levels: dict[str, dict[int, tuple[str, str, int]]] = {}  # numId -> ilvl -> (fmt, text, start)
        self.counters: dict[str, dict[int, int]] = {}
        try:
            root = document.part.numbering_part.element
        except (KeyError, NotImplementedError, AttributeError):
            return
        abstract: dict[str, dict[int, tuple[str, str, int]]] = {}
        for a in root.findall(qn("w:abstractNum")):
            levels = {}
            for lvl in a.findall(qn("w:lvl")):
                levels[int(lvl.get(qn("w:ilvl"), "0"))] = self._level(lvl)
            abstract[a.get(qn("w:abstractNumId"))] = levels
        for num in root.findall(qn("w:num")):
            ref = num.find(qn("w:abstractNumId"))
            levels = dict(abstract.get(ref.get(qn("w:val")) if ref is not None else "", {}))
            for override in num.findall(qn("w:lvlOverride")):
                ilvl = int(override.get(qn("w:ilvl"), "0"))
                lvl = override.find(qn("w:lvl"))
                start = override.find(qn("w:startOverride"))
                if lvl is not None:
                    levels[ilvl] = self._level(lvl)
                elif start is not None and ilvl in levels:
                    fmt, text, _ = levels[ilvl]
                    levels[ilvl] = (fmt, text, int(start.get(qn("w:val"), "1")))
            self.levels[num.get(qn("w:numId"))] = levels

    def _level(self, lvl) -> tuple[str, str, int]:
        qn = self.qn
        fmt = lvl.find(qn("w:numFmt"))
        text = lvl.find(qn("w:lvlText"))
        start = lvl.find(qn("w:start"))
        return (
            fmt.get(qn("w:val"), "decimal") if fmt is not None else "decimal",
            text.get(qn("w:val"), "") if text is not None else "",
            int(start.get(qn("w:val"), "1")) if start is not None else 1,
        )

    def label(self, num_id: str, ilvl: int) -> tuple[str, bool]:
        """(label, is a bullet) of the next paragraph numbered ``num_id`` at level ``ilvl``."""
        levels = self.levels.get(num_id)
        if not levels or ilvl not in levels:
            return "", False
        fmt, text, _ = levels[ilvl]
        if fmt == "bullet":
            return "-", True
        counters = self.counters.setdefault(num_id, {})
        counters[ilvl] = counters.get(ilvl, levels[ilvl][2] - 1) + 1
        for deeper in [k for k in counters if k > ilvl]:
            del counters[deeper]

        def value(match: re.Match) -> str:
            k = int(match.group(1)) - 1
            if k not in levels:
                return ""
            n = counters.get(k, levels[k][2])
            return _format_number(n, levels[k][0])

        return re.sub(r"%([1-9])", value, text).strip(), False


def _style_chain(style):
    seen = 0
    while style is not None and seen < 20:
        yield style
        style = style.base_style
        seen += 1


def parse_docx(data: bytes) -> ParsedFile:
    check_zip(data)
    import docx
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - python-docx raises many kinds for a broken package
        raise ParseError("corrupt", f"not a readable DOCX: {type(exc).__name__}: {exc}") from None
    numbering = _Numbering(document, qn)
    title = (document.core_properties.title or "").strip() or None
    blocks: list[tuple[str, str]] = []  # (kind, text): kind "item" joins the previous item line by line

    def paragraph_block(p: Paragraph) -> None:
        nonlocal title
        text = " ".join(p.text.split())
        if not text:
            return
        level = None
        num_pr = None
        p_pr = p._p.pPr
        outline = p_pr.find(qn("w:outlineLvl")) if p_pr is not None else None
        if p_pr is not None:
            num_pr = p_pr.find(qn("w:numPr"))
        for style in _style_chain(p.style):
            name = style.name or ""
            match = _HEADING_STYLE_RE.match(name)
            if level is None and match:
                level = int(match.group(1))
            if name.lower() == "title" and level is None:
                if title is None:
                    title = text
                level = 1
            s_pr = style.element.pPr
            if s_pr is not None:
                if outline is None:
                    outline = s_pr.find(qn("w:outlineLvl"))
                if num_pr is None:
                    num_pr = s_pr.find(qn("w:numPr"))
        if level is None and outline is not None:
            value = int(outline.get(qn("w:val"), "9"))
            level = value + 1 if value < 9 else None
        label, bullet = "", False
        if num_pr is not None:
            num_id = num_pr.find(qn("w:numId"))
            ilvl = num_pr.find(qn("w:ilvl"))
            if num_id is not None:
                label, bullet = numbering.label(
                    num_id.get(qn("w:val")), int(ilvl.get(qn("w:val"), "0")) if ilvl is not None else 0
                )
        if level is not None:
            blocks.append(
                ("heading", "#" * min(level, 6) + " " + (f"{label} {text}" if label and not bullet else text))
            )
        elif bullet:
            indent = "  " * (
                int(num_pr.find(qn("w:ilvl")).get(qn("w:val"), "0")) if num_pr.find(qn("w:ilvl")) is not None else 0
            )
            blocks.append(("item", f"{indent}- {text}"))
        else:
            blocks.append(("para", f"{label} {text}" if label else text))

    def table_block(table: Table) -> None:
        rows = []
        for row in table.rows:
            cells, seen = [], set()
            for cell in row.cells:
                if id(cell._tc) in seen:
                    continue  # a merged cell repeats
                seen.add(id(cell._tc))
                cells.append(" ".join(cell.text.split()).replace("|", "\\|"))
            if any(cells):
                rows.append(cells)
        if not rows:
            return
        width = max(len(r) for r in rows)
        lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
        lines.insert(1, "|" + "---|" * width)
        blocks.append(("table", "\n".join(lines)))

    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            paragraph_block(item)
        else:
            table_block(item)
    parts: list[str] = []
    previous = ""
    for kind, text in blocks:
        parts.append(("\n" if kind == previous == "item" else "\n\n") + text)
        previous = kind
    import importlib.metadata

    version = importlib.metadata.version("python-docx")
    return ParsedFile(
        "docx",
        sanitize_text("".join(parts)),
        title,
        CONTENT_TYPES["docx"],
        f"python-docx {version}",
        format_version("docx"),
    )
