"""What an HTML page's parts become: boxes set into the article (ads, sponsored content, author and
byline boxes, related posts) are left out and named in a warning; inline code is a Markdown code
span; the title is the h1 when the ``<title>`` is the h1 with the site's name; literal text shows no
backslash escapes; unknown entities and elements left open keep their text. No database needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pgkb_plpy.chunker import chunk_document
from pgkb_plpy.lexical import document_terms, inline_code
from pgkb_plpy.parsers.html import html_to_text, parse_html

HTML = Path(__file__).parents[1] / "fixtures" / "files" / "html"
WORD_JOINER = "\u2060"


def article(inner: str, title: str = "Refund policy") -> str:
    return (
        f"<html><head><title>{title}</title></head><body><article><h1>Refund policy</h1>{inner}</article></body></html>"
    )


BODY = (
    "<p>Refunds are paid to the original card within 14 days of the return reaching our warehouse.</p>"
    "<p>Items must be unused and in their original packaging. Gift cards are not refundable at all.</p>"
)


def chunks_of(html: str):
    text, title = html_to_text(html)
    return chunk_document(text, title)


# ------------------------------------------------------------------ 1. boxes set into the article


def test_a_sponsored_block_inside_the_article_is_not_indexed():
    text, _ = html_to_text((HTML / "blog-article-with-boxes.html").read_text(encoding="utf-8"))
    assert "AcmePay" not in text and "cashback" not in text
    assert "Refunds are paid to the original card" in text and "Gift cards are not refundable" in text


def test_an_author_box_inside_the_article_is_not_indexed():
    text, _ = html_to_text((HTML / "blog-article-with-boxes.html").read_text(encoding="utf-8"))
    assert "About the author" not in text and "leads the payments support team" not in text
    assert "By Jane Doe" not in text  # the byline box
    assert "How we ship orders abroad" not in text  # related posts
    assert text.split("\n\n")[0] == "# Refund policy" and "## Eligibility" in text


@pytest.mark.parametrize(
    "box",
    [
        '<div class="ad-slot">Advertisement: buy more</div>',
        '<div id="sponsoredContent">Brought to you by AcmePay</div>',
        '<div class="wp-block-group authorBox">Jane Doe writes here</div>',
        '<section class="post-author-info">Jane Doe writes here</section>',
        '<div role="region" aria-label="Advertisement">Buy more</div>',
        '<div aria-label="About the author">Jane Doe writes here</div>',
        '<div data-component="AuthorBio">Jane Doe writes here</div>',
        '<div data-testid="newsletter-signup">Get our newsletter</div>',
        '<div data-sponsored="true">Brought to you by AcmePay</div>',
        "<aside><p>Related: How we ship orders abroad</p></aside>",
        '<div role="complementary">Related: How we ship orders</div>',
    ],
)
def test_a_box_named_by_its_class_id_role_aria_label_or_data_attributes_is_not_indexed(box):
    text, _ = html_to_text(article(BODY + box))
    assert text.startswith("# Refund policy\n\nRefunds are paid") and text.endswith("not refundable at all.")


def test_a_text_container_with_ad_placement_hints_or_a_topic_is_kept():
    html = article(
        '<div data-ad-insert-after="2"><p>Refunds are paid within 14 days.</p></div>'
        '<div data-section="advertising"><p>Advertising costs are never refunded.</p></div>' + BODY
    )
    text, _ = html_to_text(html)
    assert "Refunds are paid within 14 days." in text and "Advertising costs are never refunded." in text


def test_a_box_named_like_furniture_that_holds_most_of_the_article_is_kept():
    long_text = "Refunds are paid within 14 days of the return. " * 6
    text, _ = html_to_text(article(f'<div class="promo-text"><p>{long_text}</p></div><p>Contact us.</p>'))
    assert long_text.strip() in text


def test_a_span_or_link_named_like_furniture_inside_a_sentence_is_kept():
    text, _ = html_to_text(
        article(
            '<p>Written by <span class="byline">Jane Doe</span> with help from '
            '<a class="sponsor-link" href="/p">our partner Acme</a>.</p>' + BODY
        )
    )
    assert "Written by Jane Doe with help from our partner Acme." in text


def test_an_element_holding_the_main_content_is_never_dropped_for_its_name():
    chrome = "".join(
        f'<div class="cookie-notice"><p>We use cookies number {i} on this site.</p></div>' for i in range(12)
    )
    html = (
        f"<html><body>{chrome}<div class='layout-with-sidebar'><article><h1>Refund policy</h1>{BODY}</article>"
        "</div></body></html>"
    )
    text, _ = html_to_text(html)
    assert "Refunds are paid to the original card" in text and "cookies" not in text


def test_an_aside_that_is_a_note_or_a_footnote_is_content():
    text, _ = html_to_text((HTML / "docs-page-with-notes.html").read_text(encoding="utf-8"))
    assert "Check the database's connection limit before raising the pool size." in text
    assert "A reload re-reads it without dropping connections." in text


def test_the_boxes_left_out_of_the_main_content_are_named_in_a_warning():
    parsed = parse_html((HTML / "blog-article-with-boxes.html").read_bytes())
    [warning] = parsed.warnings
    assert warning["kind"] == "box_not_indexed" and warning["page"] is None
    message = warning["message"]
    assert message.startswith("4 block(s) inside the main content not indexed")
    assert 'p.byline "By Jane Doe · 3 May 2026"' in message
    assert 'div.sponsored-content "Sponsored: AcmePay Plus gives you cashback on every order. S…"' in message
    assert "div.author-bio" in message and "section.related-posts" in message


def test_chrome_outside_the_main_content_and_empty_ad_slots_raise_no_warning():
    html = (
        '<html><body><div class="cookie-banner">We use cookies.</div><article><h1>Refund policy</h1>'
        f'{BODY}<div class="ad-slot"></div></article></body></html>'
    ).encode()
    assert parse_html(html).warnings == []


# ------------------------------------------------------------------------------- 2. inline code


def test_inline_code_in_a_paragraph_becomes_a_markdown_code_span():
    text, _ = html_to_text((HTML / "docs-page-with-notes.html").read_text(encoding="utf-8"))
    assert (
        "Every service reaches the database through a pool. Press `Ctrl`+`C` to stop the `pgbouncer` process, "
        "then raise `pool_size` in `pgbouncer.ini`."
    ) in text
    assert "```ini\n[pgbouncer]\npool_size = 40\n```" in text


def test_inline_code_of_a_web_page_weighs_as_the_markdown_path_weighs_it():
    text, _ = html_to_text("<p>Set <code>session.idle_timeout_seconds</code> to 300.</p>")
    markdown = "Set `session.idle_timeout_seconds` to 300."
    assert text == markdown
    assert inline_code(text) == ["session.idle_timeout_seconds"]


def test_inline_code_in_list_items_and_table_cells_becomes_a_code_span():
    text, _ = html_to_text(
        "<ul><li><code>pool_size</code>: connections per pool</li></ul>"
        "<table><tr><th>Key</th><th>Default</th></tr><tr><td><code>pool_mode</code></td><td>session</td></tr></table>"
    )
    assert text == ("- `pool_size`: connections per pool\n\n| Key | Default |\n|---|---|\n| `pool_mode` | session |")


def test_a_code_span_holding_backticks_is_fenced_by_a_longer_run():
    text, _ = html_to_text("<p>Quote with <code>a`b</code> or <code>`x`</code>, never <code> </code>.</p>")
    assert text == "Quote with ``a`b`` or `` `x` ``, never ."
    assert inline_code(text) == ["a`b", "`x`"]


def test_inline_code_in_a_heading_stays_plain_text():
    text, title = html_to_text("<h1>The <code>pool_size</code> setting</h1><p>It sets the size.</p>")
    assert text.startswith("# The pool_size setting") and title == "The pool_size setting"


def test_inline_code_left_open_does_not_swallow_the_next_paragraph_s_markup():
    text, _ = html_to_text("<p>Run <code>make</p><p>Then <code>make install</code>.</p>")
    assert text == "Run make\n\nThen `make install`."


# ------------------------------------------------------------------------ 3. roots not doubled


@pytest.mark.parametrize(
    "title",
    [
        "Refund policy | Acme Help Center",
        "Refund policy - Acme",
        "Refund policy – Acme",
        "Refund Policy — Acme Help Center",
        "Refund policy · Acme",
        "Refund policy|Acme",
        "Acme Help Center | Refund policy",
        "Acme: Refund policy",
        "Refund policy | Help Center | Acme",
    ],
)
def test_the_title_is_the_h1_when_the_title_tag_is_the_h1_with_the_site_s_name(title):
    assert html_to_text(article(BODY, title))[1] == "Refund policy"


def test_a_page_whose_title_names_its_site_has_one_root_in_every_section_path():
    chunks = chunks_of((HTML / "blog-article-with-boxes.html").read_text(encoding="utf-8"))
    assert [c.section_path for c in chunks] == [["Refund policy"], ["Refund policy", "Eligibility"]]


@pytest.mark.parametrize("title", ["Returns and exchanges", "Refund policy for resellers | Acme", "Refund policy"])
def test_a_title_that_is_not_the_h1_with_a_site_name_is_kept(title):
    assert html_to_text(article(BODY, title))[1] == title


def test_a_heading_that_repeats_the_heading_right_above_it_is_written_once():
    text, title = html_to_text(
        "<title>Refund policy | Acme</title><h1>Refund policy</h1><h2>Refund Policy</h2><p>Paid in 14 days.</p>"
        "<h2>Refund policy</h2><p>Again, later.</p>"
    )
    assert text == "# Refund policy\n\nPaid in 14 days.\n\n## Refund policy\n\nAgain, later."
    assert [c.section_path for c in chunk_document(text, title)] == [
        ["Refund policy"],
        ["Refund policy", "Refund policy"],
    ]


# --------------------------------------------------------------------- 4. no backslash escapes


def test_a_hash_line_stays_text_and_shows_no_backslash():
    chunks = chunks_of("<h1>Pools</h1><p># Set the pool size to twice the number of cores.</p>")
    assert [c.section_path for c in chunks] == [["Pools"]]
    [chunk] = chunks
    assert "\\" not in chunk.content and chunk.content.endswith("# Set the pool size to twice the number of cores.")
    assert document_terms(chunk.content) == document_terms("Set the pool size to twice the number of cores.")


def test_asterisks_underscores_and_backslashes_in_text_are_left_as_written():
    text, _ = html_to_text(
        r"<p>*Required fields</p><p>_id is the key</p><p>C:\Users\jane and 2*3</p>"
        "<ul><li>*bold* claim</li><li>_private</li><li>&gt; quoted</li></ul>"
    )
    assert (
        text
        == "*Required fields\n\n_id is the key\n\nC:\\Users\\jane and 2*3\n\n- *bold* claim\n- _private\n- > quoted"
    )


@pytest.mark.parametrize(
    "line",
    ["# Heading-like", "### x", "```", "~~~ python", "| a | b |", "---", "***", "___", "===", "- - -", "|---|---|"],
)
def test_a_line_the_chunker_would_read_as_structure_stays_text_behind_an_invisible_joiner(line):
    text, _ = html_to_text(f"<h1>Doc</h1><p>Before the line<br>{line}<br>after the line.</p><p>Next paragraph.</p>")
    assert text == f"# Doc\n\nBefore the line\n{WORD_JOINER}{line}\nafter the line.\n\nNext paragraph."
    chunks = chunk_document(text, None)
    assert [c.section_path for c in chunks] == [["Doc"]]
    assert line in chunks[0].content and "Next paragraph." in chunks[0].content


def test_a_pipe_in_a_table_cell_keeps_its_escape_so_the_row_keeps_its_cells():
    text, _ = html_to_text("<table><tr><th>Operator</th><th>Meaning</th></tr><tr><td>a|b</td><td>or</td></tr></table>")
    assert text.split("\n")[2] == "| a\\|b | or |"


# ------------------------------------------------------------- 5. text after unknown entities


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<p>Fish &chips; and more text</p><p>Next.</p>", "Fish &chips; and more text\n\nNext."),
        ("<p>Tom &foo; Jerry</p>", "Tom &foo; Jerry"),
        ("<p>R&D and Q & A stay</p>", "R&D and Q & A stay"),
        ("<p>a&nbspb c</p>", "a b c"),
        ("<p>see &#xZZ; after</p>", "see &#xZZ; after"),
        ("<p>ends with &", "ends with &"),
        ("<p>ends with &foo", "ends with &foo"),
        ("<p>q?a=1&b=2 done</p>", "q?a=1&b=2 done"),
        ("<h2>Q&A &unknown; section</h2><p>Body.</p>", "## Q&A &unknown; section\n\nBody."),
        ("<table><tr><td>a &x; b</td></tr></table>", "| a &x; b |\n|---|"),
    ],
)
def test_text_after_an_unresolved_entity_is_kept(html, expected):
    assert html_to_text(html)[0] == expected


def test_an_element_left_open_at_the_end_of_the_page_keeps_its_text():
    assert html_to_text("<p>Run this:</p><pre>make &amp;&amp; make install")[0] == (
        "Run this:\n\n```\nmake && make install\n```"
    )
    assert html_to_text("<table><tr><th>Key</th></tr><tr><td>pool_size")[0] == "| Key |\n|---|\n| pool_size |"


def test_a_cell_before_any_row_keeps_its_text():
    assert html_to_text("<table><td>alone</td></table>")[0] == "| alone |\n|---|"


def test_a_section_named_for_a_topic_like_promotions_or_sponsorship_is_kept():
    html = article(
        '<section class="promotion-terms"><p>Promotional prices are refunded at the price paid.</p></section>'
        '<div class="sponsorship-tiers"><p>Event sponsorships are never refunded.</p></div>' + BODY
    )
    text, _ = html_to_text(html)
    assert "Promotional prices are refunded" in text and "Event sponsorships are never refunded." in text
