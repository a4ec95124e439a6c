"""The client as a user installs it: the project's wheel, built here and installed with pip into a clean
venv (no checkout on its path, dependencies from the package index), then `pgkb.langchain` against a real
database and the `pgkb` command, run from a folder outside the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import insert_document

REPO = Path(__file__).resolve().parents[1]
PIP = "/opt/pgkb/venv/bin/pip"


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}: {result.stderr[-2000:]}"
    return result


def test_the_wheel_installs_in_a_clean_venv_and_its_client_works_outside_a_checkout(fresh_db, dsn, tmp_path):
    insert_document(fresh_db, "refunds.md", "# Refunds\n\nRefunds are accepted within 14 days of delivery.")
    run([PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(REPO)])
    [wheel] = (tmp_path / "dist").glob("pgkb-*.whl")
    venv = tmp_path / "venv"
    run(["/usr/bin/python3", "-m", "venv", str(venv)])
    run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", f"{wheel}[langchain]"])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PGKB_DSN": dsn}
    script = (
        "import pgkb, pgkb.langchain\n"
        "docs = pgkb.langchain.PgkbRetriever(k=1).invoke('how many days for a refund')\n"
        "print(pgkb.__version__, docs[0].metadata['citation'], pgkb.langchain.__file__)\n"
    )
    printed = run([str(venv / "bin" / "python"), "-c", script], cwd=outside, env=env).stdout
    version = next(
        line.split('"')[1]
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if line.startswith("version =")
    )
    assert printed.startswith(f"{version} refunds.md") and str(venv) in printed and str(REPO) not in printed
    assert run([str(venv / "bin" / "pgkb"), "--version"], cwd=outside, env=env).stdout.strip() == f"pgkb {version}"
