"""`pgkb lab`: a local web page over the real retrieval path (query, explain, compare, documents, evaluation).

The app (harness.lab.app) renders pages on the server with Jinja2 templates; its one script draws Mermaid
diagrams (vendored under static/vendor). Every database call runs as the role named by PGKB_LAB_ROLE
(``SET ROLE`` after connecting), so that role's grants and row-level security decide what the lab shows.
docs/LAB.md describes the pages and why this stack.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from ..config import load_settings
from .database import ROLE_ENV, StartRefused, redacted, validate_role

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def loopback_hosts(host: str) -> list[str] | None:
    """The Host headers to accept when bound to a loopback address (None: any, for a lab bound to a
    non-loopback address on purpose)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return ["127.0.0.1", "localhost", "[::1]", "::1", host] if loopback else None


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, allow_superuser: bool = False) -> int:
    """Run the lab until interrupted. Returns the exit code (2: PGKB_LAB_ROLE is not a valid name, the role
    does not exist or cannot be assumed, or it bypasses row-level security and allow_superuser is not given)."""
    import uvicorn

    from .app import create_app

    try:
        role = validate_role(os.environ.get(ROLE_ENV))
    except ValueError as exc:
        print(f"pgkb lab: {exc}", file=sys.stderr)
        return 2
    dsn = load_settings().dsn
    app = create_app(dsn, role, allowed_hosts=loopback_hosts(host))
    try:
        identity = app.state.database.check_start(allow_superuser)
    except StartRefused as exc:
        app.state.database.close()
        print(f"pgkb lab: {exc}", file=sys.stderr)
        return 2
    shown = f"[{host}]" if ":" in host else host
    print(
        f"pgkb lab: http://{shown}:{port}/  (database {redacted(dsn)}, role {identity['role']}"
        + (", which bypasses row-level security)" if app.state.database.bypasses_rls else ")"),
        file=sys.stderr,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        app.state.database.close()
    return 0
