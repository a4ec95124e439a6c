"""Parse speed of pgkb's PDF and DOCX conversions (best of 3, in this process, no child):

* PDF pages/s on the text PDFs given (default: the two PDF manuals Debian ships, when installed,
  and examples/files/agent-manual.pdf repeated to 120 pages);
* DOCX seconds for a generated document of 12,000 paragraphs (headings, bullets, body text:
  about 1.7 MB of document.xml), written with python-docx.

The baseline, in the same run: the raw read of the same file, what every conversion must do at
least (PDF: pypdfium2's plain text of every page; DOCX: unzip and parse word/document.xml with
lxml); the ratio is pgkb's time over the raw read's. Another checkout (``--plpython``) is compared
by running the scenario once with each.

Run with the server venv; ``--plpython`` chooses which checkout's pgkb_plpy is measured. Prints
JSON on stdout and a table on stderr:

    /opt/pgkb/server-venv/bin/python -m bench parse_speed [--plpython DIR] [PDF ...]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBIAN_PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def long_manual() -> bytes:
    sys.path.insert(0, str(ROOT / "examples" / "files"))
    sys.path.insert(0, str(ROOT / "tests"))
    import generate
    from filebuild import draw_pdf_here

    pages = generate.manual_pages()
    return draw_pdf_here((pages * (120 // len(pages) + 1))[:120])


def big_docx() -> bytes:
    import docx

    document = docx.Document()
    for i in range(12000):
        if i % 20 == 0:
            document.add_heading(f"Section {i // 20}", level=1 + (i // 20) % 3)
        elif i % 7 == 0:
            document.add_paragraph(f"Item {i} of the list with some words", style="List Bullet")
        else:
            document.add_paragraph(
                f"Paragraph {i}: the operator rotates the certificate of node {i} before the renewal window "
                "closes, and records it."
            )
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def raw_pdf_text(data: bytes) -> str:
    """The baseline of a PDF: pypdfium2's plain text of every page, no structure."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    return "\n".join(pdf[i].get_textpage().get_text_range() for i in range(len(pdf)))


def raw_docx_xml(data: bytes) -> object:
    """The baseline of a DOCX: its word/document.xml unzipped and parsed by lxml."""
    import zipfile

    from lxml import etree

    return etree.fromstring(zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml"))


def timed_against_raw(convert, raw, data: bytes) -> tuple[float, float, object]:
    """(pgkb's best seconds, the raw read's best seconds, pgkb's result)."""
    seconds, parsed = best_of(lambda: convert(data))
    raw_seconds, _ = best_of(lambda: raw(data))
    return seconds, raw_seconds, parsed


def result(kind: str, name: str, seconds: float, raw_seconds: float, **extra) -> dict:
    """One row of the report: pgkb's and the raw read's best seconds and their ratio."""
    ratio = round(seconds / raw_seconds, 2) if raw_seconds else None
    return {
        "format": kind,
        "file": name,
        **extra,
        "seconds": round(seconds, 4),
        "raw_seconds": round(raw_seconds, 4),
        "ratio_to_raw": ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plpython", default=str(ROOT / "plpython"), help="directory holding pgkb_plpy")
    parser.add_argument("pdfs", nargs="*")
    args = parser.parse_args()
    sys.path.insert(0, args.plpython)
    from pgkb_plpy.parsers.docx import parse_docx
    from pgkb_plpy.parsers.pdf import parse_pdf

    pdfs = [(Path(p).name, Path(p).read_bytes()) for p in args.pdfs]
    if not pdfs:
        pdfs = [(p.name, p.read_bytes()) for p in DEBIAN_PDFS if p.exists()]
        pdfs.append(("agent-manual x 120 pages", long_manual()))
    rows = []
    for name, data in pdfs:
        seconds, raw_seconds, parsed = timed_against_raw(parse_pdf, raw_pdf_text, data)
        pages = len(parsed.page_starts)
        rows.append(result("PDF", name, seconds, raw_seconds, pages=pages, pages_per_s=round(pages / seconds)))
    data = big_docx()
    seconds, raw_seconds, _ = timed_against_raw(parse_docx, raw_docx_xml, data)
    rows.append(result("DOCX", "12,000 paragraphs", seconds, raw_seconds, bytes=len(data)))
    print(json.dumps({"benchmark": "parse_speed", "plpython": args.plpython, "results": rows}, indent=2))
    print(f"pgkb_plpy from {args.plpython}\n| file | pgkb | pgkb / raw read |\n| --- | --- | --- |", file=sys.stderr)
    for row in rows:
        speed = f"{row['pages_per_s']} pages/s" if row["format"] == "PDF" else f"{row['seconds']:.2f} s"
        print(f"| {row['format']} {row['file']} | {speed} | {row['ratio_to_raw']} |", file=sys.stderr)


if __name__ == "__main__":
    main()
