"""Glossary files (harness.glossary): the formats teams keep glossaries in become concepts, and
every problem is reported with the file and the line, all of them at once."""

from __future__ import annotations

import pytest

from harness.glossary import GlossaryError, read_glossary

SAME_GLOSSARY = {
    "lines": ("g.txt", "# team glossary\nSession | 会话\n\non-call|值班 | 轮值\n"),
    "tsv": ("g.tsv", "concept\ten\tzh\nSession\tSession\t会话\non-call\ton-call\t值班|轮值\n"),
    "csv": ("g.csv", 'en,zh\nSession,会话\n"on-call","值班 | 轮值"\n'),
    "json": (
        "g.json",
        '[\n  ["Session", "会话"],\n  {"concept": "on-call", "en": "on-call", "zh": ["值班", "轮值"]}\n]\n',
    ),
}


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems(path) -> list[str]:
    with pytest.raises(GlossaryError) as caught:
        read_glossary(path)
    return caught.value.problems


@pytest.mark.parametrize("file_format", SAME_GLOSSARY)
def test_every_format_gives_the_same_concepts_and_terms(tmp_path, file_format):
    name, text = SAME_GLOSSARY[file_format]
    concepts = read_glossary(write(tmp_path, name, text))
    assert [(c.name, [t for t, _ in c.terms]) for c in concepts] == [
        ("Session", ["Session", "会话"]),
        ("on-call", ["on-call", "值班", "轮值"]),
    ]


def test_columns_named_by_language_give_the_terms_their_language(tmp_path):
    concepts = read_glossary(write(tmp_path, "g.tsv", "en\tzh\tterms\nrefund\t退款\trefunds|RMA\n"))
    assert concepts[0].terms == [("refund", "en"), ("退款", "zh"), ("refunds", None), ("RMA", None)]


def test_rows_of_one_concept_are_merged_and_duplicate_terms_dropped(tmp_path):
    text = "concept,en,zh\nsession,Session,会话\nsession,session,会话\nsession,login session,\n"
    concepts = read_glossary(write(tmp_path, "g.csv", text))
    assert len(concepts) == 1
    assert [t for t, _ in concepts[0].terms] == ["Session", "会话", "session", "login session"]


def test_whitespace_inside_a_term_is_normalised(tmp_path):
    concepts = read_glossary(write(tmp_path, "g.txt", "  on   call |\t值班  \n"))
    assert [t for t, _ in concepts[0].terms] == ["on call", "值班"]


def test_every_problem_is_reported_with_file_and_line(tmp_path):
    path = write(tmp_path, "bad.txt", "Session | 会话\nlonely\n\nok | fine\n" + "x" * 201 + " | y\n")
    found = problems(path)
    assert found == [
        f"{path}:5: term is 201 characters long; the limit is 200",
        f"{path}:2: concept 'lonely' has a single term; a glossary concept needs at least two (its equivalents)",
        f"{path}:5: concept 'y' has a single term; a glossary concept needs at least two (its equivalents)",
    ]


def test_an_unknown_column_is_refused_on_the_header_line(tmp_path):
    path = write(tmp_path, "bad.tsv", "en\tchinese\nSession\t会话\n")
    assert problems(path) == [
        f"{path}:1: column 'chinese' is neither a language code (en, zh, zh-Hant, ...) nor one of concept, terms"
    ]


def test_a_row_with_more_cells_than_columns_names_its_line(tmp_path):
    path = write(tmp_path, "bad.csv", 'en,zh\nSession,会话\n"multi\nline",退款,extra\n')
    assert problems(path) == [f"{path}:3: 3 cells, but the header names 2 columns"]


def test_json_problems_name_the_line_of_their_concept(tmp_path):
    text = '[\n  ["Session", "会话"],\n  {"en": "refund",\n   "zh": 7},\n  {"english": "x", "zh": "y"}\n]'
    path = write(tmp_path, "bad.json", text)
    assert problems(path) == [
        f"{path}:3: term must be text, got int",
        f"{path}:5: key 'english' is neither a language code nor concept or terms",
        f"{path}:3: concept 'refund' has a single term; a glossary concept needs at least two (its equivalents)",
        f"{path}:5: concept 'y' has a single term; a glossary concept needs at least two (its equivalents)",
    ]


def test_invalid_json_and_invalid_utf8_name_their_line(tmp_path):
    path = write(tmp_path, "bad.json", '[\n  ["a", "b"],\n  ["c" "d"]\n]')
    assert problems(path) == [f"{path}:3: invalid JSON: Expecting ',' delimiter"]
    raw = tmp_path / "bad.txt"
    raw.write_bytes("Session | 会话\n".encode() + b"caf\xe9 | coffee\n")
    assert problems(raw) == [f"{raw}:2: not valid UTF-8 (byte offset 20)"]


def test_a_missing_file_is_named(tmp_path):
    assert problems(tmp_path / "nowhere.tsv") == [f"{tmp_path / 'nowhere.tsv'}: no such file"]
