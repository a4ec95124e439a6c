"""bench/ is one tool: `python -m bench <scenario>` runs a module registered in bench/scenarios.py.
Every registered module imports and has a `main`, and every benchmark command the docs cite
(README.md, docs/*.md, bench/README.md) names a registered scenario or a module that exists, so a
removed script cannot stay cited. No database needed: the modules are only imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import scenarios  # noqa: E402
from bench.__main__ import main as bench_main  # noqa: E402

CITING = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
SCENARIO_CMD = re.compile(r"-m bench[ \t]+([A-Za-z_]\w*)")
MODULE_CMD = re.compile(r"-m (bench(?:\.\w+)+)")
SCRIPT_PATH = re.compile(r"(?<![\w/.-])(bench/[\w/]+\.py)\b")


def _module_exists(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _unknown_citations(text: str) -> list[str]:
    """The benchmark commands and script paths of a text that name nothing in the repository."""
    unknown = [
        f"python -m bench {name}" for name in SCENARIO_CMD.findall(text) if name not in {*scenarios.SCENARIOS, "list"}
    ]
    unknown += [f"python -m {name}" for name in MODULE_CMD.findall(text) if not _module_exists(name)]
    unknown += [path for path in SCRIPT_PATH.findall(text) if not (ROOT / path).is_file()]
    return unknown


def test_every_registered_scenario_imports_and_exposes_main():
    """In a fresh interpreter: some modules put folders of the repository on sys.path when imported."""
    probe = (
        "import importlib, json, sys\n"
        "from bench.scenarios import SCENARIOS\n"
        "print(json.dumps({n: callable(getattr(importlib.import_module(s.module), 'main', None))"
        " for n, s in SCENARIOS.items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    has_main = json.loads(done.stdout.splitlines()[-1])
    assert has_main == {name: True for name in scenarios.SCENARIOS}


def test_every_scenario_says_what_it_compares_against():
    assert len(scenarios.SCENARIOS) >= 10
    for name, scenario in scenarios.SCENARIOS.items():
        assert re.fullmatch(r"[a-z_]+", name), name
        assert scenario.module.startswith("bench."), name
        assert len(scenario.description) > 40, f"{name}: say what it measures and against what"


def test_list_prints_one_line_per_scenario(capsys):
    assert bench_main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(scenarios.SCENARIOS)


def test_an_unknown_scenario_is_refused_with_the_list(capsys):
    assert bench_main(["no_such_scenario"]) == 2
    assert "retrieval" in capsys.readouterr().err


def test_a_scenario_runs_its_modules_main_with_the_remaining_arguments(tmp_path, monkeypatch):
    (tmp_path / "bench_probe_module.py").write_text(
        "import sys\ndef main():\n    global seen\n    seen = list(sys.argv)\n    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(scenarios.SCENARIOS, "probe", scenarios.Scenario("bench_probe_module", "a probe"))
    before = list(sys.argv)
    assert bench_main(["probe", "--db", "x"]) == 3
    assert sys.modules["bench_probe_module"].seen == ["python -m bench probe", "--db", "x"]
    assert sys.argv == before


def test_the_citation_rule_sees_a_removed_script():
    text = "python bench/parse_libraries.py; python -m bench parse_libraries; python -m bench.ecosystem.cjk_terms"
    assert len(_unknown_citations(text)) == 3
    assert _unknown_citations("python -m bench query_path; python bench/query_path.py; python -m bench.retrieval") == []


@pytest.mark.parametrize("page", CITING, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bench_command_cited_names_a_scenario_or_module(page):
    unknown = _unknown_citations(page.read_text(encoding="utf-8"))
    assert not unknown, f"{page.relative_to(ROOT)} cites what bench/ does not have: {unknown}"
