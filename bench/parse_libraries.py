"""pgkb's conversions against the libraries that specialise in one part of them, on the files of
examples/files: trafilatura (HTML main content), docx2python (DOCX notes and revisions) and
pdfplumber (PDF tables). Fidelity: the share of the facts each file must keep that are found
(whitespace ignored), and the share of the chrome or deleted text that must go and is gone;
speed: best of 3 in this process. Needs trafilatura, docx2python, pdfplumber, pypdfium2, lxml:

    python bench/parse_libraries.py
"""

from __future__ import annotations

import io
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "examples" / "files"
sys.path.insert(0, str(ROOT / "plpython"))

#: file -> (facts to keep, text that must be gone)
EXPECTED = {
    "connection-pools.html": (
        [
            "Set the pool size to twice the number of CPU cores",
            "clients wait up to 5 seconds",
            "invoices | 20",
            "billing-eu | invoices",
        ],
        ["We use cookies", "Popular pages", "Great article", "Copyright 2026"],
    ),
    "研发值班手册.html": (
        ["每周一上午十点在值班群内交接", "P2 | 30 分钟 | 值班经理", "夜间故障先电话通知二线"],
        ["本站使用 Cookie", "请问节假日", "版权所有"],
    ),
    "oncall-runbook.docx": (
        [
            "a SEV1 is acknowledged within 5 minutes",
            "held within 3 business days",
            "the Ledger Platform team",
            "Never fail over the primary database",
            "SEV1 | Incident commander",
        ],
        ["within 10 business days"],
    ),
    "差旅费报销细则.docx": (
        ["住宿标准上浮百分之二十", "可乘坐二等座", "伙食补助每天一百元"],
        ["一等座"],
    ),
    "agent-manual.pdf": (
        ["| NB-7703 | Disk almost full | Free space under /var/lib |", "renewal window opens 21 days"],
        ["NodeBridge Agent Manual - Release", "Confidential - Northwind", "........"],
    ),
}


def norm(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("\\", ""))


def score(text: str, name: str) -> tuple[float, float]:
    keep, gone = EXPECTED[name]
    flat = norm(text)
    return (
        sum(norm(k) in flat for k in keep) / len(keep),
        sum(norm(g) not in flat for g in gone) / len(gone),
    )


def timed(fn, repeat: int = 3) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def pdfplumber_text(data: bytes) -> str:
    import pdfplumber

    parts = []
    with pdfplumber.open(io.BytesIO(data)) as pdf:
        for page in pdf.pages:
            parts.append(page.extract_text() or "")
            for table in page.extract_tables():
                parts += ["| " + " | ".join(c or "" for c in row) + " |" for row in table]
    return "\n".join(parts)


def main() -> None:
    import trafilatura
    from docx2python import docx2python
    from pgkb_plpy.parsers.docx import parse_docx
    from pgkb_plpy.parsers.html import parse_html
    from pgkb_plpy.parsers.pdf import parse_pdf

    candidates = {
        ".html": {
            "pgkb parse_html": lambda d: parse_html(d).text,
            "trafilatura (markdown, tables)": lambda d: (
                trafilatura.extract(
                    d.decode("utf-8"), output_format="markdown", include_tables=True, include_comments=False
                )
                or ""
            ),
        },
        ".docx": {
            "pgkb parse_docx": lambda d: parse_docx(d).text,
            "docx2python": lambda d: docx2python(io.BytesIO(d)).text,
        },
        ".pdf": {
            "pgkb parse_pdf": lambda d: parse_pdf(d).text,
            "pdfplumber (text + tables)": pdfplumber_text,
        },
    }
    print("| file | converter | ms | facts kept | chrome/deleted gone |")
    print("| --- | --- | --- | --- | --- |")
    for name in EXPECTED:
        data = (FILES / name).read_bytes()
        for label, fn in candidates[Path(name).suffix].items():
            seconds, text = timed(lambda fn=fn, data=data: fn(data))
            kept, gone = score(text, name)
            print(f"| {name} | {label} | {seconds * 1000:.1f} | {kept:.0%} | {gone:.0%} |")


if __name__ == "__main__":
    main()
