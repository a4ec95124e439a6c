"""The registry of benchmark scenarios: one line each, name -> (module, description).

A scenario runs its module's ``main`` unchanged, with the command line's remaining arguments as
``sys.argv[1:]``, so every module stays runnable on its own too (``python -m bench.<module>`` or
``python bench/<module>.py``). Every scenario prints a JSON report and a short table, and its
description names the baseline it measures against in the same run (the ratio it reports)."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Scenario:
    module: str
    description: str


# fmt: off
SCENARIOS: dict[str, Scenario] = {
    "retrieval": Scenario("bench.retrieval.cli", "kb_retrieve latency at --sizes against the bare legs (hybrid p95 / sum of the bare legs' p95), HNSW recall@10 against exact search (--recall-only, --ef-search-sweep), two databases interleaved (--compare A,B: B / A)"),  # noqa: E501
    "dense_breakdown": Scenario("bench.retrieval.dense_breakdown", "where the dense stage's time goes on a real-vector database: each step's p50 / p95 and its ratio to a bare top-10 HNSW scan"),  # noqa: E501
    "query_path": Scenario("bench.query_path", "kb_retrieve in every mode as the owner and as a tenant against the bare legs: hybrid / (bare BM25 + bare HNSW), hybrid less one embedding / (lexical + bare HNSW), tenant / owner"),  # noqa: E501
    "framework_async": Scenario("bench.framework_async", "the LangChain retriever's ainvoke, and 4 at once, against invoke, warm pools: async / sync p50, 4 at once / sync p50, a new connection per async call / sync"),  # noqa: E501
    "first_query": Scenario("bench.first_query", "the first query of a fresh connection per mode: p50 above SELECT 1 on a fresh connection"),  # noqa: E501
    "concurrency": Scenario("bench.concurrency", "kb_retrieve from 1, 4, 16 clients while a writer ingests: queries/s over 1 client; a fresh client's first query through PgBouncer against direct"),  # noqa: E501
    "tenant_interference": Scenario("bench.tenant_interference", "what another tenant's postings cost a tenant's query: p50 of a shared word / a control word; what the id sequences reveal"),  # noqa: E501
    "version_chains": Scenario("bench.version_chains", "long version histories and the dense leg: current versions found by HNSW against an exact scan (and hybrid, the evidence z)"),  # noqa: E501
    "shard_latency": Scenario("bench.shard_latency", "kb_shard.retrieve on a 3-shard coordinator: coordinator / one node holding the same corpus, routed / the shard directly"),  # noqa: E501
    "replica_lag": Scenario("bench.replica_lag", "a hot standby during a bulk ingest: replay lag, catch-up, standby kb_retrieve latency during / idle"),  # noqa: E501
    "ingest_throughput": Scenario("bench.ingest_throughput", "INSERT through the ingest trigger against a Python + COPY pipeline (own cost per chunk) and the provider called directly (in-database / direct)"),  # noqa: E501
    "ingest_bulk": Scenario("bench.ingest_bulk", "pgkb ingest --workers N against the model alone in N backends: ingest / model alone"),  # noqa: E501
    "worker_throughput": Scenario("bench.worker_throughput", "chunks/s of pgkb worker per provider: 2 connections / 1"),  # noqa: E501
    "dictionary_cost": Scenario("bench.dictionary_cost", "kb_retrieve with the bilingual dictionary against without, owner and tenant: with / without p50 and the added ms"),  # noqa: E501
    "chunk_window": Scenario("bench.chunk_window", "stored chunks against the bundled model's 512-token window: model tokens / the chunker's estimate, chunks over the window"),  # noqa: E501
    "answerability_fit": Scenario("bench.answerability_fit", "cases, fit or decisions of the shipped answerability model: held out (leave one dataset out) against fitted on all; after / before runs"),  # noqa: E501
    "passage_relevance": Scenario("bench.passage_relevance", "each passage's relevance fitted on some datasets and scored on the others (held out): its AUC pooled over calls, calibration and Brier against the call's evidence as every passage's relevance and the fused score"),  # noqa: E501
    "migrate_beside_writer": Scenario("bench.migrate_beside_writer", "pgkb migrate 5 times beside a writer (sync e5 inserts) and a kb_retrieve reader: each migrate's time and the stalls and errors they felt / the writer's median insert with no migrate"),  # noqa: E501
    "lab_pages": Scenario("bench.lab_pages", "warm median of each pgkb lab page in-process against a static asset through the same client (ms above that floor)"),  # noqa: E501
    "ocr_accuracy": Scenario("bench.ocr_accuracy", "OCR of generated scans (server venv): character accuracy against the page's text layer, pages/s"),  # noqa: E501
    "parse_speed": Scenario("bench.parse_speed", "pgkb's PDF and DOCX conversion (server venv) against the raw read of the same file (pypdfium2 text, lxml parse): pgkb / raw"),  # noqa: E501
}
# fmt: on


def load(name: str) -> ModuleType:
    """The module of a registered scenario, imported."""
    return importlib.import_module(SCENARIOS[name].module)


def run(name: str, argv: list[str]) -> int:
    """Run a scenario's ``main`` as if its module had been started with ``argv``."""
    main = load(name).main
    saved = sys.argv
    sys.argv = [f"python -m bench {name}", *argv]
    try:
        status = main()
    finally:
        sys.argv = saved
    return status if isinstance(status, int) else 0


def listing() -> str:
    """``python -m bench list``: one line per scenario, its name and what it compares."""
    width = max(map(len, SCENARIOS))
    return "\n".join(f"{name:<{width}}  {s.description}" for name, s in SCENARIOS.items())
