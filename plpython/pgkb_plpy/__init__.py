"""pgkb_plpy: the Python that runs inside PostgreSQL (chunking, BM25 terms, embedding,
query analysis, snippets). PL/Python reaches it only through :mod:`pgkb_plpy.entry`."""

#: The interface version the schema checks (``kb.plpython_expected_version()`` in
#: sql/010_plpython.sql holds the same literal; bump both together whenever an entry point,
#: its arguments or the meaning of its result changes).
__version__ = "0.9.0"
