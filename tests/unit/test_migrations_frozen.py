"""Migrations are frozen once recorded: each migrations directory (the database's migrations/, the
shard coordinator's sql/shards/migrations/) has a .frozen.sha256 holding the SHA-256 of every file in
`sha256sum` format, and a recorded file may neither change nor disappear. A database that applied a
migration keeps its checksum (kb.schema_migrations, kb_shard.schema_migrations), and `pgkb migrate`
or `pgkb shards init` refuses it once the file differs; these tests say so before any database does.

The manifest's name starts with a dot because `pgkb migrate` (harness.migrate.migration_files)
treats every other file of migrations/ but *.md as a migration and refuses a name that is not
NNNN_name.sql. No database needed."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from harness.migrate import checksum

ROOT = Path(__file__).resolve().parents[2]
MIGRATION_DIRS = ["migrations", "sql/shards/migrations"]
LINE = re.compile(r"([0-9a-f]{64})  (\d{4}_[a-z0-9_]+\.sql)")

HOW_TO_RECORD = "record it from the repository root: (cd {directory} && sha256sum {name} >> .frozen.sha256)"
every_directory = pytest.mark.parametrize("directory", MIGRATION_DIRS)


def _sha256(path: Path) -> str:
    """What `sha256sum` prints for the file: the digest of its bytes, as they are on disk."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(directory: str) -> dict[str, str]:
    """The manifest of ``directory`` as {file name: digest}; a malformed line fails here, naming it."""
    recorded: dict[str, str] = {}
    manifest = f"{directory}/.frozen.sha256"
    for number, line in enumerate((ROOT / manifest).read_text(encoding="utf-8").splitlines(), start=1):
        match = LINE.fullmatch(line)
        assert match, f"{manifest}:{number}: not '<sha256>  NNNN_name.sql': {line!r}"
        digest, name = match.groups()
        assert name not in recorded, f"{manifest}:{number}: {name} is recorded twice"
        recorded[name] = digest
    return recorded


@every_directory
def test_the_manifest_lists_the_migrations_in_order(directory):
    names = list(_recorded(directory))
    assert names, f"{directory}/.frozen.sha256 records no migration"
    assert names == sorted(names), f"{directory}/.frozen.sha256 lists the files in name order, one line each"


@every_directory
def test_no_recorded_migration_was_edited_or_removed(directory):
    problems = []
    for name, digest in _recorded(directory).items():
        path = ROOT / directory / name
        if not path.exists():
            problems.append(
                f"{directory}/{name} is recorded but gone: a database that applied it still lists it; "
                "restore the file (a change to the schema is a new migration)"
            )
        elif _sha256(path) != digest:
            problems.append(
                f"{directory}/{name} differs from its recorded SHA-256 ({digest[:12]}…, file now "
                f"{_sha256(path)[:12]}…): `pgkb migrate` refuses every database that applied it; restore it "
                f"(git checkout -- {directory}/{name}) and put the change in a new migration"
            )
    assert not problems, "\n".join(problems)


@every_directory
def test_every_migration_is_recorded(directory):
    recorded = _recorded(directory)
    missing = [path.name for path in sorted((ROOT / directory).glob("*.sql")) if path.name not in recorded]
    assert not missing, "\n".join(
        f"{directory}/{name} is not frozen yet; " + HOW_TO_RECORD.format(directory=directory, name=name)
        for name in missing
    )


@every_directory
def test_pgkb_migrate_records_the_same_checksums(directory):
    """The databases keep harness.migrate.checksum of each file; the manifest keeps sha256sum's."""
    files = sorted((ROOT / directory).glob("*.sql"))
    differ = [path.name for path in files if checksum(path) != _sha256(path)]
    assert not differ, (
        "harness.migrate.checksum is no longer the SHA-256 of a file's bytes, so the manifest and the "
        f"checksums databases recorded stop agreeing: {', '.join(differ)}"
    )
