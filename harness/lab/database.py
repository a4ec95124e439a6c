"""The lab's connections: opened as the lab's database role, reused, and every unit of work in one transaction.

Rules:

* Every connection does ``SET ROLE <PGKB_LAB_ROLE>`` right after connecting (when a role is given), so the
  role's grants and row-level security decide everything the lab shows, as for the MCP server.
* A unit of work (``run``) is one transaction. Per-query retrieval settings are applied inside it with
  ``set_config('pgkb.<key>', value, true)`` (transaction-local), so they end with the transaction: they
  never reach another request and are never written to ``kb.settings``. The transaction commits (the
  only thing a retrieval may write is its ``kb.retrieval_log`` row, when the log is on).
* Up to ``POOL_SIZE`` idle connections are kept, so a backend's embedding model stays loaded between
  requests; a connection that is lost or left inside a transaction is closed, not reused.
* Errors become the lab's own exceptions: ``DatabaseUnavailable`` (cannot connect, connection lost),
  ``RoleUnavailable`` (SET ROLE refused), ``NotPermitted`` (the role lacks a privilege) and
  ``QueryFailed`` (anything else the database refused), each with PostgreSQL's own message.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from typing import TypeVar

import psycopg
from psycopg import sql

from .. import roles
from ..db import connect, connection_lost, redacted

ROLE_ENV = "PGKB_LAB_ROLE"
POOL_SIZE = 4
T = TypeVar("T")


class LabError(Exception):
    """An error the lab shows as a page: an HTTP status, a title, PostgreSQL's message and a hint."""

    status = 500
    title = "The database refused"

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class DatabaseUnavailable(LabError):
    status = 503
    title = "Cannot reach the database"


class RoleUnavailable(LabError):
    status = 503
    title = "Cannot act as the lab's role"


class NotPermitted(LabError):
    status = 403
    title = "The lab's role may not do this"


class QueryFailed(LabError):
    status = 400
    title = "The database refused the request"


class StartRefused(Exception):
    """Why the lab will not start with this database and role (shown by ``pgkb lab``, exit code 2)."""


IDENTITY_SQL = """SELECT current_user AS role, r.rolsuper AS superuser, r.rolbypassrls AS bypass_rls
                  FROM pg_roles AS r WHERE r.rolname = current_user"""


def validate_role(name: str | None) -> str | None:
    """The role name from ROLE_ENV, or None; ValueError for a name PostgreSQL cannot hold."""
    return roles.validate_role(name, ROLE_ENV)


def db_message(exc: psycopg.Error) -> tuple[str, str | None]:
    """PostgreSQL's primary message and hint of an error (the exception text when there is none)."""
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag else None) or str(exc).strip() or type(exc).__name__
    return message, (diag.message_hint if diag else None)


def refusal(exc: psycopg.Error, role_label: str) -> LabError:
    """The page for an error the database answered with: not permitted, or refused with its message."""
    message, hint = db_message(exc)
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return NotPermitted(message, hint or f"the lab runs as {role_label}")
    return QueryFailed(message, hint)


class LabDatabase:
    """Connections to one database as one role (None: the connection's own user)."""

    def __init__(self, dsn: str, role: str | None):
        self.dsn = dsn
        self.role = role
        self._idle: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue(maxsize=POOL_SIZE)
        # who the pages run as, read from the first connection: {role, superuser, bypass_rls}
        self.identity: dict[str, object] | None = None

    @property
    def role_label(self) -> str:
        if self.role:
            return self.role
        return str(self.identity["role"]) if self.identity else "(the connection's user)"

    @property
    def bypasses_rls(self) -> bool:
        """Whether the pages run as a role that row-level security does not restrict (superuser or BYPASSRLS)."""
        return bool(self.identity and (self.identity["superuser"] or self.identity["bypass_rls"]))

    def check_start(self, allow_superuser: bool) -> dict[str, object]:
        """The identity the pages will run as; StartRefused when the role does not exist or cannot be assumed,
        or when it bypasses row-level security (a superuser, or BYPASSRLS) and allow_superuser is not given."""
        try:
            identity = self.run(lambda conn: conn.execute(IDENTITY_SQL).fetchone())
        except LabError as exc:
            raise StartRefused(f"{exc.message}" + (f" ({exc.hint})" if exc.hint else "")) from exc
        if (identity["superuser"] or identity["bypass_rls"]) and not allow_superuser:
            kind = "a superuser" if identity["superuser"] else "a role with BYPASSRLS"
            raise StartRefused(
                f"the lab would run as {identity['role']}, {kind}: row-level security would not apply to what it "
                f"shows. Set {ROLE_ENV} to a reader or admin role (e.g. {ROLE_ENV}=pgkb_admin), or pass "
                "--allow-superuser to run as it anyway (the footer then says so)"
            )
        return identity

    def _open(self) -> psycopg.Connection:
        try:
            conn = connect(self.dsn)
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(
                f"cannot connect to {redacted(self.dsn)}: {str(exc).strip()}",
                "start the embedded cluster with `pgkb up`, or point PGKB_DSN at a running server",
            ) from exc
        conn.execute("SET application_name = 'pgkb lab'")
        if self.role:
            try:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(self.role)))
            except psycopg.Error as exc:
                conn.close()
                message, _ = db_message(exc)
                raise RoleUnavailable(
                    f"SET ROLE {self.role} (from {ROLE_ENV}) failed: {message}",
                    f"create the role and GRANT it to the connection's user, or unset {ROLE_ENV}",
                ) from exc
        if self.identity is None:
            self.identity = conn.execute(IDENTITY_SQL).fetchone()
        return conn

    def _borrow(self) -> tuple[psycopg.Connection, bool]:
        """A connection and whether it was reused (an idle one may have been dropped by the server meanwhile)."""
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            return self._open(), False
        return (conn, True) if not conn.closed else (self._open(), False)

    def _give_back(self, conn: psycopg.Connection) -> None:
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            return
        try:
            self._idle.put_nowait(conn)
        except queue.Full:
            conn.close()

    def run(
        self,
        work: Callable[[psycopg.Connection], T],
        settings: Mapping[str, str] | None = None,
        transaction: bool = True,
    ) -> T:
        """work(conn) inside one transaction, with the session settings pgkb.<key> = value local to it.

        transaction=False runs work outside a transaction block (for CALL of a procedure that commits);
        settings are then not allowed."""
        if settings and not transaction:
            raise ValueError("settings apply inside a transaction only")
        for attempt in (1, 2):
            conn, reused = self._borrow()
            try:
                if not transaction:
                    result = work(conn)
                else:
                    with conn.transaction():
                        for key, value in (settings or {}).items():
                            conn.execute("SELECT set_config(%s, %s, true)", (f"pgkb.{key}", str(value)))
                        for key in settings or {}:
                            # kb.setting checks the value (type, choices, the catalogue's range) even when
                            # this retrieval would not read it: a wrong value is named, never ignored
                            conn.execute("SELECT kb.setting(%s)", (key,))
                        result = work(conn)
            except psycopg.Error as exc:
                if not connection_lost(exc, conn):
                    self._give_back(conn)
                    raise refusal(exc, self.role_label) from exc
                conn.close()
                if attempt == 1 and reused:
                    continue  # the server restarted or dropped an idle connection: one fresh try
                message, hint = db_message(exc)
                raise DatabaseUnavailable(f"lost the connection to the database: {message}", hint) from exc
            except BaseException:
                self._give_back(conn)
                raise
            self._give_back(conn)
            return result
        raise AssertionError("unreachable")

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
