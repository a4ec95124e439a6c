"""Files to text: PDF, DOCX, XLSX, PPTX, HTML, Markdown and plain text become the Markdown-like body the
chunker reads (headings as ``#`` lines, lists, tables as ``|`` rows), with page offsets for PDFs.

The formats are :data:`FORMATS` (``formats.py``): one :class:`Format` each, with its suffixes,
content types, conversion version and parser module; every lookup here is derived from them.

* :func:`detect` decides the format from the bytes (magic numbers, an HTML sniff), and refuses a
  file whose name or declared content type says another format (a lying extension).
* :func:`parse_bytes` parses in this process (pure; used by the worker and by tests).
* :func:`parse_isolated` runs :func:`parse_bytes` in a child process with a memory limit
  (``RLIMIT_AS``), a CPU limit and a wall-clock timeout, so that a hostile or broken file can
  neither crash nor exhaust the PostgreSQL backend that asked. Markdown and text are decoded in
  the caller (cheap, pure Python); a format with a parser module always goes through a child.

Every failure is a :class:`ParseError` whose ``kind`` is one of :data:`ERROR_KINDS` and whose
message names the problem ("PDF has no text layer (scanned?): OCR is not supported").

The limits are settings of kb.settings (``file_max_bytes``, ``file_max_pages``,
``file_parse_timeout_s``, ``file_max_expansion_ratio``, ``ocr_max_pages``); the database passes the
values in force to :func:`parse_file`, and the constants here are their defaults (a test compares
them with sql/005_settings/01_catalogue.sql). An error caused by a limit names the setting.
``file_max_expansion_ratio`` bounds expansion twice: a zip member's size over its compressed size
(:func:`.ooxml.check_zip`, from the zip's directory), and the text a file yields per byte of the
file (:class:`TextBudget`, counted as the parser produces it, repeated text at each repetition).

Warnings (a page without text, a page awaiting OCR or that OCR could not read, a sheet that is not
a table) are ``{"page", "kind", "message"}`` dicts in :attr:`ParsedFile.warnings`; the database
stores them (``kb.documents.parse_warnings``, view ``kb.file_warnings``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..vocabulary import CJK_SYMBOLS_PUNCTUATION, HALFWIDTH_FULLWIDTH_FORMS, HAN_UNIFIED, HIRAGANA_KATAKANA
from .formats import (
    CONTENT_TYPE_FORMATS,
    CONTENT_TYPES,
    FORMAT_BY_NAME,
    FORMAT_VERSIONS,
    FORMATS,
    LEGACY_FORMATS,
    MAIN_PARTS,
    SUFFIX_FORMATS,
    TEXT,
    Format,
    ole_kind,
    sniff_bytes,
)

__all__ = [
    "CONTENT_TYPES",
    "ERROR_KINDS",
    "FORMATS",
    "FORMAT_VERSIONS",
    "Format",
    "MAX_FILE_BYTES",
    "ParseError",
    "ParsedFile",
    "TextBudget",
    "decode_file_text",
    "decode_text",
    "detect",
    "parse_bytes",
    "parse_file",
    "parse_isolated",
    "sanitize_text",
    "set_limits",
]

# ------------------------------------------------------------------------------ limits

#: Largest file parsed (bytes); a larger one is stored, marked failed, and not parsed.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Most pages of a PDF parsed.
MAX_PAGES = 3000
#: Most characters of text a file may yield.
MAX_TEXT_CHARS = 20_000_000
#: Most bytes the members of a DOCX (a zip) may expand to, in all.
MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
#: Largest expansion ratio of one zip member over 1 MiB (zip bombs reach thousands), and most characters
#: of text a file may yield per byte of the file (:class:`TextBudget`).
MAX_COMPRESSION_RATIO = 100
#: Most members of a DOCX zip.
MAX_ZIP_MEMBERS = 10_000
#: Wall-clock seconds one parse may take in its child process.
PARSE_TIMEOUT_S = 120
#: Most image-only pages of one PDF read by OCR (about 2.5 s of CPU a dense page); the run's time
#: limit grows with its pages (kb.ocr_run_timeout_s).
OCR_MAX_PAGES = 20
#: Address space of the child process (bytes).
PARSE_MEMORY_BYTES = 2 * 1024 * 1024 * 1024

#: The limits a parse runs under, by their names in kb.settings (the defaults; :func:`set_limits`).
DEFAULT_LIMITS = {
    "file_max_bytes": MAX_FILE_BYTES,
    "file_max_pages": MAX_PAGES,
    "file_parse_timeout_s": PARSE_TIMEOUT_S,
    "file_max_expansion_ratio": MAX_COMPRESSION_RATIO,
    "ocr_max_pages": OCR_MAX_PAGES,
}
#: The limits in force in this process (the child sets them from the database's values).
LIMITS: dict[str, int] = dict(DEFAULT_LIMITS)


def set_limits(limits: dict | None) -> dict[str, int]:
    """Put ``limits`` (names of :data:`DEFAULT_LIMITS`; missing or null: the default) in force;
    returns them."""
    LIMITS.clear()
    LIMITS.update(DEFAULT_LIMITS)
    for key, value in (limits or {}).items():
        if key in DEFAULT_LIMITS and value is not None:
            LIMITS[key] = int(value)
    return dict(LIMITS)


def limit_message(what: str, key: str) -> str:
    """``"<what>; the limit file_max_pages is 3000 (kb.settings)"``: an error naming its setting."""
    return f"{what}; the limit {key} is {LIMITS[key]} (kb.settings)"


#: What a ParseError's kind can be.
ERROR_KINDS = (
    "too_large",
    "type_mismatch",
    "unsupported_format",
    "encrypted",
    "no_text_layer",
    "corrupt",
    "zip_bomb",
    "too_many_pages",
    "encoding",
    "empty",
    "timeout",
    "out_of_memory",
    "parser_crashed",
)

#: Declared content types that say nothing of the format (S3, web forms, most HTTP clients send
#: application/octet-stream): the content decides, as for no type at all.
GENERIC_CONTENT_TYPES = frozenset(
    {
        "application/octet-stream",
        "binary/octet-stream",
        "application/binary",
        "application/unknown",
        "application/download",
        "application/x-download",
        "application/force-download",
        "application/zip",
        "application/x-zip-compressed",
        "*/*",
    }
)
#: Formats whose name or declared type may describe the same bytes as another's.
_TEXT_FAMILY = frozenset(f.name for f in FORMATS if f.family == TEXT)
#: The OOXML formats (known by a zip package's main part).
_OOXML = frozenset(name for _, name in MAIN_PARTS)
#: The legacy formats an OLE container holds.
_OLE_LEGACY = ("doc", "xls", "ppt")
#: The stream of an encrypted OOXML file (an OLE container that holds the encrypted package).
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")


def _human(fmt: str) -> str:
    """How errors name a format: "a PDF"."""
    return FORMAT_BY_NAME[fmt].human


class ParseError(Exception):
    """A file that cannot become text; ``kind`` is one of :data:`ERROR_KINDS`."""

    def __init__(self, kind: str, message: str):
        assert kind in ERROR_KINDS, kind
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {self.args[0]}"


class TextBudget:
    """The text one file may yield: ``file_max_expansion_ratio`` characters per byte of the file,
    the same expansion a zip member may have, counted on the text the parser produces -- so text
    repeated from one place of the file (an XLSX shared string in every cell that uses it, a DOCX
    cell merged down rows or a footnote referenced again, an HTML cell spanning rows) counts at
    each repetition. A parser that can repeat text calls :meth:`take` as it produces it and stops
    at the first piece past the limit; :func:`parse_bytes` checks every format's whole text too.
    Past the limit the file is refused (``zip_bomb``, naming the setting and where it was)."""

    def __init__(self, file_bytes: int, what: str) -> None:
        self.file_bytes = file_bytes
        self.what = what  # "XLSX", "HTML": the format as errors name it
        self.ratio = LIMITS["file_max_expansion_ratio"]
        self.limit = self.ratio * max(1, file_bytes)
        self.used = 0

    def take(self, chars: int, where=None) -> None:
        """Count ``chars`` more characters of text; past the limit, a :class:`ParseError` naming
        ``where`` (a string, or a function giving one: called only then)."""
        self.used += chars
        if self.used > self.limit:
            raise self.exceeded(where() if callable(where) else where)

    def exceeded(self, where: str | None = None) -> ParseError:
        what = (
            f"the {self.what} would yield more than {self.ratio} characters of text per byte of the file "
            f"(more than {self.limit} characters from {self.file_bytes} bytes)" + (f", at {where}" if where else "")
        )
        return ParseError("zip_bomb", limit_message(what, "file_max_expansion_ratio"))


@dataclass
class ParsedFile:
    """What a parser made of a file."""

    format: str  # the name of one of FORMATS: pdf, docx, xlsx, pptx, html, markdown, text
    text: str  # the body: Markdown-like text the chunker reads
    title: str | None = None
    content_type: str = ""
    parser: str = ""  # library and version, e.g. "pypdfium2 5.15.2"
    parser_version: str = ""  # "<format>/<FORMAT_VERSIONS[format]>"
    page_starts: list[int] | None = None  # PDF (pages), PPTX (slides): offset in text where page n+1 starts
    warnings: list[dict] = field(default_factory=list)  # {"page": n or None, "kind", "message"}
    #: OCR of a PDF: {"status": "pending"|"done", "engine", "languages", "pages": [{"page", "confidence",
    #: "chars"}], "pending_pages": [n, ...]}; None when no page needed it
    ocr: dict | None = None

    def as_json(self) -> dict:
        return asdict(self)


def format_version(fmt: str) -> str:
    """What ``parser_version`` records for a format: ``"pdf/1"``."""
    return f"{fmt}/{FORMAT_VERSIONS[fmt]}"


# --------------------------------------------------------------------------- detection


def _legacy_error(kind: str, how: str) -> ParseError:
    return ParseError(
        "unsupported_format",
        f"{_human(kind)} ({how}) is not supported: save it as .{LEGACY_FORMATS[kind]}",
    )


def _declared(filename: str, content_type: str | None) -> tuple[str | None, str | None]:
    """The formats the name and the declared content type say (None: nothing, or nothing known)."""
    by_name = SUFFIX_FORMATS.get(Path(filename or "").suffix.lower())
    by_type = None
    if content_type:
        by_type = CONTENT_TYPE_FORMATS.get(content_type.split(";")[0].strip().lower())
    return by_name, by_type


def _detection(data: bytes, filename: str = "", content_type: str | None = None) -> tuple[str, str | None]:
    """(format, a note when the name or declared type said another format than the one read)."""
    if not data:
        raise ParseError("empty", "the file is empty (0 bytes)")
    by_name, by_type = _declared(filename, content_type)
    # (format claimed, how a legacy error names the claim, how a note names it)
    claims = [
        (by_type, f"content type {content_type!r}", f"the content type {content_type!r}"),
        (by_name, f"named {filename!r}", repr(filename)),
    ]
    claims = [claim for claim in claims if claim[0] is not None]
    sniffed = sniff_bytes(data)
    if sniffed == "ole":
        if _ENCRYPTED_PACKAGE in data:
            raise ParseError("encrypted", "the Office file is encrypted (password-protected); remove the password")
        # the bytes confirm a legacy file: its streams say which, else the name or declared type
        kind = ole_kind(data)
        named = [(c, how) for c, how, _ in claims if c in _OLE_LEGACY and kind in (c, "ole")]
        if named:
            raise _legacy_error(*named[0])
        if kind == "ole":
            raise ParseError("unsupported_format", f"the content is {_human('ole')}, not a supported document")
        raise _legacy_error(kind, "OLE content")
    if sniffed in LEGACY_FORMATS:  # RTF, Office 2003 XML: text whose format is a legacy one
        raise _legacy_error(sniffed, "RTF content" if sniffed == "rtf" else "Office 2003 XML content")
    if sniffed in ("zip", "binary"):
        claimed, how, _ = claims[0] if claims else (None, "", "")
        if claimed in LEGACY_FORMATS:  # nothing read here; the name says what to save it as
            raise _legacy_error(claimed, how)
        if claimed and claimed not in _OOXML:
            raise ParseError(
                "type_mismatch",
                f"{filename or 'the file'} is declared {_human(claimed)} but its content is {_human(sniffed)}",
            )
        raise ParseError("unsupported_format", f"the content is {_human(sniffed)}, not a supported document")
    declared = by_type or by_name
    if sniffed in _TEXT_FAMILY and declared in _TEXT_FAMILY:
        return declared, None  # a .txt holding HTML, a .md with an <html> tag: the name decides
    for claimed, _, said in claims:
        if claimed != sniffed:
            return sniffed, f"{said} says {_human(claimed)} but the content is {_human(sniffed)}: read as such"
    return sniffed, None


def detect(data: bytes, filename: str = "", content_type: str | None = None) -> str:
    """The format of ``data``: pdf, docx, xlsx, pptx, image, html, markdown or text. The content
    decides whenever it is a format read here, whatever the name or declared content type say; they
    decide only among the text formats (a ``.md``, a ``.txt`` holding HTML), which carry no
    signature. A name or type refuses only what the bytes confirm: a legacy Office file (an OLE
    container, RTF, Office 2003 XML) is refused naming the format to save it as; content that is
    no document read here (a plain zip, unknown binary data) is refused naming what it is. An empty
    file is ``empty`` before anything else is looked at."""
    return _detection(data, filename, content_type)[0]


# ------------------------------------------------------------------------------- text

_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: What counts toward a GB18030 decoding being "mostly Chinese": CJK punctuation, kana, Han and
#: full-width forms (GB2312, which GB18030 extends, encodes all of them).
_CJK_RE = re.compile(f"[{CJK_SYMBOLS_PUNCTUATION}{HIRAGANA_KATAKANA}{HAN_UNIFIED}{HALFWIDTH_FULLWIDTH_FORMS}]")


def sanitize_text(text: str) -> str:
    """``text`` as PostgreSQL can store and the chunker reads it: NFC, ``\\n`` line ends, no NUL
    or other control characters (tabs kept), no trailing spaces, at most two blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n")
    text = _CONTROL_RE.sub("", text)
    text = unicodedata.normalize("NFC", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


#: What the chunker reads as structure at the start of a line of text: an ATX heading, a fence, a
#: table row, or a line made only of rule characters (a thematic break, which it drops; a setext
#: underline, which makes the line above a heading; a table's delimiter row). A line that starts
#: with ``>``, ``*``, ``-`` or ``+`` becomes at most a quote or list block of the same text.
_STRUCTURE_LINE_RE = re.compile(r"^(?:#{1,6}(?:[ \t]|$)|`{3,}|~{3,}|\||[-*_=|:+ \t]+$)")
#: Invisible, zero-width, and removed by the lexical rules (category Cf): it keeps a line literal
#: without a backslash showing in passages and citations.
WORD_JOINER = "\u2060"


def escape_line(line: str) -> str:
    """``line`` of converted text made literal for the chunker: after a word joiner when the chunker
    would read it as structure (``# x`` is text, not a heading; ``| a``, a fence, ``===`` likewise),
    else as written, so no escape shows to readers. Numbered lines (1.1, 第一章) are left as they
    are: they head in every format."""
    stripped = line.lstrip(" \t")
    if _STRUCTURE_LINE_RE.match(stripped):
        cut = len(line) - len(stripped)
        return line[:cut] + WORD_JOINER + stripped
    return line


def escape_text(text: str) -> str:
    """:func:`escape_line` of every line of ``text``."""
    return "\n".join(escape_line(line) for line in text.split("\n"))


_HEADING_LINE_RE = re.compile(r"^(#{1,6}) (.*)$")
_FENCE_LINE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
#: Numbering kinds of a Chinese document's structure (the chunker's markers): 第X编/章/节/条/款, 一、, （一）.
_DIVISION_KINDS = ("编", "章", "节", "条", "款")
_ZH_KINDS = (*_DIVISION_KINDS, "zh_item", "zh_paren")


def _outside_fences(text: str):
    """(index, line) of the lines of ``text`` outside fenced code blocks."""
    fence = None
    for i, line in enumerate(text.split("\n")):
        m = _FENCE_LINE_RE.match(line)
        if fence is None and m:
            fence = m.group(1)[0]
        elif fence is not None and m and m.group(1)[0] == fence:
            fence = None
        elif fence is None:
            yield i, line


def numbered_lines_divide(text: str) -> bool:
    """Whether converted ``text`` has a line that is not a heading yet starts with a division marker
    (第X章, 第X条 ...): the document's structure is carried by its numbers, not only by its tags."""
    from ..chunker import _marker

    for _, line in _outside_fences(text):
        if line[:1] != "#":
            marker = _marker(line)
            if marker is not None and marker.kind in _DIVISION_KINDS:
                return True
    return False


def nest_by_numbers(text: str) -> str:
    """``text`` with its headings (``#`` lines from tags, styles, font sizes or the outline) that
    start with a Chinese structure marker (第X章, 第X条, 一、, （一）) written as numbered lines, which
    the chunker nests by their numbers. Called when :func:`numbered_lines_divide`: a regulation
    whose articles are untagged but whose items are tagged headings would otherwise have each
    tagged item close the article above it (第二章 > （一） instead of 第二章 > 第五条 > （一）)."""
    from ..chunker import _marker, _titled

    lines = text.split("\n")
    for i, line in _outside_fences(text):
        m = _HEADING_LINE_RE.match(line)
        if not m:
            continue
        marker = _marker(m.group(2))
        if marker is not None and marker.kind in _ZH_KINDS:
            if marker.kind in _DIVISION_KINDS or _titled(m.group(2)[marker.end :]):
                lines[i] = m.group(2)
    return "\n".join(lines)


_JUNK_TITLE_RE = re.compile(
    r"^(?:untitled(?:[ -]?\d+)?|\(?anonymous\)?|no title|title|document\d*|unknown|none|null|slide \d+|"
    r"microsoft (?:word|powerpoint) - .*|.*\.(?:docx?|pdf|dvi|tex|odt|rtf|txt|html?|indd|qxd|ps))$",
    re.IGNORECASE,
)


def clean_title(title: str | None) -> str | None:
    """A document title worth putting at the root of every section path, or None: blank, "untitled",
    "(anonymous)", "Microsoft Word - x.docx", a file name, or text without a letter are dropped."""
    title = " ".join((title or "").split())
    if not title or _JUNK_TITLE_RE.match(title) or not any(ch.isalpha() for ch in title):
        return None
    return title


#: How many of a document's first lines (those with a letter) are read for the header (版头) of a
#: Chinese official document and the title under it.
OPENING_LINES = 12
#: Longest title (characters) taken under such a header, and most lines it may be wrapped over.
OFFICIAL_TITLE_MAX_CHARS = 80
OFFICIAL_TITLE_LINES = 3
#: The end of an issuing body's name: a government, office, committee, bureau, ministry, company...
#: ("江川市人民政府办公厅", "中共江川市委"), so that "…招标文件" or "设计文件" is no red header.
_ISSUER = (
    r"(?:政府|办公厅|办公室|人大|政协|大学|学校|中心|小组|公司|集团|银行|分行|支行|总队|支队|大队"
    r"|[会委局厅部院署办所站处社])"
)
#: The lines of a header (GB/T 9704), compared without whitespace: the issuer's red line ending in
#: 文件, a document number (江政办发〔2023〕12号), the signer (签发人：…), a date alone (2023年5月12日,
#: 二〇二三年五月十二日), a copy number (six digits), a secrecy or urgency mark.
_HEADER_LINE_RE = re.compile(
    rf"^(?:.{{0,40}}{_ISSUER})?文件$"
    r"|[〔\[［【(（](?:19|20)\d{2}[〕\]］】)）]第?\d{1,5}号"
    r"|签发人"
    r"|^[(（]?(?:\d{4}|[〇○零Ｏ一二三四五六七八九]{4})年(?:\d{1,2}|[一二三四五六七八九十]{1,3})月"
    r"(?:\d{1,2}|[一二三四五六七八九十]{1,3})日[)）]?(?:印发|发布|签发|发)?$"
    r"|^\d{4}[-./]\d{1,2}[-./]\d{1,2}$"
    r"|^(?:份号[:：]?)?\d{6}$|^(?:绝密|机密|秘密)(?:★.{0,8})?$|^(?:特急|加急|特提|平急)$"
)
#: A line that only names issuing bodies: the joint issuers set above the header's 文件 line.
_ISSUER_ONLY_RE = re.compile(rf"^[^，。；：、,;:]{{2,40}}{_ISSUER}$")
_SENTENCE_MARK_RE = re.compile(r"[。，；！？]")
#: A line that ends like a sentence or a clause, or holds a full stop: no title.
_NOT_TITLE_LINE_RE = re.compile(r"[。！？；：，、.!?;:,]$|。")
#: The kind of document a Chinese title ends with (…的通知, …管理办法, …条例（试行）).
_DOCUMENT_KIND_RE = re.compile(
    r"(?:通知|通报|决定|意见|办法|规定|条例|细则|规则|方案|批复|报告|请示|函|公告|通告|纪要|决议|命令|令|议案"
    r"|规划|计划|要点|措施|制度|章程|守则|准则|指引|指南|规范|标准|[)）])$"
)
_PARENTHESISED_RE = re.compile(r"[（(][^（）()]{1,20}[)）]")


def official_header(line: str) -> bool:
    """Whether ``line`` is a line of the header (版头) of a Chinese official document: the issuer's
    red line (…人民政府办公厅文件), the document number, the signer, a date, a secrecy or urgency mark.
    Such a line names the issuer and the filing, never the document: it is no title and no heading."""
    compact = "".join(line.split())
    return (
        0 < len(compact) <= 60
        and "关于" not in compact
        and not _SENTENCE_MARK_RE.search(compact)
        and bool(_HEADER_LINE_RE.search(compact))
    )


def title_continues(title: str, line: str) -> bool:
    """Whether ``line`` carries on the Chinese title ``title`` wrapped before it: the title leaves a
    bracket open or ends with a joining word (的, 和, 与, 及, 、, 关于), or it is a 关于… title that has
    not reached its kind of document yet (…的通知), or ``line`` is its parenthesised qualifier ((试行))."""
    if any(title.count(o) > title.count(c) for o, c in ("《》", "（）", "()", "「」", "〔〕", "【】")):
        return True
    if title.endswith(("的", "和", "与", "及", "暨", "、", "关于")) or _PARENTHESISED_RE.fullmatch(line):
        return True
    return "关于" in title and not _DOCUMENT_KIND_RE.search(title)


def _official_title_line(text: str) -> bool:
    from ..chunker import _marker

    return (
        2 <= len(text) <= OFFICIAL_TITLE_MAX_CHARS
        and not _NOT_TITLE_LINE_RE.search(text)
        and _marker(text) is None
        and sum(ch.isalpha() for ch in text) >= 2
        and not official_header(text)
    )


def official_header_lines(lines: list[str]) -> int:
    """How many of ``lines`` make the header (版头) a Chinese official document opens with: its lines
    (:func:`official_header`), the issuing bodies named above its 文件 line and lines without a
    letter (a rule, a copy number), up to the first other line; 0 when the lines do not open with
    such a header (within their first ``OPENING_LINES`` lines with a letter)."""
    header, read = False, 0
    for i, line in enumerate(lines):
        if not any(ch.isalpha() for ch in line):
            continue
        read += 1
        if read > OPENING_LINES:
            return 0
        if official_header(line):
            header = True
        elif not _ISSUER_ONLY_RE.match("".join(line.split())):
            return i if header else 0
    return len(lines) if header else 0


def official_title_lines(lines: list[str]) -> range | None:
    """Which of ``lines`` hold the title of a Chinese official document that opens with its header
    (:func:`official_header_lines`): the first line after the header, when it reads as a title
    (short, no sentence or clause end, not numbered), and the lines right below it that the title
    is wrapped onto (:func:`title_continues`). None when the document does not open with such a
    header (its title is then chosen as for any document) or no title follows it."""
    start = official_header_lines(lines)
    if not start or start == len(lines) or not _official_title_line(" ".join(lines[start].split())):
        return None
    title, end = " ".join(lines[start].split()), start + 1
    while end < len(lines) and end - start < OFFICIAL_TITLE_LINES:
        text = " ".join(lines[end].split())
        if len(title) + len(text) > OFFICIAL_TITLE_MAX_CHARS or not _official_title_line(text):
            break
        if not title_continues(title, text):
            break
        title, end = join_title_lines([title, text]), end + 1
    return range(start, end)


def join_title_lines(lines: list[str]) -> str:
    """Lines of one title as one line: joined without a space where Chinese meets Chinese."""
    title = ""
    for line in lines:
        line = " ".join(line.split())
        glue = "" if not title or _CJK_RE.match(title[-1]) or _CJK_RE.match(line[:1]) else " "
        title += glue + line
    return title


def official_title(lines: list[str]) -> str | None:
    """The title of a Chinese official document under its header (:func:`official_title_lines`),
    as one line; None when the lines do not open with such a header."""
    found = official_title_lines(lines)
    return clean_title(join_title_lines([lines[i] for i in found])) if found else None


def decode_text(data: bytes) -> str:
    """Bytes of a text file as text: UTF-8 (BOM or not), UTF-16 with a BOM, else GB18030 when the
    result is mostly Chinese; anything else is an ``encoding`` error naming the byte offset."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ParseError("encoding", f"not valid UTF-16 (byte offset {exc.start})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        first_error = exc.start
    if b"\x00" not in data:
        try:
            text = data.decode("gb18030")
        except UnicodeDecodeError:
            pass
        else:
            non_ascii = [ch for ch in text if ord(ch) > 127]
            if non_ascii and sum(1 for ch in non_ascii if _CJK_RE.match(ch)) >= 0.9 * len(non_ascii):
                return text
    raise ParseError("encoding", f"not valid UTF-8 text (byte offset {first_error})")


def decode_file_text(data: bytes) -> str:
    """The text of a text file's bytes, as every door reads it (kb.ingest_file, the folder loader):
    a NUL byte outside UTF-16 is a ``corrupt`` error (binary data), then :func:`decode_text`."""
    nul = -1 if data.startswith((b"\xff\xfe", b"\xfe\xff")) else data.find(b"\x00")
    if nul >= 0:
        raise ParseError("corrupt", f"contains a NUL byte at offset {nul} (binary file?)")
    return decode_text(data)


_HEADING_MARK_RE = re.compile(r"^#{1,6} +")


def _parse_text(data: bytes, fmt: str) -> ParsedFile:
    text = sanitize_text(decode_file_text(data))
    lines = text.split("\n")
    # a Chinese official document is titled under its header (红头, document number), which is
    # never the title; any other text by its first "# " heading
    title = official_title([_HEADING_MARK_RE.sub("", line) for line in lines[: 4 * OPENING_LINES]])
    if title is None:
        headings = (line[2:] for line in lines if line.startswith("# ") and not official_header(line[2:]))
        title = next(headings, "").strip() or None
    return ParsedFile(fmt, text, title, CONTENT_TYPES[fmt], "pgkb", format_version(fmt))


# ----------------------------------------------------------------------------- parsing


def _parse_function(entry: Format):
    """The parse function of a format with a parser module, imported when first needed: a
    process that reads only text never loads pypdfium2 or lxml."""
    module, _, function = entry.parser.rpartition(".")
    return getattr(importlib.import_module(f".{module}", __name__), function)


def parse_bytes(
    data: bytes,
    filename: str = "",
    content_type: str | None = None,
    *,
    limits: dict | None = None,
    ocr: str = "defer",
) -> ParsedFile:
    """Parse ``data`` in this process (no isolation); raises :class:`ParseError`. ``limits``: the
    values of kb.settings' limits (:func:`set_limits`); ``ocr``: what to do with a PDF's image-only
    pages: ``defer`` (list them as pending: the worker reads them later), ``run`` (read them now)
    or ``off``."""
    set_limits(limits)
    if len(data) > LIMITS["file_max_bytes"]:
        raise ParseError("too_large", limit_message(f"the file is {len(data)} bytes", "file_max_bytes"))
    fmt, note = _detection(data, filename, content_type)
    entry = FORMAT_BY_NAME[fmt]
    if entry.parser is None:
        parsed = _parse_text(data, fmt)
    else:
        parsed = _parse_function(entry)(data, **({"ocr": ocr} if entry.ocr else {}))
    if note:  # read by its content: the name that said otherwise is shown, not silently overruled
        parsed.warnings.insert(0, {"page": None, "kind": "name_mismatch", "message": note})
    if len(parsed.text) > MAX_TEXT_CHARS:
        raise ParseError(
            "too_large", f"the file yields {len(parsed.text)} characters of text; the limit is {MAX_TEXT_CHARS}"
        )
    # every format, whatever its parser counted on the way: the whole text against the file's size
    TextBudget(len(data), fmt.upper() if entry.parser else "file").take(len(parsed.text))
    if not parsed.text.strip() and not (parsed.ocr and parsed.ocr.get("pending_pages")):
        if entry.ocr:
            why = "OCR is off" if ocr == "off" else "OCR found no text either"
            if parsed.ocr is None:
                why = "no page holds an image to read by OCR (blank?)"
            elif parsed.ocr.get("unavailable"):
                why = f"OCR is not available here ({parsed.ocr['unavailable']})"
            what = "PDF has no text layer (scanned?) and" if fmt == "pdf" else f"{_human(fmt)} is read by OCR only, and"
            raise ParseError("no_text_layer", f"{what} {why}")
        raise ParseError("empty", f"the {_human(fmt)} contains no text")
    return parsed


def _site_dir() -> Path:
    """The directory this package is imported from (a venv's site-packages, or a private site)."""
    return Path(__file__).resolve().parents[2]


def _worker_python() -> str:
    """The interpreter of the venv this package is installed in (its libraries are there); for a
    private site (a directory whose ``.pth`` file names a venv's site-packages), that venv's."""
    site_dir = _site_dir()
    roots = [site_dir]
    for pth in sorted(site_dir.glob("*.pth")):
        try:
            roots += [Path(line.strip()) for line in pth.read_text().splitlines() if line.startswith("/")]
        except OSError:
            continue
    for root in roots:
        for parent in list(root.parents)[:4]:
            candidate = parent / "bin" / "python3"
            if (parent / "pyvenv.cfg").exists() and candidate.exists():
                return str(candidate)
    executable = Path(sys.executable or "")
    return str(executable) if executable.name.startswith("python") and executable.exists() else "/usr/bin/python3"


def parse_isolated(
    data: bytes,
    filename: str = "",
    content_type: str | None = None,
    *,
    python: str | None = None,
    package_path: str | None = None,
    timeout_s: float | None = None,
    memory_bytes: int = PARSE_MEMORY_BYTES,
    limits: dict | None = None,
    ocr: str = "defer",
) -> ParsedFile:
    """:func:`parse_bytes` in a child process (see the module docstring). ``python`` and
    ``package_path`` choose the interpreter and where it imports pgkb_plpy from (tests); the
    wall-clock limit is ``timeout_s``, else the limit ``file_parse_timeout_s``."""
    limits = set_limits(limits)
    if timeout_s is None:
        timeout_s = float(limits["file_parse_timeout_s"])
    if len(data) > limits["file_max_bytes"]:
        raise ParseError("too_large", limit_message(f"the file is {len(data)} bytes", "file_max_bytes"))
    fmt = detect(data, filename, content_type)
    if FORMAT_BY_NAME[fmt].parser is None:  # text decoded here: nothing for a child to guard against
        return parse_bytes(data, filename, content_type, limits=limits)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OMP_THREAD_LIMIT": "1",  # tesseract: one core per parse
    }
    # the child imports the same pgkb_plpy as this process (a private site is not the venv's)
    env["PYTHONPATH"] = package_path or str(_site_dir())
    args = [
        python or _worker_python(),
        "-m",
        "pgkb_plpy.parsers.worker",
        filename or "",
        content_type or "",
        str(memory_bytes),
        str(int(timeout_s) + 1),
        json.dumps(limits),
        ocr,
    ]
    try:
        done = subprocess.run(args, input=data, capture_output=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise ParseError(
            "timeout",
            f"parsing took longer than {timeout_s:g} s (the limit file_parse_timeout_s, kb.settings); "
            "the file was not parsed",
        ) from None
    try:
        result = json.loads(done.stdout.decode("utf-8")) if done.stdout else None
    except ValueError:
        result = None
    if result is None:
        if done.returncode < 0 and -done.returncode in (9, 24):  # SIGKILL, SIGXCPU: the CPU limit
            raise ParseError(
                "timeout",
                f"parsing used more than {timeout_s:g} s of CPU (the limit file_parse_timeout_s, kb.settings); "
                "the file was not parsed",
            )
        if b"MemoryError" in done.stderr:
            raise ParseError("out_of_memory", f"parsing needed more than {memory_bytes} bytes of memory")
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ParseError("parser_crashed", f"the {fmt} parser failed: {tail[0][:300]}")
    if "error" in result:
        raise ParseError(result["error"]["kind"], result["error"]["message"])
    return ParsedFile(**result["parsed"])


def parse_file(
    data: bytes,
    filename: str = "",
    content_type: str | None = None,
    limits: dict | None = None,
    ocr: str = "defer",
) -> dict:
    """What the database stores of a file: ``{"ok": true, "format", "text", "title", "warnings",
    "ocr", ...}`` or ``{"ok": false, "format", "error_kind", "error"}``; never raises for a bad
    file. Both carry ``limits``, the limits the parse ran under (kb.reparse_files compares them)."""
    limits = set_limits(limits)
    try:
        parsed = parse_isolated(data, filename, content_type, limits=limits, ocr=ocr)
    except ParseError as exc:
        try:
            fmt = detect(data, filename, content_type)
        except ParseError:
            fmt = None
        return {
            "ok": False,
            "format": fmt,
            "content_type": CONTENT_TYPES.get(fmt or "", content_type),
            "parser_version": format_version(fmt) if fmt else None,
            "error_kind": exc.kind,
            "error": str(exc),
            "limits": limits,
        }
    return {"ok": True, **parsed.as_json(), "limits": limits}
