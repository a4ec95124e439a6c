"""Connections to the pgkb database, and a connection string as logs and pages may show it."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

# SQLSTATEs after which the session is gone: connection exceptions (class 08) and the server
# shutting down or not yet accepting connections. psycopg raises OperationalError for these and also
# for resource and program-limit errors (classes 53, 54, 55, 57), which are answers, not lost links.
_CONNECTION_LOST_STATES = ("57P01", "57P02", "57P03")


def connection_lost(exc: BaseException, conn: psycopg.Connection | None = None) -> bool:
    """Whether an error means the database cannot be reached (retry on a new connection, or say so),
    as opposed to the database refusing the request (a limit, a lock timeout, a bad value: show it)."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:  # no answer from the server at all: the socket or the backend died
        return isinstance(exc, psycopg.OperationalError) or bool(conn is not None and conn.broken)
    return state.startswith("08") or state in _CONNECTION_LOST_STATES


def connect(dsn: str, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=autocommit, row_factory=dict_row)


def redacted(dsn: str) -> str:
    """The DSN without its password, for pages and logs."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    parts.pop("password", None)
    return make_conninfo("", **parts)
