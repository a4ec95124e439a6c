"""Write tests/fixtures/files/tables/expected.json: the expected tables of the ruled PDF fixtures,
as pdfplumber's "lines" table finder reads them (whitespace in a cell collapsed, a word hyphenated
at a line's end made whole, consecutive equal rows and empty rows and columns left out), with the
corrections checked by eye: a table continued on the next page joined to it (its repeated header
dropped), a multi-row header written as one row (each column named by the cells above it), and
numbered rows printed in one ruled row (a heading and bulleted items beside stacked numbers) as
the rows they are.

pdfplumber is not a dependency of pgkb; run this in a scratch venv:
    python3 -m venv /tmp/plumb && /tmp/plumb/bin/pip install pdfplumber
    /tmp/plumb/bin/python scripts/pdf_tables_expected.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pdfplumber

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "files" / "tables"
#: file: ({page: header rows}, pages that continue the table ending the page before), by eye
CHECKED = {
    "diesel-engines.pdf": ({5: 3}, {4, 7}),
    "row-span.pdf": ({}, set()),
    "group-rows.pdf": ({1: 2}, set()),
    "survey-votes.pdf": ({}, set()),
}


def norm(cell: str | None) -> str:
    return " ".join((cell or "").replace("(cid:129)", "•").replace("-\n", "").split())


def clean(rows: list[list[str | None]]) -> list[list[str]]:
    out: list[list[str]] = []
    for row in ([norm(c) for c in r] for r in rows):
        if any(row) and (not out or row != out[-1]):
            out.append(row)
    if not out:
        return []
    keep = [k for k in range(len(out[0])) if any(r[k] for r in out)]
    return [[r[k] for k in keep] for r in out]


def flatten(raw: list[list[str | None]], depth: int) -> list[list[str | None]]:
    """The first ``depth`` rows as one header row: a None cell is spanned, its text the nearest
    cell to its left in its row, else the one above it."""

    def resolve(r: int, k: int) -> str | None:
        if raw[r][k] is not None:
            return raw[r][k]
        for kk in range(k - 1, -1, -1):
            if raw[r][kk] is not None:
                return raw[r][kk]
        return resolve(r - 1, k) if r else ""

    header = []
    for k in range(len(raw[0])):
        parts: list[str] = []
        for r in range(depth):
            text = norm(resolve(r, k))
            if text and (not parts or parts[-1] != text):
                parts.append(text)
        header.append(" ".join(parts))
    return [header, *raw[depth:]]


def stacked(raw: list[list[str | None]]) -> list[list[str | None]]:
    """Rows printed in one ruled row, as the eye reads them: a first cell of stacked numbers
    (``21\n22\n23``) beside a cell of a heading line and one bulleted line per number is a heading
    row and one row per number."""
    out: list[list[str | None]] = []
    for row in raw:
        labels = (row[0] or "").split("\n")
        text = (row[1] or "").replace("(cid:129)", "•").split("\n") if len(row) == 2 else []
        bullets = [i for i, line in enumerate(text) if line.startswith("•")]
        if len(labels) < 2 or not all(label.isdigit() for label in labels) or len(bullets) != len(labels):
            out.append(row)
            continue
        if bullets[0]:
            out.append(["", " ".join(text[: bullets[0]])])
        for label, start, stop in zip(labels, bullets, [*bullets[1:], len(text)], strict=True):
            out.append([label, " ".join(text[start:stop])])
    return out


def expected(name: str) -> list[dict]:
    depths, continued = CHECKED[name]
    tables: list[dict] = []
    with pdfplumber.open(FOLDER / name) as pdf:
        for number, page in enumerate(pdf.pages, 1):
            for found in page.find_tables():
                raw = stacked(found.extract())
                rows = clean(flatten(raw, depths[number]) if number in depths else raw)
                if len(rows) < 2 or len(rows[0]) < 2:
                    continue
                if number in continued and tables:
                    last = tables[-1]
                    last["rows"] += rows[1:] if rows[0] == last["rows"][0] else rows
                    last["last_page"] = number
                else:
                    tables.append({"first_page": number, "last_page": number, "rows": rows})
    return tables


if __name__ == "__main__":
    out = {name: expected(name) for name in CHECKED}
    (FOLDER / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")
    for name, tables in out.items():
        print(name, [(t["first_page"], t["last_page"], len(t["rows"])) for t in tables])
