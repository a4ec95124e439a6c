"""`pgkb glossary`: load a team glossary from a file into `kb.glossary`, and list it.

The glossary is plain SQL (`INSERT INTO kb.glossary (namespace, concept, term, lang) ...`); this
module only reads the file formats teams keep glossaries in and inserts their rows in one
transaction. Rules of matching and expansion: docs/GLOSSARY.md.

Formats, chosen by the file's suffix (or ``--format``):

* ``.txt`` (and any other suffix) -- *lines*: one concept per line, its terms separated by ``|``
  (``Session | 会话``); blank lines and lines starting with ``#`` are skipped. The concept is
  named after its first term; terms have no language.
* ``.csv`` / ``.tsv`` -- a header row names the columns: language codes (``en``, ``zh``,
  ``zh-Hant``), each holding that language's term, ``terms`` for terms of no stated language,
  and optionally ``concept`` (the concept's name; default: the row's first term). A cell may
  hold several terms separated by ``|``; an empty cell is no term.
* ``.json`` -- a list of concepts, each either a list of terms or an object with an optional
  ``"concept"``, an optional ``"terms"`` list and language codes mapping to a term or a list of
  terms: ``[["Session", "会话"], {"concept": "on-call", "en": "on-call", "zh": ["值班", "轮值"]}]``.

Rows of one concept (lines, rows or objects naming the same concept) are merged; a concept
needs at least two distinct terms. Every problem is reported with the file and line and then
nothing is loaded: bad UTF-8, an unknown column, an empty or over-long term, a concept with a
single term, a term without BM25 terms (only stop words or punctuation: no query could match
it), a row the role may not write. ``--replace`` deletes the namespace's rows (the global
rows with ``--global``) in the same transaction, so the glossary afterwards is exactly the
file; without it, the file's rows are added and rows already present are kept."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .config import load_settings
from .db import connect

FORMATS = ("lines", "csv", "tsv", "json")
MAX_TERM_CHARS = 200  # kb.glossary's CHECK
NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")  # kb.documents' CHECK, kb.glossary's too
LANGUAGE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$")
WORD = re.compile(r"[^\W_]+")  # the letters-and-digits runs of a term: its words, for the stop-word warning
SPECIAL_COLUMNS = ("concept", "terms")
MAX_ERRORS_SHOWN = 25


class GlossaryError(ValueError):
    """A glossary file that cannot be loaded; ``problems`` lists each with its file and line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = problems[:MAX_ERRORS_SHOWN]
        more = len(problems) - len(shown)
        super().__init__("\n".join(shown + ([f"... and {more} more"] if more > 0 else [])))


@dataclass
class Concept:
    """One concept of a file: its name, its distinct terms (term, language) and where it starts."""

    name: str
    line: int
    terms: list[tuple[str, str | None]] = field(default_factory=list)
    term_lines: dict[str, int] = field(default_factory=dict)

    def add(self, term: str, language: str | None, line: int) -> None:
        if term not in self.term_lines:
            self.terms.append((term, language))
            self.term_lines[term] = line


@dataclass
class LoadSummary:
    file: str
    namespace: str | None
    concepts: int
    terms: int
    inserted: int
    deleted: int
    dry_run: bool
    warnings: list[str]

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "namespace": self.namespace,
            "concepts": self.concepts,
            "terms": self.terms,
            "inserted": self.inserted,
            "deleted": self.deleted,
            "dry_run": self.dry_run,
            "warnings": self.warnings,
        }


# -- reading files ---------------------------------------------------------------------------------


def detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    return {".csv": "csv", ".tsv": "tsv", ".json": "json"}.get(suffix, "lines")


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise GlossaryError([f"{path}: no such file"]) from None
    except OSError as exc:
        raise GlossaryError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise GlossaryError([f"{path}:{line}: not valid UTF-8 (byte offset {exc.start})"]) from None
    return text.removeprefix("\ufeff")


class _Collector:
    """Concepts in file order, merged by name, and the problems found, each with file and line."""

    def __init__(self, path: Path):
        self.path = path
        self.concepts: dict[str, Concept] = {}
        self.problems: list[str] = []

    def problem(self, line: int, message: str) -> None:
        self.problems.append(f"{self.path}:{line}: {message}")

    def term(self, value: object, line: int, what: str) -> str | None:
        """A cleaned term, or None (with a problem recorded) when it cannot be one."""
        if not isinstance(value, str):
            self.problem(line, f"{what} must be text, got {type(value).__name__}")
            return None
        term = " ".join(value.split())
        if not term:
            self.problem(line, f"{what} is empty")
            return None
        if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in term):
            self.problem(line, f"{what} {term!r} contains a control character")
            return None
        if len(term) > MAX_TERM_CHARS:
            self.problem(line, f"{what} is {len(term)} characters long; the limit is {MAX_TERM_CHARS}")
            return None
        return term

    def group(self, line: int, concept: str | None, terms: list[tuple[str, str | None]]) -> None:
        if not terms:
            self.problem(line, "no terms")
            return
        name = concept or terms[0][0]
        entry = self.concepts.get(name)
        if entry is None:
            entry = self.concepts[name] = Concept(name=name, line=line)
        for term, language in terms:
            entry.add(term, language, line)

    def finish(self) -> list[Concept]:
        for concept in self.concepts.values():
            if len(concept.terms) < 2:
                self.problem(
                    concept.line,
                    f"concept {concept.name!r} has a single term; a glossary concept needs at least two "
                    "(its equivalents)",
                )
        if self.problems:
            raise GlossaryError(self.problems)
        return list(self.concepts.values())


def _split_cell(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split("|")) if part]


def parse_lines(text: str, path: Path) -> list[Concept]:
    out = _Collector(path)
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        terms = []
        for part in _split_cell(stripped):
            term = out.term(part, number, "term")
            if term is not None:
                terms.append((term, None))
        out.group(number, None, terms)
    return out.finish()


def parse_delimited(text: str, path: Path, delimiter: str) -> list[Concept]:
    out = _Collector(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise GlossaryError([f"{path}:1: {exc}"]) from None
    if header is None:
        raise GlossaryError([f"{path}: empty file; expected a header row (language codes, concept, terms)"])
    columns: list[str] = []
    for name in (h.strip() for h in header):
        if name in columns:
            out.problem(1, f"column {name!r} appears twice")
        elif name not in SPECIAL_COLUMNS and not LANGUAGE.match(name):
            out.problem(
                1,
                f"column {name!r} is neither a language code (en, zh, zh-Hant, ...) nor one of "
                f"{', '.join(SPECIAL_COLUMNS)}",
            )
        columns.append(name)
    if not any(c != "concept" for c in columns):
        out.problem(1, "the header names no term column (a language code or terms)")
    if out.problems:
        raise GlossaryError(out.problems)
    previous_end = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise GlossaryError(out.problems + [f"{path}:{reader.line_num}: {exc}"]) from None
        number = previous_end + 1  # where the record starts (a quoted cell may span lines)
        previous_end = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(columns):
            out.problem(number, f"{len(row)} cells, but the header names {len(columns)} columns")
            continue
        concept = None
        terms = []
        for name, cell in zip(columns, row, strict=False):
            if name == "concept":
                concept = out.term(cell, number, "concept") if cell.strip() else None
                continue
            for part in _split_cell(cell):
                term = out.term(part, number, f"term in column {name!r}")
                if term is not None:
                    terms.append((term, None if name == "terms" else name))
        out.group(number, concept, terms)
    return out.finish()


def _json_element_lines(text: str) -> list[int]:
    """The line on which each element of the top-level JSON array starts (the text is valid JSON)."""
    decoder = json.JSONDecoder()
    lines = []
    position = text.index("[") + 1
    whitespace = " \t\r\n"
    while True:
        while position < len(text) and text[position] in whitespace:
            position += 1
        if text[position] == "]":
            return lines
        lines.append(text.count("\n", 0, position) + 1)
        _, position = decoder.raw_decode(text, position)
        while text[position] in whitespace:
            position += 1
        if text[position] == ",":
            position += 1


def parse_json(text: str, path: Path) -> list[Concept]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GlossaryError([f"{path}:{exc.lineno}: invalid JSON: {exc.msg}"]) from None
    if not isinstance(data, list):
        raise GlossaryError([f"{path}:1: expected a JSON list of concepts, got {type(data).__name__}"])
    out = _Collector(path)
    for item, number in zip(data, _json_element_lines(text), strict=True):
        concept = None
        terms: list[tuple[str, str | None]] = []
        if isinstance(item, list):
            pairs = [(None, item)]
        elif isinstance(item, dict):
            pairs = []
            for key, value in item.items():
                if key == "concept":
                    concept = out.term(value, number, "concept")
                elif key == "terms" or LANGUAGE.match(key):
                    pairs.append((None if key == "terms" else key, value))
                else:
                    out.problem(number, f"key {key!r} is neither a language code nor concept or terms")
        else:
            out.problem(number, f"a concept must be a list of terms or an object, got {type(item).__name__}")
            continue
        for language, value in pairs:
            values = value if isinstance(value, list) else [value]
            for v in values:
                term = out.term(v, number, "term")
                if term is not None:
                    terms.append((term, language))
        out.group(number, concept, terms)
    return out.finish()


def read_glossary(path: str | Path, file_format: str | None = None) -> list[Concept]:
    """The concepts of a glossary file; GlossaryError lists every problem with file and line."""
    path = Path(path)
    file_format = file_format or detect_format(path)
    if file_format not in FORMATS:
        raise GlossaryError([f"{path}: unknown format {file_format!r}; formats: {', '.join(FORMATS)}"])
    text = _read_text(path)
    if file_format == "json":
        return parse_json(text, path)
    if file_format in ("csv", "tsv"):
        return parse_delimited(text, path, "," if file_format == "csv" else "\t")
    return parse_lines(text, path)


# -- the database ----------------------------------------------------------------------------------


def _check_terms(conn: psycopg.Connection, path: Path, concepts: list[Concept]) -> tuple[list[str], list[str]]:
    """Terms the database cannot match, as errors; terms that match more loosely than written, as
    warnings (a word of the term that is a stop word is ignored)."""
    terms = sorted({t for c in concepts for t, _ in c.terms})
    words = sorted({w for t in terms for w in WORD.findall(t)})
    rows = conn.execute(
        "SELECT t, kb.query_terms(t) AS terms FROM unnest(%s::text[]) AS t", (terms + words,)
    ).fetchall()
    bm25 = {r["t"]: r["terms"] or [] for r in rows}
    errors, warnings = [], []
    for concept in concepts:
        for term, _ in concept.terms:
            line = concept.term_lines[term]
            if not bm25[term]:
                errors.append(
                    f"{path}:{line}: term {term!r} has no BM25 terms (only stop words, punctuation or symbols), "
                    "so no query could match it"
                )
                continue
            ignored = [w for w in WORD.findall(term) if not bm25.get(w)]
            if ignored:
                warnings.append(
                    f"{path}:{line}: in term {term!r} the stop words {', '.join(ignored)} are ignored: it matches "
                    f"every query with the terms {', '.join(bm25[term])}"
                )
    return errors, warnings


def load(
    conn: psycopg.Connection,
    path: str | Path,
    namespace: str | None,
    *,
    replace: bool = False,
    file_format: str | None = None,
    dry_run: bool = False,
) -> LoadSummary:
    """Load a glossary file into `namespace` (None: the global glossary) in one transaction.

    Nothing is written when any problem is found (GlossaryError, every problem with its line) or
    when `dry_run` is set. `conn` must be in autocommit mode (the harness's connections are)."""
    path = Path(path)
    if namespace is not None and not NAMESPACE.match(namespace):
        raise GlossaryError([f"namespace {namespace!r}: must match {NAMESPACE.pattern}"])
    concepts = read_glossary(path, file_format)
    errors, warnings = _check_terms(conn, path, concepts)
    if errors:
        raise GlossaryError(errors)
    rows = [(namespace, c.name, term, language) for c in concepts for term, language in c.terms]
    scope = "the global glossary" if namespace is None else f"the glossary of namespace {namespace!r}"
    try:
        with conn.transaction(force_rollback=dry_run):
            deleted = 0
            if replace:
                deleted = conn.execute(
                    "DELETE FROM kb.glossary WHERE namespace IS NOT DISTINCT FROM %s::text", (namespace,)
                ).rowcount
            # one statement; rows already present (same namespace, concept and term) are kept
            inserted = conn.execute(
                """INSERT INTO kb.glossary (namespace, concept, term, lang)
                   SELECT %s::text, u.concept, u.term, u.lang
                   FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS u (concept, term, lang, n)
                   ORDER BY u.n
                   ON CONFLICT ON CONSTRAINT glossary_term_unique DO NOTHING""",
                (namespace, [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]),
            ).rowcount
    except psycopg.errors.InsufficientPrivilege as exc:
        role = conn.execute("SELECT current_user AS r").fetchone()["r"]
        raise GlossaryError(
            [f"{path}: role {role} may not write {scope} ({exc.diag.message_primary}); nothing was loaded"]
        ) from None
    except psycopg.errors.CheckViolation as exc:
        raise GlossaryError([f"{path}: {exc.diag.message_primary}; nothing was loaded"]) from None
    return LoadSummary(
        file=str(path),
        namespace=namespace,
        concepts=len(concepts),
        terms=len(rows),
        inserted=inserted,
        deleted=deleted,
        dry_run=dry_run,
        warnings=warnings,
    )


def listing(conn: psycopg.Connection, namespace: str | None = None, only_global: bool = False) -> list[dict]:
    """The glossary rows the current role may see (global ones first), one dict per concept."""
    where, params = "", ()
    if only_global:
        where = "WHERE g.namespace IS NULL"
    elif namespace is not None:
        where, params = "WHERE g.namespace = %s", (namespace,)
    rows = conn.execute(
        f"""SELECT g.namespace, g.concept,
                   jsonb_agg(jsonb_build_object('term', g.term, 'lang', g.lang, 'terms', g.terms) ORDER BY g.id)
                       AS terms
            FROM kb.glossary AS g {where}
            GROUP BY g.namespace, g.concept
            ORDER BY g.namespace NULLS FIRST, g.concept""",
        params,
    ).fetchall()
    return [dict(r) for r in rows]


# -- the command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of `pgkb glossary`: load FILE (--namespace NS | --global) [--replace], list."""
    sub = parser.add_subparsers(dest="glossary_command", required=True, help="load a file, or list the rows")
    p = sub.add_parser("load", help="load a glossary file (lines with |, CSV/TSV with a header, JSON)")
    p.add_argument("file", help="the glossary file, e.g. examples/glossary.csv")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", help="the namespace whose retrievals the glossary applies to, e.g. policies")
    scope.add_argument("--global", dest="global_", action="store_true", help="the global glossary (admins)")
    p.add_argument("--replace", action="store_true", help="delete the namespace's rows first (same transaction)")
    p.add_argument("--format", choices=FORMATS, help="default: from the suffix (.csv .tsv .json; else lines)")
    p.add_argument("--dry-run", action="store_true", help="check the file against the database, write nothing")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p = sub.add_parser("list", help="the glossary rows this role may see")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--namespace", help="only this namespace's rows, e.g. policies")
    scope.add_argument("--global", dest="global_", action="store_true", help="only the global glossary's rows")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def main(args: argparse.Namespace) -> int:
    """Run `pgkb glossary load|list`: 0 on success, 1 when the file has problems (printed with their lines)."""
    with connect(load_settings().dsn) as conn:
        if args.glossary_command == "load":
            try:
                summary = load(
                    conn,
                    args.file,
                    None if args.global_ else args.namespace,
                    replace=args.replace,
                    file_format=args.format,
                    dry_run=args.dry_run,
                )
            except GlossaryError as exc:
                for problem in exc.problems:
                    print(f"pgkb glossary: {problem}", file=sys.stderr)
                print(f"pgkb glossary: {len(exc.problems)} problem(s); nothing was loaded", file=sys.stderr)
                return 1
            for warning in summary.warnings:
                print(f"pgkb glossary: warning: {warning}", file=sys.stderr)
            if args.json:
                print(json.dumps(summary.as_dict(), ensure_ascii=False, indent=2))
            else:
                where = "global glossary" if summary.namespace is None else f"namespace {summary.namespace}"
                print(
                    f"{'checked' if summary.dry_run else 'loaded'} {summary.file} into {where}: "
                    f"{summary.concepts} concepts, {summary.terms} terms, {summary.inserted} rows inserted"
                    + (f", {summary.deleted} deleted first" if args.replace else "")
                    + (" (dry run: nothing written)" if summary.dry_run else "")
                )
            return 0
        concepts = listing(conn, args.namespace, args.global_)
        if args.json:
            print(json.dumps(concepts, ensure_ascii=False, indent=2))
            return 0
        for c in concepts:
            terms = " | ".join(t["term"] + (f" ({t['lang']})" if t["lang"] else "") for t in c["terms"])
            print(f"{c['namespace'] or '(global)':<20} {c['concept']:<24} {terms}")
        if not concepts:
            print("no glossary rows visible", file=sys.stderr)
        return 0
