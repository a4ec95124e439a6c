"""pgkb_plpy.backend: the query vectors a backend keeps."""

from __future__ import annotations

import pytest
from pgkb_plpy import backend


class FakePlpy:
    """Answers ``model_rows``' query with one registered model whose dimensions a test may change."""

    def __init__(self) -> None:
        self.dimensions = 8

    def execute(self, sql, *args):
        return [
            {
                "name": "m",
                "provider": "hash",
                "model": "hash",
                "dimensions": self.dimensions,
                "active": True,
                "options": "{}",
                "secrets": "{}",
            }
        ]

    def error(self, message):
        raise RuntimeError(message)


@pytest.fixture
def embeds(monkeypatch):
    calls = []
    real = backend.provider_for

    def counting_provider(GD, model):
        provider = real(GD, model)

        class Counting:
            def embed_query(self, text):
                calls.append(text)
                return provider.embed_query(text)

        return Counting()

    monkeypatch.setattr(backend, "provider_for", counting_provider)
    return calls


def test_a_text_is_embedded_once_per_backend_and_model(embeds):
    plpy, GD = FakePlpy(), {}
    first = backend.query_vector(plpy, GD, "m", "refund days")
    assert backend.query_vector(plpy, GD, "m", "refund days") == first
    assert embeds == ["refund days"]
    plpy.dimensions = 16  # the model registered again otherwise: not the old vector's key
    backend.query_vector(plpy, GD, "m", "refund days")
    assert embeds == ["refund days", "refund days"]


def test_the_least_recently_used_vector_leaves_first(embeds, monkeypatch):
    monkeypatch.setattr(backend, "QUERY_VECTOR_CACHE_SIZE", 2)
    plpy, GD = FakePlpy(), {}
    for text in ("a", "b", "a", "c", "a", "b"):
        backend.query_vector(plpy, GD, "m", text)
    assert embeds == ["a", "b", "c", "b"]
