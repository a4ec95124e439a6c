"""Reading the query form: URL parameters into a kb_retrieve request and per-query settings.

Parameters (all optional but ``q``): ``q`` the question; one per argument of kb_retrieve the form offers
(FORM_ARGUMENTS: ``k``, ``namespace``, ``mode``, ``filters`` as a JSON object, ``as_of``, ``context`` as
earlier questions one per line); ``set.<key>`` a retrieval setting for this query only. On the compare page
each side has its own SIDE_ARGUMENTS and settings (``a.mode``, ``a.k``, ``a.set.<key>``, ``b.…``). An empty
field means "the database's default". Only what cannot be put into SQL is checked here (an integer is a whole number,
filters is a JSON object, a setting may be set per session); the database checks the rest and its message
is shown.

The form's fields are harness.retrieval.RetrievalRequest's, read by their SQL type, so an argument added to
kb_retrieve becomes a field here by itself (the template's inputs are held to them by
tests/unit/test_retrieval_request.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field, make_dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from .. import retrieval

# Arguments of kb_retrieve that are also retrieval settings of the same name: the form offers them among
# the per-query settings (set.<key>), so that one value is not asked for twice.
ARGUMENTS_AS_SETTINGS = frozenset({"max_per_document", "merge_adjacent"})
# kb_retrieve's optional arguments the form has a field for, in signature order.
FORM_ARGUMENTS = tuple(name for name in retrieval.OPTIONAL_ARGUMENTS if name not in ARGUMENTS_AS_SETTINGS)
# Fields each side of the compare page has on its own (``a.mode``, ``b.mode``); the others are shared.
SIDE_ARGUMENTS = frozenset({"mode", "namespace", "k", "as_of"})

_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})


class FormError(ValueError):
    """A form field the lab cannot turn into an argument; the message names the field."""


def _json_object(name: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormError(f"{name} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(value, dict):
        raise FormError(f'{name} must be a JSON object, e.g. {{"doc_type": "policy"}}')
    return value


def argument_value(name: str, text: str) -> Any:
    """The value of kb_retrieve's argument ``name`` from its form field, read by the argument's SQL type;
    None for an empty field (the database's default); FormError when it cannot be that type."""
    sql_type = retrieval.OPTIONAL_ARGUMENTS[name]
    if sql_type.endswith("[]"):
        return [line.strip() for line in text.splitlines() if line.strip()] or None
    if not text.strip():
        return None
    if sql_type == "integer":
        try:
            return int(text)
        except ValueError:
            raise FormError(f"{name} must be a whole number, not {text!r}") from None
    if sql_type == "boolean":
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise FormError(f"{name} must be true or false, not {text!r}")
        return word in _TRUE
    if sql_type == "jsonb":
        return _json_object(name, text)
    if sql_type == "timestamptz":
        return _iso_moment(name, text.strip())
    return text.strip()


# Words PostgreSQL reads as a moment on its own; anything else must be ISO 8601, so that 01/07/2025 is
# never read as 7 January by one server's DateStyle and 1 July by another's.
_MOMENT_WORDS = frozenset({"now", "today"})


def _iso_moment(name: str, text: str) -> str:
    if text.lower() in _MOMENT_WORDS:
        return text.lower()
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise FormError(
            f"{name} must be an ISO date such as 2025-07-01 (or a timestamp such as 2025-07-01 09:00+08), "
            f"not {text!r}: a date like 01/07/2025 means 7 January in some places and 1 July in others"
        ) from None
    return text


class _QueryFormMethods:
    def arguments(self) -> dict[str, Any]:
        """kb_retrieve's optional arguments for the fields given (the others are left to the database)."""
        values = {name: argument_value(name, getattr(self, name)) for name in FORM_ARGUMENTS}
        return {name: value for name, value in values.items() if value is not None}

    def request(self) -> retrieval.RetrievalRequest:
        """The kb_retrieve request this form asks for."""
        return retrieval.RetrievalRequest(self.q, **self.arguments())

    def query_string(self, **override: str) -> str:
        """This form as URL parameters (for links between the pages), with some fields replaced."""
        values = {"q": self.q} | {name: getattr(self, name) for name in FORM_ARGUMENTS} | override
        items = [(name, value) for name, value in values.items() if value]
        items += [(f"set.{key}", value) for key, value in self.settings.items() if value]
        return urlencode(items)


QueryForm = make_dataclass(
    "QueryForm",
    [
        ("q", str, field(default="")),
        *((name, str, field(default="")) for name in FORM_ARGUMENTS),
        ("settings", dict[str, str], field(default_factory=dict)),
    ],
    bases=(_QueryFormMethods,),
)
QueryForm.__module__ = __name__
QueryForm.__doc__ = """The query form as sent: ``q``, one text field per name of FORM_ARGUMENTS, and the
per-query settings ({key: value})."""


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
    the common fields come unprefixed, SIDE_ARGUMENTS and settings with the side's prefix."""
    return QueryForm(
        q=params.get("q", "").strip(),
        **{name: params.get(f"{side}{name}" if name in SIDE_ARGUMENTS else name, "") for name in FORM_ARGUMENTS},
        settings=settings_from(params, f"{side}set.", allowed_settings),
    )
