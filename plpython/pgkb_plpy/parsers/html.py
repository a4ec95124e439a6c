"""HTML to the chunker's Markdown-like text, with the standard library's ``html.parser``
(measured against lxml and BeautifulSoup in docs/INGEST.md: as good on these pages, no
dependency, and it never builds a tree, so memory stays proportional to the text).

Headings ``h1``-``h6`` become ``#`` lines; ``p``, ``div``, ``section``... paragraphs; ``ul``/``ol``
items ``-``/``1.`` lines (nested by indentation); ``table`` rows ``| a | b |`` with a header rule,
kept whole; ``pre`` a fenced block (its language from a ``language-x`` class); ``br`` a line
break. Dropped with everything inside: ``script``, ``style``, ``noscript``, ``template``,
``svg``, ``nav``, ``header``/``footer`` outside ``article``/``main``, ``aside``, ``form``,
``iframe``, and any element with ``role="navigation"``, ``aria-hidden="true"`` or ``hidden``.
The title is ``<title>`` (else the first ``h1``), unless it is junk (:func:`clean_title`).

Chrome built of ``div``s is found by scoring, in a first pass over the same tags (:class:`_Scorer`):
every element gets its text length and the length of the text inside its links. An element is
dropped when it is mostly links (link text at least ``LINK_DENSITY`` of its text, with at least
``MIN_LINKS`` links: a navbar, a menu, a list of related pages), or when its ``class``/``id`` names
chrome (cookie or consent banner, navbar, menu, sidebar, breadcrumb, comments, share buttons,
footer, advert, newsletter...) and it holds less than ``CHROME_MAX_SHARE`` of the page's text.
When the page marks its main content (``main``, ``article``, ``role="main"``) and that holds most
of the text, what lies outside it is dropped too.

Table cells are placed on a grid: a ``colspan`` cell keeps its text in its first column and
leaves the others empty; a ``rowspan`` cell repeats its text in each row it spans. Paragraph and
list text is escaped (:func:`pgkb_plpy.parsers.escape_line`): ``<p># Set the pool size</p>`` is
text, not a heading.

The text is counted block by block, and a table row by row, against
:class:`~pgkb_plpy.parsers.TextBudget` (a cell spanning rows counts in each row it fills): a short
page whose long cell spans a thousand rows is refused at the first row past
``file_max_expansion_ratio`` characters per byte of the page.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from . import (
    CONTENT_TYPES,
    ParsedFile,
    TextBudget,
    clean_title,
    escape_line,
    format_version,
    nest_by_numbers,
    numbered_lines_divide,
    sanitize_text,
)

_DROP = {
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "nav",
    "aside",
    "form",
    "iframe",
    "object",
    "canvas",
    "select",
    "button",
}
_DROP_OUTSIDE_MAIN = {"header", "footer"}
_BLOCK = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "body",
    "blockquote",
    "figure",
    "figcaption",
    "dl",
    "dt",
    "dd",
    "address",
    "details",
    "summary",
    "center",
    "header",
    "footer",
    "hr",
}
#: An element whose link text is at least this share of its text (and has MIN_LINKS links) is chrome.
LINK_DENSITY = 0.6
MIN_LINKS = 3
#: An element whose class or id names chrome is dropped when it holds less than this share of the text.
CHROME_MAX_SHARE = 0.5
#: Words of a class or id that name chrome (the class split at spaces, "-" and "_"), and parts of
#: camelCase names that do.
_CHROME_WORDS = frozenset(
    "cookie cookies consent gdpr banner navbar nav navigation menu menubar breadcrumb breadcrumbs sidebar widget "
    "footer masthead comment comments disqus share sharing social related promo advert advertisement ad ads "
    "sponsor sponsored popup modal newsletter subscribe signup toolbar pagination pager skip jump toc navbox "
    "editsection catlinks printfooter noprint sitesub".split()
)
_CHROME_PARTS = ("cookie", "consent", "navbar", "sidebar", "breadcrumb", "comment", "newsletter", "advert")
_MAIN_NAMES = frozenset("mw-content-text mw-parser-output main-content article-body post-content entry-content".split())
_SPLIT_RE = re.compile(r"[\s_-]+")
_TREE_DROP = {"script", "style", "noscript", "template", "svg"}


def _chrome_name(names: str) -> bool:
    lowered = names.lower()
    if set(lowered.split()) & _MAIN_NAMES:
        return False
    return bool(set(_SPLIT_RE.split(lowered)) & _CHROME_WORDS) or any(part in lowered for part in _CHROME_PARTS)


class _Scorer(HTMLParser):
    """First pass: text and link text of every element, by start-tag order (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.count = 0
        self.tags: list[str] = []
        self.names: list[str] = []  # class and id
        self.main: list[bool] = []
        self.parent: list[int] = []
        self.text: list[int] = []
        self.links: list[int] = []
        self.nlinks: list[int] = []
        self.stack: list[int] = []
        self.quiet = 0  # inside script/style: no text
        self.in_link = 0

    def handle_starttag(self, tag: str, attrs_list) -> None:
        attrs = {k: (v or "") for k, v in attrs_list}
        index = self.count
        self.count += 1
        self.tags.append(tag)
        self.names.append(f"{attrs.get('class', '')} {attrs.get('id', '')}")
        self.main.append(
            tag in ("main", "article") or attrs.get("role") == "main" or bool(set(self.names[-1].split()) & _MAIN_NAMES)
        )
        self.parent.append(self.stack[-1] if self.stack else -1)
        self.text.append(0)
        self.links.append(0)
        self.nlinks.append(0)
        if tag in _VOID:
            return
        self.stack.append(index)
        if tag in _TREE_DROP:
            self.quiet += 1
        if tag == "a":
            self.in_link += 1
            self.nlinks[index] += 1

    def handle_endtag(self, tag: str) -> None:
        if not any(self.tags[i] == tag for i in self.stack):
            return
        while self.stack:
            index = self.stack.pop()
            parent = self.parent[index]
            if parent >= 0:
                self.text[parent] += self.text[index]
                self.links[parent] += self.links[index]
                self.nlinks[parent] += self.nlinks[index]
            if self.tags[index] in _TREE_DROP:
                self.quiet -= 1
            if self.tags[index] == "a":
                self.in_link -= 1
            if self.tags[index] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.quiet or not self.stack:
            return
        n = len(data.strip())
        self.text[self.stack[-1]] += n
        if self.in_link:
            self.links[self.stack[-1]] += n

    def dropped(self) -> set[int]:
        """Start-tag indexes of the elements that are chrome."""
        while self.stack:
            self.handle_endtag(self.tags[self.stack[0]])
        total = sum(self.text[i] for i in range(self.count) if self.parent[i] == -1) or 1
        drop: set[int] = set()
        keep_tags = {"html", "body", "head", "title", "main", "article", "h1", "h2", "h3", "h4", "h5", "h6"}
        for i in range(self.count):
            if self.tags[i] in keep_tags or self.main[i]:
                continue
            if self.nlinks[i] >= MIN_LINKS and self.links[i] >= LINK_DENSITY * max(1, self.text[i]):
                drop.add(i)
            elif _chrome_name(self.names[i]) and self.text[i] < CHROME_MAX_SHARE * total:
                drop.add(i)
        mains = [i for i in range(self.count) if self.main[i]]
        if mains:
            best = max(mains, key=lambda i: self.text[i])
            if self.text[best] >= 0.5 * total:
                chain = set()
                j = best
                while j >= 0:
                    chain.add(j)
                    j = self.parent[j]
                chain.discard(best)  # its own children are the content
                for i in range(self.count):
                    if i != best and i not in chain and self.parent[i] in chain and self.tags[i] not in keep_tags:
                        drop.add(i)
        return drop


_VOID = {"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "embed", "param", "source", "track", "wbr"}
_WS_RE = re.compile(r"[ \t\r\n\f\u00a0]+")


class _Converter(HTMLParser):
    def __init__(self, chrome: set[int] | None = None, budget: TextBudget | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.chrome = chrome or set()
        self.budget = budget
        self.count = 0  # start tags seen (the scorer's indexes)
        self.out: list[str] = []  # finished blocks
        self.line: list[str] = []  # inline text of the current block
        self.drop_depth = 0
        self.drop_stack: list[str] = []
        self.main_depth = 0
        self.heading: int = 0
        self.lists: list[list] = []  # [kind, counter]
        self.pre = 0
        self.pre_lang = ""
        self.pre_text: list[str] = []
        self.table: list[list[str]] | None = None
        self.tables: list[list[list[str]] | None] = []
        self.cell: list[str] | None = None
        self.span = (1, 1)
        self.title: str | None = None
        self.in_title = False
        self.title_text: list[str] = []
        self.first_h1: str | None = None

    # -- helpers
    def flush(self) -> None:
        lines = [_WS_RE.sub(" ", part).strip() for part in "".join(self.line).split("\n")]
        text = "\n".join(line for line in lines if line)
        self.line = []
        if not text:
            return
        self.take(len(text))
        if self.heading:
            text = " ".join(text.split("\n"))
            self.out.append("#" * self.heading + " " + text)
            if self.heading == 1 and self.first_h1 is None:
                self.first_h1 = text
        elif self.lists:
            kind, _ = self.lists[-1]
            indent = "  " * (len(self.lists) - 1)
            text = escape_line(" ".join(text.split("\n")))
            if kind == "ol":
                self.lists[-1][1] += 1
                self.out.append(f"\x1e{indent}{self.lists[-1][1]}. {text}")
            else:
                self.out.append(f"\x1e{indent}- {text}")
        else:
            self.out.append("\n".join(escape_line(line) for line in text.split("\n")))

    def take(self, chars: int, where: str = "") -> None:
        """Count ``chars`` characters of the page's next block (``where`` in it) against the budget."""
        if self.budget is not None:
            self.budget.take(chars, lambda: f"the page's block {len(self.out) + 1}{where}")

    def _dropped(self, tag: str, attrs: dict) -> bool:
        if tag in _DROP or (tag in _DROP_OUTSIDE_MAIN and not self.main_depth):
            return True
        if attrs.get("role") == "navigation" or attrs.get("aria-hidden") == "true" or "hidden" in attrs:
            return True
        return False

    # -- parser callbacks
    def handle_starttag(self, tag: str, attrs_list) -> None:
        attrs = {k: (v or "") for k, v in attrs_list}
        index = self.count
        self.count += 1
        if self.drop_depth:
            if tag not in _VOID:
                self.drop_stack.append(tag)
            return
        if tag not in _VOID and (index in self.chrome or self._dropped(tag, attrs)):
            self.drop_depth = 1
            self.drop_stack = [tag]
            return
        if tag == "title":
            self.in_title = True
        elif tag in ("article", "main"):
            self.main_depth += 1
        if self.pre:
            if tag == "code" and not self.pre_lang:
                match = re.search(r"(?:language|lang)-([\w+-]+)", attrs.get("class", ""))
                self.pre_lang = match.group(1) if match else ""
            return
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.flush()
            self.heading = int(tag[1])
        elif tag in ("ul", "ol", "menu"):
            self.flush()
            self.lists.append(
                ["ol" if tag == "ol" else "ul", int(attrs.get("start", "1") or 1) - 1 if tag == "ol" else 0]
            )
        elif tag == "li":
            self.flush()
        elif tag == "pre":
            self.flush()
            self.pre = 1
            self.pre_text = []
            match = re.search(r"(?:language|lang)-([\w+-]+)", attrs.get("class", ""))
            self.pre_lang = match.group(1) if match else ""
        elif tag == "table":
            self.flush()
            self.tables.append(self.table)
            self.table = []
        elif tag == "tr" and self.table is not None:
            self.table.append([])
        elif tag in ("td", "th") and self.table is not None:
            self.cell = []
            self.span = (_span(attrs.get("rowspan")), _span(attrs.get("colspan")))
        elif tag == "br":
            if self.cell is not None:
                self.cell.append(" ")
            else:
                self.line.append("\n")
        elif tag in _BLOCK:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if self.drop_depth:
            if tag in self.drop_stack:  # close up to the matching tag (unclosed <li>, <p> inside)
                while self.drop_stack and self.drop_stack.pop() != tag:
                    pass
                if not self.drop_stack:
                    self.drop_depth = 0
            return
        if tag == "title":
            self.in_title = False
            self.title = _WS_RE.sub(" ", "".join(self.title_text)).strip() or None
        elif tag in ("article", "main"):
            self.main_depth = max(0, self.main_depth - 1)
        if tag == "pre" and self.pre:
            code = "".join(self.pre_text).strip("\n")
            self.pre = 0
            if code.strip():
                self.take(len(code))
                fence = "~~~" if "```" in code else "```"
                self.out.append(f"{fence}{self.pre_lang}\n{code}\n{fence}")
            return
        if self.pre:
            return
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.flush()
            self.heading = 0
        elif tag in ("ul", "ol", "menu"):
            self.flush()
            if self.lists:
                self.lists.pop()
        elif tag == "li":
            self.flush()
        elif tag in ("td", "th") and self.table is not None and self.cell is not None:
            if self.table:
                text = _WS_RE.sub(" ", "".join(self.cell)).strip().replace("|", "\\|")
                self.table[-1].append((text, *self.span))
            self.cell = None
        elif tag == "table" and self.table is not None:
            rows = [r for r in _grid(self.table, self.take) if any(c for c in r)]
            self.table = self.tables.pop() if self.tables else None
            if rows:
                width = max(len(r) for r in rows)
                lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
                lines.insert(1, "|" + "---|" * width)
                self.out.append("\n".join(lines))
        elif tag in _BLOCK:
            self.flush()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_text.append(data)
            return
        if self.drop_depth:
            return
        if self.pre:
            self.pre_text.append(data)
        elif self.cell is not None:
            self.cell.append(data)
        else:
            self.line.append(data)

    def close(self) -> None:
        super().close()
        self.flush()


def _span(value: str | None) -> int:
    try:
        return min(max(int(value or 1), 1), 1000)
    except ValueError:
        return 1


def _fill_pending(line: list[str], pending: dict[int, tuple[str, int]]) -> None:
    """Place in ``line`` the cells of rows above that span down to it, while they come next."""
    while len(line) in pending:
        text, left = pending[len(line)]
        if left > 1:
            pending[len(line)] = (text, left - 1)
        else:
            del pending[len(line)]
        line.append(text)


def _grid(rows: list[list[tuple[str, int, int]]], take=None) -> list[list[str]]:
    """Cells ``(text, rowspan, colspan)`` placed on a grid: a cell spanning columns keeps its text in
    the first and leaves the others empty; a cell spanning rows repeats its text below. ``take``
    counts each row's characters as it is placed (:meth:`_Converter.take`)."""
    out: list[list[str]] = []
    pending: dict[int, tuple[str, int]] = {}  # column -> (text, rows still to fill)
    for row in rows:
        line: list[str] = []
        for text, rowspan, colspan in row:
            _fill_pending(line, pending)
            for k in range(colspan):
                if rowspan > 1:
                    pending[len(line)] = (text if k == 0 else "", rowspan - 1)
                line.append(text if k == 0 else "")
        _fill_pending(line, pending)
        while pending and max(pending) >= len(line):  # spans past the row's last cell
            if len(line) in pending:
                _fill_pending(line, pending)
            else:
                line.append("")
        if take is not None:
            take(sum(len(cell) + 3 for cell in line), f" (a table), row {len(out) + 1}")
        out.append(line)
    return out


def _decode(data: bytes) -> str:
    head = data[:4096].decode("ascii", "ignore").lower()
    match = re.search(r"""<meta[^>]+charset\s*=\s*["']?([\w-]+)""", head)
    for encoding in ([match.group(1)] if match else []) + ["utf-8"]:
        try:
            return data.decode("utf-8-sig" if encoding in ("utf-8", "utf8") else encoding)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("utf-8", "replace")


def html_to_text(html: str, budget: TextBudget | None = None) -> tuple[str, str | None]:
    """``(text, title)`` of an HTML document (see the module docstring); its text counted against
    ``budget`` when given."""
    scorer = _Scorer()
    scorer.feed(html)
    scorer.close()
    conv = _Converter(scorer.dropped(), budget)
    conv.feed(html)
    conv.close()
    # list items (marked \x1e) follow each other line by line; other blocks are paragraphs
    parts: list[str] = []
    previous_item = False
    for block in conv.out:
        item = block.startswith("\x1e")
        parts.append(("\n" if item and previous_item else "\n\n") + (block[1:] if item else block))
        previous_item = item
    text = "".join(parts)
    if numbered_lines_divide(text):
        text = nest_by_numbers(text)
    return sanitize_text(text), clean_title(conv.title) or clean_title(conv.first_h1)


def parse_html(data: bytes) -> ParsedFile:
    text, title = html_to_text(_decode(data), TextBudget(len(data), "HTML"))
    return ParsedFile("html", text, title, CONTENT_TYPES["html"], "python html.parser", format_version("html"))
