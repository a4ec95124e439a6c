"""Unit tests for query-aware snippets (pgkb_plpy.snippets); no database needed."""

from __future__ import annotations

import re

import pytest
from pgkb_plpy.snippets import make_snippet

FILLER = "Background paragraph without the interesting words. " * 12
TAIL = "Closing remarks that say nothing. " * 12


def _unmarked(snippet: str, mark=("«", "»")) -> str:
    return snippet.replace(mark[0], "").replace(mark[1], "").strip("…")


def test_marks_stemmed_matches_and_centres_on_them():
    content = FILLER + "Refunds are processed within 30 days; a refunded order cannot be refunded twice. " + TAIL
    snippet = make_snippet(content, "refund", width=120)
    assert "«Refunds»" in snippet
    assert "«refunded»" in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    plain = _unmarked(snippet)
    assert len(plain) <= 120 + 25
    # centred: the cluster (about 80 chars) sits in the middle, with context on both sides
    before = snippet.index("«Refunds»") - 1
    after = len(snippet) - snippet.rindex("«refunded»") - len("«refunded»") - 1
    assert 5 <= before <= 40 and 5 <= after <= 40, (before, after, snippet)


def test_window_prefers_the_densest_cluster_of_distinct_terms():
    content = (
        "The refund desk opens at nine. "
        + FILLER
        + "Digital goods: the refund window for digital goods is 14 days. "
        + TAIL
        + "Another refund mention. "
    )
    snippet = make_snippet(content, "refund window digital goods", width=100)
    assert "«window»" in snippet
    assert "«Digital»" in snippet or "«digital»" in snippet
    assert "desk" not in snippet


def test_stop_words_are_not_marked():
    snippet = make_snippet("The refund is not the problem.", "the refund")
    assert "«The»" not in snippet and "«the»" not in snippet
    assert "«refund»" in snippet


def test_identifier_matched_verbatim_case_insensitive():
    content = FILLER + "If the API returns e-4031 the session expired; E-40312 is a different code. " + TAIL
    snippet = make_snippet(content, "What does E-4031 mean?", width=80)
    assert "«e-4031»" in snippet
    assert "«E-40312»" not in snippet


def test_dotted_identifier_marked_whole():
    snippet = make_snippet("Set session.ttl_seconds to 3600 in the config.", "session.ttl_seconds")
    assert "«session.ttl_seconds»" in snippet


def test_cjk_bigrams_marked_and_merged():
    content = "前言部分没有相关内容。" * 20 + "在会议中礼貌地打断别人说话是一门艺术。" + "结尾部分。" * 20
    snippet = make_snippet(content, "如何打断别人说话", width=30)
    assert "«打断别人说话»" in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    assert len(_unmarked(snippet)) <= 30


def test_short_cjk_query():
    snippet = make_snippet("前言。" * 50 + "不要随意打断别人。" + "结尾。" * 50, "打断", width=20)
    assert "«打断»" in snippet


def test_mixed_chinese_english():
    content = "其他说明。" * 30 + "根据退款policy，数字商品在30天内可以申请退款。" + "其他说明。" * 30
    snippet = make_snippet(content, "退款policy在30天内", width=40)
    assert "«退款policy»" in snippet  # adjacent matches of both scripts merge into one mark
    assert "«30天内»" in snippet
    assert "在" in snippet and "«在" not in snippet  # a one-character query gram is not marked


def test_single_character_terms_do_not_light_up_everywhere():
    snippet = make_snippet("Version e of the error E-4031 is documented in appendix e.", "E-4031")
    assert "«E-4031»" in snippet
    assert "«e»" not in snippet


def test_no_match_returns_the_first_width_characters():
    content = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi."
    snippet = make_snippet(content, "zzzz", width=30)
    assert "«" not in snippet
    assert content.startswith(snippet.rstrip("…"))
    assert snippet.endswith("…")
    assert len(snippet) <= 31
    assert make_snippet("Short text.", "zzzz") == "Short text."
    assert make_snippet("Short text.", "") == "Short text."


def test_whitespace_collapsed():
    snippet = make_snippet("Refund\n\n  policy\t\tapplies\r\n  here", "refund")
    assert snippet == "«Refund» policy applies here"


def test_custom_marks():
    assert make_snippet("The refund policy.", "refund", mark=("<b>", "</b>")) == "The <b>refund</b> policy."


def test_window_does_not_split_words_when_a_space_is_near():
    content = FILLER + "Refunds are processed quickly. " + TAIL
    snippet = make_snippet(content, "refunds", width=60)
    body = snippet.strip("…")
    words = set(re.findall(r"\w+", FILLER + TAIL + "Refunds are processed quickly."))
    for word in re.findall(r"\w+", body.replace("«", " ").replace("»", " ")):
        assert word in words, word


@pytest.mark.parametrize(
    "query",
    [
        "'\"; DROP TABLE x; --",
        "%_\\",
        ".*+?[](){}|^$",
        "\x00",
        "refund\x00",
        "😀",
        "👩‍👩‍👧 refund",
        "\u202eרפונד",
        "e\u0301",
        "   ",
        "a" * 10_000,
    ],
)
def test_hostile_queries_do_not_crash(query):
    content = "Some refund text with % and _ and \\ and .* and 😀👍🏽 and שלום and e\u0301 and \x00 NUL."
    snippet = make_snippet(content, query, width=40)
    assert isinstance(snippet, str) and snippet
    assert "\x00" not in snippet


@pytest.mark.parametrize(
    "content",
    ["", "\x00\x00", "😀" * 500, "👩‍👩‍👧" * 100, "e\u0301" * 300, "שלום עולם " * 50, "x" * 100_000],
)
def test_hostile_contents_do_not_crash(content):
    assert isinstance(make_snippet(content, "refund 😀 e", width=50), str)


def test_cut_never_splits_a_zwj_emoji_sequence_or_combining_mark():
    family = "👩\u200d👩\u200d👧"
    content = (family + " ") * 30 + "refund " + (family + " ") * 30
    snippet = make_snippet(content, "refund", width=40).strip("…")
    assert not snippet.startswith("\u200d") and not snippet.endswith("\u200d")
    content = "e\u0301" * 100 + " refund " + "e\u0301" * 100
    snippet = make_snippet(content, "refund", width=30).strip("…")
    assert not snippet.startswith("\u0301")


def test_non_string_and_odd_arguments_degrade_gracefully():
    assert make_snippet(None, "refund") == ""  # type: ignore[arg-type]
    assert make_snippet("refund policy", None) == "refund policy"  # type: ignore[arg-type]
    assert make_snippet("refund policy", "refund", width=0) != ""
    assert "refund" in make_snippet("refund policy", "refund", mark=("only-one",))  # type: ignore[arg-type]


def test_very_long_content_is_handled():
    content = ("filler " * 50_000) + "the refund clause " + ("filler " * 50_000)
    snippet = make_snippet(content, "refund clause", width=60)
    assert "«refund»" in snippet and "«clause»" in snippet
