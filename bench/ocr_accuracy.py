"""OCR speed and character accuracy on generated scans of known text.

Each page of the text PDFs given (default: tests/fixtures/files/handbook-zh.pdf, policy-en.pdf and
examples/files/agent-manual.pdf) is rendered by PDFium at ``--scan-dpi`` into an image-only page
(a clean "scan"); pgkb's PDF conversion then reads it with OCR (``parse_bytes(..., ocr="run")``,
tesseract chi_sim+eng through pytesseract, in this process). The reference is the original page's
text layer. Character accuracy = 1 - (Levenshtein distance / reference length), whitespace and
the Markdown escapes removed from both sides; speed is pages per second of the whole conversion
(render at 300 dpi + OCR), one core (``OMP_THREAD_LIMIT=1``, as in the parser's child process).

Run with the server venv; prints one JSON object, then a table:

    OMP_THREAD_LIMIT=1 /opt/pgkb/server-venv/bin/python bench/ocr_accuracy.py [--plpython DIR] [PDF ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PDFS = [
    ROOT / "tests/fixtures/files/handbook-zh.pdf",
    ROOT / "tests/fixtures/files/policy-en.pdf",
    ROOT / "examples/files/agent-manual.pdf",
]


def normalise(text: str) -> str:
    """Text compared: no whitespace, no Markdown escapes or heading marks, full-width punctuation as ASCII."""
    import unicodedata

    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"(?m)^#+ ", "", text).replace("\\", "").replace("|", "").replace("---", "")
    return re.sub(r"\s+", "", text)


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def scans(pdf_bytes: bytes, dpi: int) -> list[tuple[str, bytes]]:
    """(reference text, one-page image-only PDF) of each page."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf_bytes)
    out = []
    for index in range(len(doc)):
        page = doc[index]
        reference = page.get_textpage().get_text_range()
        image = page.render(scale=dpi / 72).to_pil().convert("RGB")
        buf = io.BytesIO()
        image.save(buf, format="PDF", resolution=dpi)
        out.append((reference, buf.getvalue()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pdfs", nargs="*", type=Path, default=DEFAULT_PDFS)
    ap.add_argument("--plpython", type=Path, default=ROOT / "plpython", help="where pgkb_plpy is imported from")
    ap.add_argument("--scan-dpi", type=int, default=200, help="resolution of the generated scans")
    args = ap.parse_args()
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    sys.path.insert(0, str(args.plpython))
    from pgkb_plpy.parsers import ocr, parse_bytes

    results = []
    for path in args.pdfs:
        for number, (reference, scan) in enumerate(scans(path.read_bytes(), args.scan_dpi), start=1):
            started = time.perf_counter()
            parsed = parse_bytes(scan, "scan.pdf", ocr="run")
            seconds = time.perf_counter() - started
            ref, got = normalise(reference), normalise(parsed.text)
            distance = levenshtein(ref, got)
            results.append(
                {
                    "file": path.name,
                    "page": number,
                    "reference_chars": len(ref),
                    "ocr_chars": len(got),
                    "char_accuracy": round(max(0.0, 1 - distance / max(1, len(ref))), 4),
                    "confidence": parsed.ocr["pages"][0]["confidence"],
                    "seconds": round(seconds, 2),
                }
            )
    pages = len(results)
    total_s = sum(r["seconds"] for r in results)
    summary = {
        "engine": ocr.engine(),
        "render_dpi": ocr.DPI,
        "scan_dpi": args.scan_dpi,
        "pages": pages,
        "pages_per_second": round(pages / total_s, 3) if total_s else None,
        "char_accuracy": round(
            1
            - sum((1 - r["char_accuracy"]) * r["reference_chars"] for r in results)
            / max(1, sum(r["reference_chars"] for r in results)),
            4,
        ),
        "results": results,
    }
    print(json.dumps(summary, ensure_ascii=False, indent=1))
    print(f"\n{'file':<22} {'page':>4} {'chars':>6} {'accuracy':>9} {'confidence':>10} {'s':>6}")
    for r in results:
        print(
            f"{r['file']:<22} {r['page']:>4} {r['reference_chars']:>6} {r['char_accuracy']:>9.1%} "
            f"{r['confidence']:>10.1f} {r['seconds']:>6.2f}"
        )
    print(f"{'all':<22} {pages:>4} {'':>6} {summary['char_accuracy']:>9.1%} {'':>10} {total_s:>6.2f}")
    print(f"pages/s: {summary['pages_per_second']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
