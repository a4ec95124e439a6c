"""Per-document access: a document may name the roles that may read it (kb.documents.readers).
To every other role, also one that may read the namespace, the document does not exist: no
retrieval leg returns it, no statistic counts it, no successor it is retires anything, and no
table shows a row of it. tests/test_isolation_battery.py runs every isolation rule with B's
documents private in A's namespace; these are the rules of the readers list itself."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import psycopg
import pytest
from helpers import acting_as, insert_document, sources, temporary_role

from harness import loader
from harness.retrieval import MODES, explain, retrieve

SUFFIX = uuid.uuid4().hex[:8]
STAFF = f"staff_{SUFFIX}"
BOARD = f"board_{SUFFIX}"
EDITOR = f"editor_{SUFFIX}"
CLERK = f"clerk_{SUFFIX}"


@pytest.fixture
def office(fresh_db):
    """Namespace `hr` read by staff and the board (both pgkb_reader) and written by an editor who
    sits on the board and by a clerk who does not; a shared handbook and a board-only salary review."""
    conn = fresh_db
    with ExitStack() as stack:
        stack.enter_context(temporary_role(conn, BOARD, "NOLOGIN IN ROLE pgkb_reader"))
        stack.enter_context(temporary_role(conn, STAFF, "NOLOGIN IN ROLE pgkb_reader"))
        stack.enter_context(temporary_role(conn, EDITOR, f"NOLOGIN IN ROLE pgkb_writer, {BOARD}"))
        stack.enter_context(temporary_role(conn, CLERK, "NOLOGIN IN ROLE pgkb_writer"))
        for name in (STAFF, BOARD, EDITOR, CLERK):
            conn.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'hr')", (name,))
        conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
        insert_document(conn, "handbook.md", "# Handbook\n\nSalaries are paid monthly.", namespace="hr")
        insert_document(
            conn,
            "salary-review.md",
            "# Salary review\n\nThe zqxbonus pool grows by eight percent next year.",
            namespace="hr",
            readers=[BOARD],
        )
        yield conn


def retrieved_as(conn, role_name: str, query: str, mode: str = "lexical", **kwargs) -> list[str]:
    with acting_as(conn, role_name):
        return sources(retrieve(conn, query, k=10, mode=mode, **kwargs))


@pytest.mark.parametrize("mode", MODES)
def test_a_private_document_is_retrieved_by_its_readers_and_by_no_other_role_of_its_namespace(office, mode):
    query = "zqxbonus pool salary"
    assert "salary-review.md" in retrieved_as(office, BOARD, query, mode)
    assert "salary-review.md" in retrieved_as(office, EDITOR, query, mode), "a member of a reader role reads it"
    assert "salary-review.md" not in retrieved_as(office, STAFF, query, mode)
    assert "salary-review.md" in sources(retrieve(office, query, k=10, mode=mode)), "the owner reads everything"


def test_no_table_shows_a_role_outside_the_readers_any_row_of_a_private_document(office):
    for relation, column in (
        ("kb.documents", "source"),
        ("kb.chunks", "content"),
        ("kb.lexical_postings", "term"),
        ("kb.embeddings", "chunk_id::text"),
    ):
        query = f"SELECT string_agg({column}, ' ') AS t, count(*) AS n FROM {relation}"
        with acting_as(office, STAFF):
            staff = office.execute(query).fetchone()
        with acting_as(office, BOARD):
            board = office.execute(query).fetchone()
        assert staff["n"] < board["n"], relation
    with acting_as(office, STAFF):
        postings = "SELECT count(*) AS n FROM kb.lexical_postings WHERE term = (kb.query_terms('zqxbonus'))[1]"
        assert office.execute(postings).fetchone()["n"] == 0


def test_statistics_leave_private_documents_out_for_every_role(office):
    """The BM25 and language statistics describe what every reader of the namespace may read, so
    no role's scores move because of a document it may not read (its readers' neither)."""
    office.execute("SELECT kb.refresh_term_stats(NULL)")
    df = office.execute(
        "SELECT count(*) AS n FROM kb.lexical_terms WHERE term = (kb.query_terms('zqxbonus'))[1]"
    ).fetchone()["n"]
    chunks = office.execute("SELECT chunk_count FROM kb.lexical_stats WHERE namespace = 'hr'").fetchone()
    assert df == 0
    assert (
        chunks["chunk_count"]
        == office.execute(
            "SELECT count(*) AS n FROM kb.chunks AS c INNER JOIN kb.documents AS d ON d.id = c.document_id"
            " WHERE d.namespace = 'hr' AND d.readers IS NULL"
        ).fetchone()["n"]
    )
    with acting_as(office, BOARD):
        board = explain(office, "zqxbonus pool", k=5, mode="lexical")
    office.execute("UPDATE kb.documents SET readers = NULL WHERE source = 'salary-review.md'")
    with acting_as(office, BOARD):
        shared = explain(office, "zqxbonus pool", k=5, mode="lexical")
    assert board["results"][0]["lexical_score"] > shared["results"][0]["lexical_score"], (
        "a word only the private document holds has the idf of a word no document holds"
    )


def test_making_a_document_private_or_shared_recounts_its_namespaces_statistics_at_once(office):
    def df(word: str) -> int:
        return office.execute(
            "SELECT coalesce(sum(df), 0) AS n FROM kb.lexical_terms WHERE term = (kb.query_terms(%s))[1]", (word,)
        ).fetchone()["n"]

    office.execute("SELECT kb.refresh_term_stats(NULL)")
    assert df("monthly") == 1
    office.execute("UPDATE kb.documents SET readers = %s WHERE source = 'handbook.md'", ([BOARD],))
    assert df("monthly") == 0
    office.execute("UPDATE kb.documents SET readers = NULL WHERE source IN ('handbook.md', 'salary-review.md')")
    assert (df("monthly"), df("zqxbonus")) == (1, 1)


def test_a_private_successor_does_not_retire_the_version_other_roles_read(office):
    insert_document(office, "leave-v1.md", "# Leave\n\nAnnual leave is twenty days.", namespace="hr")
    insert_document(
        office,
        "leave-v2.md",
        "# Leave\n\nAnnual leave is twenty five days.",
        namespace="hr",
        supersedes="leave-v1.md",
        readers=[BOARD],
    )
    assert "leave-v1.md" in retrieved_as(office, STAFF, "annual leave days")
    board = retrieved_as(office, BOARD, "annual leave days")
    assert "leave-v2.md" in board and "leave-v1.md" not in board
    filtered = retrieved_as(office, STAFF, "annual leave days", filters={"source_prefix": "leave"})
    assert filtered == ["leave-v1.md"], "filters judge visibility by the same rule"


def test_a_reader_that_is_no_role_is_refused_with_the_document_and_the_name(office):
    with pytest.raises(psycopg.errors.UndefinedObject, match=r'hr/x\.md names reader "nobody_[0-9a-f]+": no such role'):
        insert_document(office, "x.md", "text", namespace="hr", readers=[f"nobody_{SUFFIX}"])
    with pytest.raises(psycopg.errors.CheckViolation, match="documents_readers_listed"):
        insert_document(office, "y.md", "text", namespace="hr", readers=[])


def test_a_dropped_reader_matches_nobody_and_a_new_role_of_its_name_inherits_nothing(office):
    temp = f"temp_{SUFFIX}"
    with temporary_role(office, temp, "NOLOGIN IN ROLE pgkb_reader"):
        office.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'hr')", (temp,))
        insert_document(office, "temp.md", "# Temp\n\nThe ykwtemp note.", namespace="hr", readers=[temp])
        assert "temp.md" in retrieved_as(office, temp, "ykwtemp note")
        office.execute("DELETE FROM kb.namespace_grants WHERE role_name = %s", (temp,))
    with temporary_role(office, temp, "NOLOGIN IN ROLE pgkb_reader"):
        office.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'hr')", (temp,))
        assert "temp.md" not in retrieved_as(office, temp, "ykwtemp note")


def test_reader_ids_follow_the_readers_list_and_cannot_be_written_directly(office):
    staff_oid = office.execute("SELECT %s::regrole::oid AS o", (STAFF,)).fetchone()["o"]
    forged = "UPDATE kb.documents SET reader_ids = ARRAY[%s::oid] WHERE source = 'salary-review.md'"
    office.execute(forged, (staff_oid,))
    assert "salary-review.md" not in retrieved_as(office, STAFF, "zqxbonus pool")


def test_a_writer_may_write_only_documents_it_may_read_itself(office):
    with acting_as(office, EDITOR):
        insert_document(office, "board-minutes.md", "Minutes.", namespace="hr", readers=[BOARD])
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            insert_document(office, "staff-only.md", "Staff.", namespace="hr", readers=[STAFF])


def test_a_writer_of_the_namespace_learns_only_that_a_private_source_name_is_taken(office):
    """What stays (docs/RELIABILITY.md): a source names one document per namespace, so inserting a
    private document's source fails; the error repeats what the writer gave and nothing else."""
    office.execute("GRANT pgkb_writer TO " + STAFF)
    with acting_as(office, STAFF), pytest.raises(psycopg.errors.UniqueViolation) as err:
        insert_document(office, "salary-review.md", "guess", namespace="hr")
    assert "zqxbonus" not in str(err.value) and BOARD not in str(err.value)


def test_readers_apply_with_tenant_isolation_off_too(office):
    office.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'")
    assert "salary-review.md" not in retrieved_as(office, STAFF, "zqxbonus pool")
    with acting_as(office, STAFF):
        assert office.execute("SELECT count(*) AS n FROM kb.documents WHERE readers IS NOT NULL").fetchone()["n"] == 0


def test_reloading_a_folder_keeps_a_documents_readers(office, dsn, tmp_path):
    """pgkb ingest does not set readers (SQL does); loading a changed file again keeps them."""
    folder = tmp_path / "hr"
    folder.mkdir()
    (folder / "bonus.md").write_text("# Bonus\n\nThe qqbonus rule.", encoding="utf-8")
    loader.ingest(dsn, [str(folder)], namespace="hr", progress=False)
    office.execute("UPDATE kb.documents SET readers = %s WHERE source = 'bonus.md'", ([BOARD],))
    (folder / "bonus.md").write_text("# Bonus\n\nThe qqbonus rule, revised.", encoding="utf-8")
    loader.ingest(dsn, [str(folder)], namespace="hr", progress=False)
    assert office.execute("SELECT readers FROM kb.documents WHERE source = 'bonus.md'").fetchone()["readers"] == [BOARD]
    assert "bonus.md" not in retrieved_as(office, STAFF, "qqbonus rule")


# -- lifecycle links: a writer cannot change the lifecycle of what it may not read ---------------------


def lifecycle_as(conn, role_name: str, source: str) -> str | None:
    with acting_as(conn, role_name):
        row = conn.execute("SELECT lifecycle FROM kb.read_document('hr', %s)", (source,)).fetchone()
    return row and row["lifecycle"]


def clerk_writes_notice(conn, **fields) -> None:
    """The clerk, who may not read salary-review.md, writes a shared notice in `hr`."""
    with acting_as(conn, CLERK):
        insert_document(conn, "notice.md", "# Notice\n\nThe canteen opens at eight.", namespace="hr", **fields)


def test_a_writer_who_may_not_read_a_private_document_cannot_retire_it_through_supersedes(office):
    clerk_writes_notice(office, supersedes="salary-review.md")
    assert "salary-review.md" in retrieved_as(office, BOARD, "zqxbonus pool")
    assert lifecycle_as(office, BOARD, "salary-review.md") == "current"
    filtered = retrieved_as(office, BOARD, "zqxbonus pool", filters={"source_prefix": "salary"})
    assert filtered == ["salary-review.md"], "filters judge visibility by the same rule"
    with acting_as(office, BOARD):
        current = office.execute("SELECT source FROM kb.current_documents WHERE namespace = 'hr'").fetchall()
    assert "salary-review.md" in {r["source"] for r in current}
    # a reader of the private document writing the same link retires it
    with acting_as(office, EDITOR):
        office.execute("UPDATE kb.documents SET supersedes = NULL WHERE source = 'notice.md'")
        office.execute("UPDATE kb.documents SET supersedes = 'salary-review.md' WHERE source = 'notice.md'")
    assert lifecycle_as(office, BOARD, "salary-review.md") == "superseded"


def test_the_writer_of_a_link_is_recorded_by_the_database_not_by_the_statement(office):
    clerk_writes_notice(office, supersedes="salary-review.md", supersedes_writer_ids=None)
    with acting_as(office, CLERK):
        office.execute("UPDATE kb.documents SET supersedes_writer_ids = NULL WHERE source = 'notice.md'")
    assert lifecycle_as(office, BOARD, "salary-review.md") == "current"


def test_a_writer_cannot_close_a_cycle_through_a_private_document_it_may_not_read(office):
    office.execute("UPDATE kb.documents SET supersedes = 'notice.md' WHERE source = 'salary-review.md'")
    clerk_writes_notice(office)
    with acting_as(office, CLERK):
        # its link names nothing it may read: no cycle in force, no error that tells it otherwise
        office.execute("UPDATE kb.documents SET supersedes = 'salary-review.md' WHERE source = 'notice.md'")
    assert "salary-review.md" in retrieved_as(office, BOARD, "zqxbonus pool")
    assert lifecycle_as(office, STAFF, "notice.md") == "current"


def test_a_cycle_through_a_private_document_is_refused_without_naming_it(office):
    # salary-review.md -> handbook.md and memo.md -> salary-review.md are written by the owner (links
    # that hold); the clerk's handbook.md -> memo.md would close the cycle through the private document
    insert_document(office, "memo.md", "# Memo\n\nThe memo.", namespace="hr", supersedes="salary-review.md")
    office.execute("UPDATE kb.documents SET supersedes = 'handbook.md' WHERE source = 'salary-review.md'")
    with acting_as(office, CLERK), pytest.raises(psycopg.errors.CheckViolation) as refused:
        office.execute("UPDATE kb.documents SET supersedes = 'memo.md' WHERE source = 'handbook.md'")
    message = str(refused.value)
    assert "handbook.md -> memo.md -> (a document you may not read) -> handbook.md" in message
    assert "salary-review" not in message


def test_the_retrieval_log_names_a_private_document_only_to_roles_that_may_read_it(office):
    admin, board_admin = f"admin_{SUFFIX}", f"board_admin_{SUFFIX}"
    office.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    assert "salary-review.md" in retrieved_as(office, BOARD, "zqxbonus pool")
    with ExitStack() as stack:
        stack.enter_context(temporary_role(office, admin, "NOLOGIN IN ROLE pgkb_admin"))
        stack.enter_context(temporary_role(office, board_admin, f"NOLOGIN IN ROLE pgkb_admin, {BOARD}"))
        with acting_as(office, admin):
            logged = office.execute("SELECT string_agg(array_to_string(sources, ' '), ' ') AS s FROM kb.retrieval_log")
            assert "salary-review" not in (logged.fetchone()["s"] or "")
            named = office.execute("SELECT sources, private_unnamed FROM kb.retrieval_log_sources").fetchall()
            assert all("hr/salary-review.md" not in r["sources"] for r in named)
            assert sum(r["private_unnamed"] for r in named) >= 1, "counted, not named"
            top = office.execute("SELECT string_agg(source, ' ') AS s FROM kb.retrieval_top_sources").fetchone()
            assert "salary-review" not in (top["s"] or "")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                office.execute("SELECT private_sources FROM kb.retrieval_log")
        with acting_as(office, board_admin):
            named = office.execute("SELECT sources FROM kb.retrieval_log_sources").fetchall()
            assert any("hr/salary-review.md" in r["sources"] for r in named), "a reader of it sees it named"
