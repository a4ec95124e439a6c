"""Bulk embedding of the real corpus's chunk texts with a bundled model, outside the database.

Run with the *server's* Python (the venv PL/Python uses, so the model package and its version are
the ones ingest would use), in the background::

    nohup nice -n 5 /opt/pgkb/server-venv/bin/python -m bench.retrieval.embed_job \\
        /var/tmp/pgkb_bench_real/usem3 --processes 2 > /var/tmp/pgkb_bench_real/usem3/embed.log 2>&1 &

It reads ``texts.jsonl`` of that folder (one JSON string per line: the chunks' ``embed_text``,
written by ``python -m bench.retrieval --corpus real --prepare-texts``) and ``model.json`` (the
registered model row: provider, model, dimensions, options), embeds the texts through pgkb's own
provider (``pgkb_plpy.embedders.get_provider(...).embed_passages``, batches of ``--batch``), and
writes ``vectors.npy`` (float32, one row per line of texts.jsonl). Each process embeds every
``--processes``-th text and checkpoints its part every ``--checkpoint`` texts
(``part-<i>.npy``), so a killed job resumes where it stopped. Progress goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("PGKB_BENCH_PLPYTHON") or str(REPO_ROOT / "plpython"))


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _share(folder: Path, index: int, processes: int):
    """Process ``index``'s part of the job: the model row, its texts (every ``processes``-th from
    ``index``) and the provider that embeds them."""
    from pgkb_plpy import embedders

    model = json.loads((folder / "model.json").read_text())
    with (folder / "texts.jsonl").open(encoding="utf-8") as fh:
        texts = [json.loads(line) for n, line in enumerate(fh) if n % processes == index]
    provider = embedders.get_provider(
        {}, model["provider"], model["model"], model["dimensions"], model.get("options") or {}
    )
    return model, texts, provider


def _work(job: tuple[Path, int, int, int, int]) -> int:
    folder, index, processes, batch, checkpoint = job
    model, texts, provider = _share(folder, index, processes)
    part = folder / f"part-{index}.npy"
    done = np.load(part) if part.is_file() else np.zeros((0, model["dimensions"]), dtype=np.float32)
    vectors = [done]
    n, started = len(done), time.perf_counter()
    since = n
    _log(f"process {index}: {len(texts)} texts, {n} done before")
    while n < len(texts):
        chunk = texts[n : n + checkpoint]
        out = []
        for start in range(0, len(chunk), batch):
            out.extend(provider.embed_passages(chunk[start : start + batch]))
        vectors.append(np.asarray(out, dtype=np.float32))
        n += len(chunk)
        np.save(folder / f"part-{index}.tmp.npy", np.concatenate(vectors))
        os.replace(folder / f"part-{index}.tmp.npy", part)
        rate = (n - since) / (time.perf_counter() - started)
        _log(f"process {index}: {n}/{len(texts)} ({rate:.1f} texts/s, ~{(len(texts) - n) / rate / 60:.1f} min left)")
    return n


def _tail(job: tuple[Path, int, int, int, int]) -> int:
    """Help a running job from the other end: embed process ``index``'s texts backwards in blocks
    of ``checkpoint`` (``tail-<i>.npy`` holds the embedded suffix, in order) until the suffix
    meets what ``part-<i>.npy`` holds."""
    folder, index, processes, batch, checkpoint = job
    model, texts, provider = _share(folder, index, processes)
    tail_path = folder / f"tail-{index}.npy"
    tail = np.load(tail_path) if tail_path.is_file() else np.zeros((0, model["dimensions"]), dtype=np.float32)
    while True:
        part = folder / f"part-{index}.npy"
        head = len(np.load(part, mmap_mode="r")) if part.is_file() else 0
        end = len(texts) - len(tail)
        if head >= end:
            break
        start = max(head, end - checkpoint)
        out = []
        for b in range(start, end, batch):
            out.extend(provider.embed_passages(texts[b : min(b + batch, end)]))
        tail = np.concatenate([np.asarray(out, dtype=np.float32), tail])
        np.save(folder / f"tail-{index}.tmp.npy", tail)
        os.replace(folder / f"tail-{index}.tmp.npy", tail_path)
        _log(f"tail {index}: {len(tail)} from the end, head at {head} of {len(texts)}")
    _log(f"tail {index}: met the head ({head} + {len(tail)} >= {len(texts)})")
    return len(tail)


def merge(folder: Path, processes: int) -> int:
    """vectors.npy from part-<i>.npy (the head) and tail-<i>.npy (the suffix a --tail job embedded)."""
    model = json.loads((folder / "model.json").read_text())
    n_texts = sum(1 for _ in (folder / "texts.jsonl").open(encoding="utf-8"))
    out = np.zeros((n_texts, model["dimensions"]), dtype=np.float32)
    for i in range(processes):
        n_i = len(range(i, n_texts, processes))
        head = np.load(folder / f"part-{i}.npy")
        tail_path = folder / f"tail-{i}.npy"
        tail = np.load(tail_path) if tail_path.is_file() else np.zeros((0, model["dimensions"]), dtype=np.float32)
        if len(head) + len(tail) < n_i:
            raise SystemExit(f"process {i}: {len(head)} + {len(tail)} vectors, {n_i} texts: not finished")
        out[i::processes] = np.concatenate([head[: n_i - len(tail)], tail])
    np.save(folder / "vectors.tmp.npy", out)
    os.replace(folder / "vectors.tmp.npy", folder / "vectors.npy")
    _log(f"merged {n_texts} vectors -> {folder / 'vectors.npy'}")
    return n_texts


def merge_partial(folder: Path, processes: int, target: Path) -> int:
    """A store in ``target`` of the texts embedded so far (heads and tails of every process), for a
    smaller database of exactly those chunks (``--real-universe``); marked ``partial``."""
    model = json.loads((folder / "model.json").read_text())
    with (folder / "texts.jsonl").open(encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    keep: list[tuple[int, np.ndarray]] = []
    for i in range(processes):
        idx = list(range(i, len(lines), processes))
        head_path, tail_path = folder / f"part-{i}.npy", folder / f"tail-{i}.npy"
        head = np.load(head_path) if head_path.is_file() else np.zeros((0, model["dimensions"]), dtype=np.float32)
        tail = np.load(tail_path) if tail_path.is_file() else np.zeros((0, model["dimensions"]), dtype=np.float32)
        keep.extend(zip(idx[: len(head)], head, strict=True))
        tail_start = max(len(idx) - len(tail), len(head))
        keep.extend(zip(idx[tail_start:], tail[len(tail) - (len(idx) - tail_start) :], strict=True))
    keep.sort(key=lambda x: x[0])
    target.mkdir(parents=True, exist_ok=True)
    (target / "texts.jsonl").write_text("".join(lines[n] + "\n" for n, _ in keep), encoding="utf-8")
    (target / "model.json").write_text((folder / "model.json").read_text())
    np.save(target / "vectors.npy", np.stack([v for _, v in keep]))
    (target / "partial").write_text(json.dumps({"of": str(folder), "texts": len(keep), "universe": len(lines)}))
    _log(f"partial store: {len(keep)} of {len(lines)} texts -> {target}")
    return len(keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="holds texts.jsonl and model.json; vectors.npy is written there")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="texts per embed_passages call")
    ap.add_argument("--checkpoint", type=int, default=2000, help="texts per process between checkpoints")
    ap.add_argument(
        "--tail",
        action="store_true",
        help="help a running job (same --processes) from the end of each process's texts; then --merge",
    )
    ap.add_argument("--merge", action="store_true", help="write vectors.npy from the part-* and tail-* files")
    ap.add_argument(
        "--partial-to", type=Path, default=None, help="write a store of the texts embedded so far to this folder"
    )
    args = ap.parse_args(argv)
    folder = args.folder
    if args.partial_to:
        merge_partial(folder, args.processes, args.partial_to)
        return 0
    if args.merge:
        merge(folder, args.processes)
        return 0
    n_texts = sum(1 for _ in (folder / "texts.jsonl").open(encoding="utf-8"))
    model = json.loads((folder / "model.json").read_text())
    _log(f"{n_texts} texts, model {model['name']} ({model['provider']}:{model['model']}, {model['dimensions']} dims)")
    started = time.perf_counter()
    jobs = [(folder, i, args.processes, args.batch, args.checkpoint) for i in range(args.processes)]
    # fork before any model is loaded (each process loads its own, as each backend does)
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        pool.map(_tail if args.tail else _work, jobs)
    if args.tail:
        return 0
    parts = [np.load(folder / f"part-{i}.npy") for i in range(args.processes)]
    out = np.zeros((n_texts, model["dimensions"]), dtype=np.float32)
    for i, part in enumerate(parts):
        out[i :: args.processes] = part
    np.save(folder / "vectors.tmp.npy", out)
    os.replace(folder / "vectors.tmp.npy", folder / "vectors.npy")
    elapsed = time.perf_counter() - started
    (folder / "embed_facts.json").write_text(
        json.dumps(
            {
                "texts": n_texts,
                "processes": args.processes,
                "batch": args.batch,
                "elapsed_s": round(elapsed, 1),
                "texts_per_s": round(n_texts / elapsed, 1),
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "python": sys.executable,
            }
        )
    )
    _log(f"done: {n_texts} vectors in {elapsed:.0f} s -> {folder / 'vectors.npy'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
