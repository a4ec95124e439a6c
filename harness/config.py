"""Where things live: every path, port and DSN the harness uses, from the environment."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from pgkb_plpy import vocabulary

from .install_plpython import PLPYTHON_DIR as PLPYTHON_DIR

REPO_ROOT = Path(__file__).resolve().parent.parent
# PGKB_MIGRATIONS_DIR: another migrations folder (tests use it for edited copies).
MIGRATIONS_DIR = Path(os.environ.get("PGKB_MIGRATIONS_DIR") or REPO_ROOT / "migrations")
SQL_DIR = REPO_ROOT / "sql"
DEFAULT_PORT = 5499
DATABASE_NAME = "pgkb"

# The modes, limits and character classes the database uses (pgkb_plpy.vocabulary), under the
# name harness.loader imports; other modules import pgkb_plpy.vocabulary themselves.
VOCABULARY = vocabulary


@dataclass(frozen=True)
class Settings:
    home: Path  # embedded cluster: data/, log/, run/
    port: int
    dsn_override: str | None
    server_venv: Path
    # PGKB_READ_DSN: where the read tools (pgkb query, the MCP server, the lab) retrieve
    read_dsn_override: str | None = None

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "log" / "postgresql.log"

    @property
    def socket_dir(self) -> Path:
        return self.home / "run"

    @property
    def embedded_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE_NAME}"

    @property
    def dsn(self) -> str:
        return self.dsn_override or self.embedded_dsn

    @property
    def dsn_source(self) -> str:
        """Where ``dsn`` came from, for error messages."""
        if self.dsn_override:
            return "PGKB_DSN"
        return f"the embedded cluster (PGKB_HOME={self.home}, PGKB_PORT={self.port})"

    @property
    def read_dsn_source(self) -> str:
        """Where ``read_dsn`` came from, for error messages."""
        return "PGKB_READ_DSN" if self.read_dsn_override else self.dsn_source

    @property
    def read_dsn(self) -> str:
        """The one rule for where reads go: PGKB_READ_DSN when set (a hot standby, or a libpq
        multi-host string such as `postgresql://standby,primary/pgkb?target_session_attrs=prefer-standby`),
        else the primary (PGKB_DSN or the embedded cluster). Retrieval writes nothing on a
        standby (docs/SCALING.md); anything that writes (ingest, backfill, worker, migrate, the
        lab's retry button) must use `dsn`."""
        return self.read_dsn_override or self.dsn

    def server_site_packages(self) -> str | None:
        """site-packages of the server-side venv, when it is on this machine."""
        explicit = os.environ.get("PGKB_SERVER_SITE_PACKAGES")
        if explicit:
            return explicit
        found = sorted(glob.glob(str(self.server_venv / "lib" / "python3*" / "site-packages")))
        return found[-1] if found else None


def load_settings() -> Settings:
    return Settings(
        home=Path(os.environ.get("PGKB_HOME", "/var/lib/pgkb")),
        port=int(os.environ.get("PGKB_PORT", DEFAULT_PORT)),
        dsn_override=os.environ.get("PGKB_DSN") or None,
        server_venv=Path(os.environ.get("PGKB_SERVER_VENV", "/opt/pgkb/server-venv")),
        read_dsn_override=os.environ.get("PGKB_READ_DSN") or None,
    )


def postgres_bin_dir() -> Path:
    """The newest installed PostgreSQL server's bin directory (17 on Debian 13, 15 on Debian 12)."""
    for version in ("17", "16", "15"):
        candidate = Path(f"/usr/lib/postgresql/{version}/bin")
        if (candidate / "pg_ctl").exists():
            return candidate
    raise RuntimeError("no PostgreSQL server found under /usr/lib/postgresql; run scripts/install.sh first")
