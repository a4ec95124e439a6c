"""`pgkb check PATH` (harness/check.py): broken relative links, a `supersedes` that names no
document of the folder, a missing `effective_from` where most of a namespace has one, and files
`pgkb ingest` would refuse; a JSON report with a stable shape, exit 1 with findings, 0 without,
2 for a usage error. Offline: no database is involved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import check, cli


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def kinds(report: dict) -> list[tuple[str, int | None, str]]:
    return [(Path(f["file"]).name, f["line"], f["kind"]) for f in report["findings"]]


def test_a_clean_folder_has_no_findings_and_exits_0(tmp_path, capsys):
    write(tmp_path, "a.md", "# A\n\nSee [b](b.md), [b's part](./b.md#part), [web](https://example.com), [top](#a).\n")
    write(tmp_path, "b.md", "# B\n\n![diagram](img/d.png)\n")
    write(tmp_path, "img/d.png", "png")
    assert cli.main(["check", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "version": 1,
        "root": str(tmp_path.resolve()),
        "documents": 2,
        "findings": [],
        "counts": dict.fromkeys(check.KINDS, 0),
    }


def test_broken_relative_links_and_images_are_reported_with_file_and_line(tmp_path):
    write(
        tmp_path,
        "docs/a.md",
        "---\ntitle: A\n---\n# A\n\nSee [gone](missing.md#x) and ![pic](../img/nope.png).\n\n[ref]: ./old/b.md\n",
    )
    report = check.check(tmp_path)
    assert kinds(report) == [("a.md", 6, "broken_link"), ("a.md", 6, "broken_link"), ("a.md", 8, "broken_link")]
    assert "missing.md" in report["findings"][0]["message"]
    assert report["counts"]["broken_link"] == 3


def test_links_inside_code_are_not_checked(tmp_path):
    write(tmp_path, "a.md", "Use `[x](nope.md)` here.\n\n```md\n[y](nope.md)\n```\n")
    assert check.check(tmp_path)["findings"] == []


def test_a_link_to_a_folder_relative_path_resolves_from_the_folder_given(tmp_path):
    write(tmp_path, "sub/a.md", "[root](/b.md) and [gone](/c.md)\n")
    write(tmp_path, "b.md", "B\n")
    assert kinds(check.check(tmp_path)) == [("a.md", 1, "broken_link")]


def test_supersedes_that_names_no_document_of_the_namespace_is_reported(tmp_path):
    write(tmp_path, "v2.md", "---\nnamespace: hr\nsupersedes: v1.md\n---\nV2\n")
    write(tmp_path, "v3.md", "---\nnamespace: hr\nsupersedes: v2.md\n---\nV3\n")
    write(tmp_path, "other.md", "---\nnamespace: it\nsupersedes: v2.md\n---\nOther namespace\n")
    report = check.check(tmp_path)
    assert kinds(report) == [("other.md", 3, "unknown_supersedes"), ("v2.md", 3, "unknown_supersedes")]
    assert "'hr'" in report["findings"][1]["message"]


def test_a_missing_effective_from_is_reported_where_most_of_the_namespace_has_one(tmp_path):
    for name in ("a", "b", "c"):
        write(tmp_path, f"p/{name}.md", "---\nnamespace: policies\neffective_from: 2025-01-01\n---\nText\n")
    write(tmp_path, "p/d.md", "---\nnamespace: policies\n---\nNo date\n")
    # a namespace where dates are the exception is not judged
    write(tmp_path, "n/x.md", "---\nnamespace: notes\neffective_from: 2025-01-01\n---\nText\n")
    write(tmp_path, "n/y.md", "---\nnamespace: notes\n---\nText\n")
    report = check.check(tmp_path)
    assert kinds(report) == [("d.md", None, "missing_effective_from")]
    assert "3 of the 4" in report["findings"][0]["message"]


def test_a_file_pgkb_ingest_would_refuse_is_reported_with_its_line(tmp_path):
    write(tmp_path, "bad.md", "---\ntitle: x\nconcept_keys: one\n---\nText\n")
    write(tmp_path, "yaml.md", "---\ntitle: [unclosed\n---\nText\n")
    report = check.check(tmp_path)
    # yaml.md: the line where YAML finds the problem
    assert kinds(report) == [("bad.md", 3, "invalid_document"), ("yaml.md", 3, "invalid_document")]


def test_findings_exit_1_and_a_missing_path_exits_2(tmp_path, capsys):
    write(tmp_path, "a.md", "[x](nope.md)\n")
    assert cli.main(["check", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert set(report["findings"][0]) == {"file", "line", "kind", "message"}
    assert cli.main(["check", str(tmp_path / "absent")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli.main(["check"])
    assert usage.value.code == 2


def test_the_namespace_option_puts_every_document_in_one_namespace_as_ingest_does(tmp_path):
    write(tmp_path, "v2.md", "---\nnamespace: hr\nsupersedes: v1.md\n---\nV2\n")
    write(tmp_path, "v1.md", "---\nnamespace: it\n---\nV1\n")
    assert kinds(check.check(tmp_path)) == [("v2.md", 3, "unknown_supersedes")]
    assert check.check(tmp_path, namespace="all")["findings"] == []
