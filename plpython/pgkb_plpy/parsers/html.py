"""HTML to the chunker's Markdown-like text, with the standard library's ``html.parser``
(measured against lxml and BeautifulSoup in docs/INGEST.md: as good on these pages, no
dependency, and it never builds a tree, so memory stays proportional to the text).

Headings ``h1``-``h6`` become ``#`` lines; ``p``, ``div``, ``section``... paragraphs; ``ul``/``ol``
items ``-``/``1.`` lines (nested by indentation); ``table`` rows ``| a | b |`` with a header rule,
kept whole; ``pre`` a fenced block (its language from a ``language-x`` class); ``br`` a line
break. Dropped with everything inside: ``script``, ``style``, ``noscript``, ``template``,
``svg``, ``nav``, ``header``/``footer`` outside ``article``/``main``, ``aside``, ``form``,
``iframe``, and any element with ``role="navigation"``, ``aria-hidden="true"`` or ``hidden``.
The title is ``<title>`` (else the first ``h1``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from . import CONTENT_TYPES, ParsedFile, format_version, sanitize_text

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
_VOID = {"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "embed", "param", "source", "track", "wbr"}
_WS_RE = re.compile(r"[ \t\r\n\f\u00a0]+")


class _Converter(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
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
        if self.heading:
            text = " ".join(text.split("\n"))
            self.out.append("#" * self.heading + " " + text)
            if self.heading == 1 and self.first_h1 is None:
                self.first_h1 = text
        elif self.lists:
            kind, _ = self.lists[-1]
            indent = "  " * (len(self.lists) - 1)
            text = " ".join(text.split("\n"))
            if kind == "ol":
                self.lists[-1][1] += 1
                self.out.append(f"\x1e{indent}{self.lists[-1][1]}. {text}")
            else:
                self.out.append(f"\x1e{indent}- {text}")
        else:
            self.out.append(text)

    def _dropped(self, tag: str, attrs: dict) -> bool:
        if tag in _DROP or (tag in _DROP_OUTSIDE_MAIN and not self.main_depth):
            return True
        if attrs.get("role") == "navigation" or attrs.get("aria-hidden") == "true" or "hidden" in attrs:
            return True
        return False

    # -- parser callbacks
    def handle_starttag(self, tag: str, attrs_list) -> None:
        attrs = {k: (v or "") for k, v in attrs_list}
        if self.drop_depth:
            if tag not in _VOID:
                self.drop_depth += 1
            return
        if tag not in _VOID and self._dropped(tag, attrs):
            self.drop_depth = 1
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
        elif tag == "br":
            if self.cell is not None:
                self.cell.append(" ")
            else:
                self.line.append("\n")
        elif tag in _BLOCK:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if self.drop_depth:
            self.drop_depth -= 1
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
                self.table[-1].append(_WS_RE.sub(" ", "".join(self.cell)).strip().replace("|", "\\|"))
            self.cell = None
        elif tag == "table" and self.table is not None:
            rows = [r for r in self.table if any(c for c in r)]
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


def _decode(data: bytes) -> str:
    head = data[:4096].decode("ascii", "ignore").lower()
    match = re.search(r"""<meta[^>]+charset\s*=\s*["']?([\w-]+)""", head)
    for encoding in ([match.group(1)] if match else []) + ["utf-8"]:
        try:
            return data.decode("utf-8-sig" if encoding in ("utf-8", "utf8") else encoding)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("utf-8", "replace")


def html_to_text(html: str) -> tuple[str, str | None]:
    """``(text, title)`` of an HTML document (see the module docstring)."""
    conv = _Converter()
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
    return sanitize_text(text), conv.title or conv.first_h1


def parse_html(data: bytes) -> ParsedFile:
    text, title = html_to_text(_decode(data))
    return ParsedFile("html", text, title, CONTENT_TYPES["html"], "python html.parser", format_version("html"))
