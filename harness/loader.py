"""`pgkb ingest`: load folders of Markdown/text with YAML front matter through plain
SQL; the ingest trigger inside PostgreSQL chunks and embeds.

- `source` is the file's path relative to the folder given (a single file: its name).
- Unchanged files are skipped (every stored field compared); files that disappeared
  since the last run from the same folder get `removed_at` (no longer current).
- A bad file is reported with its path (and line, for front matter) and the others load.
- Front matter is a leading block between two `---` lines (the second may be `...`) that YAML
  reads as a mapping, or as nothing (empty, comments only). Any other text there is refused with
  its line, never dropped: YAML that does not parse, a list, a sentence.
- A body that is blank once the front matter is gone (only spaces and invisible characters, by
  the one definition the database's CHECK uses: `pgkb_plpy.vocabulary.is_blank`) is refused.
- The retrieval keys ``rag_include``, ``concept_keys``, ``aliases`` and ``synonyms`` stay in
  ``metadata``, where the ingest trigger reads them; a value they may not hold is refused with the
  file, the key's line and the rule (one definition: ``pgkb_plpy/front_matter.py``, the one the
  database applies to any SQL client's metadata).
- Which files are read here and which are sent comes from the parsers' format registry
  (``pgkb_plpy.parsers.formats``) and the same sniffing of the first bytes the database does: a
  file whose content is a PDF, DOCX, XLSX, PPTX or HTML page is sent whatever its name (a DOCX
  named ``.doc`` or without an extension, an HTML export named ``.xls``), an image only under a
  document format's name (a scan saved as ``.pdf``: an image file is a figure); a legacy Office
  file (by its content, else its name) is skipped naming the format to save it as; content
  without a signature is text, read here when its name is a text format's (Markdown, text) and
  decoded as the database decodes it (``pgkb_plpy.parsers.decode_file_text``: UTF-8, UTF-16 with
  a BOM, GB18030). What is sent is parsed by `kb.ingest_file` inside the database exactly as for
  any other SQL client (docs/INGEST.md); one that cannot be parsed is stored there as failed and
  reported with the database's error.
- ``--workers N`` is the bulk path: N connections store interleaved shares of the files with
  deferred embedding, many documents per statement (the ingest trigger runs once per statement),
  then N worker connections (:mod:`harness.worker`) embed the queue. What is stored is what the
  file-by-file load stores; a batch the database rejects is retried file by file, so the bad
  file is named and the others load.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import yaml
from pgkb_plpy import front_matter, vocabulary
from pgkb_plpy.parsers import ParseError, decode_file_text, formats
from tqdm import tqdm

from . import worker
from .db import connect

FRONT_MATTER_KEYS = {
    "title",
    "namespace",
    "doc_type",
    "status",
    "version",
    "effective_from",
    "effective_to",
    "supersedes",
    "tags",
}
#: Files read here, front matter and all: the formats the database decodes as text (Markdown, text).
TEXT_SUFFIXES = formats.suffixes(isolated=False)
#: Files whose bytes kb.ingest_file parses in the database: the formats with a parser module.
BINARY_SUFFIXES = formats.suffixes(isolated=True)
FILE_SUFFIXES = TEXT_SUFFIXES | BINARY_SUFFIXES
#: Legacy binary Office files: not sent (the database refuses them too), reported as skipped, with
#: the suffix to save them as.
LEGACY_SUFFIXES = {
    suffix: formats.FORMAT_BY_NAME[f.save_as].suffixes[0]
    for f in formats.FORMATS
    if f.family == formats.LEGACY
    for suffix in f.suffixes
}
#: Formats the content alone says (a magic number, a zip package's main part, HTML markup): a file
#: holding one is sent whatever its name, but HTML under a text format's name, read here as that
#: format (the database reads a .md holding HTML as Markdown too).
SENT_BY_CONTENT = {f.name for f in formats.FORMATS if f.supported and f.parser is not None}
#: Image files: in a folder they are its documents' figures and screenshots, not documents; one is
#: sent only under a document format's name (a scan saved as .pdf). kb.ingest_file reads any image.
IMAGE_SUFFIXES = set(formats.FORMAT_BY_NAME["image"].suffixes)
IMAGE_MESSAGE = "an image: a folder's images are its documents' figures, not loaded (kb.ingest_file reads one by OCR)"
#: Bytes of an OLE container read to tell which legacy Office file it is (its streams' names).
OLE_SNIFF_BYTES = 8 * 1024 * 1024
MAX_FILE_BYTES = 20 * 1024 * 1024
#: Largest PDF/DOCX/HTML file sent (the database parses at most kb.file_max_bytes() and stores
#: a larger one as failed; beyond this one the loader does not read it at all).
MAX_BINARY_FILE_BYTES = 512 * 1024 * 1024

INGEST_FILE = """
SELECT document_id, ingest_status, ingest_error, changed
FROM kb.ingest_file(%(namespace)s, %(source)s, %(content)s, p_origin => %(origin)s)
"""


class DocumentError(ValueError):
    """A file that cannot become a document; the message names the file and, where known, the line."""


@dataclass
class LoadedDocument:
    namespace: str
    source: str
    title: str | None
    body: str
    doc_type: str | None
    metadata: dict
    status: str
    version: str | None
    effective_from: dt.date | None
    effective_to: dt.date | None
    supersedes: str | None


@dataclass
class Summary:
    synced: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: files found and not loaded: {"file", "reason": unknown_extension | legacy_format | image | too_large, "message"}
    not_loaded: list[dict] = field(default_factory=list)
    #: what the database's parser could not do in a loaded file: {"file", "page", "kind", "message"}
    warnings: list[dict] = field(default_factory=list)
    #: the bulk path's embedding (--workers): model, concurrency, embedded, failed_batches, error, remaining
    embedding: dict | None = None

    def as_dict(self) -> dict:
        out = {
            "synced": len(self.synced),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "removed": len(self.removed),
            "errors": self.failed,
            "removed_sources": self.removed,
            "not_loaded": self.not_loaded,
            "warnings": self.warnings,
        }
        if self.embedding is not None:
            out["embedding"] = self.embedding
        return out


def _date(value, key: str, where: str) -> dt.date | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise DocumentError(f"{where}: front matter {key} must be a date YYYY-MM-DD, got {value!r}") from None


def _text(value, key: str, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise DocumentError(f"{where}: front matter {key} must be a single value, got {type(value).__name__}")
    return str(value)


def split_front_matter(text: str, where: str) -> tuple[dict, str]:
    """(front matter, body) of a file's text; ``({}, text)`` without front matter. The opening and
    closing lines are recognised as the in-database chunker recognises them (trailing spaces
    allowed), so a block the loader does not take is never dropped by the chunker either."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---" or not lines[0].endswith("\n"):
        return {}, text
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            raw = "".join(lines[1:i])
            body = "".join(lines[i + 1 :])
            break
    else:
        raise DocumentError(f"{where}:1: front matter starts with '---' but has no closing '---' line")
    try:
        data = yaml.safe_load(raw) if raw.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1  # +1 for the opening '---', +1 for 1-based
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DocumentError(f"{where}:{line}: invalid YAML front matter: {problem}") from None
    except ValueError as exc:  # YAML that parses but cannot be built, e.g. the date 2026-02-30
        raise DocumentError(f"{where}: invalid value in front matter: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DocumentError(f"{where}:2: front matter must be a mapping of keys, got {type(data).__name__}")
    return data, body


def _key_line(text: str, key: str) -> int | None:
    """The 1-based line of the front matter that sets ``key``, if one does."""
    pattern = re.compile(rf"^['\"]?{re.escape(key)}['\"]?\s*:")
    for number, line in enumerate(text.splitlines()[:1000], start=1):
        if number > 1 and line.rstrip() in ("---", "..."):
            return None
        if pattern.match(line):
            return number
    return None


def read_document(path: Path, source: str, namespace_override: str | None) -> LoadedDocument:
    where = str(path)
    raw = path.read_bytes()
    if len(raw) > MAX_FILE_BYTES:
        raise DocumentError(f"{where}: file is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        text = decode_file_text(raw)  # as kb.ingest_file decodes a text file
    except ParseError as exc:
        try:
            raw.decode("utf-8-sig")
            line = ""
        except UnicodeDecodeError as utf8:
            line = ":" + str(raw[: utf8.start].count(b"\n") + 1)  # the line of the first byte that is no UTF-8
        raise DocumentError(f"{where}{line if exc.kind == 'encoding' else ''}: {exc.args[0]}") from None
    data, body = split_front_matter(text, where)
    data = {str(k): v for k, v in data.items()}
    if vocabulary.is_blank(body):
        raise DocumentError(f"{where}: the document body is empty (only spaces or invisible characters)")
    status = _text(data.get("status"), "status", where) or "active"
    if status not in ("draft", "active", "deprecated"):
        raise DocumentError(f"{where}: front matter status must be draft, active or deprecated, got {status!r}")
    tags = data.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, (str, int, float)) for t in tags)):
        raise DocumentError(f"{where}: front matter tags must be a list of words")
    try:
        front_matter.retrieval_options(data, "front matter")
    except front_matter.RetrievalKeyError as exc:
        key = next((k for k in front_matter.RETRIEVAL_KEYS if f" {k} " in f" {exc} "), None)
        line = _key_line(text, key) if key else None
        raise DocumentError(f"{where}:{line}: {exc}" if line else f"{where}: {exc}") from None
    metadata = {k: v for k, v in data.items() if k not in FRONT_MATTER_KEYS}
    if tags is not None:
        metadata["tags"] = [str(t) for t in tags]
    try:
        metadata = json.loads(json.dumps(metadata, default=str))
    except (TypeError, ValueError) as exc:
        raise DocumentError(f"{where}: front matter values cannot be stored as JSON: {exc}") from None
    title = _text(data.get("title"), "title", where)
    if title is None:
        title = next((ln.lstrip("#").strip() for ln in body.splitlines() if ln.startswith("# ")), None)
    return LoadedDocument(
        namespace=namespace_override or _text(data.get("namespace"), "namespace", where) or "default",
        source=source,
        title=title,
        body=body,
        doc_type=_text(data.get("doc_type"), "doc_type", where),
        metadata=metadata,
        status=status,
        version=_text(data.get("version"), "version", where),
        effective_from=_date(data.get("effective_from"), "effective_from", where),
        effective_to=_date(data.get("effective_to"), "effective_to", where),
        supersedes=_text(data.get("supersedes"), "supersedes", where),
    )


def route(path: Path) -> tuple[str, str | None]:
    """How the file at ``path`` is loaded, by the rule the database applies (``detect``): the
    content decides whenever it is a format read here; the name only among the text formats.
    ``("send", None)``: its bytes go to kb.ingest_file; ``("read", None)``: read here as text;
    else (reason, message) of a file not loaded: ``legacy_format``, ``image`` (an image file, a
    figure of the folder's documents: sent only under a document format's name, a scan saved as
    .pdf) or ``unknown_extension``."""
    suffix = path.suffix.lower()
    try:
        sniffed = formats.sniff_path(path)
    except OSError:
        sniffed = None  # reported when it is read
    named_document = suffix in BINARY_SUFFIXES - IMAGE_SUFFIXES
    if (sniffed == "image" and not named_document) or (suffix in IMAGE_SUFFIXES and sniffed not in SENT_BY_CONTENT):
        return "image", IMAGE_MESSAGE
    if sniffed in SENT_BY_CONTENT and not (sniffed == "html" and suffix in TEXT_SUFFIXES):
        return "send", None
    legacy = sniffed if sniffed in formats.LEGACY_FORMATS else None  # RTF, Office 2003 XML
    if sniffed == "ole" and suffix not in FILE_SUFFIXES:
        legacy = formats.SUFFIX_FORMATS.get(suffix) if suffix in LEGACY_SUFFIXES else _ole_kind(path)
    elif legacy is None and suffix in LEGACY_SUFFIXES and sniffed not in ("ole", *SENT_BY_CONTENT):
        legacy = formats.SUFFIX_FORMATS[suffix]
    if legacy in formats.LEGACY_FORMATS:
        save_as = formats.FORMAT_BY_NAME[formats.LEGACY_FORMATS[legacy]].suffixes[0]
        return "legacy_format", f"{formats.FORMAT_BY_NAME[legacy].human}: save it as {save_as}"
    if suffix in TEXT_SUFFIXES:
        return "read", None
    if suffix in BINARY_SUFFIXES or (sniffed == "ole" and suffix in FILE_SUFFIXES):
        return "send", None  # the database names what it is (damaged, encrypted, another format)
    message = f"extension {suffix!r} is not loaded" if suffix else "no extension: not loaded"
    what = "its content is no document read here" if sniffed in ("ole", "binary", "zip") else "its content is text"
    loaded = ", ".join(sorted(FILE_SUFFIXES - IMAGE_SUFFIXES))
    return "unknown_extension", f"{message} ({what}; loaded: {loaded} and by content)"


def sends(path: Path) -> bool:
    """Whether the file at ``path`` (one :func:`discover` found) goes to kb.ingest_file as bytes
    rather than being read here as text (:func:`route`)."""
    return route(path)[0] == "send"


def _ole_kind(path: Path) -> str:
    """Which legacy Office file the OLE container at ``path`` is (``ole``: none)."""
    with open(path, "rb") as handle:
        return formats.ole_kind(handle.read(OLE_SNIFF_BYTES))


def discover(root: Path, not_loaded: list[dict] | None = None) -> list[tuple[Path, str]]:
    """(path, source) of the files under ``root`` that are loaded (:func:`route`); every other file
    (hidden files and folders aside) is appended to ``not_loaded`` with the reason:
    ``unknown_extension``, ``legacy_format`` (.doc, .xls, .ppt, .rtf by content or name),
    ``image`` or ``too_large`` (over what the loader reads)."""
    if not_loaded is None:
        not_loaded = []
    if root.is_file():
        candidates = [(root, root.name)]
    elif root.is_dir():
        candidates = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if not name.startswith("."):
                    path = Path(dirpath) / name
                    candidates.append((path, path.relative_to(root).as_posix()))
    else:
        raise FileNotFoundError(f"{root}: no such file or folder")
    found = []
    for path, source in candidates:
        reason, message = route(path)
        if reason in ("read", "send"):
            limit = MAX_BINARY_FILE_BYTES if reason == "send" else MAX_FILE_BYTES
            reason = message = None
            try:
                size = path.stat().st_size
            except OSError:
                size = 0  # reported when it is read
            if size > limit:
                reason, message = "too_large", f"file is {size} bytes; the loader reads at most {limit}"
        if reason:
            not_loaded.append({"file": str(path), "source": source, "reason": reason, "message": message})
        else:
            found.append((path, source))
    return found


UPSERT_COLUMNS = (
    "namespace",
    "source",
    "title",
    "body",
    "doc_type",
    "metadata",
    "status",
    "version",
    "effective_from",
    "effective_to",
    "supersedes",
    "origin",
)
UPSERT_INSERT = f"INSERT INTO kb.documents ({', '.join(UPSERT_COLUMNS)}, removed_at)"
UPSERT_VALUES = "(" + ", ".join(f"%({c})s" for c in UPSERT_COLUMNS) + ", NULL)"
UPSERT_CONFLICT = """
ON CONFLICT (namespace, source) DO UPDATE SET
    title = excluded.title, body = excluded.body, doc_type = excluded.doc_type, metadata = excluded.metadata,
    status = excluded.status, version = excluded.version, effective_from = excluded.effective_from,
    effective_to = excluded.effective_to, supersedes = excluded.supersedes, origin = excluded.origin,
    removed_at = NULL
WHERE (kb.documents.title, kb.documents.body, kb.documents.doc_type, kb.documents.metadata, kb.documents.status,
       kb.documents.version, kb.documents.effective_from, kb.documents.effective_to, kb.documents.supersedes,
       kb.documents.origin, kb.documents.removed_at)
   IS DISTINCT FROM
      (excluded.title, excluded.body, excluded.doc_type, excluded.metadata, excluded.status, excluded.version,
       excluded.effective_from, excluded.effective_to, excluded.supersedes, excluded.origin, NULL::timestamptz)
RETURNING id, namespace, source, ingest_status, ingest_error
"""
#: One file's document, inserted or updated when anything stored differs; no row when unchanged.
UPSERT = UPSERT_INSERT + "\nVALUES " + UPSERT_VALUES + UPSERT_CONFLICT
#: Documents of a bulk load's batch (--workers) per statement, so that the ingest trigger (per
#: statement) writes their chunks, postings and queue rows in one pass.
BULK_BATCH_FILES = 32
EMPTY_FOLDER_MESSAGE = "no file here to load (hidden files and folders are not read): nothing was ingested from it"


def ingest(
    dsn: str, paths: list[str], namespace: str | None = None, progress: bool = True, workers: int | None = None
) -> Summary:
    """Load the files under ``paths`` (see the module's docstring). Without ``workers``, file by
    file on one connection, each embedded as the session's ``embed_mode`` says. With ``workers``
    (1..64), the bulk path: ``workers`` connections load interleaved shares of the files in
    deferred embedding mode, :data:`BULK_BATCH_FILES` documents per statement, then
    ``workers`` connections of :mod:`harness.worker` embed the queue (all of it, so chunks
    queued before count too); a document whose embedding failed is reported ``stored`` as in
    the file-by-file path. Either way the BM25 statistics are refreshed at the end."""
    if workers is not None and not 1 <= workers <= 64:
        raise ValueError(f"--workers must be between 1 and 64 (got {workers})")
    summary = Summary()
    origins: list[str] = []
    with connect(dsn) as conn:
        for root_arg in paths:
            root = Path(root_arg).resolve()
            skipped_here: list[dict] = []
            files = discover(root, skipped_here)
            summary.not_loaded.extend(skipped_here)
            if not files and not skipped_here:
                summary.warnings.append(
                    {"file": root_arg, "page": None, "kind": "nothing_to_load", "message": EMPTY_FOLDER_MESSAGE}
                )
            origin = str(root)
            origins.append(origin)
            bar = tqdm(files, desc=f"ingest {root_arg}", unit="file", disable=not progress, file=sys.stderr)
            if workers is None:
                seen, unreadable = _load_files(conn, summary, files, namespace, origin, bar)
            else:
                seen, unreadable = _load_files_in_parallel(dsn, summary, files, namespace, origin, bar, workers)
            bar.close()
            unreadable |= {s["source"] for s in skipped_here}  # present, not loaded: not "removed"
            _mark_removed(conn, summary, origin, seen, unreadable)
        if workers is not None:
            summary.embedding = _embed_queue(dsn, conn, summary, origins, workers)
        conn.execute("SELECT kb.refresh_lexical_stats()")
    return summary


def _load_files(conn, summary: Summary, files, namespace: str | None, origin: str, bar) -> tuple[set, set]:
    """Load ``files`` one at a time on ``conn``; (the (namespace, source) keys seen, the sources
    of files present but not loadable)."""
    seen: set[tuple[str, str]] = set()
    unreadable: set[str] = set()  # sources of files present but not loadable: not "removed"
    for path, source in bar:
        if sends(path):
            key = _ingest_binary(conn, summary, path, source, namespace or "default", origin)
            if key is None:
                unreadable.add(source)
            else:
                seen.add(key)
            continue
        doc = _read_or_record_failure(summary, unreadable, path, source, namespace)
        if doc is None:
            continue
        seen.add((doc.namespace, doc.source))
        _upsert_one(conn, summary, path, doc, origin)
    return seen, unreadable


def _read_or_record_failure(
    summary: Summary, unreadable: set, path: Path, source: str, namespace: str | None
) -> LoadedDocument | None:
    """The file read as a document, or None with the failure recorded (file and reason) and the
    source kept among the unreadable, so that the run does not remove its stored version."""
    try:
        return read_document(path, source, namespace)
    except (DocumentError, OSError) as exc:
        summary.failed.append({"file": str(path), "error": str(exc)})
        unreadable.add(source)
        return None


def _upsert_one(conn, summary: Summary, path: Path, doc: LoadedDocument, origin: str) -> None:
    """Store one file's document in its own transaction; what happened goes into ``summary``."""
    try:
        with conn.transaction():
            row = conn.execute(UPSERT, _params(doc, origin)).fetchone()
    except psycopg.Error as exc:
        detail = exc.diag.message_primary or str(exc)
        summary.failed.append({"file": str(path), "error": f"{path}: rejected by the database: {detail}"})
        return
    _record(summary, path, doc.source, row)


def _params(doc: LoadedDocument, origin: str) -> dict:
    return dict(doc.__dict__, metadata=psycopg.types.json.Jsonb(doc.metadata), origin=origin)


def _record(summary: Summary, path: Path, source: str, row) -> None:
    if row is None:
        summary.skipped.append(source)
        return
    summary.synced.append(source)
    if row["ingest_status"] == "failed":
        summary.failed.append(
            {
                "file": str(path),
                "error": f"{path}: stored, embedding failed (will be retried by pgkb backfill): {row['ingest_error']}",
                "stored": True,
            }
        )


def _upsert_batch(conn, summary: Summary, batch: list[tuple[Path, LoadedDocument]], origin: str) -> None:
    """Store the documents of ``batch`` with one statement in one transaction; when the database
    rejects it, file by file, so that the bad file is named and the others load."""
    statement = (
        UPSERT_INSERT
        + "\nVALUES "
        + ",\n".join(UPSERT_VALUES.replace(")s", f"_{i})s") for i in range(len(batch)))
        + UPSERT_CONFLICT
    )
    params = {f"{k}_{i}": v for i, (_, doc) in enumerate(batch) for k, v in _params(doc, origin).items()}
    try:
        with conn.transaction():
            rows = conn.execute(statement, params).fetchall()
    except psycopg.Error:
        for path, doc in batch:
            _upsert_one(conn, summary, path, doc, origin)
        return
    by_key = {(r["namespace"], r["source"]): r for r in rows}
    for path, doc in batch:
        _record(summary, path, doc.source, by_key.get((doc.namespace, doc.source)))


def _load_files_in_parallel(
    dsn: str, summary: Summary, files, namespace: str | None, origin: str, bar, workers: int
) -> tuple[set, set]:
    """The bulk path of :func:`ingest` for one folder: files read and checked here, stored by
    ``workers`` connections (deferred embedding), each taking every ``workers``-th file."""
    seen: set[tuple[str, str]] = set()
    unreadable: set[str] = set()
    texts: list[tuple[Path, LoadedDocument]] = []
    binaries: list[tuple[Path, str]] = []
    for path, source in files:
        if sends(path):
            binaries.append((path, source))
            continue
        doc = _read_or_record_failure(summary, unreadable, path, source, namespace)
        if doc is None:
            bar.update(1)
            continue
        seen.add((doc.namespace, doc.source))
        texts.append((path, doc))
    parts = [Summary() for _ in range(workers)]
    binary_keys: list[list[tuple[str, tuple | None]]] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def load_share(n: int) -> None:
        try:
            with connect(dsn) as conn:
                conn.execute("SET pgkb.embed_mode = 'deferred'")
                share = texts[n::workers]
                for i in range(0, len(share), BULK_BATCH_FILES):
                    _upsert_batch(conn, parts[n], share[i : i + BULK_BATCH_FILES], origin)
                    bar.update(len(share[i : i + BULK_BATCH_FILES]))
                for path, source in binaries[n::workers]:
                    key = _ingest_binary(conn, parts[n], path, source, namespace or "default", origin)
                    binary_keys[n].append((source, key))
                    bar.update(1)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller after the others finish
            errors.append(exc)

    threads = [threading.Thread(target=load_share, args=(n,), name=f"pgkb-ingest-{n}") for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for part in parts:
        summary.synced.extend(part.synced)
        summary.skipped.extend(part.skipped)
        summary.failed.extend(part.failed)
        summary.warnings.extend(part.warnings)
    for source, key in (k for keys in binary_keys for k in keys):
        if key is None:
            unreadable.add(source)
        else:
            seen.add(key)
    return seen, unreadable


def _embed_queue(dsn: str, conn, summary: Summary, origins: list[str], workers: int) -> dict | None:
    """Drain the active model's embedding queue with ``workers`` connections
    (:func:`harness.worker.run`); the documents this load stored whose embedding failed become
    ``stored`` failures of ``summary``. None when no model is active (nothing to embed)."""
    if conn.execute("SELECT 1 FROM kb.models WHERE active").fetchone() is None:
        return None
    outcome = worker.run(worker.Options(dsn=dsn, concurrency=workers, once=True))
    if outcome["failed_batches"] or outcome["remaining"]:
        failed = conn.execute(
            """SELECT origin, source, ingest_error FROM kb.documents
               WHERE ingest_status IN ('failed', 'pending') AND origin = ANY(%s) AND source = ANY(%s)
               ORDER BY origin, source""",
            (origins, summary.synced),
        ).fetchall()
        for r in failed:
            summary.failed.append(
                {
                    "file": str(Path(r["origin"] or "") / r["source"]),
                    "error": f"{r['source']}: stored, not embedded (pgkb backfill or pgkb worker retries): "
                    f"{r['ingest_error'] or outcome['error']}",
                    "stored": True,
                }
            )
    return {k: outcome[k] for k in ("model", "concurrency", "embedded", "failed_batches", "error", "remaining")}


def _mark_removed(conn, summary: Summary, origin: str, seen: set, unreadable: set) -> None:
    """Documents loaded earlier from ``origin`` whose file is gone get ``removed_at``."""
    with conn.transaction():
        gone = conn.execute(
            """SELECT id, namespace, source FROM kb.documents
               WHERE origin = %s AND removed_at IS NULL ORDER BY id""",
            (origin,),
        ).fetchall()
        gone_ids = [
            r["id"] for r in gone if (r["namespace"], r["source"]) not in seen and r["source"] not in unreadable
        ]
        if gone_ids:
            conn.execute("UPDATE kb.documents SET removed_at = now() WHERE id = ANY(%s)", (gone_ids,))
            summary.removed.extend(f"{r['namespace']}/{r['source']}" for r in gone if r["id"] in gone_ids)


def report_lines(summary: Summary) -> list[str]:
    """The files not loaded and the parser's warnings as a table for people (the JSON has both)."""
    lines = []
    if summary.not_loaded:
        lines.append(f"{'not loaded':<18} {'reason':<18} message")
        lines += [f"{n['source']:<18} {n['reason']:<18} {n['message']}" for n in summary.not_loaded]
    if summary.warnings:
        lines.append(f"{'warning':<18} {'page':<5} {'kind':<18} message")
        lines += [
            f"{Path(w['file']).name:<18} {'' if w['page'] is None else w['page']:<5} {w['kind']:<18} {w['message']}"
            for w in summary.warnings
        ]
    return lines


def _ingest_binary(conn, summary: Summary, path: Path, source: str, namespace: str, origin: str) -> tuple | None:
    """Send one PDF/DOCX/HTML file's bytes to kb.ingest_file; its (namespace, source) as stored,
    or None when it could not be sent."""
    try:
        size = path.stat().st_size
        if size > MAX_BINARY_FILE_BYTES:
            raise DocumentError(f"{path}: file is {size} bytes; the loader sends at most {MAX_BINARY_FILE_BYTES}")
        content = path.read_bytes()
    except (DocumentError, OSError) as exc:
        summary.failed.append({"file": str(path), "error": str(exc)})
        return None
    params = {"namespace": namespace, "source": source, "content": content, "origin": origin}
    try:
        with conn.transaction():
            row = conn.execute(INGEST_FILE, params).fetchone()
            stored = conn.execute(
                "SELECT source, parse_warnings FROM kb.documents WHERE id = %s", (row["document_id"],)
            ).fetchone()
    except psycopg.Error as exc:
        detail = exc.diag.message_primary or str(exc)
        summary.failed.append({"file": str(path), "error": f"{path}: rejected by the database: {detail}"})
        return None
    (summary.synced if row["changed"] else summary.skipped).append(source)
    for w in stored["parse_warnings"] or []:
        summary.warnings.append({"file": str(path), "page": w.get("page"), "kind": w["kind"], "message": w["message"]})
    if row["ingest_status"] == "failed":
        summary.failed.append(
            {"file": str(path), "error": f"{path}: stored, not indexed: {row['ingest_error']}", "stored": True}
        )
    return (namespace, stored["source"])
