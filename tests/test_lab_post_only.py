"""pgkb lab: state changes only by POST, as a property of the app's routes rather than a list of names.

Every route of the app (walked from its route table, path parameters filled in) is asked with the union
of the fields any action reads (this process's form token, a judgment, a case source, modes, ...), and
the database is compared before and after each request (every row of every table, evaluation jobs in
the background waited for):

* a GET writes nothing, on any route; a route that does not accept GET answers 405;
* a route that writes when posted those fields accepts only POST, and without the form token it
  answers 403 and writes nothing.

A GET carrying the page's form token once recorded a judgment (a write link in a browser's history,
issue 42 and 43)."""

from __future__ import annotations

import json

import pytest
from helpers import insert_document, wait_for
from starlette.routing import Route
from starlette.testclient import TestClient

from harness.lab.app import create_app

TABLES = """SELECT c.oid::regclass::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND n.nspname NOT LIKE 'pg\\_%' ORDER BY 1"""
JUDGMENTS = ("relevant", "not relevant", "forbidden")


def digest(conn) -> dict[str, str]:
    """Every table's rows, as one md5 per table."""
    tables = [row["oid"] for row in conn.execute(TABLES).fetchall()]
    return {
        t: conn.execute(
            f"SELECT md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '')) AS h FROM {t} AS r"
        ).fetchone()["h"]
        for t in tables
    }


def routes(app) -> list[Route]:
    """The app's routes (mounted static files aside), each with its path parameters filled in."""
    return [r for r in app.routes if isinstance(r, Route)]


def concrete(route: Route, value: int) -> str:
    return route.path_format.format(**dict.fromkeys(route.param_convertors, value))


def fields(token: str, n: int) -> dict[str, str]:
    """What any action reads, with this process's token; the judgment differs from one request to the next."""
    judgment = {"j": JUDGMENTS[n % len(JUDGMENTS)], "ns": "default", "src": "refund.md"}
    return {
        "token": token,
        "q": "refund",
        "judge": json.dumps(judgment),
        "source": "judged",
        "modes": "lexical",
        "k": "10",
        "back": "/documents",
    }


@pytest.fixture
def lab(fresh_db, dsn):
    """The lab as the database owner (it may do every action) on a database where every action has
    something to do: a document whose chunks wait in the queue, a judged question to evaluate."""
    insert_document(fresh_db, "refund.md", "# Refund policy\n\nA refund is possible within 14 days of delivery.")
    fresh_db.execute("UPDATE kb.settings SET value = '\"deferred\"' WHERE key = 'embed_mode'")
    insert_document(fresh_db, "later.md", "# Later\n\nEmbedded when the queue runs.")
    fresh_db.execute("UPDATE kb.settings SET value = '\"sync\"' WHERE key = 'embed_mode'")
    fresh_db.execute("SELECT kb.record_judgment('default', 'refund', 'refund.md', 'relevant')")
    document_id = fresh_db.execute("SELECT min(id) AS id FROM kb.documents").fetchone()["id"]
    client = TestClient(create_app(dsn, None))
    yield client, fresh_db, document_id
    client.app.state.database.close()


def settled(client: TestClient) -> None:
    """Wait for the evaluation jobs a request started (they write from a thread of their own)."""
    for job in client.app.state.jobs.recent():
        wait_for(lambda job=job: job.state != "running", timeout=120)


def test_a_get_writes_nothing_on_any_route_and_a_route_without_get_answers_405(lab):
    client, conn, document_id = lab
    token = client.app.state.token
    for n, route in enumerate(routes(client.app)):
        path = concrete(route, document_id)
        before = digest(conn)
        answer = client.get(path, params=fields(token, n), follow_redirects=False)
        settled(client)
        assert digest(conn) == before, f"GET {path} with the form token wrote"
        if "GET" not in route.methods:
            assert answer.status_code == 405, f"GET {path}: {answer.status_code}"


def test_a_route_that_writes_accepts_only_post_and_needs_the_form_token(lab):
    client, conn, document_id = lab
    token = client.app.state.token
    writers = []
    for n, route in enumerate(routes(client.app)):
        if "POST" not in route.methods:
            continue
        path = concrete(route, document_id)
        before = digest(conn)
        refused = client.post(path, data=fields("guessed", n), follow_redirects=False)
        settled(client)
        assert digest(conn) == before, f"POST {path} without the form token wrote"
        client.post(path, data=fields(token, n), follow_redirects=False)
        settled(client)
        if digest(conn) != before:
            writers.append(path)
            assert route.methods == {"POST"}, f"{path} writes and accepts {sorted(route.methods)}"
            assert refused.status_code == 403, f"POST {path} without the token: {refused.status_code}"
    # the walk found the routes that write (retry, evaluation, judging), or it proves nothing
    assert len(writers) >= 3, writers
