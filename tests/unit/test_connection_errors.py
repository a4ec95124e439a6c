"""One rule for "the database cannot be reached" (harness.db.connection_lost), shared by the lab, the MCP
server and the framework retrievers: psycopg raises OperationalError for lost connections and for
answers such as a program limit or a lock timeout, which must be shown as what they are."""

import psycopg
import pytest

from harness.db import connection_lost


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.ConnectionException("connection exception"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
        psycopg.OperationalError("server closed the connection unexpectedly"),  # no SQLSTATE: no answer
    ],
)
def test_a_lost_connection_is_connection_lost(error):
    assert connection_lost(error)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.ProgramLimitExceeded("kb.record_judgment: query must be at most 2000 characters"),
        psycopg.errors.LockNotAvailable("could not obtain lock"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        psycopg.errors.OutOfMemory("out of memory"),
        psycopg.errors.InvalidParameterValue("k must be between 1 and 1000"),
        ValueError("not a database error"),
    ],
)
def test_an_answer_of_the_database_is_not_connection_lost(error):
    assert not connection_lost(error)
