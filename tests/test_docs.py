"""The documentation states the present: README.md and docs/*.md say what is true now, every
measured figure says when, on which commit and with which command it was measured, and the
history lives in CHANGELOG.md. No database needed: these tests read the Markdown files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOC_PAGES]

# Words that tell how the work went rather than what is true. CHANGELOG.md is where they belong.
NARRATION = [
    (r"\bissues? \d+", "an issue number"),
    (r"(?<![\w&/])#\d+\b", "an issue or pull request number"),
    (r"\bsessions? \d+\b", "a numbered session"),
    (r"\b(this|that|the previous) session\b", "the session that did the work"),
    (r"\b(code|machine) of the session\b|\bthe session (that|which)\b", "the session that did the work"),
    (r"\bsession's (start|database|changes)\b", "the session that did the work"),
    (r"\bround \d+\b", "a numbered round of work"),
    (r"\b(this|that|the previous|second|first) round\b", "a round of work"),
    (r"\bround'?s? start\b", "the start of a round of work"),
    (r"\bprevious commit\b", "the previous commit"),
    (r"\b(later|earlier) the same day\b", "the order of the day's work"),
    (r"\bsince-fixed\b", "a bug fixed earlier"),
    (r"\bwhat we found\b", "what the work found"),
    (r"\balong the way\b", "how the work went"),
    (r"\bfirst version\b", "an earlier version"),
    (r"\bbefore this (design|change|session|round)\b", "an earlier design"),
    (r"\(was \d", "a superseded figure"),
    (r"\bre-measured after\b", "a superseded measurement"),
    (r"\bnot yet at\b", "work in progress"),
]

# A figure's provenance, in one form everywhere: "Measured 2026-12-02 on b6f2a75".
PROVENANCE = re.compile(r"[Mm]easured\s+\d{4}-\d{2}-\d{2}\b[^.]*?\son\s+`?[0-9a-f]{7,40}\b")
COMMIT_NAMED = re.compile(r"\bon `?([0-9a-f]{7,40})\b")
MEASURED_CELL = re.compile(r"[~≈]?\d[\d,]*\.\d+\b")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of a page outside fenced code blocks, numbered from 1."""
    lines, in_fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line))
    return lines


def _sections(path: Path) -> list[tuple[str, list[str]]]:
    """A page split at its headings (## and deeper): (heading, lines outside code)."""
    sections: list[tuple[str, list[str]]] = [("(top)", [])]
    for _, line in _prose_lines(path):
        if re.match(r"#{1,6} ", line):
            sections.append((line.strip(), []))
        else:
            sections[-1][1].append(line)
    return sections


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for _, line in _prose_lines(path):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            text = re.sub(r"[`*_]", "", match.group(1).strip().lower())
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def _table_cells(lines: list[str]) -> list[str]:
    """The cells of a section's table rows, headers and separator rows left out."""
    rows = [line.strip() for line in lines if line.lstrip().startswith("|")]
    data = [row for i, row in enumerate(rows) if i > 0 and not re.match(r"\|[\s|:-]+\|$", row)]
    return [cell for row in data for cell in row.strip("|").split("|")]


def _is_measured_figure(cell: str) -> bool:
    """A cell that is a number with decimals (a score, a time, a ratio), not prose quoting one."""
    return bool(MEASURED_CELL.match(cell.strip().strip("*").strip()))


def test_no_doc_page_narrates_past_work():
    found = []
    for path in PAGES:
        for number, line in _prose_lines(path):
            for pattern, what in NARRATION:
                if re.search(pattern, line, flags=re.IGNORECASE):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for path in [*PAGES, CHANGELOG]:
        for number, line in _prose_lines(path):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                if not linked.exists():
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {target} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_table_of_measured_figures_says_when_on_which_commit_and_how():
    """A section whose table holds decimal figures names its date and commit; a command shows how."""
    missing = []
    for path in DOC_PAGES:
        for heading, lines in _sections(path):
            if not any(_is_measured_figure(cell) for cell in _table_cells(lines)):
                continue
            text = "\n".join(lines)
            if not PROVENANCE.search(text):
                missing.append(f"{path.relative_to(ROOT)}: {heading}")
    assert not missing, "figures without 'Measured <date> on <commit>':\n" + "\n".join(missing)


def test_every_commit_a_doc_names_is_in_the_history_of_head():
    """A named commit must be an ancestor of HEAD: a clean clone of main has no other branch."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    unknown = []
    for path in [*PAGES, CHANGELOG]:
        for number, line in _prose_lines(path):
            for commit in COMMIT_NAMED.findall(line):
                if not re.search(r"[a-f]", commit) or not re.search(r"\d", commit):
                    continue  # a word of hex letters or a plain number, not a commit
                known = subprocess.run(
                    ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit, "HEAD"], capture_output=True
                )
                if known.returncode != 0:
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: {commit}")
    assert not unknown, "\n".join(unknown)


def test_no_paragraph_is_copied_between_doc_pages():
    """Three consecutive lines of prose or table (outside code) stand in one place only."""
    seen: dict[tuple[str, ...], str] = {}
    copied = []
    for path in PAGES:
        lines = [
            (number, " ".join(line.split()))
            for number, line in _prose_lines(path)
            if len(line.strip()) >= 40 and not re.match(r"\|[\s|:-]+\|$", line.strip())
        ]
        for i in range(len(lines) - 2):
            window = tuple(text for _, text in lines[i : i + 3])
            place = f"{path.relative_to(ROOT)}:{lines[i][0]}"
            if window in seen and not seen[window].startswith(f"{path.relative_to(ROOT)}:"):
                copied.append(f"{place} repeats {seen[window]}: {window[0][:80]}")
            seen.setdefault(window, place)
    assert not copied, "\n".join(copied)


def test_readme_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    assert block, "README.md has no bash block"
    commands = [line for line in block.group(1).splitlines() if line and not line.startswith("#")]
    # CI runs the test command written here.
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_readme_leads_with_the_commands_then_the_tour_then_the_reference():
    headings = [line for _, line in _prose_lines(README) if line.startswith("## ")]
    assert headings[:2] == ["## The two commands", "## A five-minute tour"], headings
    tour = README.read_text(encoding="utf-8").split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    subsections = re.findall(r"^### (.*)$", tour, flags=re.MULTILINE)
    assert subsections == [
        "SQL",
        "CLI",
        "The lab",
        "MCP",
        "LangChain and LlamaIndex",
        "From retrieval to a cited answer",
    ], subsections


def test_status_lists_only_what_does_not_work_yet():
    text = (ROOT / "docs" / "STATUS.md").read_text(encoding="utf-8")
    assert text.startswith("# What does not work yet\n")
    assert "## Security gaps still open" in text
    assert not re.search(r"^(Works|Done|Built and tested)\b", text, flags=re.MULTILINE)
