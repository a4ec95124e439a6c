"""One release version: the newest version of CHANGELOG.md is the version of META.json (and of what
it provides) and of pyproject.toml, and every file META.json names exists. CHANGELOG.md keeps
pgvector's form: `## X.Y.Z (YYYY-MM-DD)` headings, newest first, only the newest may be
`(unreleased)`, and under each heading one `- ` line per change.

pgkb_plpy.__version__ is another number: the interface version the schema's handshake compares
(kb.plpython_expected_version(), tests/unit/test_vocabulary.py), changed when an entry point
changes, not when pgkb is released. No database needed."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
META = ROOT / "META.json"
PYPROJECT = ROOT / "pyproject.toml"
HEADING = re.compile(r"## (\d+)\.(\d+)\.(\d+) \((unreleased|\d{4}-\d{2}-\d{2})\)")


def _releases() -> list[tuple[tuple[int, int, int], str, list[str]]]:
    """CHANGELOG.md's sections: (version, date or "unreleased", the lines under the heading)."""
    releases: list[tuple[tuple[int, int, int], str, list[str]]] = []
    for number, line in enumerate(CHANGELOG.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#"):
            match = HEADING.fullmatch(line)
            assert match, f"CHANGELOG.md:{number}: a heading is '## X.Y.Z (YYYY-MM-DD)' or '## X.Y.Z (unreleased)'"
            major, minor, patch, date = match.groups()
            releases.append(((int(major), int(minor), int(patch)), date, []))
        elif line.strip():
            assert releases, f"CHANGELOG.md:{number}: text before the first version"
            releases[-1][2].append(f"{number}: {line}")
    assert releases, "CHANGELOG.md has no version"
    return releases


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def _changelog_version() -> str:
    return _dotted(_releases()[0][0])


def test_the_changelog_lists_versions_newest_first():
    releases = _releases()
    versions = [version for version, _, _ in releases]
    assert versions == sorted(set(versions), reverse=True), "one section per version, newest first"
    dates = [date for _, date, _ in releases]
    assert "unreleased" not in dates[1:], "only the newest version may be unreleased"
    released = [date for date in dates if date != "unreleased"]
    assert released == sorted(released, reverse=True), "release dates go back in time down the file"


def test_the_changelog_has_one_line_per_change():
    problems = []
    for version, _, lines in _releases():
        if not lines:
            problems.append(f"{_dotted(version)}: no change listed")
        problems += [f"CHANGELOG.md:{line}" for line in lines if not line.split(": ", 1)[1].startswith("- ")]
    assert not problems, "under a version, every line is one change, '- ' and one sentence:\n" + "\n".join(problems)


def test_meta_json_has_the_changelogs_version():
    meta = json.loads(META.read_text(encoding="utf-8"))
    expected = _changelog_version()
    assert meta["version"] == expected, f"META.json version {meta['version']}, CHANGELOG.md's newest {expected}"
    for name, provided in meta["provides"].items():
        assert provided["version"] == expected, f"META.json provides.{name}.version {provided['version']}"


def test_pyproject_has_the_changelogs_version():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    expected = _changelog_version()
    assert project["version"] == expected, (
        f"pyproject.toml version {project['version']}, CHANGELOG.md's newest {expected}: "
        f'set version = "{expected}" in [project]'
    )


def test_every_file_meta_json_names_exists():
    meta = json.loads(META.read_text(encoding="utf-8"))
    named = [
        (f"provides.{name}.{key}", provided[key])
        for name, provided in meta["provides"].items()
        for key in ("file", "docfile")
        if key in provided
    ]
    named += [(f"no_index.{kind}", path) for kind, paths in meta.get("no_index", {}).items() for path in paths]
    missing = [f"META.json {where}: {path}" for where, path in named if not (ROOT / path).exists()]
    assert not missing, "\n".join(missing)


def test_meta_json_provides_the_file_that_defines_kb_retrieve():
    """PGXN's provides.pgkb.file is the file holding what pgkb provides: kb_retrieve's definition."""
    path = json.loads(META.read_text(encoding="utf-8"))["provides"]["pgkb"]["file"]
    text = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else ""
    assert re.search(r"CREATE (OR REPLACE )?FUNCTION (public\.)?kb_retrieve\(", text), (
        f"META.json provides.pgkb.file is {path}, which does not define kb_retrieve"
    )
