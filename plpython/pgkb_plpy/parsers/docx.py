"""DOCX to text: the package's XML read with lxml (python-docx's dependency; entities never
resolved, no network), after a zip-bomb check of the archive. Styles are resolved once per style
(a dictionary), not once per paragraph, which is what made python-docx's ``paragraph.style`` the
cost of a large file.

* Every word of the body, in document order: paragraphs, tables, content controls (``w:sdt``,
  unless they show only their placeholder), custom XML, text boxes (``w:txbxContent``, after the
  paragraph that anchors them; the VML fallback copy of a text box is skipped), hyperlinks, field
  results (not field codes), tracked insertions (``w:ins``, ``w:moveTo``) -- tracked deletions
  (``w:del``, ``w:moveFrom``) are dropped.
* A table of contents is not read (it repeats the headings with page numbers): the result of a
  ``TOC`` field, over every paragraph it spans (:func:`_toc_fields`), a content control of the
  "Table of Contents" gallery and paragraphs styled "toc 1" ... "toc 9" / "TOC Heading" -- except
  what follows the end of the TOC field in its paragraph (often the first heading).
* Footnotes and endnotes are attached where they are referenced: ``[footnote 1: text]`` right
  after the word that carries the mark. Page headers and footers are not read (page furniture);
  comments are not read.
* Tables where they stand (rows ``| a | b |``, header rule after the first row): a cell merged
  across columns (``gridSpan``) keeps its text in its first column and leaves the others empty;
  a cell merged down rows (``vMerge``) repeats its text in every row it spans, so each row reads
  whole.
* Literal text stays text: a paragraph is escaped (:func:`pgkb_plpy.parsers.escape_line`) so a
  "# comment" or "| x" written in Word is no structure.
* Headings: a paragraph whose style (or a style it is based on) is ``Heading N`` / ``标题 N``, or
  that has an outline level, becomes a ``#`` heading of that level; ``Title`` gives the title
  when the core properties have none (a junk title is dropped, :func:`clean_title`). A first
  line typed without such a style is the title too (a level-1 heading, and the document's title
  when the core properties have none) when it is set apart -- centred, or all bold, or all larger
  than the body text -- and reads like a title: at most ``TITLE_MAX_CHARS`` characters, no
  sentence end inside nor clause end at its end, no numbering (``第一章`` heads its own chapter),
  not a list item. A Chinese official document's header (版头: the issuer's red line ending in 文件,
  the document number, signer, date; :func:`pgkb_plpy.parsers.official_header_lines`) stays text but
  is neither the title nor a heading, and that first-line rule looks past it to the title under it;
  a core-properties title that is such a header line is dropped.
* Word's automatic numbering is written out (``第一章``, ``1.1``, ``（一）``, ``a)``...) from
  numbering.xml, so numbered headings and paragraphs read as they print; the chunker then takes
  numbered lines as headings as in every other format -- except list items: a paragraph numbered
  or bulleted by Word (``w:numPr``, its own or its style's) or set in a list style ("List
  Paragraph", "List Number" ...) that has no heading style or outline level is written as a ``-``
  list item (``- 1. Install the agent``), so it never heads a section. Numbering that divides a
  Chinese regulation (``第一章``, ``第三条``) is structure, not a list, and stays a numbered line.
"""

from __future__ import annotations

import re
from functools import partial

from . import (
    CONTENT_TYPES,
    FORMAT_BY_NAME,
    OPENING_LINES,
    ParsedFile,
    ParseError,
    TextBudget,
    clean_title,
    escape_line,
    format_version,
    nest_by_numbers,
    numbered_lines_divide,
    official_header,
    official_header_lines,
    ooxml,
    sanitize_text,
)

_HEADING_STYLE_RE = re.compile(r"^(?:heading|标题)\s*([1-9])$", re.IGNORECASE)
#: Word's styles of a table of contents: its entries ("toc 1" ... "toc 9") and its own heading.
_TOC_STYLE_RE = re.compile(r"^toc(?: [1-9]| heading)$", re.IGNORECASE)
#: The instruction of a table-of-contents field (`` TOC \o "1-3" \h \z \u ``).
_TOC_FIELD_RE = re.compile(r"^\s*TOC\b", re.IGNORECASE)
#: Word's list styles ("List Paragraph", "List Number 2", "List Bullet", "列表段落", "列出段落").
_LIST_STYLE_RE = re.compile(r"^(?:list(?: paragraph| number| bullet| continue)?(?: [1-9])?|列表段落|列出段落)$", re.I)
#: A numbering label that divides a Chinese regulation (第一章, 第三条): structure, not a list.
_DIVISION_LABEL_RE = re.compile(r"^第.{1,6}[编章节条款]$")
#: Longest first line (characters) taken for the document's title when no style says so.
TITLE_MAX_CHARS = 60
#: Text that makes a line a sentence or a numbered line, not a title: a sentence end inside or a
#: clause end at the end, or a numbering marker at the start (第一章, 一、, （一）, 1., 1.1, (1)).
_NOT_TITLE_RE = re.compile(
    r"[。！？；]|[.!?;](?:\s|$)|[，、：,:]$"
    r"|^(?:第[零〇一二两三四五六七八九十百千\d]{1,6}[编章节条款]|[零〇一二三四五六七八九十]{1,4}[、．]"
    r"|[（(][零〇一二三四五六七八九十\d]{1,4}[)）]|\d{1,2}(?:[.．]\d{1,2})*(?:[.．、)）]|\s))"
)
_OFF = ("0", "false", "off", "none")
_ZH_DIGITS = "零一二三四五六七八九"


_WHAT = "DOCX"
_MAIN_PART = FORMAT_BY_NAME["docx"].main_part


def check_zip(data: bytes):
    """The package of ``data``; refused when it is not a readable DOCX or would expand beyond the
    limits."""
    return ooxml.check_zip(data, _WHAT, _MAIN_PART, "a Word document")


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


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_P, _TBL, _TR, _TC, _SDT, _SDT_CONTENT = W + "p", W + "tbl", W + "tr", W + "tc", W + "sdt", W + "sdtContent"
_T, _TAB, _BR, _CR = W + "t", W + "tab", W + "br", W + "cr"
_FOOTNOTE_REF, _ENDNOTE_REF = W + "footnoteReference", W + "endnoteReference"
_FLD_CHAR, _INSTR, _FLD_SIMPLE, _R = W + "fldChar", W + "instrText", W + "fldSimple", W + "r"
_TXBX = W + "txbxContent"
#: What a run shows: hidden where a table of contents is.
_SHOWN = frozenset({_T, _TAB, _BR, _CR, W + "noBreakHyphen", _FOOTNOTE_REF, _ENDNOTE_REF, _TXBX})
#: Elements whose text is never the document's: deletions, properties, field codes, the VML copy.
_SKIP = frozenset(
    {
        W + "del",
        W + "moveFrom",
        W + "delText",
        W + "instrText",
        W + "delInstrText",
        W + "pPr",
        W + "rPr",
        W + "tblPr",
        W + "tblGrid",
        W + "trPr",
        W + "tcPr",
        W + "sdtPr",
        W + "sdtEndPr",
        W + "sectPr",
        W + "commentReference",
        W + "rt",  # a ruby's phonetic guide (the base text is read)
        W + "softHyphen",
        _MC + "Fallback",
    }
)


def _val(el, name: str, default: str | None = None) -> str | None:
    child = el.find(W + name) if el is not None else None
    return child.get(W + "val", default) if child is not None else default


class _Numbering:
    """Word's list counters, from numbering.xml: the label of each numbered paragraph."""

    def __init__(self, root) -> None:
        self.levels: dict[str, dict[int, tuple[str, str, int]]] = {}  # numId -> ilvl -> (fmt, text, start)
        self.counters: dict[str, dict[int, int]] = {}
        if root is None:
            return
        abstract: dict[str, dict[int, tuple[str, str, int]]] = {}
        for a in root.iter(W + "abstractNum"):
            abstract[a.get(W + "abstractNumId")] = {
                int(lvl.get(W + "ilvl", "0")): self._level(lvl) for lvl in a.iter(W + "lvl")
            }
        for num in root.iter(W + "num"):
            levels = dict(abstract.get(_val(num, "abstractNumId", ""), {}))
            for override in num.findall(W + "lvlOverride"):
                ilvl = int(override.get(W + "ilvl", "0"))
                lvl = override.find(W + "lvl")
                start = _val(override, "startOverride")
                if lvl is not None:
                    levels[ilvl] = self._level(lvl)
                elif start is not None and ilvl in levels:
                    fmt, text, _ = levels[ilvl]
                    levels[ilvl] = (fmt, text, int(start))
            self.levels[num.get(W + "numId")] = levels

    @staticmethod
    def _level(lvl) -> tuple[str, str, int]:
        return (
            _val(lvl, "numFmt", "decimal") or "decimal",
            _val(lvl, "lvlText", "") or "",
            int(_val(lvl, "start", "1")),
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


class _Styles:
    """Paragraph styles resolved once each (the chain of ``basedOn``): heading level, title, outline
    level and numbering of a style id."""

    def __init__(self, root) -> None:
        self.raw: dict[str, tuple[str, str | None, object]] = {}  # id -> (name, basedOn, pPr)
        self.run_pr: dict[str, object] = {}  # id -> rPr of the style
        self.default: str | None = None
        self.default_size = 20  # half-points: Word's 10 pt when nothing says otherwise
        self.looks: dict[str | None, tuple[int, bool, bool]] = {}
        self.cache: dict[str | None, tuple[int | None, bool, int | None, tuple[str, int] | None, bool]] = {}
        if root is None:
            return
        defaults = root.find(f"{W}docDefaults/{W}rPrDefault/{W}rPr")
        size = _val(defaults, "sz")
        if size and size.isdigit():
            self.default_size = int(size)
        for style in root.iter(W + "style"):
            if style.get(W + "type") != "paragraph":
                continue
            sid = style.get(W + "styleId")
            self.raw[sid] = (_val(style, "name", "") or "", _val(style, "basedOn"), style.find(W + "pPr"))
            self.run_pr[sid] = style.find(W + "rPr")
            if style.get(W + "default") in ("1", "true", "on"):
                self.default = sid

    def resolve(self, sid: str | None) -> tuple[int | None, bool, int | None, tuple[str, int] | None, bool]:
        """(heading level, is Title, outline level, (numId, ilvl), is a list style) of style ``sid``."""
        if sid in self.cache:
            return self.cache[sid]
        level, title, outline, numbering, listed = None, False, None, None, False
        seen = set()
        current = sid if sid is not None else self.default
        while current in self.raw and current not in seen and len(seen) < 20:
            seen.add(current)
            name, based_on, p_pr = self.raw[current]
            match = _HEADING_STYLE_RE.match(name)
            if level is None and match:
                level = int(match.group(1))
            if name.lower() == "title" and level is None:
                title, level = True, 1
            listed = listed or bool(_LIST_STYLE_RE.match(name))
            if p_pr is not None:
                if outline is None and _val(p_pr, "outlineLvl") is not None:
                    outline = int(_val(p_pr, "outlineLvl", "9"))
                num_pr = p_pr.find(W + "numPr")
                if numbering is None and num_pr is not None and _val(num_pr, "numId") is not None:
                    numbering = (_val(num_pr, "numId"), int(_val(num_pr, "ilvl", "0")))
            current = based_on
        self.cache[sid] = (level, title, outline, numbering, listed)
        return self.cache[sid]

    def is_toc(self, sid: str | None) -> bool:
        """Whether style ``sid`` (or a style it is based on) sets a table of contents: an entry
        ("toc 1" ... "toc 9") or the contents' own heading ("TOC Heading")."""
        seen = set()
        current = sid
        while current in self.raw and current not in seen and len(seen) < 20:
            seen.add(current)
            name, based_on, _ = self.raw[current]
            if _TOC_STYLE_RE.match(name):
                return True
            current = based_on
        return False

    def look(self, sid: str | None) -> tuple[int, bool, bool]:
        """(font size in half-points, bold, centred) that style ``sid`` gives its text."""
        if sid in self.looks:
            return self.looks[sid]
        size, bold, centred = None, None, None
        seen = set()
        current = sid if sid is not None else self.default
        while current in self.raw and current not in seen and len(seen) < 20:
            seen.add(current)
            _, based_on, p_pr = self.raw[current]
            r_pr = self.run_pr.get(current)
            if size is None and (_val(r_pr, "sz") or "").isdigit():
                size = int(_val(r_pr, "sz"))
            if bold is None and r_pr is not None and r_pr.find(W + "b") is not None:
                bold = _val(r_pr, "b", "1") not in _OFF
            if centred is None and _val(p_pr, "jc") is not None:
                centred = _val(p_pr, "jc") in ("center", "centre")
            current = based_on
        self.looks[sid] = (size or self.default_size, bool(bold), bool(centred))
        return self.looks[sid]


def _set_apart(p, style: str | None, styles: _Styles) -> bool:
    """Whether paragraph ``p`` is set apart from the body text: centred, or all its text bold, or
    all its text larger than the body's (direct formatting over its style's)."""
    size, bold, centred = styles.look(style)
    body_size = styles.look(None)[0]
    p_pr = p.find(W + "pPr")
    if _val(p_pr, "jc") is not None:
        centred = _val(p_pr, "jc") in ("center", "centre")
    if centred:
        return True
    runs = [r for r in p.iter(W + "r") if any((t.text or "").strip() for t in r.iter(_T))]
    if not runs:
        return False
    all_bold = all_larger = True
    for run in runs:
        r_pr = run.find(W + "rPr")
        run_bold = bold if r_pr is None or r_pr.find(W + "b") is None else _val(r_pr, "b", "1") not in _OFF
        run_size = int(_val(r_pr, "sz")) if (_val(r_pr, "sz") or "").isdigit() else size
        all_bold = all_bold and run_bold
        all_larger = all_larger and run_size > body_size
    return all_bold or all_larger


class _Notes:
    """Footnotes or endnotes by id; numbered in the order they are first referenced."""

    def __init__(self, root, kind: str) -> None:
        self.kind = kind
        self.text: dict[str, object] = {}
        self.numbers: dict[str, int] = {}
        self.refs: dict[str, int] = {}  # id -> times referenced (each reference repeats the note)
        if root is None:
            return
        for note in root.iter(W + kind):
            if note.get(W + "type") in ("separator", "continuationSeparator", "continuationNotice"):
                continue
            self.text[note.get(W + "id")] = note

    def reference(self, note_id: str | None, read) -> str:
        note = self.text.get(note_id or "")
        if note is None:
            return ""
        number = self.numbers.setdefault(note_id, len(self.numbers) + 1)
        self.refs[note_id] = self.refs.get(note_id, 0) + 1
        words = " ".join(" ".join(read(p)[0].split()) for p in note.iter(_P)).strip()
        return f" [{self.kind} {number}: {words}]" if words else ""


def _showing_placeholder(sdt) -> bool:
    pr = sdt.find(W + "sdtPr")
    return pr is not None and pr.find(W + "showingPlcHdr") is not None


def _rows_of(el):
    """The table rows of ``el``, inside content controls and custom XML too."""
    for child in el:
        if child.tag == _TR:
            yield child
        elif child.tag in (_SDT, W + "customXml", _SDT_CONTENT):
            yield from _rows_of(child)


def _cells_of(el):
    """The cells of row ``el``, inside content controls and custom XML too."""
    for child in el:
        if child.tag == _TC:
            yield child
        elif child.tag in (_SDT, W + "customXml", _SDT_CONTENT):
            yield from _cells_of(child)


def _table_rows(tbl, cell_text, budget: TextBudget, place: str) -> list[list[str]]:
    """The non-empty rows of table ``tbl`` as cells of text (``cell_text`` of a ``w:tc``): a cell
    merged across columns keeps its text in its first column, a cell merged down rows repeats it
    in every row it spans, so that each row reads whole; each repetition counts against
    ``budget`` (the table is ``place`` in errors)."""
    rows: list[list[str]] = []
    above: dict[int, str] = {}  # grid column -> text of the cell a vertical merge continues
    for tr in _rows_of(tbl):
        cells: list[str] = []
        for tc in _cells_of(tr):
            pr = tc.find(W + "tcPr")
            span = int(_val(pr, "gridSpan", "1") or 1) if pr is not None else 1
            merge = pr.find(W + "vMerge") if pr is not None else None
            column = len(cells)
            if merge is not None and merge.get(W + "val", "continue") == "continue":
                text = above.get(column, "")
                budget.take(len(text), f"{place}, row {len(rows) + 1}: a cell merged down rows repeats its text")
            else:
                text = cell_text(tc)
                above[column] = text
            cells.append(text)
            cells.extend([""] * (max(1, span) - 1))
        if any(cells):
            rows.append(cells)
    return rows


def _toc_fields(body) -> tuple[set, set]:
    """What the table-of-contents fields of ``body`` hide: the content of the runs of a TOC field's
    result (its entries and page numbers, nested PAGEREF fields included, over as many paragraphs
    as it spans; a ``w:fldSimple`` TOC whole), and the ``fldChar`` elements that end a TOC field
    (what follows one in its paragraph is the document's text again). The TOC repeats the headings
    with page numbers: indexed, it would be a chunk of every heading. A TOC field whose end is
    missing (a damaged file) hides nothing, so no text after it is lost."""
    hidden: set = set()
    ends: set = set()
    fields: list[list] = []  # the open fields, outermost first: [instruction, is a TOC]
    pending: list = []  # content inside the open TOC field, hidden when it ends

    def in_toc() -> bool:
        return any(toc for _, toc in fields)

    def scan(el, in_run: bool) -> None:
        for child in el:
            tag = child.tag
            if tag in (W + "del", W + "moveFrom", _MC + "Fallback"):
                continue  # deleted text and the VML copy hold no live field
            if tag == _FLD_CHAR:
                kind = child.get(W + "fldCharType")
                if kind == "begin":
                    fields.append(["", False])
                elif kind == "separate" and fields:
                    fields[-1][1] = bool(_TOC_FIELD_RE.match(fields[-1][0]))
                elif kind == "end" and fields:
                    instruction, toc = fields.pop()
                    if toc or _TOC_FIELD_RE.match(instruction):
                        ends.add(child)
                    if not in_toc():
                        hidden.update(pending)
                        pending.clear()
            elif tag == _INSTR:
                if fields:
                    fields[-1][0] += child.text or ""
            elif in_toc() and (in_run or tag == _FLD_SIMPLE):
                pending.append(child)
            elif tag == _FLD_SIMPLE and _TOC_FIELD_RE.match(child.get(W + "instr", "")):
                hidden.add(child)
            else:
                scan(child, tag == _R)

    scan(body, False)
    return hidden, ends


def _is_toc_control(sdt) -> bool:
    """Whether content control ``sdt`` is Word's table-of-contents block (its document part gallery
    "Table of Contents")."""
    gallery = sdt.find(f"{W}sdtPr/{W}docPartObj/{W}docPartGallery")
    return gallery is not None and (gallery.get(W + "val") or "").casefold() == "table of contents"


def _plain_text(p) -> str:
    """The characters of paragraph ``p`` as typed (no notes, fields or deletions told apart)."""
    return "".join(t.text or "" for t in p.iter(_T))


def _opening_header(body) -> set:
    """The paragraphs of the header (版头) a Chinese official document opens with -- the red line
    of its issuer (…人民政府办公厅文件), its document number, signer, date (:func:`official_header_lines`):
    they name the issuer and the filing, so they are kept as text but are neither the title nor a
    heading, and the title rule for the first line looks past them."""
    paragraphs: list = []
    texts: list[str] = []
    for p in body.iter(_P):
        text = _plain_text(p)
        if text.strip():
            paragraphs.append(p)
            texts.append(text)
            if len(texts) >= 2 * OPENING_LINES:
                break
    return set(paragraphs[: official_header_lines(texts)])


def _join_blocks(blocks: list[tuple[str, str]]) -> str:
    """The blocks as text: consecutive list items line by line, everything else as paragraphs."""
    parts: list[str] = []
    previous = ""
    for kind, text in blocks:
        parts.append(("\n" if kind == previous == "item" else "\n\n") + text)
        previous = kind
    return "".join(parts)


def _place(p, blocks: list, notes: dict) -> str:
    """Where paragraph ``p`` is, for an error: a note and how often it was referenced so far, or
    the body's block it makes."""
    for note in p.iterancestors(W + "footnote", W + "endnote"):
        kind, note_id = note.tag[len(W) :], note.get(W + "id")
        refs = next((n.refs.get(note_id, 0) for n in notes.values() if n.kind == kind), 0)
        return f"{kind} {note_id} (referenced {refs} times)"
    return f"the body's block {len(blocks) + 1}"


def _typed_title(p, p_pr, text: str, styles: _Styles, resolved: tuple) -> bool:
    """Whether paragraph ``p`` (properties ``p_pr``, text ``text``, its style ``resolved`` with the
    paragraph's own outline level), typed without a heading, list or numbering, reads as a title:
    short, no sentence end, not numbered, and set apart from the body text (:func:`_set_apart`)."""
    level, _, outline, style_numbering, list_style = resolved
    return (
        level is None
        and outline is None
        and not list_style
        and (p_pr is None or p_pr.find(W + "numPr") is None)
        and style_numbering is None
        and len(text) <= TITLE_MAX_CHARS
        and not _NOT_TITLE_RE.search(text)
        and bool(clean_title(text))
        and _set_apart(p, _val(p_pr, "pStyle"), styles)
    )


def parse_docx(data: bytes) -> ParsedFile:
    archive = check_zip(data)
    from lxml import etree

    document = ooxml.read_xml(archive, _MAIN_PART, _WHAT)
    body = document.find(W + "body") if document is not None else None
    if body is None:
        raise ParseError("corrupt", f"not a readable DOCX: {_MAIN_PART} has no body")
    styles = _Styles(ooxml.read_xml(archive, "word/styles.xml", _WHAT))
    numbering = _Numbering(ooxml.read_xml(archive, "word/numbering.xml", _WHAT))
    notes = {
        _FOOTNOTE_REF: _Notes(ooxml.read_xml(archive, "word/footnotes.xml", _WHAT), "footnote"),
        _ENDNOTE_REF: _Notes(ooxml.read_xml(archive, "word/endnotes.xml", _WHAT), "endnote"),
    }
    title = clean_title(ooxml.core_title(archive, _WHAT))
    if title is not None and official_header(title):
        title = None  # a red header's line typed into the properties names the issuer, not the document
    blocks: list[tuple[str, str]] = []  # (kind, text): kind "item" joins the previous item line by line
    budget = TextBudget(len(data), _WHAT)  # every word read counts: a note at each reference
    toc_hidden, toc_ends = _toc_fields(body)
    header = _opening_header(body)
    opening = 0  # blocks of the header: the first line's title rule looks past them
    in_toc_control = 0

    def read(p, toc: bool = False) -> tuple[str, list]:
        """(text of paragraph ``p`` with its notes, the text boxes it anchors); a paragraph of a
        table of contents (``toc``) keeps only what follows the end of its TOC field."""
        out: list[str] = []
        boxes: list = []
        where = partial(_place, p, blocks, notes)
        hiding = toc

        def walk(el) -> None:
            nonlocal hiding
            for child in el:
                tag = child.tag
                if tag in _SKIP or not isinstance(tag, str) or child in toc_hidden or hiding and tag in _SHOWN:
                    continue
                if tag == _FLD_CHAR:
                    hiding = hiding and child not in toc_ends
                elif tag == _T:
                    out.append(child.text or "")
                    budget.take(len(out[-1]), where)
                elif tag in (_TAB, _BR, _CR):
                    out.append(" ")
                elif tag == W + "noBreakHyphen":
                    out.append("-")
                elif tag in notes:
                    out.append(notes[tag].reference(child.get(W + "id"), read))
                elif tag == _TXBX:
                    boxes.append(child)
                elif tag == _SDT and _showing_placeholder(child):
                    continue
                else:
                    walk(child)

        walk(p)
        return "".join(out), boxes

    def paragraph_block(p) -> None:
        nonlocal title, opening
        p_pr = p.find(W + "pPr")
        raw_text, boxes = read(p, bool(in_toc_control) or styles.is_toc(_val(p_pr, "pStyle")))
        text = " ".join(raw_text.split())
        if text and p in header:
            if len(blocks) == opening:
                opening += 1
            blocks.append(("para", escape_line(text)))
        elif text:
            level, is_title, outline, style_numbering, list_style = styles.resolve(_val(p_pr, "pStyle"))
            if _val(p_pr, "outlineLvl") is not None:
                outline = int(_val(p_pr, "outlineLvl", "9"))
            if is_title and title is None:
                title = clean_title(text)
            resolved = (level, is_title, outline, style_numbering, list_style)
            if len(blocks) == opening and _typed_title(p, p_pr, text, styles, resolved):
                # an unstyled first line set apart (centred, bold or larger): the document's title
                level = 1
                title = title or clean_title(text)
            num_pr = p_pr.find(W + "numPr") if p_pr is not None else None
            num = (_val(num_pr, "numId"), int(_val(num_pr, "ilvl", "0"))) if num_pr is not None else None
            if num is None or num[0] is None:
                num = style_numbering
            if level is None and outline is not None:
                level = outline + 1 if outline < 9 else None
            label, bullet = numbering.label(*num) if num else ("", False)
            labelled = f"{label}{'' if label.endswith(('、', '）', ')')) and not label.isascii() else ' '}{text}"
            if level is not None:
                blocks.append(("heading", "#" * min(level, 6) + " " + (labelled if label and not bullet else text)))
            elif bullet or (label and not _DIVISION_LABEL_RE.match(label)) or (list_style and not label):
                # a list item stays a list item: "- 1. text" is never a numbered heading for the chunker
                depth = "  " * (num[1] if num else 0)
                blocks.append(("item", depth + "- " + (labelled if label and not bullet else escape_line(text))))
            else:
                blocks.append(("para", labelled if label else escape_line(text)))
        for box in boxes:
            content(box)

    def table_block(tbl) -> None:
        nonlocal opening
        cell_text = lambda tc: ooxml.cell_text(" ".join(read(p)[0] for p in tc.iter(_P)))  # noqa: E731
        rows = _table_rows(tbl, cell_text, budget, f"the body's block {len(blocks) + 1} (a table)")
        if rows:
            if len(blocks) == opening and all(p in header for p in tbl.iter(_P) if _plain_text(p).strip()):
                opening += 1  # a red header set in a table (joint issuers beside 文件) is still the header
            blocks.append(("table", ooxml.markdown_table(rows)))

    def content(container) -> None:
        nonlocal in_toc_control
        for child in container:
            tag = child.tag
            if tag == _P:
                paragraph_block(child)
            elif tag == _TBL:
                table_block(child)
            elif tag == _SDT:
                if not _showing_placeholder(child):
                    inner = child.find(_SDT_CONTENT)
                    toc = _is_toc_control(child)
                    if inner is not None:
                        in_toc_control += toc
                        content(inner)
                        in_toc_control -= toc
            elif tag in (W + "customXml", W + "ins", W + "moveTo", W + "smartTag", _MC + "AlternateContent"):
                content(child)
            elif tag == _MC + "Choice":
                content(child)

    content(body)
    text = _join_blocks(blocks)
    if numbered_lines_divide(text):
        text = nest_by_numbers(text)
    return ParsedFile(
        "docx",
        sanitize_text(text),
        title,
        CONTENT_TYPES["docx"],
        f"lxml {etree.__version__} (pgkb OOXML reader)",
        format_version("docx"),
    )
