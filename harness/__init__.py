"""pgkb's harness: install, migrate, load, query, evaluate and benchmark retrieval inside PostgreSQL."""

from importlib import metadata


def version() -> str:
    """The installed package's version (pyproject.toml, the CHANGELOG's newest heading)."""
    try:
        return metadata.version("pgkb")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"
