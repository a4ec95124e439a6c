"""Connections to the pgkb database."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row


def connect(dsn: str, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=autocommit, row_factory=dict_row)
