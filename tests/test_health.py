"""kb.health() and `pgkb doctor` fail fast: a broken in-database Python path, a missing HNSW
index, a provider answering with the wrong dimensions and an unreachable provider each show as a
failed check with its fix, and the exit code tells a script."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from fake_ollama import FakeOllama
from psycopg.rows import dict_row

from harness import status

PGKB = "/opt/pgkb/venv/bin/pgkb"


def checks(dsn: str) -> dict[str, dict]:
    """The checks as a new session sees them (PL/Python state is per backend)."""
    return {c["check_name"]: c for c in status.health(dsn)}


def doctor(dsn: str) -> subprocess.CompletedProcess:
    return subprocess.run([PGKB, "doctor"], env={**os.environ, "PGKB_DSN": dsn}, capture_output=True, text=True)


def test_a_healthy_database_passes_every_check(fresh_db, dsn):
    fresh_db.execute("INSERT INTO kb.documents (source, body) VALUES ('a.md', '# A\n\nRefunds take 14 days.')")
    got = checks(dsn)
    assert {c["state"] for c in got.values()} == {"ok"}, got
    assert {"in-database python", "active model", "stored vectors", "hnsw index hash-64", "bm25 statistics"} <= set(got)
    result = doctor(dsn)
    assert result.returncode == 0 and "ok       active model: hash-64" in result.stdout


def test_doctor_is_clean_on_the_sample_corpus_as_readme_command_1_loads_it(fresh_db, dsn):
    """scripts/demo.sh's ingest: the sample corpus has superseded, draft and future versions, which the BM25
    statistics rightly leave out; the check counts by the same rule, so nothing is degraded."""
    loaded = subprocess.run(
        [PGKB, "ingest", "examples/corpus", "--quiet"],
        env={**os.environ, "PGKB_DSN": dsn},
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert loaded.returncode == 0, loaded.stderr
    versions = fresh_db.execute("SELECT count(*) FILTER (WHERE status <> 'active') AS n FROM kb.documents").fetchone()
    assert versions["n"] > 0  # the corpus does hold versions the statistics leave out
    result = doctor(dsn)
    assert result.returncode == 0, result.stdout
    assert "ok       bm25 statistics" in result.stdout


def test_a_broken_python_path_fails_with_the_fix(fresh_db, dsn):
    fresh_db.execute("""UPDATE kb.settings SET value = '"/nonexistent/site-packages"' WHERE key = 'python_path'""")
    python = checks(dsn)["in-database python"]
    assert python["state"] == "failed" and "/nonexistent/site-packages" in python["detail"]
    assert "install.sh" in python["fix"]
    result = doctor(dsn)
    assert result.returncode == 2 and "failed   in-database python" in result.stdout


def test_a_missing_hnsw_index_fails_and_names_how_to_recreate_it(fresh_db, dsn):
    index = fresh_db.execute("SELECT kb.hnsw_index_name('hash-64') AS i").fetchone()["i"]
    fresh_db.execute(f"DROP INDEX kb.{index}")
    hnsw = checks(dsn)["hnsw index hash-64"]
    assert hnsw["state"] == "failed" and hnsw["detail"].startswith("missing")
    assert "kb.register_model('hash-64'" in hnsw["fix"]


def test_a_provider_with_the_wrong_dimensions_or_unreachable_fails(migrated_db, dsn):
    with FakeOllama(dimensions=8) as srv:
        migrated_db.execute("DELETE FROM kb.models")
        options = {"base_url": srv.url, "max_retries": 1, "timeout_s": 2, "backoff_s": 0.01, "backoff_max_s": 0.02}
        migrated_db.execute(
            "SELECT kb.register_model('fake', 'ollama', 'nomic-embed-text', 8, %s, true)",
            (psycopg.types.json.Jsonb(options),),
        )
        assert checks(dsn)["active model"]["state"] == "ok"
        srv.mode = "wrong_dims"
        model = checks(dsn)["active model"]
        assert model["state"] == "failed" and "dimension" in model["detail"]
    unreachable = checks(dsn)["active model"]
    assert unreachable["state"] == "failed" and "Ollama" in unreachable["fix"]


def test_a_reader_sees_only_checks_it_may_run(fresh_db, dsn):
    """Checks run with the caller's rights: a role without access to a table reports 'skipped'."""
    fresh_db.execute("CREATE ROLE pgkb_health_probe NOLOGIN")
    fresh_db.execute("GRANT USAGE ON SCHEMA kb TO pgkb_health_probe")
    fresh_db.execute("GRANT SELECT ON kb.models, kb.settings TO pgkb_health_probe")
    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("SET ROLE pgkb_health_probe")
            got = {r["check_name"]: r["state"] for r in conn.execute("SELECT * FROM kb.health()")}
        assert (got["bm25 statistics"], got["embedding queue"], got["stored vectors"]) == ("skipped",) * 3
        assert got["active model"] == "ok" and got["extension vector"] == "ok"
    finally:
        fresh_db.execute("DROP OWNED BY pgkb_health_probe")
        fresh_db.execute("DROP ROLE pgkb_health_probe")


def test_hnsw_options_that_differ_from_the_settings_are_degraded_until_reindex_hnsw(fresh_db, dsn):
    from harness import reindex

    assert checks(dsn)["hnsw options hash-64"]["state"] == "ok"
    fresh_db.execute("UPDATE kb.settings SET value = '8' WHERE key = 'hnsw_m'")
    fresh_db.execute("UPDATE kb.settings SET value = '32' WHERE key = 'hnsw_ef_construction'")
    try:
        stale = checks(dsn)["hnsw options hash-64"]
        assert stale["state"] == "degraded" and "m = 16, ef_construction = 64" in stale["detail"]
        assert stale["fix"].startswith("pgkb reindex-hnsw --model hash-64")
        done = reindex.run(dsn, model="hash-64", quiet=True)
        assert done["options"] == "m = 8, ef_construction = 32" and done["rebuilt"]
        assert checks(dsn)["hnsw options hash-64"]["state"] == "ok"
        options = fresh_db.execute(
            "SELECT reloptions FROM pg_class WHERE relname = kb.hnsw_index_name('hash-64')"
        ).fetchone()["reloptions"]
        assert sorted(options) == ["ef_construction=32", "m=8"]
        assert reindex.run(dsn, model="hash-64", quiet=True)["rebuilt"] == [], "nothing left to rebuild"
    finally:
        fresh_db.execute("UPDATE kb.settings SET value = default_value WHERE key IN ('hnsw_m', 'hnsw_ef_construction')")


def test_reindex_hnsw_drops_the_invalid_copy_an_interrupted_rebuild_left(fresh_db, dsn):
    """A REINDEX CONCURRENTLY cut off mid-build leaves an invalid `<index>_ccnew`; made here by a
    concurrent build that fails (a cast every stored 64-dimension vector refuses)."""
    from harness import reindex

    fresh_db.execute("INSERT INTO kb.documents (source, body) VALUES ('a.md', '# A\n\nRefunds take 14 days.')")
    leftover = fresh_db.execute("SELECT kb.hnsw_index_name('hash-64') || '_ccnew' AS n").fetchone()["n"]
    with pytest.raises(psycopg.errors.DataException, match="dimensions"):
        fresh_db.execute(
            f"CREATE INDEX CONCURRENTLY {leftover} ON kb.embeddings"
            " USING hnsw ((embedding::vector(65)) vector_cosine_ops)"
        )
    invalid = "SELECT count(*) AS n FROM pg_index WHERE NOT indisvalid AND indrelid = 'kb.embeddings'::regclass"
    assert fresh_db.execute(invalid).fetchone()["n"] == 1
    done = reindex.run(dsn, quiet=True)
    assert done["rebuilt"] == [] and leftover not in done["kept"], "the settings did not change: nothing rebuilt"
    assert fresh_db.execute(invalid).fetchone()["n"] == 0
    assert fresh_db.execute("SELECT to_regclass(%s) AS r", [f"kb.{leftover}"]).fetchone()["r"] is None
    assert checks(dsn)["hnsw options hash-64"]["state"] == "ok"


def test_an_hnsw_setting_pgvector_would_refuse_is_named_by_health_and_not_used(fresh_db, dsn):
    """The setting's range refuses hnsw_m = 200 when written; one stored before the range existed
    (written here past the range's trigger) is named by the health check, and the index build
    uses the default instead of failing."""
    with pytest.raises(psycopg.errors.CheckViolation, match="hnsw_m = 200 is outside its range 4 to 100"):
        fresh_db.execute("UPDATE kb.settings SET value = '200' WHERE key = 'hnsw_m'")
    fresh_db.execute("ALTER TABLE kb.settings DISABLE TRIGGER settings_value_in_range")
    fresh_db.execute("UPDATE kb.settings SET value = '200' WHERE key = 'hnsw_m'")
    fresh_db.execute("ALTER TABLE kb.settings ENABLE TRIGGER settings_value_in_range")
    try:
        named = checks(dsn)["settings"]
        assert named["state"] == "degraded" and "hnsw_m" in named["detail"], named
        fresh_db.execute("SELECT kb.ensure_hnsw_indexes('hash-64')")
        assert fresh_db.execute("SELECT kb.setting('hnsw_m') AS m").fetchone()["m"] == 16
    finally:
        fresh_db.execute("UPDATE kb.settings SET value = default_value WHERE key = 'hnsw_m'")
