"""Connections to the pgkb database, and a connection string as logs and pages may show it."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row


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
