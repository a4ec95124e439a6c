"""pgkb lab in a real browser: Debian's headless Chromium (/usr/bin/chromium) driven by Playwright, against
the lab served by uvicorn on a random loopback port, as a tenant admin role of the world built in
test_lab.py (tenant isolation on). Playwright never downloads a browser here: the executable path is
the system's, with the flags the environment notes ask for (and Playwright's own fresh profile per
launch, which is the fresh --user-data-dir).

Each test saves a screenshot of its page as lab-<page>.png: into $PGKB_LAB_SCREENSHOTS when set
(``PGKB_LAB_SCREENSHOTS=docs bash scripts/test.sh tests/test_lab_browser.py`` refreshes docs/lab-*.png),
else into the test's temporary directory. Every test fails on a script error in the page or on any
request to another host than the lab."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from helpers import wait_for
from playwright.sync_api import Page, expect, sync_playwright
from test_lab import role, world  # noqa: F401  (the module-scoped world fixture, built here again)

from harness.lab import loopback_hosts
from harness.lab.app import create_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NARROW = {"width": 390, "height": 844}
WIDE = {"width": 1280, "height": 900}


@contextmanager
def serving(world_dsn: str, role_name: str):
    """The lab as a role on a random loopback port (a socket bound first, so there is no race for the port)."""
    app = create_app(world_dsn, role(role_name), allowed_hosts=loopback_hosts("127.0.0.1"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=15)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()
    app.state.database.close()


@pytest.fixture(scope="module")
def lab_url(world):  # noqa: F811
    with serving(world, "acme_admin") as url:
        yield url


@pytest.fixture(scope="module")
def reader_url(world):  # noqa: F811
    with serving(world, "acme_reader") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, lab_url):
    context = browser.new_context(base_url=lab_url, viewport=WIDE)
    foreign: list[str] = []

    def only_the_lab(route):
        if route.request.url.startswith(lab_url):
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_lab)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert not errors, errors
    assert not foreign, foreign


def shoot(page: Page, name: str, tmp_path: Path) -> Path:
    folder = Path(os.environ.get("PGKB_LAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"lab-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def ask(page: Page, question: str, namespace: str = "acme") -> None:
    page.goto("/query")
    page.fill("input[name=q]", question)
    page.select_option("select[name=namespace]", namespace)
    page.click("button[type=submit]")


def test_in_a_browser_a_query_shows_the_expected_source_first(page, tmp_path):
    ask(page, "refund within days of delivery")
    first = page.locator("article.result").first
    expect(first).to_have_attribute("data-source", "policies/refund-v2.md")
    expect(first.locator("mark").first).to_be_visible()
    expect(first.locator(".section")).to_contain_text("Period")
    first.locator("details.passage summary").click()
    expect(first.locator(".markdown")).to_contain_text("14 days")
    shoot(page, "query", tmp_path)


def test_in_a_browser_explain_opens_from_the_query_page(page, tmp_path):
    ask(page, "refund within days of delivery")
    page.click("button[data-explain-button]")
    expect(page).to_have_url(re.compile(r"/explain$"))
    expect(page.locator("input[name=q]")).to_have_value("refund within days of delivery")
    expect(page.locator("[data-answer]")).to_be_visible()
    expect(page.locator("[data-timings] .seg").first).to_be_visible()
    expect(page.locator("[data-stages] table")).to_be_visible()
    expect(page.locator("[data-hidden]")).to_contain_text("policies/refund-v1.md")
    shoot(page, "explain", tmp_path)


def test_in_a_browser_compare_of_two_settings_marks_a_rank_change(page, tmp_path):
    page.goto("/compare")
    page.fill("input[name=q]", "refund within days of delivery")
    page.select_option("select[name='a.namespace']", "acme")
    page.select_option("select[name='b.namespace']", "acme")
    page.select_option("select[name='a.mode']", "lexical")
    page.select_option("select[name='b.mode']", "hybrid")
    page.select_option("select[name='b.set.fusion']", "rrf")
    page.fill("input[name='b.set.weight_dense']", "0.9")
    page.click("button[type=submit]")
    expect(page.locator("[data-side=b] article.result").first).to_be_visible()
    assert page.locator("[data-side=b] .move.up, [data-side=b] .move.down, [data-side=b] .move.new").count() > 0
    assert int(page.locator("[data-changed]").get_attribute("data-changed")) > 0
    # the results come right after the form: its settings fold once there are results
    assert page.evaluate("document.querySelector('[data-side=a]').getBoundingClientRect().top") < WIDE["height"]
    shoot(page, "compare", tmp_path)


def test_in_a_browser_documents_are_listed_and_one_opens_with_its_diagrams(page, tmp_path):
    page.goto("/documents?namespace=acme")
    expect(page.locator("[data-documents] tbody tr")).to_have_count(8)
    expect(page.locator("tr[data-source='policies/refund-v1.md']")).to_contain_text("superseded by")
    shoot(page, "documents", tmp_path)
    page.click("a:text-is('manuals/export.md')")
    expect(page.locator("[data-document-source]")).to_have_text("manuals/export.md")
    for summary in page.locator("[data-chunks] details summary").all():
        summary.click()
    expect(page.locator(".mermaid-diagram svg").first).to_be_visible(timeout=20_000)
    expect(page.locator(".mermaid-failed")).to_have_count(1)
    expect(page.locator("pre.mermaid-source[data-drawn=failed]")).to_contain_text("does not parse")
    expect(page.locator(".markdown table").first).to_be_visible()
    shoot(page, "document", tmp_path)


def test_in_a_browser_an_eval_run_opens_with_its_chart(page, tmp_path):
    page.goto("/eval")
    expect(page.locator("[data-chart] svg polyline")).to_have_count(2)
    shoot(page, "eval", tmp_path)
    page.locator("[data-runs] a").first.click()
    expect(page.locator("[data-run-title]")).to_contain_text("Run #")
    expect(page.locator("[data-chart] svg circle[r='6']")).to_have_count(1)
    expect(page.locator("[data-cases] tbody tr")).to_have_count(3)
    shoot(page, "eval-run", tmp_path)
    page.locator("[data-case-link]").first.click()
    expect(page).to_have_url(re.compile(r"/query\?q="))
    expect(page.locator("[data-results]")).to_be_visible()


def page_width(page: Page) -> int:
    return page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")


def test_in_a_browser_the_answer_comes_first_with_its_reason(page, tmp_path):
    ask(page, "zygomorphic xylophone quokka")
    answer = page.locator("[data-answer]")
    expect(answer).to_be_visible()
    assert answer.get_attribute("data-answer") in ("low confidence", "no evidence")
    expect(answer.locator("[data-why]")).to_contain_text("probability")
    top_of_answer = answer.bounding_box()["y"]
    cards = page.locator("article.result")
    if cards.count():
        assert top_of_answer < cards.first.bounding_box()["y"]
    ask(page, "E-4031")
    expect(page.locator("[data-answer]")).to_have_attribute("data-answer", "answer")
    expect(page.locator("article.result").first.locator("[data-lifecycle]")).to_have_attribute(
        "data-lifecycle", "current"
    )
    shoot(page, "answer", tmp_path)


def test_in_a_browser_a_question_of_thousands_of_characters_is_answered_and_kept(page):
    question = "客户自签收之日起多少天内可以申请退款，数字商品下载以后还能退吗？" * 120
    page.goto("/query")
    page.fill("input[name=q]", question)
    page.click("button[type=submit]:text-is('Search')")
    expect(page.locator("[data-answer]")).to_be_visible()
    expect(page.locator("input[name=q]")).to_have_value(question)
    page.click("button[data-explain-button]")
    expect(page.locator("[data-explain]")).to_be_visible()
    expect(page.locator("input[name=q]")).to_have_value(question)


def test_in_a_browser_an_out_of_range_setting_is_named_with_its_range(page):
    page.goto("/query?q=refund&mode=lexical&set.rrf_k=-60")
    expect(page.locator("[role=alert]")).to_contain_text("rrf_k = -60 is outside its range 1 to 1000")
    page.goto("/query")
    page.fill("input[name=q]", "refund")
    page.locator("details.settings summary").click()
    page.fill("input[name='set.weight_dense']", "-5")
    page.click("button[type=submit]:text-is('Search')")
    # the browser refuses it first, from the catalogue's range on the control
    assert page.locator("input[name='set.weight_dense']").evaluate("e => e.validity.rangeUnderflow")


def test_in_a_browser_an_unknown_namespace_is_named(page):
    page.goto("/query?q=refund&namespace=globex")
    expect(page.locator("[role=alert]")).to_contain_text("unknown namespace 'globex'")


@pytest.mark.parametrize(
    "path",
    [
        "/query",
        "/query?q=refund+within+days+of+delivery&namespace=acme",
        "/explain?q=refund+within+days+of+delivery&namespace=acme",
        "/compare?q=refund+within+days+of+delivery&namespace=acme&a.mode=lexical&b.mode=hybrid",
        "/documents?namespace=acme",
        "/eval",
        "/judgments",
    ],
)
def test_in_a_browser_every_page_fits_390_pixels_without_sideways_scrolling(page, path, tmp_path):
    page.set_viewport_size(NARROW)
    page.goto(path)
    # what sticks out, for the failure message (a table.grid scrolls inside itself)
    wide = page.evaluate(
        "[...document.querySelectorAll('body *')]"
        ".filter(e => e.getBoundingClientRect().right > 390 && !e.closest('table.grid'))"
        ".slice(0, 5).map(e => e.tagName + ':' + e.textContent.slice(0, 60))"
    )
    assert page_width(page) <= NARROW["width"], (path, wide)
    header = page.locator("header.top")
    assert header.bounding_box()["width"] <= NARROW["width"]
    for link in header.locator("a").all():  # light text stays on the dark band, each name on one line
        box = link.bounding_box()
        assert box["x"] + box["width"] <= NARROW["width"] and box["height"] < 40
    if path.startswith("/query?"):
        shoot(page, "query-390", tmp_path)
    elif path.startswith("/explain"):
        shoot(page, "explain-390", tmp_path)


def test_in_a_browser_explain_fits_1280_pixels(page, tmp_path):
    page.set_viewport_size(WIDE)
    page.goto("/explain?q=refund+within+days+of+delivery&namespace=acme")
    expect(page.locator("[data-explain]")).to_be_visible()
    assert page_width(page) <= WIDE["width"]


def test_in_a_browser_an_evaluation_runs_from_the_page_and_two_runs_are_compared(page, tmp_path):
    from test_lab import TUNING_CASES

    cases = tmp_path / "acme-browser.json"
    cases.write_text(json.dumps(TUNING_CASES), encoding="utf-8")
    for fusion in ("linear", "rrf"):
        page.goto("/eval")
        page.locator("[data-start] > summary").click()
        page.set_input_files("input[name=upload]", str(cases))
        page.select_option("[data-start] select[name=namespace]", "acme")
        page.check("[data-start] input[name=modes][value=hybrid]")
        page.uncheck("[data-start] input[name=modes][value=auto]")
        page.locator("[data-start] details.settings summary").click()
        page.select_option("[data-start] select[name='set.fusion']", fusion)
        page.click("button[data-start-run]")
        expect(page).to_have_url(re.compile(r"/eval/jobs/\d+$"))
        expect(page.locator("[data-job]")).to_have_attribute("data-job", "finished", timeout=60_000)
    shoot(page, "eval-job", tmp_path)
    page.locator("[data-job-run]").first.click()
    expect(page.locator("[data-configuration] summary")).to_contain_text("fusion=rrf")
    page.click("button[data-compare-with]")
    expect(page.locator("[data-run-against-run]")).to_be_visible()
    expect(page.locator("[data-case-pairs] tbody tr")).to_have_count(len(TUNING_CASES))
    assert page.locator("[data-rbo]").inner_text() != "–"
    shoot(page, "eval-compare", tmp_path)
    page.set_viewport_size(NARROW)
    assert page_width(page) <= NARROW["width"]
    shoot(page, "eval-compare-390", tmp_path)
    page.set_viewport_size(WIDE)
    page.goto("/eval?dataset=cases:acme-browser.json")
    expect(page.locator("[data-chart] svg polyline")).to_have_count(2)
    shoot(page, "eval", tmp_path)
    page.locator("[data-runs] a").first.click()
    page.locator("tr[data-case=refund-then] [data-case-link]").click()
    expect(page.locator("input[name=as_of]")).to_have_value("2024-06-01")
    expect(page.locator("article.result").first).to_have_attribute("data-source", "policies/refund-v1.md")


def stays_on_the_page(page: Page):
    """A marker that only a full page load removes."""
    page.evaluate("window.pgkbNoReload = true")
    return lambda: page.evaluate("window.pgkbNoReload === true")


def test_in_a_browser_a_result_is_judged_in_place_by_mouse_and_keys_and_becomes_a_golden_case(page, tmp_path):
    ask(page, "how long may a customer ask for a refund")
    page.wait_for_load_state("load")  # lab.js (deferred) listens for keys from here
    still_here = stays_on_the_page(page)
    cards = page.locator("article.result")
    first, second = cards.nth(0).get_attribute("data-source"), cards.nth(1).get_attribute("data-source")
    page.keyboard.press("j")
    expect(cards.nth(0)).to_be_focused()
    page.keyboard.press("j")
    expect(cards.nth(1)).to_be_focused()
    page.keyboard.press("3")  # forbidden, by key, on the passage in focus
    expect(cards.nth(1).locator(".judge")).to_have_attribute("data-judge", "forbidden")
    page.keyboard.press("k")
    page.keyboard.press("1")  # relevant
    expect(cards.nth(0).locator(".judge")).to_have_attribute("data-judge", "relevant")
    expect(cards.nth(0).locator("button[data-judgment=relevant]")).to_have_attribute("aria-pressed", "true")
    cards.nth(0).locator("button[data-judgment='not relevant']").click()  # and by mouse: judged again
    expect(cards.nth(0).locator(".judge")).to_have_attribute("data-judge", "not relevant")
    cards.nth(0).locator("button[data-judgment=relevant]").click()
    expect(cards.nth(0).locator(".judge")).to_have_attribute("data-judge", "relevant")
    assert still_here(), "judging reloaded the page"
    shoot(page, "judge", tmp_path)
    page.click("header a:text-is('Judgments')")
    case = page.locator("[data-judged-cases] tr", has_text="how long may a customer ask for a refund")
    expect(case).to_have_attribute("data-state", "ready")
    expect(case).to_contain_text(first)
    expect(case).to_contain_text(second)
    shoot(page, "judgments", tmp_path)
    with page.expect_download() as download:
        page.click("a[data-export]")
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    [golden] = [c for c in exported if c["query"] == "how long may a customer ask for a refund"]
    assert golden["expected"] == [first] and golden["forbidden"] == [second]


def test_in_a_browser_a_question_being_asked_says_so(page):
    page.goto("/query")
    page.fill("input[name=q]", "refund within days of delivery")
    # the answer never comes: the form's own submit is stopped, lab.js still sees it
    page.evaluate("document.querySelector('form.query').addEventListener('submit', (e) => e.preventDefault())")
    page.click("button[type=submit]")
    expect(page.locator("[data-asking]")).to_contain_text("the first question of a new connection loads")
    expect(page.locator("[data-asking]")).to_have_attribute("role", "status")


def test_in_a_browser_chinese_is_drawn_with_glyphs_not_boxes(page):
    """Without a CJK font every Chinese character is drawn as the same box; with one, two differ."""
    page.goto("/query")
    drawings = page.evaluate(
        """() => ['退', '款'].map((ch) => {
               const canvas = document.createElement('canvas');
               canvas.width = canvas.height = 40;
               const pen = canvas.getContext('2d');
               pen.font = '32px ' + getComputedStyle(document.body).fontFamily;
               pen.fillText(ch, 2, 34);
               return Array.from(pen.getImageData(0, 0, 40, 40).data).join(',');
           })"""
    )
    assert drawings[0] != drawings[1], "no CJK font: scripts/test.sh installs fonts-wqy-microhei"


def test_in_a_browser_a_readers_judgment_never_overwrites_an_admins_case(browser, lab_url, reader_url):
    question = "refund within days of delivery"
    for url, judgment in ((lab_url, "relevant"), (reader_url, "not relevant")):
        context = browser.new_context(base_url=url, viewport=WIDE)
        tab = context.new_page()
        ask(tab, question)
        card = tab.locator("article.result[data-source='policies/refund-v2.md']").first
        card.locator(f"button[data-judgment='{judgment}']").click()
        expect(card.locator(".judge")).to_have_attribute("data-judge", judgment)
        if url == reader_url:
            expect(card.locator(".judge .label")).to_contain_text("a suggestion until an admin accepts it")
        context.close()
    context = browser.new_context(base_url=lab_url, viewport=WIDE)
    tab = context.new_page()
    tab.goto("/judgments")
    case = tab.locator("[data-judged-cases] tr", has_text=question)
    expect(case).to_have_attribute("data-state", "ready")
    expect(case.locator("[data-suggestions]")).to_have_text("1")
    expect(case).to_contain_text("policies/refund-v2.md")
    expect(tab.locator("[data-judging-queue]")).to_contain_text("suggested judgments wait for review")
    context.close()


def test_in_a_browser_not_relevant_makes_no_no_answer_case_and_two_dates_make_two_cases(page):
    question = "what does error E-4031 mean"
    ask(page, question)
    page.locator("article.result").first.locator("button[data-judgment='not relevant']").click()
    expect(page.locator("article.result").first.locator(".judge")).to_have_attribute("data-judge", "not relevant")
    for as_of, source in (("2024-06-01", "policies/refund-v1.md"), ("", "policies/refund-v2.md")):
        page.goto("/query")
        page.fill("input[name=q]", "how many days for a refund now")
        page.select_option("select[name=namespace]", "acme")
        page.fill("input[name=as_of]", as_of)
        page.click("button[type=submit]")
        expect(page.locator("[data-as-of]")).to_have_attribute("data-as-of", re.compile(as_of or "now"))
        page.locator(f"article.result[data-source='{source}'] button[data-judgment=relevant]").first.click()
        expect(page.locator(f"article.result[data-source='{source}'] .judge").first).to_have_attribute(
            "data-judge", "relevant"
        )
    page.goto("/judgments")
    expect(page.locator("[data-judged-cases] tr", has_text=question)).to_have_attribute("data-state", "incomplete")
    dated = page.locator("[data-judged-cases] tr", has_text="how many days for a refund now")
    expect(dated).to_have_count(2)
    expect(dated.filter(has_text="as of 2024-06-01")).to_contain_text("policies/refund-v1.md")
    with page.expect_download() as download:
        page.click("a[data-export]")
    exported = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert not [c for c in exported if c["query"] == question]  # incomplete: not a no-answer case
    assert sorted(c.get("as_of") or "" for c in exported if c["query"] == "how many days for a refund now") == [
        "",
        "2024-06-01",
    ]


def test_in_a_browser_runs_over_a_changed_case_set_say_so_before_any_figure(page, tmp_path):
    from test_lab import TUNING_CASES

    cases = tmp_path / "acme-changing.json"
    for version in (
        TUNING_CASES,
        [{**TUNING_CASES[0], "query": TUNING_CASES[0]["query"] + " exactly"}, *TUNING_CASES[1:]],
    ):
        cases.write_text(json.dumps(version), encoding="utf-8")
        page.goto("/eval")
        page.locator("[data-start] > summary").click()
        page.set_input_files("input[name=upload]", str(cases))
        page.select_option("[data-start] select[name=namespace]", "acme")
        page.click("button[data-start-run]")
        expect(page.locator("[data-job]")).to_have_attribute("data-job", "finished", timeout=60_000)
    page.locator("[data-job-run]").first.click()
    page.click("button[data-compare-with]")
    differences = page.locator("[data-run-differences]")
    expect(differences).to_contain_text("not like with like")
    top = page.evaluate("(el) => el.getBoundingClientRect().top", differences.element_handle())
    first_figure = page.locator("[data-case-pairs]")
    assert top < page.evaluate("(el) => el.getBoundingClientRect().top", first_figure.element_handle())
    expect(first_figure.locator("tbody tr")).to_have_count(len(TUNING_CASES) - 1)  # only the cases asked alike


def test_in_a_browser_pages_carry_their_headers_say_who_they_run_as_and_render_snippets(page):
    response = page.goto("/query")
    headers = response.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    expect(page.locator("footer[data-footer]")).to_contain_text("row-level security apply")
    ask(page, "comma separated spreadsheet xlsx")
    snippet = page.locator("article.result[data-source='manuals/export.md'] .snippet").first
    expect(snippet).to_contain_text("·")
    assert "|" not in snippet.inner_text() and "##" not in snippet.inner_text()
    dense = page.locator("article.result [data-leg=dense].on").first
    expect(dense).to_contain_text(re.compile(r"dense #\d+ · (cosine|z-score) "))


def test_in_a_browser_an_evaluation_states_its_bounds_and_is_cancelled_from_its_page(page, world, tmp_path):  # noqa: F811
    import psycopg
    from test_lab import TUNING_CASES

    cases = tmp_path / "acme-cancel.json"
    cases.write_text(json.dumps(TUNING_CASES), encoding="utf-8")
    page.goto("/eval")
    expect(page.locator("[data-job-bounds]")).to_contain_text("cases × k per run")
    with psycopg.connect(world) as holder:  # the job cannot store its run while this lock is held
        holder.execute("LOCK TABLE kb.eval_runs IN EXCLUSIVE MODE")
        page.locator("[data-start] > summary").click()
        page.set_input_files("input[name=upload]", str(cases))
        page.select_option("[data-start] select[name=namespace]", "acme")
        # two modes: the first cannot store its run while the lock is held, so a case of the second is
        # always still to come when the cancel arrives, and the job stops before it
        page.check("[data-start] input[name=modes][value=lexical]")
        page.click("button[data-start-run]")
        expect(page.locator("[data-job]")).to_have_attribute("data-job", "running")
        page.click("button[data-cancel]")
        holder.rollback()
    expect(page.locator("[data-job]")).to_have_attribute("data-job", "cancelled", timeout=60_000)
    expect(page.locator("[data-cancelled]")).to_contain_text("Cancelled")
