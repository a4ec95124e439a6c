"""Unit tests for the bilingual dictionary's rows (pgkb_plpy.dictionary); no database needed."""

from __future__ import annotations

import re

from pgkb_plpy import dictionary

SAMPLE = """# CC-CEDICT
#! version=1
#! entries=5
#! date=2023-11-07T06:42:16Z
信用卡 信用卡 [xin4 yong4 ka3] /credit card/
報銷 报销 [bao4 xiao1] /to submit an expense account/to apply for reimbursement/to write off/to wipe out/
會話 会话 [hui4 hua4] /(language learning) conversation/dialog/(computing) session/CL:個|个[ge4],次[ci4]/
卡 卡 [ka3] /card/
張 张 [Zhang1] /surname Zhang/
""".splitlines(keepends=True)


def rows(lines=SAMPLE) -> list[dictionary.Entry]:
    return list(dictionary.entries(lines))


def test_the_header_gives_name_snapshot_and_size():
    source = dictionary.source(SAMPLE)
    assert (source.name, source.snapshot, source.entries, source.licence) == (
        "CC-CEDICT",
        "2023-11-07",
        5,
        "CC BY-SA 4.0",
    )


def test_a_sense_keeps_its_words_without_notes_or_references():
    assert dictionary.sense_text("(computing) session") == "session"
    assert dictionary.sense_text("(language learning) conversation") == "conversation"
    assert dictionary.sense_text("CL:個|个[ge4]") is None
    assert dictionary.sense_text("variant of 報銷|报销[bao4 xiao1]") is None
    assert dictionary.sense_text("surname Zhang") is None


def test_both_scripts_of_a_headword_are_rows_and_single_characters_are_not():
    headwords = {r.headword for r in rows()}
    assert {"信用卡", "报销", "報銷", "会话", "會話"} <= headwords
    # a single character is never a term of running CJK text (bigrams), so it translates nothing
    assert "卡" not in headwords and "张" not in headwords


def test_phrasal_verbs_and_descriptions_are_left_out():
    senses = [r.sense for r in rows() if r.headword == "报销"]
    # "to write off" would otherwise claim that "write" means 报销
    assert "to write off" not in senses and "to wipe out" not in senses
    assert senses == ["to submit an expense account", "to apply for reimbursement"]
    long_gloss = "#! date=2023-11-07\n測試 测试 [ce4 shi4] /to test/a test of the whole system in production/\n"
    assert [r.sense for r in rows(long_gloss.splitlines(keepends=True)) if r.headword == "测试"] == ["to test"]


def test_terms_are_the_lexical_legs_and_ranks_count_kept_senses():
    session = [r for r in rows() if r.headword == "会话"]
    assert [(r.sense_terms, r.sense_rank, r.senses) for r in session] == [
        (["convers"], 1, 3),
        (["dialog"], 2, 3),
        (["session"], 3, 3),
    ]
    card = next(r for r in rows() if r.headword == "信用卡")
    assert card.headword_terms == ["信用", "用卡"] and card.sense_terms == ["credit", "card"]


def test_the_bundled_snapshot_reads_whole():
    source = dictionary.source(dictionary.data_lines())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source.snapshot)
    assert source.entries > 100_000
