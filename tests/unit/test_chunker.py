"""Unit tests for pgkb_plpy.chunker (pure Python, no database)."""

from __future__ import annotations

import hashlib
import random
import re
import time

import pytest
import yaml
from pgkb_plpy.chunker import Chunk, chunk_document, estimate_tokens, strip_front_matter
from pgkb_plpy.vocabulary import is_blank

EN_SENTENCES = [f"Sentence number {i} explains refund rule {i} for customers in region {i % 7}." for i in range(400)]
ZH_ENDS = "。！？；"


def _check_invariants(body: str, chunks: list[Chunk], max_tokens: int | None = None) -> None:
    for i, c in enumerate(chunks):
        assert c.ordinal == i
        assert c.content and c.content == c.content.strip()
        prefix = " > ".join(c.section_path)
        plain = prefix + "\n\n" + c.content if c.section_path else c.content
        if c.embed_text == plain:
            assert c.content_hash == hashlib.sha256(c.embed_text.encode("utf-8")).hexdigest()
        else:  # a code block or diagram is embedded as its description; the hash covers the content too
            assert "[code: " in c.embed_text or "[diagram: " in c.embed_text
            assert c.embed_text.startswith(prefix)
            hashed = c.embed_text + "\x00" + c.content
            assert c.content_hash == hashlib.sha256(hashed.encode("utf-8")).hexdigest()
        assert c.token_count == estimate_tokens(c.embed_text)
        assert 0 <= c.char_start < c.char_end <= len(body)
        src = body[c.char_start : c.char_end].replace("\r\n", "\n")
        # packed blocks are joined by one blank line, so compare the first and last lines; a piece of a
        # split table after the first starts with the table's header, which its span does not hold
        content = c.content
        if content.startswith("|") and not src.startswith(content.split("\n", 1)[0]):
            content = content.split("\n", 2)[2]
        assert src.startswith(content.split("\n", 1)[0][:20])
        assert src.endswith(c.content.rsplit("\n", 1)[-1][-20:])
        if max_tokens is not None:
            assert c.token_count <= max_tokens


# ------------------------------------------------------------------ token estimate


def test_estimate_tokens_rule() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n\t ") == 0
    assert estimate_tokens("the") == 1
    assert estimate_tokens("word") == 1
    assert estimate_tokens("words") == 2  # ceil(5/4)
    assert estimate_tokens("internationalization") == 5  # 20 chars
    assert estimate_tokens("Hi, all!") == 4  # Hi , all !
    assert estimate_tokens("Hello, world!") == 6  # Hell o , worl d !
    assert estimate_tokens("中文分词") == 4
    assert estimate_tokens("退款。") == 3
    assert estimate_tokens("한국어 かな") == 5
    assert estimate_tokens("abc中def") == 3
    assert estimate_tokens("snake_case") == 4  # snak e _ case
    assert estimate_tokens("café naïve") == 3  # non-ASCII words use the same rule
    assert estimate_tokens("nai\u0308ve") == 2  # a combining mark stays inside its word
    assert estimate_tokens("a b") == estimate_tokens("a") + estimate_tokens("b")


# ------------------------------------------------------------------ sections


def test_headings_build_section_paths() -> None:
    body = (
        "# Refund policy\n\nIntro text.\n\n"
        "## Eligibility\n\nWho may ask.\n\n"
        "### Exceptions\n\nSale items are final.\n\n"
        "## Process\n\nFill in the form.\n"
    )
    chunks = chunk_document(body)
    _check_invariants(body, chunks)
    assert [(c.section_path, c.content) for c in chunks] == [
        (["Refund policy"], "Intro text."),
        (["Refund policy", "Eligibility"], "Who may ask."),
        (["Refund policy", "Eligibility", "Exceptions"], "Sale items are final."),
        (["Refund policy", "Process"], "Fill in the form."),
    ]
    assert chunks[2].embed_text == "Refund policy > Eligibility > Exceptions\n\nSale items are final."


def test_nested_headings_reset_deeper_levels() -> None:
    body = "# A\n\n## B\n\n### C\n\ntext c\n\n# D\n\ntext d\n\n### E\n\ntext e\n\n## F\n\ntext f\n"
    paths = [c.section_path for c in chunk_document(body)]
    assert paths == [["A", "B", "C"], ["D"], ["D", "E"], ["D", "F"]]


def test_title_first_and_not_duplicated_by_h1() -> None:
    body = "# Refund Policy\n\nIntro.\n\n## Eligibility\n\nRules.\n"
    chunks = chunk_document(body, title="Refund policy")
    assert [c.section_path for c in chunks] == [["Refund policy"], ["Refund policy", "Eligibility"]]
    chunks = chunk_document(body, title="Handbook")
    assert [c.section_path for c in chunks] == [
        ["Handbook", "Refund Policy"],
        ["Handbook", "Refund Policy", "Eligibility"],
    ]


def test_heading_markers_and_setext() -> None:
    body = "Overview\n========\n\nAbout it.\n\nDetails\n-------\n\nMore.\n\n## Closed ##\n\nText.\n\n#hashtag is text\n"
    chunks = chunk_document(body)
    assert [c.section_path for c in chunks] == [["Overview"], ["Overview", "Details"], ["Overview", "Closed"]]
    assert chunks[-1].content == "Text.\n\n#hashtag is text"


def test_heading_inside_code_block_is_not_a_heading() -> None:
    body = (
        "# Guide\n\n## Setup\n\n```bash\n# install the package\npip install x\n## not a heading\n```\n\n"
        "~~~\n# also not\n~~~\n\nAfter code.\n"
    )
    chunks = chunk_document(body)
    _check_invariants(body, chunks)
    assert all(c.section_path == ["Guide", "Setup"] for c in chunks)
    joined = "\n".join(c.content for c in chunks)
    assert "# install the package" in joined and "## not a heading" in joined and "# also not" in joined


def test_never_pack_across_sections_but_pack_within() -> None:
    body = "## One\n\nPara one.\n\nPara two.\n\n- item\n\n## Two\n\nPara three.\n"
    chunks = chunk_document(body)
    assert [c.content for c in chunks] == ["Para one.\n\nPara two.\n\n- item", "Para three."]
    assert chunks[0].char_start == body.index("Para one.")
    assert chunks[0].char_end == body.index("- item") + len("- item")


def test_no_headings_plain_text() -> None:
    body = "Just some text.\nSecond line.\n\nAnother paragraph."
    chunks = chunk_document(body)
    assert len(chunks) == 1 and chunks[0].section_path == []
    assert chunks[0].embed_text == chunks[0].content == "Just some text.\nSecond line.\n\nAnother paragraph."
    titled = chunk_document(body, title="Notes")
    assert titled[0].section_path == ["Notes"]
    assert titled[0].embed_text.startswith("Notes\n\nJust some text.")


@pytest.mark.parametrize(
    "body", ["", "   ", "\n\n\t\n", "\r\n \r\n", "\u00a0\u3000\u2003\n", "\u200b\u200d\ufeff", "\x1c\u2028 \u00ad"]
)
def test_blank_bodies_give_no_chunks(body: str) -> None:
    assert chunk_document(body) == []
    assert chunk_document(body, title="T") == []


STRUCTURE_ONLY = [
    ("one heading", "# Refunds", "# Refunds"),
    ("headings only", "# A\n\n## B\n", "# A\n\n## B"),
    ("setext heading", "Refunds\n=======\n", "Refunds\n======="),
    ("front matter only", "---\ntitle: x\n---\n\n  \n", "---\ntitle: x\n---"),
    ("thematic breaks only", "***\n\n- - -\n", "***\n\n- - -"),
    ("headings after front matter", "---\ntitle: x\n---\n# Refunds\n", "# Refunds"),
]


@pytest.mark.parametrize("case,body,content", STRUCTURE_ONLY, ids=[c[0] for c in STRUCTURE_ONLY])
def test_a_body_that_is_only_structure_is_one_chunk_of_its_text(case: str, body: str, content: str) -> None:
    chunks = chunk_document(body)
    _check_invariants(body, chunks)
    assert [c.content for c in chunks] == [content]
    titled = chunk_document(body, title="Refunds")
    assert [(c.section_path, c.content) for c in titled] == [(["Refunds"], content)]


def test_a_heading_alone_among_other_text_is_still_only_a_path() -> None:
    # the fallback is for bodies without any paragraph; ordinary documents keep their chunks
    chunks = chunk_document("# Refunds\n\n## Eligibility\n\nFourteen days.\n")
    assert [(c.section_path, c.content) for c in chunks] == [(["Refunds", "Eligibility"], "Fourteen days.")]


def test_a_line_of_invisible_characters_separates_blocks_like_an_empty_line() -> None:
    spaced = chunk_document("# T\n\n- a\n- b\n\nAfter.", max_tokens=6, overlap_tokens=0)
    invisible = chunk_document("# T\n\n- a\n- b\n\u00a0\u200b\nAfter.", max_tokens=6, overlap_tokens=0)
    assert [c.content for c in invisible] == [c.content for c in spaced] == ["- a\n- b", "After."]


_FRAGMENTS = [
    "# Refunds",
    "## Eligibility",
    "Setext\n======",
    "---",
    "***",
    "Refunds take 14 days.",
    "- item one\n- item two",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "```\ncode\n```",
    "> quoted",
    "\u00a0\u3000",
    "\u200b",
    "title: not front matter here",
    "退款十四天。",
    "",
]


def test_every_body_that_is_not_blank_yields_a_chunk() -> None:
    rng = random.Random(12)
    for _ in range(3000):
        parts = [rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 5))]
        body = rng.choice(["", "---\ntitle: x\n---\n"]) + rng.choice(["\n", "\n\n", "\r\n"]).join(parts)
        chunks = chunk_document(body, title=rng.choice([None, "Refunds"]), max_tokens=rng.choice([8, 380]))
        assert (chunks == []) == is_blank(body), repr(body)
        _check_invariants(body, chunks)


# ------------------------------------------------------------------ blocks kept whole


def test_list_kept_whole_with_nested_items() -> None:
    lst = "- first item\n- second item\n  - nested a\n  - nested b\n\n  continued paragraph of item\n- third item"
    before = "Before the list there is an introduction that takes some room."
    body = f"## Steps\n\n{before}\n\n{lst}\n\nAfter the list.\n"
    chunks = chunk_document(body, max_tokens=40, overlap_tokens=0)
    _check_invariants(body, chunks, 40)
    assert [c.content for c in chunks] == [before, f"{lst}\n\nAfter the list."]


def test_every_piece_of_a_table_split_across_chunks_starts_with_its_header() -> None:
    rows = "\n".join(f"| NB-{7700 + i} | certificate rotation failed on node {i} | inspect the CA |" for i in range(40))
    body = f"# Codes\n\n| code | meaning | action |\n|---|---|---|\n{rows}\n"
    chunks = chunk_document(body, max_tokens=120, overlap_tokens=0)
    _check_invariants(body, chunks, 120)
    assert len(chunks) > 3
    for c in chunks:
        assert c.content.startswith("| code | meaning | action |\n|---|---|---|\n| NB-"), c.content[:80]
    found = [line for c in chunks for line in c.content.split("\n")[2:]]
    assert found == rows.split("\n")


def test_table_kept_whole() -> None:
    table = "| plan | price |\n|------|-------|\n| basic | 10 |\n| pro | 20 |\n| team | 50 |"
    before = "Prices below are per month and per seat, billed yearly in advance, VAT excluded."
    body = f"{before}\n\n{table}\n\nTaxes excluded.\n"
    chunks = chunk_document(body, max_tokens=50, overlap_tokens=0)
    _check_invariants(body, chunks, 50)
    assert [c.content for c in chunks] == [before, f"{table}\n\nTaxes excluded."]


def test_code_block_kept_whole() -> None:
    code = "```python\ndef f(x):\n\n    return x + 1\n\n\nprint(f(2))\n```"
    intro = "Intro sentence here, long enough that the code cannot join it."
    body = f"# Code\n\n{intro}\n\n{code}\n\nOutro.\n"
    chunks = chunk_document(body, max_tokens=40, overlap_tokens=0)
    _check_invariants(body, chunks, 40)
    assert [c.content for c in chunks] == [intro, f"{code}\n\nOutro."]


def test_block_quote_is_one_block() -> None:
    body = "> quoted line one\n> # quoted heading marker\n> line three\n\nNormal."
    chunks = chunk_document(body)
    assert chunks[0].section_path == []
    assert chunks[0].content.startswith("> quoted line one\n> # quoted heading marker")


def test_large_code_block_split_at_lines() -> None:
    lines = [f"value_{i} = compute({i}, {i * 2})" for i in range(200)]
    body = "```python\n" + "\n".join(lines) + "\n```\n"
    chunks = chunk_document(body, max_tokens=100, overlap_tokens=0)
    _check_invariants(body, chunks, 100)
    assert len(chunks) > 3
    for c in chunks:
        for line in c.content.split("\n"):
            assert line in lines or line.startswith("```")
    covered = "\n".join(c.content for c in chunks)
    assert covered == body.strip()  # no overlap, nothing lost


# ------------------------------------------------------------------ splitting


def test_chinese_without_spaces_split_at_sentence_ends() -> None:
    sentences = [f"第{i}条规定：退款申请须在购买后三十天内提交{'。！？；'[i % 4]}" for i in range(600)]
    para = "".join(sentences)
    body = "# 退款政策\n\n" + para + "\n"
    chunks = chunk_document(body, max_tokens=120, overlap_tokens=30)
    _check_invariants(body, chunks, 120)
    assert len(chunks) > 10
    for c in chunks:
        assert c.section_path == ["退款政策"]
        assert c.content[-1] in ZH_ENDS  # every piece ends at a sentence end
        assert c.content in para
    # everything is covered, in order
    assert chunks[0].content.startswith("第0条")
    assert chunks[-1].content.endswith(sentences[-1])
    joined = "".join(c.content for c in chunks)
    assert all(s in joined for s in sentences)
    # whole-sentence overlap between consecutive pieces of the split paragraph
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.char_start < a.char_end
        assert a.content.endswith(body[b.char_start : a.char_end])


def test_small_chinese_doc_single_chunk() -> None:
    body = "退款须知。购买后三十天内可以申请退款！特价商品除外；详情请咨询客服？"
    chunks = chunk_document(body, title="须知")
    assert len(chunks) == 1 and chunks[0].content == body
    assert chunks[0].token_count == estimate_tokens("须知") + estimate_tokens(body)


def test_huge_english_paragraph_split_with_overlap() -> None:
    para = " ".join(EN_SENTENCES)
    body = "## Rules\n\n" + para + "\n"
    chunks = chunk_document(body, max_tokens=150, overlap_tokens=40)
    _check_invariants(body, chunks, 150)
    assert len(chunks) > 5
    for c in chunks:
        assert c.content.endswith(".")
        assert c.content[0].isupper()  # starts at a sentence start
    for a, b in zip(chunks, chunks[1:], strict=False):
        first_of_b = re.match(r"[^.]*\.", b.content).group(0)
        assert first_of_b in a.content, "consecutive pieces must overlap by whole sentences"
        overlap = a.content[a.content.index(first_of_b) :]
        assert b.content.startswith(overlap)
        assert 0 < estimate_tokens(overlap) <= 40
        assert b.char_start < a.char_end  # overlapping source spans
    assert chunks[-1].content.endswith(EN_SENTENCES[-1])


def test_overlap_zero_means_partition() -> None:
    para = " ".join(EN_SENTENCES[:100])
    chunks = chunk_document(para, max_tokens=100, overlap_tokens=0)
    _check_invariants(para, chunks, 100)
    assert " ".join(c.content for c in chunks) == para
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.char_end <= b.char_start


def test_no_overlap_between_separate_paragraphs() -> None:
    p1 = " ".join(EN_SENTENCES[:15])
    p2 = " ".join(EN_SENTENCES[15:30])
    assert estimate_tokens(p1) + estimate_tokens(p2) > 300
    body = f"{p1}\n\n{p2}\n"
    chunks = chunk_document(body, max_tokens=300, overlap_tokens=48)
    _check_invariants(body, chunks, 300)
    assert [c.content for c in chunks] == [p1, p2]
    assert chunks[0].char_end <= chunks[1].char_start


def test_one_megabyte_line_without_spaces() -> None:
    line = "abcdefghij" * 100_000
    t0 = time.perf_counter()
    chunks = chunk_document(line, max_tokens=380, overlap_tokens=48)
    assert time.perf_counter() - t0 < 30
    _check_invariants(line, chunks, 380)
    assert len(chunks) > 100
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(line)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.char_start <= a.char_end  # contiguous coverage, nothing dropped
        assert line[b.char_start : b.char_end] == b.content


def test_one_megabyte_chinese_line_without_punctuation() -> None:
    line = "退款申请须在购买后三十天内提交" * 70_000
    chunks = chunk_document(line, max_tokens=200, overlap_tokens=0)
    _check_invariants(line, chunks, 200)
    assert "".join(c.content for c in chunks) == line


def test_long_sentence_falls_back_to_newlines() -> None:
    lines = [f"line {i} of a long log without sentence ends" for i in range(100)]
    body = "\n".join(lines)
    chunks = chunk_document(body, max_tokens=80, overlap_tokens=0)
    _check_invariants(body, chunks, 80)
    for c in chunks:
        assert all(line in lines for line in c.content.split("\n"))


def test_ten_megabytes_is_fast() -> None:
    section = "## Part {i}\n\n" + " ".join(EN_SENTENCES[:40]) + "\n\n- a\n- b\n\n" + "退款说明。" * 50 + "\n\n"
    body = "".join(section.format(i=i) for i in range(10_000_000 // len(section) + 1))
    assert len(body) >= 10_000_000
    t0 = time.perf_counter()
    chunks = chunk_document(body, title="Big")
    assert time.perf_counter() - t0 < 60
    assert all(c.token_count <= 380 for c in chunks)


# ------------------------------------------------------------------ front matter, offsets


def test_strip_front_matter() -> None:
    body = "---\ntitle: Refunds\ntags: [a, b]\n---\n# Refunds\n\nText."
    rest, off = strip_front_matter(body)
    assert rest == "# Refunds\n\nText." and body[off:] == rest
    assert strip_front_matter("no front matter\n---\n") == ("no front matter\n---\n", 0)
    assert strip_front_matter("---\nunterminated: yes\n") == ("---\nunterminated: yes\n", 0)
    crlf = "---\r\na: 1\r\n---\r\nBody"
    assert strip_front_matter(crlf) == ("Body", crlf.index("Body"))


FRONT_MATTER = [
    ("keys and values", "title: Refunds\nstatus: active"),
    ("nested and listed values", "tags:\n- a\n- b\nowner:\n  team: finance\nnote: |\n  two\n  lines"),
    ("flow list and quoted key", 'tags: [a, b]\n"effective from": 2024-01-01'),
    ("comments and blank lines", "# a comment\n\ntitle: x  # trailing comment"),
    ("comments only", "# commented-out template\n# title: x"),
    ("empty", ""),
    ("blank lines only", "\n  \n"),
]


@pytest.mark.parametrize("case,inner", FRONT_MATTER, ids=[c[0] for c in FRONT_MATTER])
def test_a_yaml_mapping_between_the_rules_is_front_matter(case: str, inner: str) -> None:
    body = f"---\n{inner}\n---\nBody text." if inner else "---\n---\nBody text."
    assert strip_front_matter(body) == ("Body text.", body.index("Body text."))
    assert [c.content for c in chunk_document(body)] == ["Body text."]
    assert isinstance(yaml.safe_load(inner), (dict, type(None)))  # what the loader reads it as


NOT_FRONT_MATTER = [
    ("a sentence", "Refunds take fourteen days."),
    ("two paragraphs", "Refunds take fourteen days.\n\nAsk the finance team."),
    ("a list", "- refunds\n- returns"),
    ("a heading and text", "Refunds\n\nFourteen days after delivery."),
    ("a key then prose", "Note: refunds take fourteen days.\nAsk the finance team."),
    ("a link", "https://example.com/refunds"),
    ("indented text first", "  indented refunds text"),
]


@pytest.mark.parametrize("case,inner", NOT_FRONT_MATTER, ids=[c[0] for c in NOT_FRONT_MATTER])
def test_text_between_two_rules_that_is_not_a_yaml_mapping_is_kept_as_text(case: str, inner: str) -> None:
    body = f"---\n{inner}\n---\nAfter."
    assert strip_front_matter(body) == (body, 0)
    chunks = chunk_document(body)
    _check_invariants(body, chunks)
    indexed = "\n".join(c.embed_text for c in chunks)
    for line in inner.splitlines():
        assert line.strip() in indexed
    try:
        loaded = yaml.safe_load(inner)
    except yaml.YAMLError:
        loaded = None
    assert not isinstance(loaded, dict)  # the loader refuses these too (with the line)


def test_front_matter_not_chunked_and_offsets_refer_to_original() -> None:
    body = "---\ntitle: Refunds\nstatus: active\n---\n\nIntro paragraph.\n\n## Details\n\nDetail text.\n"
    chunks = chunk_document(body, title="Refunds")
    _check_invariants(body, chunks)
    assert all("status" not in c.content for c in chunks)
    assert [c.content for c in chunks] == ["Intro paragraph.", "Detail text."]
    assert body[chunks[0].char_start : chunks[0].char_end] == "Intro paragraph."
    assert body[chunks[1].char_start : chunks[1].char_end] == "Detail text."


def test_windows_newlines_offsets_in_original_string() -> None:
    body = "# Title\r\n\r\nFirst line.\r\nSecond line.\r\n\r\n## Sub\r\n\r\n- a\r\n- b\r\n"
    chunks = chunk_document(body)
    _check_invariants(body, chunks)
    assert [c.content for c in chunks] == ["First line.\nSecond line.", "- a\n- b"]
    assert "\r" not in "".join(c.embed_text for c in chunks)
    assert body[chunks[0].char_start : chunks[0].char_end] == "First line.\r\nSecond line."
    assert body[chunks[1].char_start : chunks[1].char_end] == "- a\r\n- b"


def test_offsets_of_split_pieces() -> None:
    body = "# H\n\n" + " ".join(EN_SENTENCES[:80]) + "\n\nTail paragraph."
    chunks = chunk_document(body, max_tokens=120, overlap_tokens=30)
    _check_invariants(body, chunks, 120)
    for c in chunks:
        assert body[c.char_start : c.char_end] == c.content


# ------------------------------------------------------------------ hashes


def test_content_hash_tracks_heading_text() -> None:
    body = "# Policy\n\n## Eligibility\n\nCustomers may ask for a refund.\n"
    renamed = body.replace("Eligibility", "Who is eligible")
    a, b, a2 = chunk_document(body), chunk_document(renamed), chunk_document(body)
    assert a[0].content == b[0].content
    assert a[0].content_hash != b[0].content_hash
    assert [c.content_hash for c in a] == [c.content_hash for c in a2]


def test_editing_one_section_changes_only_its_chunks() -> None:
    sections = [f"## Section {i}\n\n" + " ".join(EN_SENTENCES[i * 20 : i * 20 + 20]) + "\n\n" for i in range(6)]
    body = "# Manual\n\n" + "".join(sections)
    edited_sections = list(sections)
    edited_sections[3] = edited_sections[3].replace("region", "area")
    edited = "# Manual\n\n" + "".join(edited_sections)
    before = chunk_document(body, max_tokens=120)
    after = chunk_document(edited, max_tokens=120)
    changed_before = {c.content_hash for c in before} - {c.content_hash for c in after}
    changed_after = {c.content_hash for c in after} - {c.content_hash for c in before}
    assert changed_before and changed_after
    for c in before:
        if c.content_hash in changed_before:
            assert c.section_path == ["Manual", "Section 3"]
    for c in after:
        if c.content_hash in changed_after:
            assert c.section_path == ["Manual", "Section 3"]
    untouched = [c.content_hash for c in before if c.section_path != ["Manual", "Section 3"]]
    assert untouched == [c.content_hash for c in after if c.section_path != ["Manual", "Section 3"]]


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        chunk_document("text", max_tokens=0)
    with pytest.raises(ValueError):
        chunk_document("text", overlap_tokens=-1)


def test_long_heading_path_counts_against_budget() -> None:
    body = "# " + "very long heading words " * 10 + "\n\n" + " ".join(EN_SENTENCES[:60])
    chunks = chunk_document(body, max_tokens=200)
    _check_invariants(body, chunks, 200)


def test_title_repeated_as_h1_with_other_punctuation_is_not_duplicated():
    body = "# 数据保留规范（Data Retention Policy）\n\n## 目的\n\n明确各类数据的保留期限。"
    chunks = chunk_document(body, title="数据保留规范 Data Retention Policy")
    assert chunks[0].section_path == ["数据保留规范 Data Retention Policy", "目的"]


def test_parsed_blocks_are_one_record_type_with_a_span_each():
    from pgkb_plpy.chunker import _parse

    text = "# Title #\n\nPara one.\n\nSub  heading\n---\n\n- a\n- b\n\n```\ncode\n```\n"
    blocks = _parse(text, 0)
    assert [(b.kind, b.level, b.text) for b in blocks] == [
        ("heading", 1, "Title"),
        ("para", 0, ""),
        ("heading", 2, "Sub heading"),
        ("list", 0, ""),
        ("code", 0, ""),
    ]
    assert [text[b.start : b.end] for b in blocks] == [
        "# Title #",
        "Para one.",
        "Sub  heading\n---",
        "- a\n- b",
        "```\ncode\n```",
    ]
