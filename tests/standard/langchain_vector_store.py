"""langchain-tests' standard vector-store suite, run against pgkb.langchain.PgkbVectorStore from the installed
wheel (tests/test_client_wheel.py runs this file with the clean venv's pytest; our own suite does not collect
it: its name is not test_*). Each test gets an empty namespace of its own, dropped afterwards. The DSN is
PGKB_DSN."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from pgkb.langchain import PgkbVectorStore


class TestPgkbVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self):
        namespace = f"standard_{uuid.uuid4().hex[:12]}"
        store = PgkbVectorStore(namespace=namespace)
        try:
            yield store
        finally:
            with psycopg.connect(os.environ["PGKB_DSN"], autocommit=True) as conn:
                conn.execute("DELETE FROM kb.documents WHERE namespace = %s", (namespace,))
