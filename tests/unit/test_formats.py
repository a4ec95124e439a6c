"""The file format registry (pgkb_plpy.parsers.formats): one entry per format, every lookup derived
from it, and the places outside Python that spell its facts (kb.parser_versions() in
sql/022_files/01_versions_and_limits.sql, the folder loader's suffixes) in agreement with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pgkb_plpy import chunker, parsers
from pgkb_plpy.parsers import detect, formats

FILES_SQL = Path(__file__).parents[2] / "sql" / "022_files" / "01_versions_and_limits.sql"


def sql_function_body(name: str) -> str:
    """The body (between the ``$$``) of the SQL function ``name`` in sql/022_files/01_versions_and_limits.sql."""
    match = re.search(
        rf"CREATE OR REPLACE FUNCTION {re.escape(name)}\(\).*?AS \$\$(.*?)\$\$", FILES_SQL.read_text(), re.S
    )
    assert match, f"{name} not found in {FILES_SQL}"
    return match.group(1)


def test_the_sql_literal_of_parser_versions_is_the_registry():
    literal = re.search(r"SELECT '(\{.*?\})'::jsonb", sql_function_body("kb.parser_versions")).group(1)
    assert json.loads(literal) == formats.FORMAT_VERSIONS == parsers.FORMAT_VERSIONS
    chunker_literal = re.search(r"SELECT '([^']*)'::text", sql_function_body("kb.chunker_version")).group(1)
    assert chunker_literal == chunker.CHUNKER_VERSION


def test_each_suffix_content_type_and_name_belongs_to_one_format():
    names = [f.name for f in formats.FORMATS]
    suffixes = [s for f in formats.FORMATS for s in f.suffixes]
    types = [t for f in formats.FORMATS for t in f.content_types]
    assert len(set(names)) == len(names)
    assert len(set(suffixes)) == len(suffixes)
    assert len(set(types)) == len(types)
    assert all(s.startswith(".") and s == s.lower() for s in suffixes)
    assert all(t == t.lower() and t not in parsers.GENERIC_CONTENT_TYPES for t in types)


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_every_format_is_complete_for_its_family(fmt):
    assert fmt.family in (formats.BINARY, formats.TEXT, formats.LEGACY, formats.OTHER)
    assert fmt.human
    if fmt.family in (formats.BINARY, formats.TEXT):
        assert fmt.supported and fmt.suffixes and fmt.content_type and fmt.save_as is None
        assert parsers.format_version(fmt.name) == f"{fmt.name}/{fmt.version}"
    else:
        assert not fmt.supported and fmt.parser is None
    if fmt.family == formats.LEGACY:
        assert formats.FORMAT_BY_NAME[fmt.save_as].supported and fmt.suffixes and fmt.content_types
    if fmt.family == formats.OTHER:
        assert not fmt.suffixes and not fmt.content_types
    if fmt.parser is not None:  # resolvable without parsing anything
        assert callable(parsers._parse_function(fmt))
    assert fmt.main_part is None or fmt.family == formats.BINARY


@pytest.mark.parametrize("fmt", [f for f in formats.FORMATS if f.family == formats.TEXT], ids=lambda f: f.name)
def test_detection_knows_every_suffix_and_content_type_of_the_registry(fmt):
    sample = b"<html><body><p>x</p></body></html>" if fmt.name == "html" else b"plain words\n"
    for suffix in fmt.suffixes:
        assert detect(sample, f"a{suffix}") == fmt.name
    for content_type in fmt.content_types:
        assert detect(sample, "", f"{content_type}; charset=utf-8") == fmt.name


@pytest.mark.parametrize("fmt", [f for f in formats.FORMATS if f.family == formats.LEGACY], ids=lambda f: f.name)
def test_a_legacy_format_is_refused_naming_what_to_save_it_as(fmt):
    # the bytes confirm a legacy file (an OLE container, RTF); its name says which
    content = b"{\\rtf1 x}" if fmt.name == "rtf" else b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100
    with pytest.raises(parsers.ParseError, match=rf"save it as \.{fmt.save_as}") as caught:
        detect(content, f"old{fmt.suffixes[0]}")
    assert caught.value.kind == "unsupported_format"


def test_the_loader_sends_and_reads_the_files_the_registry_parses():
    from harness import loader

    assert loader.FILE_SUFFIXES == {s for f in formats.FORMATS if f.supported for s in f.suffixes}
    assert loader.TEXT_SUFFIXES == {".md", ".markdown", ".txt", ".text"}  # read here, front matter and all
    images = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".gif", ".bmp", ".webp"}
    assert loader.BINARY_SUFFIXES == {".pdf", ".docx", ".xlsx", ".pptx", ".html", ".htm", ".xhtml"} | images
    assert loader.LEGACY_SUFFIXES == {".doc": ".docx", ".xls": ".xlsx", ".ppt": ".pptx", ".rtf": ".docx"}
