"""A model's ``options`` (``kb.models.options``): parsing, typed access, and a cache key."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import EmbeddingError, label

__all__ = ["options_key", "opt_float", "opt_int", "opt_str", "parse_options"]


def parse_options(options: Any, provider: str, model: str, allowed: dict[str, Any]) -> dict[str, Any]:
    """Merge ``options`` (dict, JSON text or None) over the defaults in ``allowed``.

    Raises ``EmbeddingError(kind="bad_input")`` for invalid JSON, a non-object, or a key
    ``allowed`` does not name (the message lists the accepted keys)."""
    where = label(provider, model)
    if options is None or options == "":
        options = {}
    if isinstance(options, (str, bytes)):
        try:
            options = json.loads(options)
        except ValueError as e:
            raise EmbeddingError("bad_input", f"{where}: options are not valid JSON: {e}") from None
        if options is None:
            options = {}
    if not isinstance(options, dict):
        raise EmbeddingError("bad_input", f"{where}: options must be a JSON object, got {options!r}")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise EmbeddingError("bad_input", f"{where}: unknown option(s) {', '.join(unknown)}; accepted options: {known}")
    merged = dict(allowed)
    merged.update(options)
    return merged


def opt_int(opts: dict[str, Any], key: str, label: str, minimum: int) -> int:
    """``opts[key]`` as an integer >= ``minimum`` (a float with an integral value is accepted)."""
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or int(v) < minimum:
        raise EmbeddingError("bad_input", f"{label}: option {key} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def opt_float(opts: dict[str, Any], key: str, label: str, minimum: float, strict: bool = False) -> float:
    """``opts[key]`` as a finite number >= ``minimum`` (> when ``strict``)."""
    v = opts[key]
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    ok = ok and (v > minimum if strict else v >= minimum)
    if not ok:
        cmp = ">" if strict else ">="
        raise EmbeddingError("bad_input", f"{label}: option {key} must be a number {cmp} {minimum}, got {v!r}")
    return float(v)


def opt_str(opts: dict[str, Any], key: str, label: str) -> str:
    """``opts[key]`` when it is a string."""
    v = opts[key]
    if not isinstance(v, str):
        raise EmbeddingError("bad_input", f"{label}: option {key} must be a string, got {v!r}")
    return v


def options_key(options: Any) -> str:
    """Canonical JSON of ``options``, so equal options given as dict, JSON text or None share a key."""
    if options is None or options == "":
        return "{}"
    if isinstance(options, (str, bytes)):
        try:
            options = json.loads(options)
        except ValueError:
            return str(options)  # make_provider will reject it
        if options is None:
            return "{}"
    try:
        return json.dumps(options, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(options)
