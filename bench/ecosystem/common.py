"""What the ecosystem benchmarks share: paths, optional third-party packages, timing, output.

* :data:`REPO` is the checkout; :func:`use_plpython` puts its ``plpython/`` first on
  ``sys.path`` so ``pgkb_plpy`` is the checkout's, not an installed copy.
* :func:`default_datasets` is ``PGKB_DATASETS``, else ``../shared/datasets`` beside the
  repository (as in ``bench.retrieval``).
* :func:`import_extra` imports packages that pgkb does not depend on (jieba, markdown-it-py,
  mistune) from an ``--extra-site`` folder, or exits with status 2 and a message that says how
  to make one. They stay out of pgkb's venvs and ``pyproject.toml`` on purpose: the measurements
  are about libraries pgkb chose not to use.
* :func:`best_of` times functions against each other: the best of interleaved runs, seconds per call.
* :func:`emit` writes the JSON report to stdout and a plain table to stderr.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
EXTRA_PACKAGES = "jieba markdown-it-py mistune"


def use_plpython() -> None:
    path = str(REPO / "plpython")
    if path not in sys.path:
        sys.path.insert(0, path)


def default_datasets() -> Path:
    return Path(os.environ.get("PGKB_DATASETS") or REPO.parent / "shared" / "datasets")


def import_extra(extra_site: str | None, *modules: str) -> list[ModuleType]:
    """Import ``modules``, looking in ``extra_site`` first; exit(2) with a how-to when one is missing."""
    if extra_site:
        if not Path(extra_site).is_dir():
            _fail(f"--extra-site {extra_site}: not a folder")
        sys.path.insert(0, str(Path(extra_site).resolve()))
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as exc:
        where = f"in --extra-site {extra_site}" if extra_site else "(no --extra-site given)"
        _fail(
            f"cannot import {exc.name!r} {where}. These packages are not pgkb dependencies and must not be "
            f"installed into pgkb's venvs; make a separate folder and pass it:\n"
            f"    /opt/pgkb/venv/bin/python -m pip install --target /tmp/pgkb-eco-extra {EXTRA_PACKAGES}\n"
            f"    {sys.executable} {sys.argv[0]} --extra-site /tmp/pgkb-eco-extra ..."
        )


def version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None when it has no metadata)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _fail(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def best_of(fns: Mapping[str, Callable[[], object]], repeat: int, number: int = 1) -> dict[str, float]:
    """Seconds per call of each function: the best of ``repeat`` runs of ``number`` calls.

    The runs are interleaved (a run of each function in turn, ``repeat`` times) so that a busy
    machine slows the compared functions alike rather than whichever happened to run last.
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: s / number for name, s in best.items()}


def host() -> dict:
    return {
        "generated_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def emit(report: dict, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    report["host"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=sys.stderr)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=sys.stderr)
