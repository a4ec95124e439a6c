"""pgvector's text form of one embedding: pgkb's ``vector_literal`` against pgvector-python.

Inside PL/Python a vector goes to SQL as text (``plpy`` passes no binary parameters), so
``pgkb_plpy.ingest.vector_literal`` formats it: ``"[" + ",".join(repr(float(x)) ...) + "]"``.
The alternative is pgvector-python's ``pgvector.Vector(v).to_text()`` (a numpy float32 array
underneath). Both are timed on what the providers hand over, a list of Python floats (seeded
N(0, 0.05) values), for each ``--dims``: seconds per call, best of ``--repeat`` runs of
``--number`` calls (interleaved), and the ratio pgvector / pgkb (above 1: pgkb's is faster). Also reported:
the length of each text and whether the two texts give the same float32 values (pgvector
stores float32, so pgkb's longer float64 text loses nothing and gains nothing).

    /opt/pgkb/venv/bin/python bench/ecosystem/vector_text.py [--dims 384,768] [--number 2000] [--repeat 5]

JSON report on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import random

from common import best_of, emit, host, use_plpython, version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="384,768", help="comma-separated vector sizes")
    ap.add_argument("--number", type=int, default=2000, help="calls per timed run")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs; the best counts")
    args = ap.parse_args()

    use_plpython()
    import numpy as np
    from pgkb_plpy.ingest import vector_literal
    from pgvector import Vector

    results = []
    for dims in (int(d) for d in args.dims.split(",")):
        vec = [random.Random(dims).gauss(0, 0.05) for _ in range(dims)]
        ours, theirs = vector_literal(vec), Vector(vec).to_text()
        same = np.array_equal(
            np.array(ours.strip("[]").split(","), dtype=np.float32),
            np.array(theirs.strip("[]").split(","), dtype=np.float32),
        )
        t = best_of(
            {"pgkb": lambda v=vec: vector_literal(v), "pgvector": lambda v=vec: Vector(v).to_text()},
            args.repeat,
            args.number,
        )
        pgkb_s, pgvector_s = t["pgkb"], t["pgvector"]
        results.append(
            {
                "dims": dims,
                "pgkb_vector_literal_us": round(pgkb_s * 1e6, 1),
                "pgvector_to_text_us": round(pgvector_s * 1e6, 1),
                "ratio_pgvector_over_pgkb": round(pgvector_s / pgkb_s, 2),
                "pgkb_chars": len(ours),
                "pgvector_chars": len(theirs),
                "same_float32_values": bool(same),
            }
        )
    report = {
        "benchmark": "vector_text",
        "host": host(),
        "config": {"number": args.number, "repeat": args.repeat, "pgvector": version("pgvector")},
        "results": results,
    }
    emit(
        report,
        ["dims", "vector_literal µs", "Vector.to_text µs", "pgvector/pgkb", "chars pgkb/pgvector", "same float32"],
        [
            [
                r["dims"],
                r["pgkb_vector_literal_us"],
                r["pgvector_to_text_us"],
                r["ratio_pgvector_over_pgkb"],
                f"{r['pgkb_chars']}/{r['pgvector_chars']}",
                r["same_float32_values"],
            ]
            for r in results
        ],
    )


if __name__ == "__main__":
    main()
