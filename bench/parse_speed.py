"""Parse speed of pgkb's PDF and DOCX conversions (best of 3, in this process, no child):

* PDF pages/s on the text PDFs given (default: the two PDF manuals Debian ships, when installed,
  and examples/files/agent-manual.pdf repeated to 120 pages);
* DOCX seconds for a generated document of 12,000 paragraphs (headings, bullets, body text:
  about 1.7 MB of document.xml), written with python-docx.

Run with the server venv; ``--plpython`` chooses which checkout's pgkb_plpy is measured:

    /opt/pgkb/server-venv/bin/python bench/parse_speed.py [--plpython DIR] [PDF ...]
"""

from __future__ import annotations

import argparse
import io
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
    print(f"pgkb_plpy from {args.plpython}")
    for name, data in pdfs:
        seconds, parsed = best_of(lambda data=data: parse_pdf(data))
        pages = len(parsed.page_starts)
        print(f"PDF  {name}: {pages} pages, {pages / seconds:.0f} pages/s")
    data = big_docx()
    seconds, parsed = best_of(lambda: parse_docx(data))
    print(f"DOCX 12,000 paragraphs ({len(data)} bytes): {seconds:.2f} s")


if __name__ == "__main__":
    main()
