"""What every backend reads, the query path's included: settings, the registered models and their
providers, and query vectors (called through :mod:`pgkb_plpy.entry` with ``plpy``, the backend's
``GD`` and the calling function's ``SD``). Kept apart from ingest (:mod:`pgkb_plpy.ingest_db`), so
that a backend that only retrieves never imports the chunker and the file parsers."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any

from . import embedders
from .embedders.options import options_key

__all__ = ["as_embedding_error", "model_rows", "provider_for", "query_vector", "redact", "settings", "vector_literal"]


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form; repr keeps full float precision."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _plan(plpy, SD, key: str, sql: str, types: list[str]):
    if key not in SD:
        SD[key] = plpy.prepare(sql, types)
    return SD[key]


def settings(plpy, SD, keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` as ``kb.setting`` gives them (a session's ``pgkb.<key>`` where the
    key allows one, else kb.settings; an unknown key is an error), in one query."""
    rows = plpy.execute(
        _plan(
            plpy,
            SD,
            "settings",
            "SELECT k AS key, kb.setting(k)::text AS value FROM unnest($1::text[]) AS k",
            ["text[]"],
        ),
        [list(keys)],
    )
    return {r["key"]: None if r["value"] is None else json.loads(r["value"]) for r in rows}


def model_rows(plpy) -> list[dict]:
    """Every registered model with the options its provider needs: ``kb.models.options``
    (what readers may see) merged with the model's ``kb.model_secrets`` (an api_key...).
    Only the SECURITY DEFINER paths (ingest trigger, queue worker, query embedding) run
    this; the secrets never leave the provider object (see :func:`redact`)."""
    rows = plpy.execute(
        """SELECT m.name, m.provider, m.model, m.dimensions, m.active,
                  (m.options || coalesce(s.secrets, '{}'))::text AS options,
                  coalesce(s.secrets, '{}')::text AS secrets
           FROM kb.models AS m LEFT JOIN kb.model_secrets AS s ON s.model = m.name
           ORDER BY m.name"""
    )
    return [dict(r, options=json.loads(r["options"]), secrets=json.loads(r["secrets"])) for r in rows]


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def redact(message: str, model: dict) -> str:
    """``message`` without the model's secret values and without credentials in any URL: errors
    are stored in kb.embed_queue (readers see it) and reach clients."""
    for value in model.get("secrets", {}).values():
        for text in value.values() if isinstance(value, dict) else [value]:
            if isinstance(text, str) and text:
                message = message.replace(text, "***")
    return _URL_CREDENTIALS.sub(r"\1***@", message)


def provider_for(GD, model: dict):
    cache = GD.setdefault("pgkb_providers", {})
    return embedders.get_provider(cache, model["provider"], model["model"], model["dimensions"], model["options"])


#: Query vectors a backend keeps (in ``GD``, least recently used first out): a question asked
#: again, a retrieval and its explain, or the lab's comparison embed a text once per backend.
QUERY_VECTOR_CACHE_SIZE = 256
_QUERY_VECTORS = "pgkb_query_vectors"


def query_vector(plpy, GD, model_name: str, query: str) -> str:
    """The vector (pgvector text form) of ``query`` from the provider of the model named
    ``model_name`` (the model whose stored vectors it will be compared with). Kept per backend
    under the model's provider, model, dimensions and options, so a model registered again with
    other options never gets a vector of the old ones."""
    model = next((m for m in model_rows(plpy) if m["name"] == model_name), None)
    if model is None:
        plpy.error(f"pgkb: unknown model {model_name!r}")
    key = (model["provider"], model["model"], model["dimensions"], options_key(model["options"]), query)
    cache: OrderedDict = GD.setdefault(_QUERY_VECTORS, OrderedDict())
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    try:
        vector = provider_for(GD, model).embed_query(query)
    except embedders.EmbeddingError as exc:
        raise _redacted(exc, model) from None
    embedders.check_vectors([vector], 1, model["dimensions"], f"{model['provider']}:{model['model']}")
    cache[key] = vector_literal(vector)
    if len(cache) > QUERY_VECTOR_CACHE_SIZE:
        cache.popitem(last=False)
    return cache[key]


def _redacted(exc: embedders.EmbeddingError, model: dict | None) -> embedders.EmbeddingError:
    """``exc`` itself, or a copy whose message has the secrets of ``model`` masked."""
    message = redact(str(exc), model or {})
    if message == str(exc):
        return exc
    return embedders.EmbeddingError(
        exc.kind, message, provider=exc.provider, model=exc.model, status=exc.status, attempts=exc.attempts
    )


def as_embedding_error(exc: Exception, model: dict | None = None) -> embedders.EmbeddingError:
    """``exc`` as the EmbeddingError recorded on the queue, without the secrets of ``model``."""
    if isinstance(exc, embedders.EmbeddingError):
        return _redacted(exc, model)
    wrapped = embedders.EmbeddingError("bad_response", f"embedding failed: unexpected {type(exc).__name__}: {exc}")
    return _redacted(wrapped, model)
