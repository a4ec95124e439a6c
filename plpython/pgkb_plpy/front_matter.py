"""The retrieval keys of a document's metadata (its front matter): one definition of what they
may hold, for the ingest trigger and for the loader (``harness/loader.py`` loads this file on its
own, so it imports nothing but the standard library).

- ``rag_include``: ``true`` (the default) or ``false``. ``false`` keeps the document stored but
  out of retrieval: it gets no chunks, postings or vectors, and its ``ingest_status`` is
  ``excluded``.
- ``concept_keys``: a list of terms the document is about. Their BM25 terms are added to every
  chunk of the document, each counting ``concept_term_weight`` times (the setting), like the
  terms of a backticked span (``like_this``) in the text.
- ``aliases`` and ``synonyms``: lists of other names of the document. Their BM25 terms are added
  to every chunk once, as the title's are, so a query that uses an alias finds the document.

A list item is a word or phrase (text or a number), not blank, at most :data:`MAX_ITEM_CHARS`
characters; a list has at most :data:`MAX_ITEMS` items. JSON ``null`` is the key's absence.
Anything else is an error (:class:`RetrievalKeyError`) that names the key and what it holds.

A document inserted by SQL may carry these keys in a front matter block at the start of its body
(the block the chunker leaves out; ``pgkb ingest`` moves front matter into metadata instead).
:func:`read_block` reads them from the block's lines with the part of YAML they need: ``key:
true``/``false`` (and YAML 1.1's ``yes``/``no``/``on``/``off``), flow lists ``[a, "b c"]`` and
block lists of ``- item`` lines. A key given in ``metadata`` wins over the same key in the body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "LIST_KEYS",
    "MAX_ITEMS",
    "MAX_ITEM_CHARS",
    "RETRIEVAL_KEYS",
    "RetrievalKeyError",
    "RetrievalOptions",
    "read_block",
    "retrieval_options",
]

#: The list keys; ``synonyms`` is another name for ``aliases``.
LIST_KEYS = ("concept_keys", "aliases", "synonyms")
RETRIEVAL_KEYS = ("rag_include", *LIST_KEYS)
MAX_ITEMS = 100
MAX_ITEM_CHARS = 200

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}
_TOP_KEY_RE = re.compile(
    r"""^(?:"([^"\n]*)"|'([^'\n]*)'|([^\s#:\-?,\[\]{}&*!|>'"%@`][^:\n]*?))[ \t]*:(?:[ \t]+(.*))?$"""
)
_ITEM_RE = re.compile(r"^[ \t]*-(?:[ \t]+(.*))?$")


class RetrievalKeyError(ValueError):
    """A retrieval key whose value is not what it may hold; the message names key and value."""


@dataclass(frozen=True)
class RetrievalOptions:
    rag_include: bool = True
    concept_keys: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # aliases, then synonyms


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _items(key: str, value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RetrievalKeyError(
            f"{where} {key} must be a list of words or phrases, e.g. [first, second], "
            f"got {type(value).__name__} {_short(value)}"
        )
    if len(value) > MAX_ITEMS:
        raise RetrievalKeyError(f"{where} {key} has {len(value)} items; at most {MAX_ITEMS} are allowed")
    items = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise RetrievalKeyError(
                f"{where} {key} must hold words or phrases, got {type(item).__name__} {_short(item)}"
            )
        text = str(item).strip()
        if not text:
            raise RetrievalKeyError(f"{where} {key} holds a blank item")
        if len(text) > MAX_ITEM_CHARS:
            raise RetrievalKeyError(f"{where} {key} item {_short(text)} is longer than {MAX_ITEM_CHARS} characters")
        items.append(text)
    return tuple(items)


def retrieval_options(metadata: dict, where: str = "metadata") -> RetrievalOptions:
    """The retrieval keys of ``metadata`` (other keys are ignored); raises
    :class:`RetrievalKeyError` for a value a key may not hold. ``where`` starts the message
    (``"metadata"``, ``"front matter"``, or a file's path)."""
    include = metadata.get("rag_include")
    if include is not None and not isinstance(include, bool):
        raise RetrievalKeyError(f"{where} rag_include must be true or false, got {_short(include)}")
    return RetrievalOptions(
        rag_include=include is not False,
        concept_keys=_items("concept_keys", metadata.get("concept_keys"), where),
        aliases=_items("aliases", metadata.get("aliases"), where) + _items("synonyms", metadata.get("synonyms"), where),
    )


def _scalar(text: str) -> object:
    """A plain or quoted YAML scalar: a boolean for YAML 1.1's words, else the text."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    return text


def _uncomment(text: str) -> str:
    """``text`` without a trailing `` # comment`` outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.strip()


def _flow_list(key: str, text: str) -> list:
    inner = text[1:-1]
    items, current, quote = [], [], None
    for ch in inner:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch == ",":
            items.append("".join(current))
            current = []
        elif ch in "[]{}":
            raise RetrievalKeyError(f"front matter {key}: nested lists or mappings are not read here")
        else:
            current.append(ch)
    if quote:
        raise RetrievalKeyError(f"front matter {key}: unclosed quote in {_short(text)}")
    items.append("".join(current))
    if len(items) == 1 and not items[0].strip():
        return []
    return [_scalar(item) for item in items]


def read_block(lines: list[str]) -> dict:
    """The retrieval keys present in the lines of a front matter block (between its ``---``
    lines), as YAML would read them; other keys are skipped. Raises :class:`RetrievalKeyError`
    for a retrieval key written with YAML this reader does not take (a block scalar, a
    mapping, a nested list)."""
    found: dict = {}
    i = 0
    while i < len(lines):
        match = _TOP_KEY_RE.match(lines[i].rstrip())
        i += 1
        if not match:
            continue
        key = next(g for g in match.groups()[:3] if g is not None).strip()
        if key not in RETRIEVAL_KEYS:
            continue
        value = _uncomment(match.group(4) or "")
        if value.startswith("["):
            if not value.endswith("]"):
                raise RetrievalKeyError(f"front matter {key}: a list [a, b] must close on its line")
            found[key] = _flow_list(key, value)
        elif value == "":
            items = []
            while i < len(lines) and (item := _ITEM_RE.match(lines[i].rstrip())):
                items.append(_scalar(_uncomment(item.group(1) or "")))
                i += 1
            found[key] = items if items else None
        elif value[0] in "{|>&*!":
            raise RetrievalKeyError(
                f"front matter {key}: {_short(value)} is not read here; write true/false, [a, b] or - item lines"
            )
        else:
            found[key] = _scalar(value)
    return found
