"""Installs plpython/pgkb_plpy into the site-packages of the server-side venv: the one installer
that scripts/install.sh (``python -m harness.install_plpython SITE_PACKAGES``) and
``pgkb migrate`` both use.

Standard library only, so install.sh can run it with the server venv's Python before the
harness venv exists.

Several installs may run at once (the migrate advisory lock is per database, the venv is per
machine): they serialise on a file lock in the target directory. An identical copy is left
alone, so running backends never see it disappear; a different one is replaced by two renames
(the gap without a copy is tiny). Every file is made readable by the ``postgres`` user."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE = "pgkb_plpy"
# The checkout's copy, found from this file rather than from harness.config, which imports
# pgkb_plpy: install.sh runs this module with the server venv's Python before pgkb_plpy is
# importable there.
PLPYTHON_DIR = Path(__file__).resolve().parent.parent / "plpython" / PACKAGE
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def install_plpython_modules(site_packages: Path, source: Path = PLPYTHON_DIR) -> bool:
    """Make ``site_packages/pgkb_plpy`` a copy of ``source``; True when it had to change.

    Raises ``PermissionError`` when the directory is not writable by this user."""
    site_packages = Path(site_packages)
    target = site_packages / PACKAGE
    with open(site_packages / f".{PACKAGE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tree_digest(target) == tree_digest(source):
            return False
        staging = Path(tempfile.mkdtemp(prefix=f".{PACKAGE}.", dir=site_packages))
        try:
            shutil.copytree(source, staging / PACKAGE, ignore=_IGNORE)
            for path in [staging / PACKAGE, *(staging / PACKAGE).rglob("*")]:
                path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))  # postgres reads it
            if target.exists():
                target.rename(staging / "old")
            (staging / PACKAGE).rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return True


def tree_digest(root: Path) -> str | None:
    """SHA-256 over the relative paths and contents of a module tree (None when absent)."""
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.install_plpython", description=__doc__.split("\n")[0])
    parser.add_argument(
        "site_packages",
        nargs="?",
        default=sysconfig.get_paths()["purelib"],
        help="target site-packages (default: this interpreter's)",
    )
    args = parser.parse_args(argv)
    changed = install_plpython_modules(Path(args.site_packages))
    state = "installed" if changed else "already up to date"
    print(f"{PACKAGE} {state} in {args.site_packages}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
