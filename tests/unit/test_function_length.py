"""The Python outside and inside the database keeps the rule the SQL keeps (tests/test_schema.py):
one job per function. No function is longer than 150 lines, and a request handler -- a `pgkb`
command's function, any function of the lab -- reads as a list of named steps, at most 80.

A function's length runs from its ``def`` line to its last line, docstring and comments
included; a nested function counts on its own and inside the function that holds it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FUNCTION_LIMIT = 150
HANDLER_LIMIT = 80
CLI = REPO / "harness" / "cli.py"
LAB = REPO / "harness" / "lab"


@dataclass(frozen=True)
class Function:
    path: Path
    line: int
    name: str  # qualified: outer.inner for a nested function, Class.method for a method
    length: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line} {self.name} ({self.length} lines)"


def _functions(path: Path) -> list[Function]:
    """Every def and async def of a file, nested ones included."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append(Function(path, child.lineno, name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return found


def _python_files(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _fail_on(offenders: list[Function], limit: int) -> None:
    __tracebackhide__ = True
    if offenders:
        pytest.fail(f"longer than {limit} lines; split into named steps:\n  " + "\n  ".join(map(str, offenders)))


def _cli_handlers() -> list[Function]:
    """The functions `pgkb` dispatches a command to: every ``set_defaults(func=...)`` in
    harness/cli.py, a name defined there or ``module.function`` of a harness module."""
    tree = ast.parse(CLI.read_text(encoding="utf-8"), str(CLI))
    targets = [
        keyword.value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "set_defaults"
        for keyword in call.keywords
        if keyword.arg == "func"
    ]
    handlers = []
    for target in targets:
        if isinstance(target, ast.Name):
            path, name = CLI, target.id
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            path, name = CLI.parent / f"{target.value.id}.py", target.attr
        else:
            raise AssertionError(f"harness/cli.py:{target.lineno}: a command handler this rule cannot find")
        matches = [f for f in _functions(path) if f.name == name]
        assert matches, f"harness/cli.py:{target.lineno}: handler {ast.unparse(target)} not found in {path.name}"
        handlers.append(matches[0])
    return handlers


def test_the_rule_measures_nested_functions_methods_and_async_defs_from_def_to_last_line(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "@decorator\n"
        "def outer():\n"
        "    async def inner():\n"
        "        return 1\n"
        "\n"
        "    return inner\n"
        "\n"
        "\n"
        "class Page:\n"
        "    def render(self):\n"
        "        pass\n"
    )
    measured = {f.name: (f.line, f.length) for f in _functions(source)}
    assert measured == {"outer": (2, 5), "outer.inner": (3, 2), "Page.render": (10, 2)}


def test_no_python_function_is_longer_than_150_lines():
    functions = [f for path in _python_files(REPO / "harness", REPO / "plpython") for f in _functions(path)]
    assert len(functions) > 100  # the rule sees the code it is about
    offenders = [f for f in functions if f.length > FUNCTION_LIMIT]
    _fail_on(offenders, FUNCTION_LIMIT)


def test_no_cli_command_handler_is_longer_than_80_lines():
    handlers = _cli_handlers()
    assert len(handlers) > 10  # every `pgkb` command, found through argparse's set_defaults
    offenders = [f for f in handlers if f.length > HANDLER_LIMIT]
    _fail_on(offenders, HANDLER_LIMIT)


def test_no_lab_function_is_longer_than_80_lines():
    functions = [f for path in _python_files(LAB) for f in _functions(path)]
    assert functions
    offenders = [f for f in functions if f.length > HANDLER_LIMIT]
    _fail_on(offenders, HANDLER_LIMIT)
