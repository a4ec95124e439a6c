"""The database role a harness tool runs as (`SET ROLE` after connecting), named by an
environment variable: PGKB_MCP_ROLE for the MCP server, PGKB_LAB_ROLE for the lab."""

from __future__ import annotations

MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1


def validate_role(name: str | None, env_name: str) -> str | None:
    """The role name read from ``env_name``, or None when unset or blank; ValueError (naming the
    variable) for a name PostgreSQL cannot hold: a NUL character, or more than 63 bytes."""
    if name is None or name.strip() == "":
        return None
    if "\x00" in name:
        raise ValueError(f"{env_name} must not contain NUL characters")
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise ValueError(f"{env_name} is longer than {MAX_IDENTIFIER_BYTES} bytes: {name!r}")
    return name
