"""Reading the query form: URL parameters into kb_retrieve arguments and per-query settings.

Parameters (all optional but ``q``): ``q`` the question; ``namespace``; ``mode``; ``k``; ``as_of``;
``filters`` (a JSON object); ``context`` (earlier questions, one per line); ``set.<key>`` a retrieval
setting for this query only. On the compare page the two sides use ``a.mode``/``a.set.<key>`` and
``b.mode``/``b.set.<key>``. An empty field means "the database's default". Only what cannot be put
into SQL is checked here (k is an integer, filters is a JSON object, a setting may be set per session);
the database checks the rest and its message is shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode


class FormError(ValueError):
    """A form field the lab cannot turn into an argument; the message names the field."""


@dataclass
class QueryForm:
    q: str = ""
    namespace: str = ""
    mode: str = ""
    k: str = ""
    as_of: str = ""
    filters: str = ""
    context: str = ""
    settings: dict[str, str] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        """kb_retrieve's optional arguments for the fields given (the others are left to the database)."""
        args: dict[str, Any] = {}
        if self.k.strip():
            try:
                args["k"] = int(self.k)
            except ValueError:
                raise FormError(f"k must be a whole number, not {self.k!r}") from None
        if self.namespace.strip():
            args["namespace"] = self.namespace.strip()
        if self.mode.strip():
            args["mode"] = self.mode.strip()
        if self.as_of.strip():
            args["as_of"] = self.as_of.strip()
        if self.filters.strip():
            try:
                value = json.loads(self.filters)
            except json.JSONDecodeError as exc:
                raise FormError(f"filters is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
            if not isinstance(value, dict):
                raise FormError('filters must be a JSON object, e.g. {"doc_type": "policy"}')
            args["filters"] = value
        turns = [line.strip() for line in self.context.splitlines() if line.strip()]
        if turns:
            args["context"] = turns
        return args

    def request(self) -> dict[str, Any]:
        return {"q": self.q, "arguments": self.arguments()}

    def query_string(self, **override: str) -> str:
        """This form as URL parameters (for links between the pages), with some fields replaced."""
        items: list[tuple[str, str]] = []
        values = {
            "q": self.q,
            "namespace": self.namespace,
            "mode": self.mode,
            "k": self.k,
            "as_of": self.as_of,
            "filters": self.filters,
            "context": self.context,
        }
        values.update(override)
        items += [(name, value) for name, value in values.items() if value]
        items += [(f"set.{key}", value) for key, value in self.settings.items() if value]
        return urlencode(items)


def settings_from(params: Mapping[str, str], prefix: str, allowed: set[str] | None) -> dict[str, str]:
    """The non-empty ``<prefix><key>`` parameters as {key: value}; FormError for a key that is not a
    session-overridable retrieval setting (allowed None: no check, to show a refused form again)."""
    found = {}
    for name, value in params.items():
        if not name.startswith(prefix) or not str(value).strip():
            continue
        key = name[len(prefix) :]
        if allowed is not None and key not in allowed:
            raise FormError(
                f"setting {key!r} cannot be set for one query (see kb.settings_catalogue: session_override)"
            )
        found[key] = str(value).strip()
    return found


def query_form(params: Mapping[str, str], allowed_settings: set[str] | None, side: str = "") -> QueryForm:
    """The form of the query and explain pages (side "" ) or one side of compare (side "a." or "b."):
    the common fields come unprefixed, mode and settings with the side's prefix."""
    return QueryForm(
        q=params.get("q", "").strip(),
        namespace=params.get("namespace", ""),
        mode=params.get(f"{side}mode", ""),
        k=params.get("k", ""),
        as_of=params.get("as_of", ""),
        filters=params.get("filters", ""),
        context=params.get("context", ""),
        settings=settings_from(params, f"{side}set.", allowed_settings),
    )
