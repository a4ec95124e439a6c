"""HTML to the chunker's Markdown-like text, with the standard library's ``html.parser``
(measured against lxml and BeautifulSoup in docs/INGEST.md: as good on these pages, no
dependency, and it never builds a tree, so memory stays proportional to the text).

Headings ``h1``-``h6`` become ``#`` lines; ``p``, ``div``, ``section``... paragraphs; ``ul``/``ol``
items ``-``/``1.`` lines (nested by indentation); ``table`` rows ``| a | b |`` with a header rule,
kept whole; ``pre`` a fenced block (its language from a ``language-x`` class); ``br`` a line
break. Inline code (``code``, ``kbd``, ``samp``, ``tt``) in paragraphs, list items and cells becomes a
Markdown code span (```like_this```), as the Markdown path sees it, so its identifiers weigh as
key terms; in headings it stays plain text (a heading is a section path and may be the title).
Dropped with everything inside: ``script``, ``style``, ``noscript``, ``template``, ``svg``, ``nav``,
``header``/``footer`` outside ``article``/``main``, ``form``, ``iframe``, and any element with
``role="navigation"``, ``aria-hidden="true"`` or ``hidden``. The title is the ``<title>``, or the
first ``h1`` when there is none or when the ``<title>`` is that ``h1`` with the site's name before
or after it ("Refund policy | Acme Help Center"), unless it is junk (:func:`clean_title`). A
heading that repeats the heading right above it (nothing between) is written once.

Chrome built of ``div``s is found by scoring, in a first pass over the same tags (:class:`_Scorer`):
every element gets its text length and the length of the text inside its links. An element is
dropped when it is mostly links (link text at least ``LINK_DENSITY`` of its text, with at least
``MIN_LINKS`` links: a navbar, a menu, a list of related pages), or when it is page furniture and
small: an ``aside`` (or ``role="complementary"``), or an element whose ``class``/``id`` names chrome
(cookie or consent banner, navbar, menu, sidebar, breadcrumb, comments, share buttons, footer...)
or whose ``class``/``id``/``role``/``aria-label``/``data-*`` value names a box set into an article
(advertising, sponsored content, promotion, newsletter sign-up, byline, author box, related posts).
Small means under ``CHROME_MAX_SHARE`` of the page's text, and inside the main content under that
share of the main content's text, and not a phrasing element (a ``span`` or link inside a sentence
is the sentence's text). An ``aside`` whose class or role names a note or a footnote (docutils
writes admonitions and footnotes as ``aside``) is content. The main content (``main``,
``article``, ``role="main"``) and any element holding it are never dropped; when it holds most of
the text, what lies outside it is dropped too. The boxes left out of the main content are listed
in a ``box_not_indexed`` warning (with the start of their text), so a rule that misfires on a
page is seen.

Table cells are placed on a grid: a ``colspan`` cell keeps its text in its first column and
leaves the others empty; a ``rowspan`` cell repeats its text in each row it spans. Text stays
literal without showing escapes: a paragraph or list line that the chunker would read as
structure (``<p># Set the pool size</p>`` a heading, a fence, a ``|`` table row, a rule or setext
underline) starts with an invisible WORD JOINER (U+2060), which the lexical rules remove
(:func:`pgkb_plpy.lexical.normalize`) and readers do not see; any other line is left as written,
``*``, ``_`` and ``\\`` included. A ``|`` inside a table cell is written ``\\|``: the chunker splits
rows at unescaped pipes, and Markdown renders the escape as ``|``. An unknown entity
(``&foo;``, a bare ``&``) stays as written; an element left open at the end of the page (a
``pre``, a ``table``) keeps its text.

The text is counted block by block, and a table row by row, against
:class:`~pgkb_plpy.parsers.TextBudget` (a cell spanning rows counts in each row it fills): a short
page whose long cell spans a thousand rows is refused at the first row past
``file_max_expansion_ratio`` characters per byte of the page.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
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
    "aside",
}
#: Elements set inside a sentence: their text is the sentence's, so their names never drop them
#: inside the main content.
_PHRASING = frozenset(
    "a abbr b bdi bdo cite code data del dfn em i ins kbd label mark q s samp small span strong sub sup time "
    "tt u var".split()
)
#: Inline code, written as a Markdown code span.
_INLINE_CODE = frozenset(("code", "kbd", "samp", "tt"))
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
#: An element whose link text is at least this share of its text (and has MIN_LINKS links) is chrome.
LINK_DENSITY = 0.6
MIN_LINKS = 3
#: An element named page furniture is dropped when it holds less than this share of the page's text
#: (inside the main content: of the main content's text).
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
#: Words of a class, id, role, aria-label or data-* value that name a box set into an article:
#: advertising, sponsored content, a promotion, a newsletter sign-up, a byline. Words that also
#: name a topic (advertising, sponsorship, promotion) are not among them: a section about it is
#: content.
_BOX_WORDS = frozenset(
    "ad ads advert adverts advertisement advertisements advertorial sponsor sponsors sponsored promo promos "
    "promoted byline bylines newsletter signup".split()
)
#: The same inside one camelCase or run-together name (AdSlot, sponsoredContent, authorBio).
_BOX_PARTS = (
    "advertisement",
    "advertorial",
    "sponsored",
    "byline",
    "newsletter",
    "adslot",
    "adunit",
    "adsbygoogle",
    "adcontainer",
    "adwrapper",
    "promobox",
    "promobanner",
    "authorbio",
    "authorbox",
    "authorinfo",
    "authorcard",
    "authorprofile",
    "authordetails",
    "aboutauthor",
    "abouttheauthor",
    "relatedposts",
    "relatedarticles",
    "relatedstories",
    "relatedcontent",
    "relatedlinks",
)
#: An author box is "author" with one of these words (author-bio, "About the author"); related
#: content is "related" with one of the others (related-posts, "Related articles").
_AUTHOR_BOX_WORDS = frozenset("about bio biography box card details info profile".split())
_RELATED_WORDS = frozenset("articles content links posts reading stories".split())
#: Words of an aside's class or role that make it content: docutils writes admonitions and footnotes
#: as ``aside``, and ``role="note"`` / ``doc-footnote`` mark the same.
_NOTE_WORDS = frozenset(
    "admonition attention callout caution danger endnote endnotes footnote footnotes hint important note notes "
    "tip tips warning".split()
)
#: A data-* attribute that says what its element is, and a value of one that is a name.
_DATA_KIND_RE = re.compile(
    r"^data-(?:[\w-]*-)?(?:block|component|element|kind|module|name|qa|role|testid|type|widget)$"
)
_DATA_NAME_RE = re.compile(r"^[A-Za-z][\w-]{0,39}$")
_MAIN_NAMES = frozenset("mw-content-text mw-parser-output main-content article-body post-content entry-content".split())
_SPLIT_RE = re.compile(r"[\s_-]+")
_TREE_DROP = {"script", "style", "noscript", "template", "svg"}
_KEEP_TAGS = frozenset(("html", "body", "head", "title", "main", "article", *_HEADINGS))


def _chrome_name(names: str) -> bool:
    lowered = names.lower()
    return bool(set(_SPLIT_RE.split(lowered)) & _CHROME_WORDS) or any(part in lowered for part in _CHROME_PARTS)


def _box_name(value: str) -> bool:
    """Whether ``value`` (a class, id, role, aria-label or data-* value) names a box set into an
    article: advertising, sponsored content, a promotion, a newsletter sign-up, a byline, an author
    box or related posts."""
    lowered = value.lower()
    words = set(_SPLIT_RE.split(lowered))
    if words & _BOX_WORDS:
        return True
    if "author" in words and words & _AUTHOR_BOX_WORDS or "related" in words and words & _RELATED_WORDS:
        return True
    joined = [re.sub(r"[_-]", "", token) for token in lowered.split()]  # one token per class
    return any(part in token for token in joined for part in _BOX_PARTS)


def _furniture(tag: str, attrs: dict[str, str]) -> bool:
    """Whether an element names itself page furniture (see the module docstring); its size decides
    whether it is dropped (:meth:`_Scorer.chrome`)."""
    class_id = f"{attrs.get('class', '')} {attrs.get('id', '')}"
    role = attrs.get("role", "")
    if tag == "aside" or role == "complementary":
        return not set(_SPLIT_RE.split(f"{class_id} {role}".lower())) & _NOTE_WORDS
    labels = " ".join([role, attrs.get("aria-label", ""), *_data_names(attrs)])
    return _chrome_name(class_id) or _box_name(class_id) or _box_name(labels)


def _data_names(attrs: dict[str, str]) -> list[str]:
    """The names an element's data-* attributes give it: an attribute named for a box itself
    (``data-ad``, ``data-sponsored``) and the value of an attribute that says what the element is
    (``data-component="author-bio"``, ``data-testid="ad-slot"``). Other data-* attributes are left
    out: a text container often carries ad-placement hints (``data-ad-insert-after="3"``) or a
    topic (``data-section="advertising"``) and is no ad."""
    names: list[str] = []
    for name, value in attrs.items():
        if name.startswith("data-") and name[5:] in _BOX_WORDS:
            names.append(name[5:])
        elif _DATA_KIND_RE.match(name) and _DATA_NAME_RE.match(value):
            names.append(value)
    return names


class _Scorer(HTMLParser):
    """First pass: text and link text of every element, by start-tag order (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.count = 0
        self.tags: list[str] = []
        self.names: list[str] = []  # class and id
        self.main: list[bool] = []
        self.furniture: list[bool] = []  # names itself page furniture (_furniture)
        self.parent: list[int] = []
        self.main_of: list[int] = []  # the nearest enclosing main element, or -1
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
        self.furniture.append(_furniture(tag, attrs))
        parent = self.stack[-1] if self.stack else -1
        self.parent.append(parent)
        self.main_of.append(-1 if parent < 0 else parent if self.main[parent] else self.main_of[parent])
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

    def _small(self, i: int, total: int) -> bool:
        """Whether element ``i``, named page furniture, is small enough to be dropped for its name."""
        main = self.main_of[i]
        if main < 0:
            return self.text[i] < CHROME_MAX_SHARE * total
        return self.tags[i] not in _PHRASING and self.text[i] < CHROME_MAX_SHARE * self.text[main]

    def chrome(self) -> tuple[set[int], set[int]]:
        """Start-tag indexes of the elements that are chrome, and of those among them that are
        furniture inside the main content (reported by :func:`html_to_text`)."""
        while self.stack:
            self.handle_endtag(self.tags[self.stack[0]])
        total = sum(self.text[i] for i in range(self.count) if self.parent[i] == -1) or 1
        holds_main = [False] * self.count
        for i in range(self.count - 1, -1, -1):  # children come after their parent
            if (self.main[i] or holds_main[i]) and self.parent[i] >= 0:
                holds_main[self.parent[i]] = True
        drop: set[int] = set()
        boxes: set[int] = set()
        for i in range(self.count):
            if self.tags[i] in _KEEP_TAGS or self.main[i] or holds_main[i]:
                continue
            if self.nlinks[i] >= MIN_LINKS and self.links[i] >= LINK_DENSITY * max(1, self.text[i]):
                drop.add(i)
            elif self.furniture[i] and self._small(i, total):
                drop.add(i)
                if self.main_of[i] >= 0:
                    boxes.add(i)
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
                    if i != best and i not in chain and self.parent[i] in chain and self.tags[i] not in _KEEP_TAGS:
                        drop.add(i)
        return drop, boxes


_VOID = {"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "embed", "param", "source", "track", "wbr"}
_WS_RE = re.compile(r"[ \t\r\n\f\u00a0]+")
#: How many characters of a box left out of the main content its warning quotes.
BOX_EXCERPT_CHARS = 60
#: How many boxes a warning names (it counts them all).
BOX_WARNING_NAMES = 5


def _code_span(code: str) -> str:
    """``code`` as a Markdown code span: between backtick runs longer than any run inside it, with a
    space inside each end when it starts or ends with a backtick (CommonMark); whitespace around it
    stays outside."""
    inner = _WS_RE.sub(" ", code)
    stripped = inner.strip()
    if not stripped:
        return inner
    lead = inner[: len(inner) - len(inner.lstrip())]
    trail = inner[len(inner.rstrip()) :]
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", stripped)), default=0))
    pad = " " if stripped[0] == "`" or stripped[-1] == "`" else ""
    return f"{lead}{fence}{pad}{stripped}{pad}{fence}{trail}"


def _letters_and_digits(text: str) -> str:
    """Letters and digits only, case-folded: how the chunker compares a title with the first H1."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).casefold() if ch.isalnum())


@dataclass
class _Box:
    """A box of page furniture left out of the main content, as its warning names it."""

    label: str  # its tag and classes (div.author-bio) or id
    chars: int = 0  # its text, whitespace collapsed
    start: str = ""  # the first BOX_EXCERPT_CHARS characters of it

    def add(self, data: str) -> None:
        words = " ".join(data.split())
        self.chars += len(words)
        if words and len(self.start) <= BOX_EXCERPT_CHARS:
            self.start = f"{self.start} {words}".strip()[: BOX_EXCERPT_CHARS + 1]


def _label(tag: str, attrs: dict[str, str]) -> str:
    """How a warning names an element: its tag with its classes (div.author-bio), else its id."""
    classes = attrs.get("class", "").split()[:3]
    if classes:
        return tag + "".join(f".{name}" for name in classes)
    return f"{tag}#{attrs['id']}" if attrs.get("id") else tag


class _Converter(HTMLParser):
    """Second pass: the text, block by block, without the chrome the scorer found."""

    def __init__(
        self, chrome: set[int] | None = None, budget: TextBudget | None = None, boxes: set[int] | None = None
    ) -> None:
        super().__init__(convert_charrefs=True)
        self.chrome = chrome or set()
        self.boxes = boxes or set()  # chrome that is furniture inside the main content
        self.budget = budget
        self.count = 0  # start tags seen (the scorer's indexes)
        self.out: list[str] = []  # finished blocks
        self.line: list[str] = []  # inline text of the current block
        self.drop_depth = 0
        self.drop_stack: list[str] = []
        self.left_out: list[_Box] = []  # the boxes of the main content dropped, in page order
        self.box: _Box | None = None  # the one being dropped now
        self.main_depth = 0
        self.heading: int = 0
        self.last_heading: tuple[int, str] | None = None  # (blocks written up to it, its _letters_and_digits)
        self.code_depth = 0  # inside inline code
        self.code_start: tuple[list[str], int] | None = None  # where the open code span's text starts
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
        self.code_depth, self.code_start = 0, None  # a code span does not cross a block
        if not text:
            return
        if self.heading:
            self.write_heading(" ".join(text.split("\n")))
            return
        self.take(len(text))
        if self.lists:
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

    def write_heading(self, text: str) -> None:
        """Write the heading ``text``, unless the heading right above (nothing between) says the same."""
        key = _letters_and_digits(text)
        if self.last_heading == (len(self.out), key):
            return
        self.take(len(text))
        self.out.append("#" * self.heading + " " + text)
        self.last_heading = (len(self.out), key)
        if self.heading == 1 and self.first_h1 is None:
            self.first_h1 = text

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

    def inline_target(self) -> list[str]:
        """Where inline text goes now: the open table cell, else the current block."""
        return self.cell if self.cell is not None else self.line

    def open_code(self) -> None:
        if not self.code_depth:
            target = self.inline_target()
            self.code_start = (target, len(target))
        self.code_depth += 1

    def close_code(self) -> None:
        """End inline code: its text, since it opened, becomes a code span (:func:`_code_span`)."""
        self.code_depth -= 1
        if self.code_depth or self.code_start is None:
            return
        target, start = self.code_start
        self.code_start = None
        if target is self.inline_target() and start <= len(target):
            code = "".join(target[start:])
            del target[start:]
            target.append(_code_span(code))

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
            if index in self.boxes:
                self.box = _Box(_label(tag, attrs))
                self.left_out.append(self.box)
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
        self.open_structure(tag, attrs)

    def open_structure(self, tag: str, attrs: dict[str, str]) -> None:
        if tag in _HEADINGS:
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
            if not self.table:  # a cell before any <tr> opens the first row
                self.table.append([])
            self.cell = []
            self.span = (_span(attrs.get("rowspan")), _span(attrs.get("colspan")))
        elif tag == "br":
            if self.cell is not None:
                self.cell.append(" ")
            else:
                self.line.append("\n")
        elif tag in _INLINE_CODE and not self.heading:
            self.open_code()
        elif tag in _BLOCK:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if self.drop_depth:
            if tag in self.drop_stack:  # close up to the matching tag (unclosed <li>, <p> inside)
                while self.drop_stack and self.drop_stack.pop() != tag:
                    pass
                if not self.drop_stack:
                    self.drop_depth = 0
                    self.box = None
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
        self.close_structure(tag)

    def close_structure(self, tag: str) -> None:
        if tag in _HEADINGS:
            self.flush()
            self.heading = 0
        elif tag in ("ul", "ol", "menu"):
            self.flush()
            if self.lists:
                self.lists.pop()
        elif tag == "li":
            self.flush()
        elif tag in ("td", "th") and self.table is not None and self.cell is not None:
            self.code_depth, self.code_start = 0, None  # a code span does not cross a cell
            # the chunker splits a row at its unescaped pipes; Markdown shows "\|" as "|"
            text = _WS_RE.sub(" ", "".join(self.cell)).strip().replace("|", "\\|")
            if not self.table:  # a table opened inside the cell and left open
                self.table.append([])
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
        elif tag in _INLINE_CODE and self.code_depth:
            self.close_code()
        elif tag in _BLOCK:
            self.flush()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_text.append(data)
            return
        if self.drop_depth:
            if self.box is not None and self.drop_stack[-1] not in _TREE_DROP:  # not a script's code
                self.box.add(data)
            return
        if self.pre:
            self.pre_text.append(data)
        else:
            self.inline_target().append(data)

    def close(self) -> None:
        super().close()
        # an element left open at the end of the page keeps its text (what was being dropped stays so)
        self.drop_depth, self.drop_stack, self.box = 0, [], None
        if self.pre:
            self.handle_endtag("pre")
        while self.table is not None:
            if self.cell is not None:
                self.handle_endtag("td")
            self.handle_endtag("table")
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


#: What stands between a page's name and its site's name in a ``<title>``: a spaced dash, bar, dot,
#: slash or colon ("Refund policy - Acme"), a bar, dot or guillemet unspaced, or a colon ("Acme: x").
_SITE_SEPARATOR_RE = re.compile(r"\s+[-–—|·•»/:~]{1,2}\s+|\s*[|·•»]\s*|:\s+")


def _document_title(title: str | None, h1: str | None) -> str | None:
    """The page's title: its ``<title>``, or its first ``h1`` when it has no ``<title>`` or when the
    ``<title>`` is the ``h1`` with the site's name after or before it ("Refund policy | Acme Help
    Center", "Acme - Refund policy"): the site's name would otherwise head every section path, above
    the h1, which the chunker leaves out when it repeats the title."""
    if title is None or h1 is None:
        return title or h1
    key = _letters_and_digits(h1)
    for separator in _SITE_SEPARATOR_RE.finditer(title):
        if key in (_letters_and_digits(title[: separator.start()]), _letters_and_digits(title[separator.end() :])):
            return h1
    return title


def _boxes_warning(boxes: list[_Box]) -> dict:
    """The warning that names the boxes of page furniture left out of the main content."""
    named = "; ".join(
        f'{box.label} "{box.start[:BOX_EXCERPT_CHARS]}{"…" if len(box.start) > BOX_EXCERPT_CHARS else ""}" '
        f"({box.chars} characters)"
        for box in boxes[:BOX_WARNING_NAMES]
    )
    more = f"; and {len(boxes) - BOX_WARNING_NAMES} more" if len(boxes) > BOX_WARNING_NAMES else ""
    return {
        "page": None,
        "kind": "box_not_indexed",
        "message": f"{len(boxes)} block(s) inside the main content not indexed as advertising, author, "
        f"related-content or other page furniture: {named}{more}",
    }


def html_to_text(
    html: str, budget: TextBudget | None = None, warnings: list[dict] | None = None
) -> tuple[str, str | None]:
    """``(text, title)`` of an HTML document (see the module docstring); its text counted against
    ``budget`` when given, and the boxes left out of its main content named in ``warnings`` when
    given."""
    scorer = _Scorer()
    scorer.feed(html)
    scorer.close()
    chrome, boxes = scorer.chrome()
    conv = _Converter(chrome, budget, boxes)
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
    left_out = [box for box in conv.left_out if box.chars]
    if warnings is not None and left_out:
        warnings.append(_boxes_warning(left_out))
    return sanitize_text(text), _document_title(clean_title(conv.title), clean_title(conv.first_h1))


def parse_html(data: bytes) -> ParsedFile:
    warnings: list[dict] = []
    text, title = html_to_text(_decode(data), TextBudget(len(data), "HTML"), warnings)
    return ParsedFile(
        "html",
        text,
        title,
        CONTENT_TYPES["html"],
        "python html.parser",
        format_version("html"),
        warnings=warnings,
    )
