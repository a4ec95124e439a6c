"""sql/ is split by seam: no file over 300 lines, no function body over 150 (the database test
in tests/test_schema.py counts the functions a migrated database has; this one reads the files, so
it also covers the shard coordinator's kb_shard, which only a coordinator installs)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.migrate import sql_files

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
MAX_FILE_LINES = 300
MAX_BODY_LINES = 150
# a function or procedure with its dollar-quoted body (the tag may be empty or named)
ROUTINE = re.compile(
    r"CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE)\s+([\w.]+)\s*\(.*?\bAS\s+(\$\w*\$)(.*?)\2",
    re.DOTALL | re.IGNORECASE,
)


def every_sql_file() -> list[Path]:
    return sorted(SQL_DIR.rglob("*.sql"))


def test_no_sql_file_is_longer_than_300_lines():
    lengths = {str(p.relative_to(SQL_DIR)): len(p.read_text(encoding="utf-8").splitlines()) for p in every_sql_file()}
    assert len(lengths) > 20
    assert {name: n for name, n in lengths.items() if n > MAX_FILE_LINES} == {}


def test_no_function_body_in_any_sql_file_is_longer_than_150_lines():
    bodies = {}
    for path in every_sql_file():
        for match in ROUTINE.finditer(path.read_text(encoding="utf-8")):
            # as pg_proc.prosrc counts it: the text between the dollar quotes, split on newlines
            bodies[f"{path.relative_to(SQL_DIR)}:{match.group(1)}"] = len(match.group(3).split("\n"))
    assert any(name.startswith("shards/") for name in bodies)
    assert any(name.endswith(":kb_node.lexical_scores") for name in bodies)
    assert {name: n for name, n in bodies.items() if n > MAX_BODY_LINES} == {}


def test_migrate_runs_every_file_of_sql_but_the_coordinators_in_path_order(tmp_path):
    for name in ["010_a.sql", "020_b/02_y.sql", "020_b/01_x.sql", "030_c.sql", "shards/01_z.sql", "README.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("SELECT 1;\n")
    assert [p.relative_to(tmp_path).as_posix() for p in sql_files(tmp_path)] == [
        "010_a.sql",
        "020_b/01_x.sql",
        "020_b/02_y.sql",
        "030_c.sql",
    ]
