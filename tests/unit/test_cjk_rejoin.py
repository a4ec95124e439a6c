"""A PDF breaks Chinese lines where the page ends, not where the sentence does, and the parser joins
them again without a space. A line goes on in the next when it fills the page and ends where a
sentence cannot end -- a Han character, an opening bracket or quote, a comma (、，) -- and the next
starts with a Han character or any Chinese punctuation (，。、；：）」》 too). A numbered line
(第X条, 一、, （一）, （1）) starts an article or item of its own, and a line that ends a sentence
(。；：) ends its paragraph. The PDFs are written here with a CID font whose text layer is exact
(tests/filebuild.py) and parsed in the parser's child process."""

from __future__ import annotations

from pathlib import Path

import pytest
from filebuild import SERVER_PYTHON, write_pdf
from pgkb_plpy import parsers

PACKAGE = str(Path(__file__).parents[2] / "plpython")
pytestmark = pytest.mark.skipif(not SERVER_PYTHON.exists(), reason="no server venv (scripts/install.sh)")


def text_of(lines: list[str]) -> str:
    """The parsed text of one page of 14 pt lines (each line's characters a full-width glyph)."""
    page = [(line, 14, 760 - 20 * k) for k, line in enumerate(lines)]
    return parsers.parse_isolated(write_pdf([page]), "p.pdf", python=str(SERVER_PYTHON), package_path=PACKAGE).text


def test_lines_that_start_with_full_width_punctuation_are_joined_without_a_break():
    starts = "，。、；：）」》"
    lines = []
    for k, ch in enumerate(starts, start=1):
        lines.append(f"公共数据的收集、归集、共享、开放和利用应当提升政府治理能力的第{k}项水平")
        lines.append(f"{ch}结合本市实际，制定本办法。")
    text = text_of(lines)
    for k in range(1, len(starts) + 1):
        assert lines[2 * k - 2] + lines[2 * k - 1] in text.split("\n"), text


@pytest.mark.parametrize("end", ["、", "，", "（", "「", "《"])
def test_lines_that_end_with_a_comma_or_an_opening_bracket_are_joined_without_a_break(end):
    first = "本办法所称公共数据，是指本市各级行政机关在依法履行职责过程中收集和产生的各类数据" + end
    text = text_of([first, "包括政务数据和公共服务数据等内容。"])
    assert first + "包括政务数据和公共服务数据等内容。" in text.split("\n"), text


def test_numbered_lines_still_start_their_own_paragraphs():
    full = "第二条　本办法适用于本市行政区域内公共数据的收集、归集、共享、开放以及其监督管理和"
    numbered = ["第三条　公共数据的管理应当遵循统一标准的原则。", "一、总体要求", "（一）统一标准。", "（1）按时更新。"]
    text = text_of([line for item in numbered for line in (full, item)])
    lines = text.split("\n")
    for item in numbered:
        assert item in lines, text


def test_a_reference_to_an_article_at_the_start_of_a_line_goes_on():
    first = "公共管理和服务机构收集公共数据，应当遵循合法、正当、必要的原则，并符合本办法"
    text = text_of([first, "第五条的规定，不得超出履行职责的范围。"])
    assert first + "第五条的规定，不得超出履行职责的范围。" in text.split("\n"), text


def test_a_line_that_ends_a_sentence_or_a_lead_in_ends_its_paragraph():
    full = "本市各级行政机关依法履行职责时收集和产生的数据，应当按照要求进行归集，并遵守规定。"
    lead = "本市各级行政机关依法履行职责时收集和产生的数据，应当按照要求进行归集并遵守下列规定："
    text = text_of([full, "《江川市政务数据目录》所列数据应当按时更新。", lead, "数据应当准确。"])
    assert text.split("\n") == [full, "《江川市政务数据目录》所列数据应当按时更新。", lead, "数据应当准确。"]


def test_english_lines_are_not_joined_without_a_space():
    lines = [
        "Every service reaches the database through a connection pool which keeps connections open",
        "(a fixed number) and lends them to requests.",
    ]
    assert text_of(lines).split("\n") == lines
