"""The file formats pgkb knows, one :class:`Format` each in :data:`FORMATS`; every lookup by
suffix, content type or name is derived from that list. A new format is one parser module and one
entry here (and, for a binary format known by a magic number rather than a zip package's main part,
its test in ``_sniff``).

Standard library only and free of relative imports: the folder loader (``harness/loader.py``)
loads this file by itself, outside the in-database package, to know which files to send.
"""

from __future__ import annotations

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
    Format("pdf", "a PDF", BINARY, (".pdf",), ("application/pdf",), "4", "pdf.parse_pdf", ocr=True),
    Format(
        "docx",
        "a DOCX (Word) file",
        BINARY,
        (".docx",),
        (_OOXML + "wordprocessingml.document",),
        "3",
        "docx.parse_docx",
        main_part="word/document.xml",
    ),
    Format(
        "xlsx",
        "an XLSX (Excel) workbook",
        BINARY,
        (".xlsx",),
        (_OOXML + "spreadsheetml.sheet",),
        "2",
        "xlsx.parse_xlsx",
        main_part="xl/workbook.xml",
    ),
    Format(
        "pptx",
        "a PPTX (PowerPoint) presentation",
        BINARY,
        (".pptx",),
        (_OOXML + "presentationml.presentation",),
        "1",
        "pptx.parse_pptx",
        main_part="ppt/presentation.xml",
    ),
    Format(
        "html",
        "an HTML page",
        TEXT,
        (".html", ".htm", ".xhtml"),
        ("text/html", "application/xhtml+xml"),
        "3",
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
