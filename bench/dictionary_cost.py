"""What the bilingual dictionary costs the query path, against the same calls without it, in one run.

On a database with the dictionary loaded (any migrated one) and documents in ``--namespace``, per
question, interleaved so that background load hits both series alike: ``kb_retrieve`` with the
dictionary (``pgkb.dictionary_expansion`` true) and without (false), in the modes given, as the
owner and as a tenant reader granted that namespace (tenant isolation on), who goes first
alternating. The questions are a BEIR folder's (both languages of xquad-mixed by default). Also
prints the dictionary's size on disk.

Prints JSON (``--out`` also writes it) and a short table: p50 and p95 per series, the added p50
(ms) and the ratio with over without.

    /opt/pgkb/venv/bin/python -m bench.dictionary_cost --db evaldb --namespace beir-xquad-mixed \\
        --queries ../shared/datasets/xquad-mixed/queries.jsonl [--n 200]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import psycopg

from bench.retrieval.config import default_dsn
from bench.retrieval.timing import pct

TENANT = "pgkb_bench_dictionary_tenant"
SERIES = ("with", "without")


def dsn_for(server_dsn: str, db: str) -> str:
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=db)


def load_questions(path: Path, n: int, seed: int) -> list[str]:
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(texts)
    return texts[:n]


def set_up_tenant(conn, namespace: str) -> None:
    """Isolation on and a tenant reader granted the namespace (what teams run)."""
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [TENANT]).fetchone():
        conn.execute(f"CREATE ROLE {TENANT} NOLOGIN IN ROLE pgkb_reader")
    conn.execute(f"GRANT {TENANT} TO current_user")
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    conn.execute(
        "INSERT INTO kb.namespace_grants (role_name, namespace) SELECT %s, %s "
        "WHERE NOT EXISTS (SELECT 1 FROM kb.namespace_grants WHERE role_name = %s AND namespace = %s)",
        [TENANT, namespace, TENANT, namespace],
    )


def session(dsn: str, dictionary: bool, role: str | None) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT set_config('pgkb.dictionary_expansion', %s, false)", ["true" if dictionary else "false"])
    if role:
        conn.execute(f"SET ROLE {role}")
    return conn


def timed_ms(conn, sql: str, params: list) -> float:
    import time

    start = time.perf_counter()
    conn.execute(sql, params).fetchall()
    return (time.perf_counter() - start) * 1000


def run(args) -> dict:
    dsn = dsn_for(args.dsn, args.db)
    questions = load_questions(args.queries, args.n, args.seed)
    with psycopg.connect(dsn, autocommit=True) as admin:
        isolation = admin.execute("SELECT value FROM kb.settings WHERE key = 'tenant_isolation'").fetchone()[0]
        set_up_tenant(admin, args.namespace)
        size = admin.execute(
            "SELECT pg_total_relation_size('kb.dictionary'), pg_total_relation_size('kb.dictionary_lookup'), "
            "(SELECT count(*) FROM kb.dictionary), (SELECT count(*) FROM kb.dictionary_lookup)"
        ).fetchone()
    sessions = {
        (who, series): session(dsn, series == "with", TENANT if who == "tenant" else None)
        for who in ("owner", "tenant")
        for series in SERIES
    }
    sql = "SELECT chunk_id FROM kb_retrieve(%s, 10, %s, %s)"
    times: dict[str, list[float]] = {}
    try:
        for mode in args.modes:
            for q in questions[: args.warmup]:
                for conn in sessions.values():
                    conn.execute(sql, [q, args.namespace, mode]).fetchall()
            for i, q in enumerate(questions):
                order = list(sessions.items()) if i % 2 == 0 else list(reversed(sessions.items()))
                for (who, series), conn in order:
                    times.setdefault(f"{mode}/{who}/{series}", []).append(
                        timed_ms(conn, sql, [q, args.namespace, mode])
                    )
    finally:
        for conn in sessions.values():
            conn.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("UPDATE kb.settings SET value = %s WHERE key = 'tenant_isolation'", [json.dumps(isolation)])
    series = {name: pct(values) for name, values in times.items()}
    compared = {}
    for mode in args.modes:
        for who in ("owner", "tenant"):
            on, off = series[f"{mode}/{who}/with"], series[f"{mode}/{who}/without"]
            compared[f"{mode}/{who}"] = {
                "added_p50_ms": round(on["p50"] - off["p50"], 2),
                "ratio_p50": round(on["p50"] / off["p50"], 3),
            }
    return {
        "db": args.db,
        "namespace": args.namespace,
        "questions": len(questions),
        "dictionary_bytes": {"kb.dictionary": size[0], "kb.dictionary_lookup": size[1]},
        "dictionary_rows": {"kb.dictionary": size[2], "kb.dictionary_lookup": size[3]},
        "series": series,
        "compared": compared,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=default_dsn(), help="the server (default %(default)s)")
    ap.add_argument("--db", required=True)
    ap.add_argument("--namespace", required=True, help="the namespace the questions are asked in")
    ap.add_argument("--queries", type=Path, required=True, help="a BEIR queries.jsonl")
    ap.add_argument("--n", type=int, default=200, help="questions (a fixed random sample)")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["hybrid", "lexical"])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = run(args)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(f"\n{'series':<28}{'p50 ms':>10}{'p95 ms':>10}")
    for name, figures in report["series"].items():
        print(f"{name:<28}{figures['p50']:>10}{figures['p95']:>10}")
    print(f"\n{'mode/role':<28}{'added p50 ms':>14}{'ratio':>8}")
    for name, figures in report["compared"].items():
        print(f"{name:<28}{figures['added_p50_ms']:>14}{figures['ratio_p50']:>8}")
    mb = {k: round(v / 2**20, 1) for k, v in report["dictionary_bytes"].items()}
    print(f"\ndictionary on disk (MB): {mb}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
