"""Heading outline of files as pgkb reads them, and how many of a file's expected headings it gets.

    /opt/pgkb/server-venv/bin/python3 scripts/heading_outline.py FILE...            # print outlines
    /opt/pgkb/server-venv/bin/python3 scripts/heading_outline.py --score FILE...    # headings right
    ... heading_outline.py --package DIR --score FILE...   # with another pgkb_plpy (DIR/pgkb_plpy)

The outline is each distinct section path of the file's chunks, in order ("2 Structure > 2.1 Syntax").
With ``--score`` each FILE is compared with ``FILE.outline`` beside it (the outline counted right by
hand, one path a line): a heading is right when its whole path (its parents too) is in the chunks;
the paths read that are not expected are listed as extra. Run with the server venv's Python (it has
pypdfium2 for PDFs)."""

from __future__ import annotations

import sys
from pathlib import Path

_PACKAGE = sys.argv[sys.argv.index("--package") + 1] if "--package" in sys.argv else None
sys.path.insert(0, _PACKAGE or str(Path(__file__).resolve().parents[1] / "plpython"))

from pgkb_plpy.chunker import chunk_document  # noqa: E402
from pgkb_plpy.parsers import parse_bytes  # noqa: E402


def outline(path: Path) -> list[str]:
    """The distinct section paths of ``path``'s chunks (each ancestor too), in order."""
    parsed = parse_bytes(path.read_bytes(), path.name)
    seen: list[str] = []
    for chunk in chunk_document(parsed.text, None):
        for k in range(1, len(chunk.section_path) + 1):
            key = " > ".join(chunk.section_path[:k])
            if key not in seen:
                seen.append(key)
    return seen


def expected_outline(path: Path) -> list[str]:
    text = path.with_name(path.name + ".outline").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()]


def main(argv: list[str]) -> int:
    score = "--score" in argv
    files = [Path(a) for a in argv if a != "--score" and a != _PACKAGE and a != "--package"]
    right_total = expected_total = 0
    for path in files:
        got = outline(path)
        if not score:
            print(f"== {path.name}")
            print("\n".join(got))
            continue
        expected = expected_outline(path)
        right = [e for e in expected if e in got]
        extra = [g for g in got if g not in expected]
        right_total += len(right)
        expected_total += len(expected)
        print(f"{path.name}: {len(right)}/{len(expected)} headings right ({100 * len(right) / len(expected):.1f} %)")
        for e in expected:
            if e not in got:
                print(f"  missing: {e}")
        for g in extra:
            print(f"  extra:   {g}")
    if score and expected_total:
        print(f"all: {right_total}/{expected_total} headings right ({100 * right_total / expected_total:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
