"""Markdown parsing speed: pgkb's whole chunker against markdown-it-py and mistune parsing alone.

pgkb's ``pgkb_plpy.chunker.chunk_document(body, title, 380, 48)`` (the default chunk sizes) does
everything ingest needs from a body: front matter, headings and section paths, blocks, packing
into chunks, token estimates and offsets. The libraries are timed doing less, only their parse:
``markdown_it.MarkdownIt("commonmark").enable("table").parse`` (tokens) and
``mistune.create_markdown(renderer=None, plugins=["table"])`` (an AST). If a parser alone is
slower than the whole chunker, building the chunker on it cannot be faster than what pgkb has.

Input: the given Markdown files, by default the repository's ``docs/*.md`` and ``README.md``.
Each side parses every file once per run; reported is the best of ``--repeat`` interleaved runs
(ms for all files, M characters/s) and each parser's time over the chunker's.

markdown-it-py and mistune are not pgkb dependencies and must not go into its venvs or
``pyproject.toml``: install them into a folder of their own and pass it as ``--extra-site``::

    /opt/pgkb/venv/bin/python -m pip install --target /tmp/pgkb-eco-extra jieba markdown-it-py mistune
    /opt/pgkb/venv/bin/python bench/ecosystem/markdown_parsers.py --extra-site /tmp/pgkb-eco-extra \\
        [--repeat 5] [FILE.md ...]

JSON report on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import REPO, best_of, emit, host, import_extra, use_plpython, version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: docs/*.md and README.md)")
    ap.add_argument("--extra-site", help="folder holding markdown-it-py and mistune (pip install --target)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs; the best counts")
    args = ap.parse_args()

    markdown_it, mistune = import_extra(args.extra_site, "markdown_it", "mistune")
    use_plpython()
    from pgkb_plpy import chunker

    files = args.files or [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    docs = [p.read_text(encoding="utf-8") for p in files]
    chars = sum(map(len, docs))
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    ast = mistune.create_markdown(renderer=None, plugins=["table"])
    sides = {
        "pgkb chunk_document (all of it)": lambda: [chunker.chunk_document(d, "t", 380, 48) for d in docs],
        "markdown-it-py parse only": lambda: [md.parse(d) for d in docs],
        "mistune AST only": lambda: [ast(d) for d in docs],
    }
    seconds = best_of(sides, args.repeat)
    base = seconds["pgkb chunk_document (all of it)"]
    results = [
        {
            "side": name,
            "ms": round(s * 1e3, 1),
            "m_chars_per_s": round(chars / s / 1e6, 2),
            "ratio_over_chunker": round(s / base, 2),
        }
        for name, s in seconds.items()
    ]
    report = {
        "benchmark": "markdown_parsers",
        "host": host(),
        "config": {
            "files": [str(p.resolve().relative_to(REPO) if p.resolve().is_relative_to(REPO) else p) for p in files],
            "characters": chars,
            "repeat": args.repeat,
            "markdown-it-py": version("markdown-it-py") or getattr(markdown_it, "__version__", None),
            "mistune": getattr(mistune, "__version__", None),
        },
        "results": results,
    }
    emit(
        report,
        [f"{len(docs)} files, {chars:,} characters", "ms", "M chars/s", "× chunker"],
        [[r["side"], r["ms"], r["m_chars_per_s"], r["ratio_over_chunker"]] for r in results],
    )


if __name__ == "__main__":
    main()
