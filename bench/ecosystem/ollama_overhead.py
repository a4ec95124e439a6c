"""Per-batch cost of the Ollama provider: the official ``ollama`` client against the previous urllib code.

"after" is the checkout's ``pgkb_plpy.embedders.OllamaProvider`` (``ollama.Client.embed``, one
kept-alive httpx connection). "before" is the single-module provider of an earlier release
(``--old-rev``, default ``024aade``: urllib, a new connection per request), read with
``git show <rev>:plpython/pgkb_plpy/embedders.py`` into a temporary folder and imported from
there, so no copy of the old code lives in the repository.

Both call ``tests/fake_ollama.py``, started in its own process as a real Ollama runs in its own
(``--server thread``: in a thread of this process instead, so its Python work competes with the
client's for the GIL); its work (hash embeddings, JSON) is the same for both sides.
For each ``--sizes`` (texts per ``embed_passages`` call, one HTTP request each, ``batch_size``
set to it) each side gets ``--warmup`` calls, then ``--rounds`` rounds of ``--batches`` calls,
alternating sides per round (the side that starts changes each round, so a change of load on
the machine hits both). Reported per side, median (and min) over the rounds, in µs per batch:
wall time, and client CPU, the calling thread's CPU time (``time.thread_time``: the provider's
own Python work, not the server's); and after / before ratios of the medians.

Also: ``check_vectors`` of each version on 32 vectors of ``--dims`` plain floats (best of 5
interleaved runs of 50 calls), and the time to ``import ollama`` in a fresh interpreter (paid
once per backend that uses an Ollama model).

    /opt/pgkb/venv/bin/python bench/ecosystem/ollama_overhead.py [--sizes 1,16,32] [--batches 200]
        [--rounds 5] [--dims 768] [--server process|thread] [--old-rev 024aade]

Needs git and the repository's history. JSON report on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, best_of, emit, host, use_plpython, version


def load_old_provider(rev: str, folder: Path):
    """The module ``plpython/pgkb_plpy/embedders.py`` of ``rev``, imported from ``folder``."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:plpython/pgkb_plpy/embedders.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = folder / "pgkb_embedders_old.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pgkb_embedders_old", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing resolve names through sys.modules
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def fake_server(where: str, dims: int):
    """The URL of a fake Ollama: in its own process, or in a thread of this one (sharing the GIL)."""
    if where == "thread":
        sys.path.insert(0, str(REPO / "tests"))
        from fake_ollama import FakeOllama

        with FakeOllama(dimensions=dims) as srv:
            yield srv.url
        return
    cmd = [sys.executable, str(REPO / "tests" / "fake_ollama.py"), "--port", "0", "--dimensions", str(dims)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait()


def timed_round(provider, texts: list[str], batches: int) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(batches):
        provider.embed_passages(texts)
    return (time.perf_counter() - w0) / batches * 1e6, (time.thread_time() - c0) / batches * 1e6


def measure(old, new, url: str, size: int, args) -> dict:
    """One batch size: both providers warmed up, then rounds alternating which side starts."""
    texts = [f"passage {i} about refunds, shipping and the warehouse" for i in range(size)]
    opts = {"base_url": url, "batch_size": size}
    sides = {
        "before": old.OllamaProvider("nomic-embed-text", args.dims, opts),
        "after": new.OllamaProvider("nomic-embed-text", args.dims, opts),
    }
    for p in sides.values():
        for _ in range(args.warmup):
            p.embed_passages(texts)
    walls, cpus = {s: [] for s in sides}, {s: [] for s in sides}
    for r in range(args.rounds):
        for s in sorted(sides, reverse=r % 2 == 1):
            wall, cpu = timed_round(sides[s], texts, args.batches)
            walls[s].append(wall)
            cpus[s].append(cpu)
    row = {"texts_per_batch": size}
    for s in sides:
        row[s] = {
            "wall_us": round(statistics.median(walls[s])),
            "wall_us_min": round(min(walls[s])),
            "cpu_us": round(statistics.median(cpus[s])),
            "cpu_us_min": round(min(cpus[s])),
        }
    row["wall_after_over_before"] = round(row["after"]["wall_us"] / row["before"]["wall_us"], 2)
    row["cpu_after_over_before"] = round(row["after"]["cpu_us"] / row["before"]["cpu_us"], 2)
    return row


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,16,32", help="texts per batch, comma-separated")
    ap.add_argument("--batches", type=int, default=200, help="batches per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20, help="untimed batches per side and size")
    ap.add_argument("--dims", type=int, default=768)
    ap.add_argument("--server", choices=("process", "thread"), default="process", help="where the fake Ollama runs")
    ap.add_argument("--old-rev", default="024aade", help="a commit whose embedders.py is one module")
    args = ap.parse_args()

    use_plpython()
    from pgkb_plpy import embedders as new

    with (
        fake_server(args.server, args.dims) as url,
        tempfile.TemporaryDirectory(prefix="pgkb-old-embedders-") as tmp,
    ):
        old = load_old_provider(args.old_rev, Path(tmp))
        results = [measure(old, new, url, int(size), args) for size in args.sizes.split(",")]
        rng = random.Random(1)
        vectors = [[rng.gauss(0, 0.05) for _ in range(args.dims)] for _ in range(32)]
        check = best_of(
            {
                "before": lambda: old.check_vectors(vectors, 32, args.dims, "x"),
                "after": lambda: new.check_vectors(vectors, 32, args.dims, "x"),
            },
            repeat=5,
            number=50,
        )

    report = {
        "benchmark": "ollama_overhead",
        "host": host(),
        "config": {
            "sizes": [r["texts_per_batch"] for r in results],
            "batches": args.batches,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "dims": args.dims,
            "server": args.server,
            "old_rev": args.old_rev,
            "ollama": version("ollama"),
            "httpx": version("httpx"),
        },
        "per_batch": results,
        "check_vectors_32_ms": {s: round(t * 1e3, 2) for s, t in check.items()},
        "import_ollama_s": round(import_seconds("ollama"), 2),
    }
    rows = [
        [
            r["texts_per_batch"],
            f"{r['before']['wall_us']:,} → {r['after']['wall_us']:,}",
            r["wall_after_over_before"],
            f"{r['before']['cpu_us']:,} → {r['after']['cpu_us']:,}",
            r["cpu_after_over_before"],
        ]
        for r in results
    ]
    c = report["check_vectors_32_ms"]
    rows.append([f"check_vectors 32×{args.dims}", f"{c['before']} → {c['after']} ms", "", "", ""])
    rows.append(["import ollama", f"{report['import_ollama_s']} s", "", "", ""])
    emit(report, ["texts/batch", "wall µs before → after", "ratio", "client CPU µs before → after", "ratio"], rows)


if __name__ == "__main__":
    main()
