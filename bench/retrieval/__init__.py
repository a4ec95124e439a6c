"""Retrieval benchmark of pgkb: latency of ``kb_retrieve`` against its bare legs, HNSW recall, and a
same-run comparison of two databases.

Run from the repository root with the harness venv: ``python -m bench.retrieval --help``.

Modules, one job each:

* ``config``: defaults (server DSN, result and dataset folders) from the environment or relative to
  the repository, database names, logging;
* ``corpus``: the synthetic vocabulary, text and Markdown documents, the lifecycle mix;
* ``load``: a benchmark database built from that corpus with ingest's own code (chunker, chunk rows,
  BM25 terms, embedding provider), bulk-loaded by COPY and checked against the ingest trigger;
* ``queries``: short and long queries drawn from the stored chunks;
* ``timing``: percentiles, timed statements with a timeout budget, buffer pre-warming;
* ``facts``: read-only facts of a database (data, settings, installed functions, corpus fingerprint);
* ``latency``: ``kb_retrieve`` hybrid and its stages against bare pgvector, trigram and BM25;
* ``recall``: recall@10 of the dense leg per ef_search against exact search, vector statistics;
* ``compare``: ``kb_retrieve`` on two databases of one server, interleaved query by query;
* ``report``: the JSON report and the short tables;
* ``cli``: the command line (``__main__`` runs it).

Importing the package puts ``plpython/`` of this repository (or ``PGKB_BENCH_PLPYTHON``) on
``sys.path``, so that ``pgkb_plpy`` (the code ingest runs inside PostgreSQL) is the code of this
checkout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: ``PGKB_BENCH_PLPYTHON``: another ``plpython/`` folder (e.g. a snapshot of a commit, when the
#: checkout is being edited and the server runs the installed copy)
PLPYTHON_DIR = Path(os.environ.get("PGKB_BENCH_PLPYTHON") or REPO_ROOT / "plpython")

for _path in (REPO_ROOT, PLPYTHON_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
