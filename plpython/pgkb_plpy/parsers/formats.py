"""The file formats pgkb knows, one :class:`Format` each in :data:`FORMATS`; every lookup by
suffix, content type or name is derived from that list. A new format is one parser module and one
entry here (and, for a binary format known by a magic number rather than a zip package's main part,
its test in :func:`sniff`, the one sniffing both the database's parser and the folder loader use).

Standard library only and free of relative imports: the folder loader (``harness/loader.py``)
loads this file by itself, outside the in-database package, to know which files to send.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass

__all__ = [
    "BINARY",
    "CONTENT_TYPES",
    "FORMATS",
    "FORMAT_BY_NAME",
    "FORMAT_VERSIONS",
    "LEGACY",
    "LEGACY_FORMATS",
    "OTHER",
    "TEXT",
    "Format",
    "suffixes",
]

#: The content alone says which format it is (a magic number, a zip package's main part); a name or
#: declared type saying another format is a lie (``type_mismatch``).
BINARY = "binary"
#: Text formats: bytes sniffed as one of them may be named or declared as another (a ``.txt``
#: holding HTML), and the name or declared type decides.
TEXT = "text"
#: Legacy binary Office formats: refused by name, declared type or content, naming the format to
#: save the file as.
LEGACY = "legacy"
#: What sniffing can find that is no document (a plain zip, an OLE container, binary data): named
#: in errors only.
OTHER = "other"

_OOXML = "application/vnd.openxmlformats-officedocument."


@dataclass(frozen=True)
class Format:
    """One file format: how it is recognised, named, stored and parsed."""

    #: ``ParsedFile.format``, the prefix of ``parser_version``, the key of ``kb.parser_versions()``.
    name: str
    #: How errors name it: "a PDF", "an HTML page".
    human: str
    #: :data:`BINARY`, :data:`TEXT`, :data:`LEGACY` or :data:`OTHER`.
    family: str
    #: File name suffixes (lower case, with the dot) that say this format.
    suffixes: tuple[str, ...] = ()
    #: Declared content types that say this format; the first is the one stored.
    content_types: tuple[str, ...] = ()
    #: Version of pgkb's conversion: bump when the text the format yields changes (documents parsed
    #: with another version are stale; kb.reparse_files parses them again). None: not parsed.
    version: str | None = None
    #: ``"module.function"`` in this package, run in a child process (parse_isolated); None for a
    #: text format decoded in the caller (cheap, pure Python).
    parser: str | None = None
    #: An OOXML package's part that says which kind it is (read from the zip's directory).
    main_part: str | None = None
    #: The format to save a legacy file as.
    save_as: str | None = None
    #: Image-only pages are read by OCR: the parse function takes ``ocr`` (defer, run, off).
    ocr: bool = False

    @property
    def supported(self) -> bool:
        return self.version is not None

    @property
    def content_type(self) -> str | None:
        return self.content_types[0] if self.content_types else None


#: Every format, in the order a zip package's main parts are looked for.
FORMATS: tuple[Format, ...] = (
    Format("pdf", "a PDF", BINARY, (".pdf",), ("application/pdf",), "7", "pdf.parse_pdf", ocr=True),
    Format(
        "docx",
        "a DOCX (Word) file",
        BINARY,
        (".docx",),
        (_OOXML + "wordprocessingml.document",),
        "4",
        "docx.parse_docx",
        main_part="word/document.xml",
    ),
    Format(
        "xlsx",
        "an XLSX (Excel) workbook",
        BINARY,
        (".xlsx",),
        (_OOXML + "spreadsheetml.sheet",),
        "3",
        "xlsx.parse_xlsx",
        main_part="xl/workbook.xml",
    ),
    Format(
        "pptx",
        "a PPTX (PowerPoint) presentation",
        BINARY,
        (".pptx",),
        (_OOXML + "presentationml.presentation",),
        "2",
        "pptx.parse_pptx",
        main_part="ppt/presentation.xml",
    ),
    Format(
        "image",
        "an image",
        BINARY,
        (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".gif", ".bmp", ".webp"),
        ("image/png", "image/jpeg", "image/tiff", "image/gif", "image/bmp", "image/webp"),
        "1",
        "image.parse_image",
        ocr=True,
    ),
    Format(
        "html",
        "an HTML page",
        TEXT,
        (".html", ".htm", ".xhtml"),
        ("text/html", "application/xhtml+xml"),
        "4",
        "html.parse_html",
    ),
    Format("markdown", "Markdown", TEXT, (".md", ".markdown"), ("text/markdown", "text/x-markdown"), "1"),
    Format("text", "text", TEXT, (".txt", ".text"), ("text/plain",), "1"),
    Format("doc", "a legacy Word .doc file", LEGACY, (".doc",), ("application/msword",), save_as="docx"),
    Format("xls", "a legacy Excel .xls workbook", LEGACY, (".xls",), ("application/vnd.ms-excel",), save_as="xlsx"),
    Format(
        "ppt",
        "a legacy PowerPoint .ppt presentation",
        LEGACY,
        (".ppt",),
        ("application/vnd.ms-powerpoint",),
        save_as="pptx",
    ),
    Format("rtf", "an RTF document", LEGACY, (".rtf",), ("application/rtf", "text/rtf"), save_as="docx"),
    Format("zip", "a zip archive", OTHER),
    Format("ole", "a legacy Office (OLE) file", OTHER),
    Format("binary", "binary data", OTHER),
)

FORMAT_BY_NAME: dict[str, Format] = {f.name: f for f in FORMATS}
#: The conversion version of each parsed format (kb.parser_versions() in
#: sql/022_files/01_versions_and_limits.sql spells the same; a unit test compares them).
FORMAT_VERSIONS: dict[str, str] = {f.name: f.version for f in FORMATS if f.version}
#: The content type stored for each parsed format.
CONTENT_TYPES: dict[str, str] = {f.name: f.content_type for f in FORMATS if f.version}
#: Legacy format -> the format to save it as.
LEGACY_FORMATS: dict[str, str] = {f.name: f.save_as for f in FORMATS if f.save_as}
SUFFIX_FORMATS: dict[str, str] = {s: f.name for f in FORMATS for s in f.suffixes}
CONTENT_TYPE_FORMATS: dict[str, str] = {t: f.name for f in FORMATS for t in f.content_types}


def suffixes(*, family: str | None = None, isolated: bool | None = None) -> set[str]:
    """The suffixes of the parsed formats, of one ``family`` and/or parsed in a child process
    (``isolated``: the format has a parser module) or in the caller (text decoded as it is)."""
    return {
        s
        for f in FORMATS
        if f.supported
        and (family is None or f.family == family)
        and (isolated is None or (f.parser is not None) == isolated)
        for s in f.suffixes
    }


# ------------------------------------------------------------------------------ sniffing

#: Bytes of a file sniffing reads (the folder loader reads no more of a file it does not load).
SNIFF_BYTES = 65536
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: How the image formats start: PNG, JPEG, GIF, TIFF (both byte orders); BMP and WebP in :func:`sniff`.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"II*\x00", b"MM\x00*")
_HTML_TAG_RE = re.compile(rb"<(html|body|head)[\s>]")
#: Marks of Office 2003 XML (SpreadsheetML, WordML): text whose format is a legacy one.
_OFFICE_2003_XML = (
    (b"urn:schemas-microsoft-com:office:spreadsheet", "xls"),
    (b'progid="Excel.Sheet"', "xls"),
    (b"http://schemas.microsoft.com/office/word/2003/wordml", "doc"),
    (b'progid="Word.Document"', "doc"),
)
#: The part of an OOXML package that says which kind it is, in the order they are looked for.
MAIN_PARTS = tuple((f.main_part, f.name) for f in FORMATS if f.main_part)


def sniff(data: bytes, names: set[str] | None = None) -> str:
    """What the bytes say, from the first :data:`SNIFF_BYTES` of ``data``: a format's name (pdf,
    docx, xlsx, pptx, image, html; rtf, or doc/xls for Office 2003 XML), ``ole`` (a legacy Office
    container: :func:`ole_kind` says which), ``zip`` or ``binary`` for content that is no document
    read here, or ``text`` when no signature is found (the name then decides among the text
    formats). ``names``: a zip package's members, from its directory (:func:`zip_names`); without
    them its kind is read from the member names in its first bytes."""
    head = data[:1024]
    at = head.find(b"%PDF-")
    # the header may follow junk (a MacBinary or mail header), which is binary; text quoting it is text
    if at >= 0 and (not head[:at].strip(b"\xef\xbb\xbf \t\r\n") or b"\x00" in head[:at]):
        return "pdf"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(data[:SNIFF_BYTES], names)
    if head.startswith(_OLE_MAGIC):
        return "ole"
    bmp = head[:2] == b"BM" and len(head) >= 26 and head[6:10] == b"\x00\x00\x00\x00"
    if head.startswith(_IMAGE_MAGIC) or bmp or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    lowered = stripped.lower()
    if lowered.startswith((b"<!doctype html", b"<html")) or _HTML_TAG_RE.search(head.lower()):
        return "html"
    if stripped.startswith(b"{\\rtf"):
        return "rtf"
    if lowered.startswith(b"<?xml"):
        for mark, kind in _OFFICE_2003_XML:
            if mark in data[:SNIFF_BYTES]:
                return kind
    if b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "binary"
    return "text"


def _zip_kind(head: bytes, names: set[str] | None) -> str:
    """docx, xlsx or pptx by the package's main part; a damaged zip by the names in its first
    bytes; else ``zip``."""
    for part, fmt in MAIN_PARTS:
        if names is not None and part in names:
            return fmt
    if names is None:
        for part, fmt in MAIN_PARTS:
            if part.split("/")[0].encode() + b"/" in head:  # the main part's folder: word/, xl/, ppt/
                return fmt
    if b"[Content_Types].xml" in head or (names is not None and "[Content_Types].xml" in names):
        return "docx"  # an OOXML package without a known main part: the DOCX parser names what is missing
    return "zip"


def zip_names(source) -> set[str] | None:
    """The member names of the zip ``source`` (bytes, a path or a binary file), read from its
    directory (nothing expanded); None when it is no readable zip."""
    try:
        return set(zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source).namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None


def sniff_bytes(data: bytes) -> str:
    """:func:`sniff` of a whole file's bytes, a zip's kind read from its directory."""
    return sniff(data, zip_names(data) if data[:4] in (b"PK\x03\x04", b"PK\x05\x06") else None)


def sniff_path(path) -> str:
    """:func:`sniff` of the file at ``path``, reading :data:`SNIFF_BYTES` of it (and a zip's
    directory): the folder loader's test of what a file is before it reads or sends it."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    return sniff(head, zip_names(path) if head[:4] in (b"PK\x03\x04", b"PK\x05\x06") else None)


def ole_kind(data: bytes) -> str:
    """Which legacy Office file an OLE container is, by its streams' (UTF-16) names: ppt, xls,
    doc, or ``ole`` when none is found (an Outlook message, an installer ...)."""
    if "PowerPoint Document".encode("utf-16-le") in data:
        return "ppt"
    if "WordDocument".encode("utf-16-le") in data:
        return "doc"  # before the workbook: a Word file often embeds an Excel chart
    if "Workbook".encode("utf-16-le") in data or "Book".encode("utf-16-le") + b"\x00\x00" in data:
        return "xls"
    return "ole"
