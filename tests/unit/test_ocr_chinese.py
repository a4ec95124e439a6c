"""OCR of Chinese scans keeps their structure: tesseract's output normalised as Chinese is printed,
chapter and article markers checked against their sequence, lines re-joined into paragraphs, the
document titled. The scans are built by tests/scanbuild.py (a regulation drawn with Pillow, skewed,
sealed); the measured pages are read through the child process with the server venv's tesseract."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from pgkb_plpy import parsers
from pgkb_plpy.parsers import ocr, pdf

sys.path.insert(0, str(Path(__file__).parents[1]))
import scanbuild  # noqa: E402

PACKAGE = str(Path(__file__).parents[2] / "plpython")
SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")
needs_tesseract = pytest.mark.skipif(
    not SERVER_PYTHON.exists() or shutil.which("tesseract") is None or not scanbuild.FONT.exists(),
    reason="no server venv, tesseract or fonts-wqy-microhei",
)

#: Floors on the measured scan (tests/scanbuild.py sample_scan; docs/INGEST.md has the figures):
#: character accuracy of each page, whitespace ignored for Chinese.
FLOORS = {1: 0.99, 2: 0.97, 3: 0.99}


# ------------------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    "read,printed",
    [
        ("(=) 不予共享的公共数据。", "（二）不予共享的公共数据。"),
        ("(一 ) 统筹规划、集约建设 ;", "（一）统筹规划、集约建设；"),
        ("《三 ) 不予共享的公共数据。", "（三）不予共享的公共数据。"),
        ("第三条 ”公共数据管理遵循以下原则 :", "第三条\u3000公共数据管理遵循以下原则："),
        ("第一章 “总则", "第一章\u3000总则"),
        ("江政发 (2024] 12 号", "江政发〔2024〕12号"),
        ("江政发【2024 ] 12号", "江政发〔2024〕12号"),
        ("本 办 法 自 2024 年 3 月 1 日 起 施 行 .", "本办法自2024年3月1日起施行。"),
        ("Records are kept for 7 years.", "Records are kept for 7 years."),
    ],
)
def test_ocr_lines_are_normalised_as_chinese_is_printed(read, printed):
    assert ocr.normalise(read) == printed


def test_a_misread_article_number_is_set_right_by_the_articles_around_it():
    lines = ["第一条\u3000甲。", "第二条\u3000乙。", "第二条\u3000丙。", "第四条\u3000丁。"]
    assert ocr.repair_divisions(lines)[2] == "第三条\u3000丙。"


def test_a_garbled_article_marker_between_its_neighbours_becomes_the_missing_article():
    lines = [
        "第八条\u3000公共数据以共享为原则。",
        "SAR 市大数据管理机构应当制定公共数据开放清单。",
        "第十条\u3000本办法自公布之日起施行。",
    ]
    assert ocr.repair_divisions(lines)[1] == "第九条\u3000市大数据管理机构应当制定公共数据开放清单。"


def test_a_garbled_chapter_heading_after_the_last_chapter_becomes_the_next_chapter():
    lines = ["第三章\u3000共享与开放", "第九条\u3000开放清单。", "SOS “附则", "第十条\u3000本办法自公布之日起施行。"]
    assert ocr.repair_divisions(lines)[2] == "第四章\u3000附则"


def test_a_sentence_or_a_reference_is_never_made_a_division():
    lines = [
        "第一章\u3000总则",
        "第一条\u3000甲。",
        "第五条的规定不适用于本市。",  # a reference at the start of a wrapped line
        "OK 这是一句很长的正文，说明了适用范围和例外情形。",  # a sentence: not a chapter title
        "第二条\u3000乙。",
    ]
    assert ocr.repair_divisions(lines) == lines


def test_a_marker_its_neighbours_do_not_fix_stays_as_read():
    lines = ["第一条\u3000甲。", "第七条\u3000乙。", "第九条\u3000丙。"]
    assert ocr.repair_divisions(lines) == lines


@pytest.mark.parametrize(
    "n,numeral", [(1, "一"), (10, "十"), (12, "十二"), (20, "二十"), (99, "九十九"), (105, "一百零五")]
)
def test_article_numbers_are_written_in_chinese_numerals(n, numeral):
    assert ocr.zh_numeral(n) == numeral


def test_lines_of_a_paragraph_are_joined_and_numbered_lines_start_their_own():
    L = ocr.Line
    lines = [
        L("第一条\u3000为了规范公共数据的收集、共享、开放和安全管理，提高政府治理能力和公共服", 100, 2000),
        L("务水平，制定本办法。", 100, 700),
        L("第二条\u3000本市行政区域内公共数据的收集、归集、共享、开放、利用及其安全管理，适用", 100, 1990),
        L("本办法。公共数据按照共享属性分为以下类型：依法收集、按需共享、分类管理、安全可", 100, 1995),
        L("（一）无条件共享的公共数据；", 100, 900),
        L("依照本办法第四条和第五条的规定，公共管理和服务机构收集公共数据应当遵循原则，不得", 100, 2000),
        L("第五条的规定另有要求的除外。", 100, 800),
    ]
    assert ocr.rejoin(lines) == [
        "第一条\u3000为了规范公共数据的收集、共享、开放和安全管理，提高政府治理能力和公共服务水平，制定本办法。",
        "第二条\u3000本市行政区域内公共数据的收集、归集、共享、开放、利用及其安全管理，适用本办法。"
        "公共数据按照共享属性分为以下类型：依法收集、按需共享、分类管理、安全可",
        "（一）无条件共享的公共数据；",
        "依照本办法第四条和第五条的规定，公共管理和服务机构收集公共数据应当遵循原则，不得第五条的规定另有要求的除外。",
    ]


def test_english_lines_set_ragged_are_joined_with_a_space():
    L = ocr.Line
    lines = [
        L("Financial records are kept for seven years after the end of the year they", 100, 1850),
        L("concern.", 100, 300),
    ]
    lines.insert(0, L("Records are destroyed only with the written approval of the records manager of the", 100, 2000))
    assert ocr.rejoin(lines)[-1].endswith("the year they concern.")


def test_a_scanned_regulation_is_titled_by_its_name_not_by_its_red_header_or_number():
    lines = ["江川市人民政府文件", "江政发〔2024〕12号", "江川市公共数据管理办法", "第一章\u3000总则"]
    assert ocr.title_of(lines) == "江川市公共数据管理办法"
    assert ocr.title_of(["第一条\u3000为了规范公共数据的管理，制定本办法。"]) is None


def test_a_mostly_han_page_is_told_from_an_english_one():
    assert ocr.han_share(["第一条\u3000本办法适用于 API 接口"]) >= ocr.HAN_PAGE_SHARE
    assert ocr.han_share(["Records Retention Policy", "1 Purpose 目的"]) < ocr.HAN_PAGE_SHARE


class _Page:
    def close(self):
        pass


class _Engine:
    """OCR that fails on page 2 and reads one line elsewhere."""

    LANGUAGES = ocr.LANGUAGES
    MIN_CONFIDENCE = ocr.MIN_CONFIDENCE
    repair_divisions = staticmethod(ocr.repair_divisions)
    rejoin = staticmethod(ocr.rejoin)

    def read_page(self, page, languages):
        if page.index == 1:
            raise RuntimeError("tesseract: Error during processing.")
        return [ocr.Line(f"第{ocr.zh_numeral(page.index + 1)}条\u3000正文。", 0, 100)], 90.0, languages


def test_a_page_ocr_fails_on_is_warned_about_and_the_other_pages_are_read():
    class Pdf:
        def __getitem__(self, index):
            page = _Page()
            page.index = index
            return page

    warnings: list[dict] = []
    read, pages = pdf._ocr_read(Pdf(), [0, 1, 2], warnings, _Engine())
    assert [w["kind"] for w in warnings] == ["ocr_failed"] and warnings[0]["page"] == 2
    assert "tesseract: Error during processing." in warnings[0]["message"]
    assert sorted(read) == [0, 2] and [p["page"] for p in pages] == [1, 3]


# ------------------------------------------------------------------------------ measured on scans


@pytest.fixture(scope="module")
def scanned():
    data, truths = scanbuild.sample_scan()
    parsed = parsers.parse_isolated(
        data, "scan.pdf", python=str(SERVER_PYTHON), package_path=PACKAGE, ocr="run", timeout_s=300
    )
    return parsed, scanbuild.measure(parsed, truths)


@needs_tesseract
def test_ocr_of_scanned_pages_reads_each_page_above_its_floor(scanned):
    _, rows = scanned
    low = [(r["page"], r["name"], round(r["accuracy"], 4)) for r in rows if r["accuracy"] < FLOORS[r["page"]]]
    assert not low, low


@needs_tesseract
def test_ocr_of_a_scanned_regulation_keeps_every_chapter_and_article_and_makes_no_sentence_a_section(scanned):
    _, rows = scanned
    assert [r["structure"] for r in rows] == [(11, 11, 0), (9, 9, 0), (0, 0, 0)]


@needs_tesseract
def test_a_scanned_regulation_is_titled_and_its_chinese_pages_read_with_chinese_alone(scanned):
    parsed, _ = scanned
    assert parsed.title == "江川市公共数据管理办法"
    assert [p["languages"] for p in parsed.ocr["pages"]] == [ocr.CHINESE, ocr.CHINESE, ocr.LANGUAGES]
    assert "（二）有条件共享的公共数据" in parsed.text and "(=)" not in parsed.text
