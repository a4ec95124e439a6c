"""The PL/Python entry points (pgkb_plpy.entry) against a stand-in for PL/Python's plpy: the
version handshake, the terms version check, and what each entry point returns."""

from __future__ import annotations

import json

import pgkb_plpy
import pytest
from pgkb_plpy import entry, lexical


class PlpyError(Exception):
    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class FakePlpy:
    """Answers the queries the entry points send; counts them; raises PlpyError for plpy.error."""

    def __init__(self, expected: str = pgkb_plpy.__version__, terms_version: object = lexical.TERMS_VERSION):
        self.expected = expected
        self.settings = {"lexical_terms_version": terms_version}
        self.queries: list[str] = []

    def prepare(self, sql: str, types: list[str]) -> str:
        return sql

    def execute(self, sql: str, args: list | None = None) -> list[dict]:
        self.queries.append(sql)
        if "kb.plpython_expected_version()" in sql:
            return [{"v": self.expected}]
        if "kb.setting(k)" in sql:
            return [{"key": k, "value": json.dumps(self.settings[k])} for k in args[0]]
        raise AssertionError(f"unexpected query {sql!r}")

    def error(self, message: str, hint: str | None = None) -> None:
        raise PlpyError(message, hint)


def test_entry_points_answer_like_the_modules_they_call():
    plpy = FakePlpy()
    assert entry.query_terms(plpy, {}, {}, "Refunds E-4031") == lexical.query_terms("Refunds E-4031")
    assert entry.query_terms(plpy, {}, {}, None) == []
    analysis = json.loads(entry.analyze_query(plpy, {}, {}, "什么是退款？", None))
    assert analysis["language"] == "zh" and analysis["normalized"] == "退款"
    assert analysis["stage_terms"] == [lexical.query_terms(stage) for stage in analysis["stages"]]
    assert entry.snippets(plpy, {}, {}, ["a refund policy", None], "refund", 200) == ["a «refund» policy", ""]
    assert entry.snippets(plpy, {}, {}, None, "refund", 200) == []


def test_the_version_is_checked_once_per_compiled_function():
    plpy, SD = FakePlpy(), {}
    version_checks = lambda: sum("plpython_expected_version" in q for q in plpy.queries)  # noqa: E731
    for _ in range(3):
        entry.analyze_query(plpy, {}, SD, "refund", None)
    assert version_checks() == 1
    # PL/Python gives a recompiled function (after a migrate) a fresh SD: it checks again
    entry.analyze_query(plpy, {}, {}, "refund", None)
    assert version_checks() == 2


def test_a_session_with_older_modules_is_told_to_reconnect(monkeypatch):
    monkeypatch.setattr(entry, "_installed_version", lambda: "9.9.9")
    plpy = FakePlpy(expected="9.9.9")
    with pytest.raises(PlpyError) as ei:
        entry.snippets(plpy, {}, {}, ["text"], "text", 100)
    message = str(ei.value)
    assert f"runs pgkb_plpy {pgkb_plpy.__version__} but the schema expects 9.9.9" in message
    assert "reconnect" in message and "pgkb migrate" in message
    assert "new connection" in ei.value.hint.lower()


def test_an_old_installed_copy_is_told_to_be_installed(monkeypatch):
    monkeypatch.setattr(entry, "_installed_version", lambda: pgkb_plpy.__version__)
    plpy, SD = FakePlpy(expected="9.9.9"), {}
    with pytest.raises(PlpyError) as ei:
        entry.query_terms(plpy, {}, SD, "refund")
    assert "installed copy is " + pgkb_plpy.__version__ in str(ei.value)
    assert "pgkb migrate" in ei.value.hint and "install.sh" in ei.value.hint
    assert SD == {}, "a failed handshake is not remembered"


def test_the_installed_version_is_read_from_disk():
    assert entry._installed_version() == pgkb_plpy.__version__


def test_a_missing_entry_point_outside_postgres_is_an_attribute_error():
    assert not hasattr(entry, "no_such_entry_point")
    with pytest.raises(AttributeError):
        entry._no_such_private_name  # noqa: B018


def test_query_terms_refuse_postings_of_other_term_rules():
    plpy = FakePlpy(terms_version=lexical.TERMS_VERSION + 1)
    with pytest.raises(PlpyError) as ei:
        entry.query_terms(plpy, {}, {}, "refund")
    assert f"built with terms version {lexical.TERMS_VERSION + 1}" in str(ei.value)
    assert f"produces terms version {lexical.TERMS_VERSION}" in str(ei.value)
    assert "pgkb migrate" in ei.value.hint


def test_query_terms_check_the_terms_version_once_per_compiled_function():
    plpy, SD = FakePlpy(), {}
    for _ in range(3):
        entry.query_terms(plpy, {}, SD, "refund")
    assert len(plpy.queries) == 2  # the handshake and the terms version, once each
