"""What DOCX, XLSX and PPTX share: a zip package checked against zip bombs from its directory
before anything is expanded, XML read with lxml without entities, DTDs or network, and Markdown
tables written from rows of cells."""

from __future__ import annotations

import io
import posixpath
import zipfile

from . import LIMITS, MAX_UNCOMPRESSED_BYTES, MAX_ZIP_MEMBERS, ParseError, limit_message

#: The relationships namespace of the package (r:id attributes).
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def check_zip(data: bytes, what: str, main_part: str, kind: str) -> zipfile.ZipFile:
    """The package of ``data``, refused when it is not a readable zip holding ``main_part`` or
    would expand beyond the limits (members, total size, ``file_max_expansion_ratio``)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseError("corrupt", f"not a readable {what} (damaged or truncated zip?): {exc}") from None
    if len(members) > MAX_ZIP_MEMBERS:
        raise ParseError("zip_bomb", f"the {what} holds {len(members)} files; the limit is {MAX_ZIP_MEMBERS}")
    ratio = LIMITS["file_max_expansion_ratio"]
    total = 0
    for info in members:
        if info.flag_bits & 0x1:
            raise ParseError("encrypted", f"the {what} member {info.filename} is encrypted")
        total += info.file_size
        if info.file_size > 1024 * 1024 and info.file_size > ratio * max(1, info.compress_size):
            raise ParseError(
                "zip_bomb",
                limit_message(
                    f"{info.filename} would expand {info.file_size // max(1, info.compress_size)}-fold to "
                    f"{info.file_size} bytes (zip bomb?)",
                    "file_max_expansion_ratio",
                ),
            )
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ParseError(
            "zip_bomb", f"the {what} would expand to {total} bytes (zip bomb?); the limit is {MAX_UNCOMPRESSED_BYTES}"
        )
    if main_part not in {m.filename for m in members}:
        raise ParseError("corrupt", f"the zip has no {main_part}: not {kind}")
    return archive


def read_xml(archive: zipfile.ZipFile, name: str, what: str):
    """The parsed XML part ``name`` (None when absent); no entity expansion, no DTD, no network."""
    from lxml import etree

    try:
        data = archive.read(name)
    except KeyError:
        return None
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True, recover=False)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise ParseError("corrupt", f"not a readable {what}: {name} is not well-formed XML: {exc}") from None


def relationships(archive: zipfile.ZipFile, part: str, what: str) -> dict[str, tuple[str, str]]:
    """Relationship id -> (target part name resolved against ``part``'s folder, type's last
    segment, e.g. ``notesSlide``) of ``part``; external targets are left out."""
    folder, name = posixpath.split(part)
    root = read_xml(archive, posixpath.join(folder, "_rels", name + ".rels"), what)
    out: dict[str, tuple[str, str]] = {}
    if root is None:
        return out
    for rel in root.iter(_PKG_REL):
        target = rel.get("Target") or ""
        if rel.get("TargetMode") == "External":
            continue
        path = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
        out[rel.get("Id") or ""] = (path, (rel.get("Type") or "").rsplit("/", 1)[-1])
    return out


def core_title(archive: zipfile.ZipFile, what: str) -> str | None:
    """dc:title of docProps/core.xml."""
    root = read_xml(archive, "docProps/core.xml", what)
    if root is None:
        return None
    el = root.find("{http://purl.org/dc/elements/1.1/}title")
    return (el.text or "").strip() or None if el is not None else None


def cell_text(text: str) -> str:
    """A cell's text on one line of a Markdown table (a ``|`` escaped, line breaks as spaces)."""
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(rows: list[list[str]]) -> str:
    """Rows of cells as a Markdown table, the first row the header."""
    width = max(len(r) for r in rows)
    lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * width)
    return "\n".join(lines)
