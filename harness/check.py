"""`pgkb check PATH`: link and freshness checks of a folder, offline, as a JSON report for CI.

The folder is read exactly as `pgkb ingest` reads it (:func:`harness.loader.discover` for the
files and their ``source``, :func:`harness.loader.read_document` for front matter and body), so
a document means here what it means there. Nothing is sent to a database: the checks compare the
folder's documents with each other (a ``supersedes`` that names a document already stored but
absent from the folder is reported; load that document's folder with this one to check both).

Findings, each ``{"file", "line", "kind", "message"}`` (``line`` is 1-based, ``null`` when it
does not apply), sorted by file, line and kind:

- ``invalid_document``: a file `pgkb ingest` would refuse (front matter, encoding, empty body,
  a bad retrieval key); the loader's message, its line when it names one.
- ``broken_link``: a Markdown link or image (``[text](target)``, ``![alt](target)``, or a
  reference definition ``[label]: target``) to a relative path that does not exist (relative to
  the linking file; ``/path`` relative to the folder). URLs (``scheme:``), ``mailto:``,
  anchors within the file (``#...``) and links inside code are not checked; a link's
  ``#anchor`` and ``?query`` are ignored (the file must exist, its headings are not compared).
- ``unknown_supersedes``: ``supersedes`` names no document of the same namespace in the folder.
- ``missing_effective_from``: no ``effective_from`` in a namespace where most documents (more
  than half, at least two) have one: probably forgotten, and the lifecycle rule then treats
  the document as in force since always.

Report: ``{"version": 1, "root", "documents", "findings": [...], "counts": {kind: n}}``; exit
status 0 without findings, 1 with findings, 2 for a usage error (no such path).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pgkb_plpy import vocabulary

from . import loader

REPORT_VERSION = 1
KINDS = ("invalid_document", "broken_link", "unknown_supersedes", "missing_effective_from")

# [text](target "title") and ![alt](target); the target ends at whitespace or ')' (or is <...>)
_INLINE_LINK_RE = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)")
# [label]: target, a reference definition at the start of a line
_REFERENCE_RE = re.compile(r"^ {0,3}\[(?:[^\]\\]|\\.)+\]:\s*(<[^>\n]*>|\S+)")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_INLINE_CODE_RE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINE_RE = re.compile(r":(\d+):")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int | None
    kind: str
    message: str

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class _Doc:
    path: Path
    source: str
    namespace: str
    supersedes: str | None
    effective_from: object
    supersedes_line: int | None
    text: str | None  # Markdown/text (links are checked), None for PDF/DOCX/HTML


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link, image and reference definition in ``text``,
    outside fenced code blocks and inline code; the front matter block, if any, is skipped."""
    lines = text.splitlines()
    start = 0
    if lines and lines[0].rstrip() == "---":
        for i in range(1, len(lines)):
            if lines[i].rstrip() in ("---", "..."):
                start = i + 1
                break
    found: list[tuple[int, str]] = []
    for index, line in vocabulary.lines_outside_fences(lines[start:]):
        number = start + index + 1
        reference = _REFERENCE_RE.match(line)
        if reference:
            found.append((number, reference.group(1)))
            continue
        plain = _INLINE_CODE_RE.sub(lambda m: " " * len(m.group(0)), line)
        found.extend((number, m.group(1)) for m in _INLINE_LINK_RE.finditer(plain))
    return found


def _local_path(target: str) -> str | None:
    """The path part of a link target that names a local file, else None."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    if not target or target.startswith("#") or _SCHEME_RE.match(target) or target.startswith("//"):
        return None
    path = re.split(r"[#?]", target, maxsplit=1)[0]
    return unquote(path) or None


def _line_of(message: str) -> int | None:
    match = _LINE_RE.search(message)
    return int(match.group(1)) if match else None


def _supersedes_line(text: str) -> int | None:
    for number, line in enumerate(text.splitlines()[:200], start=1):
        if line.startswith("supersedes:"):
            return number
    return None


def check(root: Path, namespace: str | None = None) -> dict:
    """The report of one folder (or file); raises FileNotFoundError when ``root`` does not exist."""
    root = root.resolve()
    base = root if root.is_dir() else root.parent
    findings: list[Finding] = []
    docs: list[_Doc] = []
    for path, source in loader.discover(root):
        shown = str(path)
        if loader.sends(path):
            docs.append(_Doc(path, source, namespace or "default", None, None, None, None))
            continue
        try:
            doc = loader.read_document(path, source, namespace)
        except (loader.DocumentError, OSError) as exc:
            message = str(exc)
            findings.append(Finding(shown, _line_of(message), "invalid_document", message))
            continue
        text = path.read_text(encoding="utf-8-sig")
        line = _supersedes_line(text) if doc.supersedes else None
        docs.append(_Doc(path, source, doc.namespace, doc.supersedes, doc.effective_from, line, text))

    for doc in docs:
        if doc.text is None:
            continue
        for line, target in link_targets(doc.text):
            local = _local_path(target)
            if local is None:
                continue
            resolved = (base / local.lstrip("/")) if local.startswith("/") else (doc.path.parent / local)
            if not resolved.exists():
                findings.append(
                    Finding(str(doc.path), line, "broken_link", f"link to {target!r}: {local} does not exist")
                )

    sources: dict[str, set[str]] = defaultdict(set)
    for doc in docs:
        sources[doc.namespace].add(doc.source)
    for doc in docs:
        if doc.supersedes and doc.supersedes not in sources[doc.namespace]:
            findings.append(
                Finding(
                    str(doc.path),
                    doc.supersedes_line,
                    "unknown_supersedes",
                    f"supersedes {doc.supersedes!r}, but namespace {doc.namespace!r} of this folder has no "
                    "document with that source (a path relative to the folder)",
                )
            )

    by_namespace: dict[str, list[_Doc]] = defaultdict(list)
    for doc in docs:
        if doc.text is not None:
            by_namespace[doc.namespace].append(doc)
    for ns, members in by_namespace.items():
        dated = sum(1 for d in members if d.effective_from is not None)
        if dated >= 2 and 2 * dated > len(members):
            for doc in members:
                if doc.effective_from is None:
                    findings.append(
                        Finding(
                            str(doc.path),
                            None,
                            "missing_effective_from",
                            f"no effective_from, while {dated} of the {len(members)} documents of namespace "
                            f"{ns!r} have one",
                        )
                    )

    findings.sort(key=lambda f: (f.file, f.line or 0, KINDS.index(f.kind)))  # stable: text order within a line
    counts = Counter(f.kind for f in findings)
    return {
        "version": REPORT_VERSION,
        "root": str(root),
        "documents": len(docs) + counts["invalid_document"],
        "findings": [f.as_dict() for f in findings],
        "counts": {kind: counts[kind] for kind in KINDS},
    }
