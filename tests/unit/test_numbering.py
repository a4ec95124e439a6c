"""Numbered sections: numbers go on after any chapter, appendices head their lettered sections, a
wrapped list sentence is no heading, back matter is no subsection, a superscript stays apart from
its word. The real files are in tests/fixtures/files/numbering (sources and licences in its
README.md); each ``FILE.outline`` beside them is the outline counted right by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from pgkb_plpy import parsers
from pgkb_plpy.chunker import _marker, chunk_document

NUMBERING = Path(__file__).parents[1] / "fixtures" / "files" / "numbering"
PACKAGE = str(Path(__file__).parents[2] / "plpython")
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")
needs_server_venv = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


def paths(text: str) -> list[list[str]]:
    return [c.section_path for c in chunk_document(text)]


def outline(text: str) -> list[str]:
    """Each distinct section path (and its ancestors) of the chunks of ``text``, in order."""
    seen: list[str] = []
    for path in paths(text):
        for k in range(1, len(path) + 1):
            key = " > ".join(path[:k])
            if key not in seen:
                seen.append(key)
    return seen


# ------------------------------------------------------------------------- the rules, one by one


def test_a_markdown_heading_with_a_chapter_number_lets_its_subsections_follow():
    text = (
        "# 1 Introduction\n\nIntro.\n\n# 2 Structure\n\nAbout structure.\n\n2.1 Syntax rules\n\nThe rules.\n\n"
        "# 3 Utilities\n\nAbout tools.\n\n3.1 Invoking the parser\n\nRun it.\n"
    )
    assert paths(text) == [
        ["1 Introduction"],
        ["2 Structure"],
        ["2 Structure", "2.1 Syntax rules"],
        ["3 Utilities"],
        ["3 Utilities", "3.1 Invoking the parser"],
    ]


def test_a_chapter_line_sets_the_number_its_sections_follow():
    text = "Chapter 3\n\n# Expressions\n\nIntro.\n\n3.1 Numeric expressions\n\nA number.\n"
    assert paths(text) == [["Expressions"], ["Expressions", "3.1 Numeric expressions"]]


def test_a_chapter_named_inside_a_paragraph_or_in_a_running_header_heads_nothing():
    text = "# 2 Structure\n\nAs shown in\nChapter 3\nthe parser runs.\n\nAppendix A: Copying Information 26\n\nText.\n"
    assert {tuple(p) for p in paths(text)} == {("2 Structure",)}


def test_an_appendix_heads_its_lettered_sections_and_closes_the_numbered_ones():
    text = (
        "# 3 Utilities\n\nTools.\n\n3.1 Invoking the parser\n\nRun it.\n\n"
        "Appendix A Copying Information\n\nCopying.\n\nA.1 GNU Free Documentation License\n\nThe licence.\n"
    )
    assert paths(text)[-2:] == [
        ["Appendix A Copying Information"],
        ["Appendix A Copying Information", "A.1 GNU Free Documentation License"],
    ]


def test_a_chinese_appendix_is_an_appendix_heading():
    marker = _marker("附录A 术语")
    assert marker is not None and marker.kind == "chapter" and marker.number == ("A",)


def test_a_list_sentence_wrapped_over_lines_is_not_a_heading():
    text = (
        "# 4 Modifications\n\nYou must do these things:\n\n"
        "I. Preserve the section Entitled “History”, Preserve its Title, and add to it an item\n"
        "stating at least the title, year, new authors, and publisher of the Modified Version.\n"
    )
    assert {tuple(p) for p in paths(text)} == {("4 Modifications",)}


def test_back_matter_is_not_nested_under_the_last_numbered_section():
    text = "# 3 Utilities\n\nTools.\n\n3.1 Invoking the parser\n\nRun it.\n\n### References\n\n[1] A paper.\n"
    assert paths(text)[-1] == ["References"]


def test_a_numbered_heading_closes_the_markdown_heading_numbered_beside_it():
    text = "# 1. Introduction\n\n## 1.1. Version\n\nVersion 0.21.\n\n1.2. What is this spec?\n\nMany programs.\n"
    assert paths(text)[-1] == ["1. Introduction", "1.2. What is this spec?"]


def test_a_markdown_subsection_stays_under_its_numbered_section():
    text = "# Expressions\n\nIntro.\n\n3.1 Numeric expressions\n\nNumbers.\n\n### 3.1.1 Numeric literals\n\n12.\n"
    assert paths(text)[-1] == ["Expressions", "3.1 Numeric expressions", "3.1.1 Numeric literals"]


def test_a_section_after_an_indented_list_is_not_an_item_of_it():
    text = "1. Upgrade Procedure\n\nSteps:\n\n  1. Build it.\n  2. Ship it.\n\n2. This document\n\nIts source.\n"
    assert paths(text)[-1] == ["2. This document"]


def test_a_document_may_number_its_first_chapter_zero():
    text = "0. Preface\n\nWhy.\n\n0.1. Notices\n\nWho.\n\n1. Conventions\n\nHow.\n"
    assert paths(text) == [["0. Preface"], ["0. Preface", "0.1. Notices"], ["1. Conventions"]]


def test_a_heading_standing_alone_may_skip_numbers_within_its_section():
    text = "1. Introduction\n\nWhy.\n\n1.2 Version 1.2\n\nNew.\n\n1.5 Introduction to version 1.5\n\nNewer.\n"
    assert paths(text)[-1] == ["1. Introduction", "1.5 Introduction to version 1.5"]


def test_a_skipped_number_inside_a_paragraph_stays_text():
    text = "1. Ingredients\n\nMix the flour with\n1.5 kg of sugar and water\nStir well.\n"
    assert paths(text) == [["1. Ingredients"]]


def test_a_list_restarting_at_one_under_a_numbered_markdown_chapter_nests_in_it():
    text = "# 2 Structure\n\nAbout structure.\n\n1. Overview of the parts\n\nThe parts.\n"
    assert paths(text)[-1] == ["2 Structure", "1. Overview of the parts"]


# --------------------------------------------------------------------------------------- PDF


def test_an_appendix_line_matches_the_outline_title_without_the_word_appendix():
    from pgkb_plpy.parsers.pdf import _key, _outline_lines

    marks = {_key("A Copying Information"): 1}
    assert _outline_lines(marks, ["3.2 Invoking asn1Coding", "Appendix A Copying Information"]) == {1: 1}


def test_a_line_ending_like_a_list_item_does_not_take_an_outline_title():
    from pgkb_plpy.parsers.pdf import _key, _outline_lines

    marks = {_key("Numeric expressions"): 2}
    lines = ["— numeric expressions;", "— symbolic expressions;", "3.1 Numeric expressions"]
    assert _outline_lines(marks, lines) == {2: 2}


@pytest.mark.parametrize(
    "text,level",
    [
        ("References", 1),
        ("Acknowledgements", 1),
        ("Appendix A Copying Information", 1),
        ("参考文献", 1),
        ("A.1 GNU Free Documentation License", 2),
        ("3.1.2 Stream Flags", 3),
        ("Introduction", None),
    ],
)
def test_a_pdf_heading_takes_its_level_from_its_number_and_back_matter_is_level_one(text, level):
    from pgkb_plpy.parsers.pdf import _number_depth

    assert _number_depth(text) == level


def _two_column_paper() -> bytes:
    """A page set in two columns: sections at 12 pt, subsections in body type (9 pt) as papers set them."""
    from filebuild import draw_pdf

    body = [
        ("The parser reads the module definitions and builds a tree of nodes", 9),
        ("that later calls walk; each node keeps its type, its tag and", 9),
        ("the value it holds. Errors name the line where they were found.", 9),
    ]
    left = ["1 Introduction", "1.1 Scope", "1.2 Terms", "2 Structure", "2.1 Syntax rules", "2.2 Naming"]
    right = ["2.3 Simple parsing", "3 Utilities", "3.1 Invoking the parser", "3.2 Invoking the coder"]
    lines = [("A Library for Abstract Syntax Notation", 16, 810, 50)]
    for x, headings in ((50, left), (310, right)):
        y = 770
        for heading in headings:
            size = 9 if "." in heading else 12
            for text, text_size in [(heading, size), *body]:
                lines.append((text, text_size, y, x))
                y -= 14 if text_size <= 10 else 20
    lines += [("References", 12, y, 310), ("[1] A. Author. A paper. 2001.", 9, y - 20, 310)]
    return draw_pdf([lines])


@needs_server_venv
def test_every_subsection_of_a_two_column_paper_in_body_type_heads_its_section():
    text = parsers.parse_isolated(
        _two_column_paper(), "paper.pdf", python=str(SERVER_PYTHON), package_path=PACKAGE
    ).text
    assert outline(text) == [
        "1 Introduction",
        "1 Introduction > 1.1 Scope",
        "1 Introduction > 1.2 Terms",
        "2 Structure",
        "2 Structure > 2.1 Syntax rules",
        "2 Structure > 2.2 Naming",
        "2 Structure > 2.3 Simple parsing",
        "3 Utilities",
        "3 Utilities > 3.1 Invoking the parser",
        "3 Utilities > 3.2 Invoking the coder",
        "References",
    ]


@needs_server_venv
def test_a_superscript_footnote_mark_is_kept_apart_from_its_word():
    data = (NUMBERING / "glpk-cnfsat.pdf").read_bytes()
    text = parsers.parse_isolated(data, "glpk-cnfsat.pdf", python=str(SERVER_PYTHON), package_path=PACKAGE).text
    assert "DIMACS CNF-SAT problem format^1" in text
    assert "format1" not in text
    assert "+2^31 − 1" in text


# -------------------------------------------------------------------------------- real files

REAL = sorted(p.name for p in NUMBERING.iterdir() if p.suffix in (".pdf", ".txt"))


def read(name: str) -> str:
    data = (NUMBERING / name).read_bytes()
    if name.endswith(".pdf"):
        if not SERVER_PYTHON.exists():
            pytest.skip("no server venv (scripts/install.sh)")
        return parsers.parse_isolated(data, name, python=str(SERVER_PYTHON), package_path=PACKAGE).text
    return parsers.parse_bytes(data, name).text


def expected(name: str) -> list[str]:
    return [line for line in (NUMBERING / f"{name}.outline").read_text(encoding="utf-8").split("\n") if line]


@pytest.mark.parametrize("name", REAL)
def test_a_real_file_reads_no_numbered_heading_it_does_not_print(name):
    got = outline(read(name))
    wrong = [p for p in got if p not in expected(name) and _marker(p.split(" > ")[-1]) is not None]
    assert wrong == []


def test_numbered_headings_of_the_real_files_are_at_least_95_percent_right():
    right = total = 0
    missing: dict[str, list[str]] = {}
    for name in REAL:
        got = outline(read(name))
        want = expected(name)
        right += sum(1 for p in want if p in got)
        total += len(want)
        missing[name] = [p for p in want if p not in got]
    assert total and right / total >= 0.95, missing
