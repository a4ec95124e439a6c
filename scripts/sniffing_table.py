"""Every supported format read under its right name, a wrong name and no name: whether pgkb reads the
same text as under the right name, and which format it read.

    /opt/pgkb/server-venv/bin/python3 scripts/sniffing_table.py

One sample of each format (the real files of tests/fixtures/files, and XLSX, PPTX and images built
as the tests build them). The wrong names are another format's (``.pdf``, or ``.docx`` for a PDF)
and the legacy Office name of the family (``.doc``, ``.xls``, ``.ppt``). A cell is right when the
text is the right name's, character for character (images read by OCR with ``ocr="run"``). Run with
the server venv's Python (it has pypdfium2, python-docx, Pillow and tesseract's binding);
tests/unit/test_sniffing.py asserts every cell."""

from __future__ import annotations

import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plpython"))
sys.path.insert(0, str(ROOT / "tests"))

from pgkb_plpy.parsers import ParseError, parse_bytes  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "files"


def rendered_image(kind: str, lines: list[str]) -> bytes:
    """A page of ``lines`` rendered in DejaVu Sans (a scan without a text layer), as ``kind`` (PNG, JPEG)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (1600, 120 + 110 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 44)
    for i, line in enumerate(lines):
        draw.text((70, 60 + 110 * i), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


def samples() -> list[tuple[str, str, bytes]]:
    """(format, right name, bytes) of one sample of each supported format."""
    from filebuild import make_pptx, make_xlsx

    scan = ["Receipts are kept for seven years.", "Claims close after ninety days."]
    return [
        ("pdf", "policy-en.pdf", (FIXTURES / "policy-en.pdf").read_bytes()),
        ("docx", "policy-en.docx", (FIXTURES / "policy-en.docx").read_bytes()),
        ("xlsx", "budget.xlsx", make_xlsx([("Budget", [["Item", "Cost"], ["Travel", 1200], ["Rent", 900]])])),
        ("pptx", "deck.pptx", make_pptx([("Onboarding", ["Badge office", "Laptop pickup"], "Closes at 16:00")])),
        ("image", "scan.png", rendered_image("PNG", scan)),
        ("image", "scan.jpg", rendered_image("JPEG", scan)),
        ("html", "runbook-en.html", (FIXTURES / "runbook-en.html").read_bytes()),
        ("markdown", "runbook-en.md", (FIXTURES / "runbook-en.md").read_bytes()),
        ("text", "handbook-zh.txt", (FIXTURES / "handbook-zh.txt").read_bytes()),
        ("text", "handbook-gb18030.txt", (FIXTURES / "handbook-zh.txt").read_text("utf-8").encode("gb18030")),
    ]


_LEGACY_NAME = {"xlsx": ".xls", "pptx": ".ppt"}


def namings(fmt: str, name: str) -> list[tuple[str, str]]:
    """(column, file name) of the namings a sample is read under."""
    stem = Path(name).stem
    return [
        ("right name", name),
        ("another format's name", stem + (".docx" if fmt == "pdf" else ".pdf")),
        ("legacy Office name", stem + _LEGACY_NAME.get(fmt, ".doc")),
        ("no name", stem),
    ]


def read(data: bytes, name: str) -> tuple[str, str | None]:
    """(format read or the error kind, text) of ``data`` named ``name``."""
    try:
        parsed = parse_bytes(data, name, ocr="run")
    except ParseError as exc:
        return f"error {exc.kind}", None
    return parsed.format, parsed.text


def table() -> list[dict]:
    """One row per sample: its format, name and, per naming, (format read, text as the right name's)."""
    rows = []
    for fmt, name, data in samples():
        _, reference = read(data, name)
        cells = {}
        for column, named in namings(fmt, name):
            got, text = read(data, named)
            cells[column] = (got, text is not None and text == reference)
        rows.append({"format": fmt, "name": name, "cells": cells})
    return rows


def main() -> int:
    rows = table()
    columns = [c for c, _ in namings("docx", "x.docx")]
    print("| format | sample | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    right = total = 0
    for row in rows:
        cells = []
        for column in columns:
            got, same = row["cells"][column]
            right, total = right + same, total + 1
            cells.append(f"{'yes' if same else 'NO'} ({got})")
        print(f"| {row['format']} | {row['name']} | " + " | ".join(cells) + " |")
    print(f"\n{right} of {total} read as under the right name")
    return 0 if right == total else 1


if __name__ == "__main__":
    sys.exit(main())
