"""The query path as the owner and as a tenant role, against the bare legs, in one run.

On a database built by ``bench.retrieval`` (``--build-only``; its documents live in namespace
``default``), this benchmark:

* turns ``tenant_isolation`` on in that database and makes a tenant reader role granted
  ``default``, so the tenant sees exactly what the owner sees and any difference is the cost of
  isolation;
* with ``--chain N``, stores a policy as N versions (each supersedes the one before) in namespace
  ``bench-chain``, granted to the tenant too, and asks it one question per round;
* per query, interleaved so that background load hits every series alike: ``kb_retrieve`` in
  hybrid, dense and lexical mode as the owner and as the tenant (a session each, with no
  settings of their own; who goes first alternates from one query to the next), the bare BM25
  leg (``kb_node.lexical_candidates`` with precomputed terms, 100 candidates, as the owner, in a
  third session) and bare HNSW
  (``ORDER BY embedding <=> q LIMIT n`` through the model's index, with the leg's ef_search) for
  10 and for the leg's candidate count, and the dense leg's own function
  (``kb_node.dense_candidates``: the same scan with the lifecycle filter, no language
  correction);
* checks that the tenant's rows equal the owner's (same chunks, same order) for every query;
* then, for hybrid and dense mode, where the owner's calls spend their time: each function's own
  time per query (``track_functions``), the breakdown behind the ratios.

Prints JSON (``--out`` also writes it) and a short table: p50 and p95 per series, and the ratios
the fast-query-path issue sets targets on (hybrid over bare BM25 + bare HNSW; tenant over owner).

    /opt/pgkb/venv/bin/python -m bench.query_path --db pgkb_bench_qp_10000 [--queries 100] [--chain 1000]
"""

from __future__ import annotations  # noqa: I001  (bench.retrieval must put plpython/ on sys.path first)

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import psycopg
from psycopg.rows import tuple_row

from bench.retrieval.config import default_dsn
from bench.retrieval.timing import pct
from pgkb_plpy import lexical

TENANT = "pgkb_bench_tenant"
CHAIN_NAMESPACE = "bench-chain"
WORD_RE = re.compile(r"[A-Za-z][A-Za-z-]+")
MODES = ("hybrid", "dense", "lexical")


def dsn_for(server_dsn: str, db: str) -> str:
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=db)


def sample_queries(conn, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` queries drawn from stored chunks, alternately short (2-4 words or 2-6 Han characters)
    and long (15-30 words or 20-45 characters), as ``(kind, text)``."""
    rng = random.Random(seed)
    max_id = conn.execute("SELECT max(id) FROM kb.chunks WHERE namespace = 'default'").fetchone()[0]
    out: list[tuple[str, str]] = []
    while len(out) < n:
        row = conn.execute("SELECT content FROM kb.chunks WHERE id = %s", [rng.randint(1, max_id)]).fetchone()
        if row is None:
            continue
        short = len(out) % 2 == 0
        han = re.sub(r"[^\u4e00-\u9fff]", "", row[0])
        if len(han) > 50:
            size = rng.randint(2, 6) if short else rng.randint(20, 45)
            start = rng.randint(0, len(han) - size)
            text = han[start : start + size]
        else:
            words = [w.lower() for w in WORD_RE.findall(row[0]) if w.lower() not in lexical.STOP_WORDS]
            size = rng.randint(2, 4) if short else rng.randint(15, 30)
            if len(words) < size:
                continue
            start = rng.randint(0, len(words) - size)
            text = " ".join(words[start : start + size])
        out.append(("short" if short else "long", text))
    return out


def set_up_tenant(conn, chain: int) -> None:
    """Isolation on, the tenant reader granted ``default`` (and the chain's namespace), the chain."""
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [TENANT]).fetchone()
    if not exists:
        conn.execute(f"CREATE ROLE {TENANT} NOLOGIN IN ROLE pgkb_reader")
    conn.execute(f"GRANT {TENANT} TO current_user")
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    for namespace in ("default", CHAIN_NAMESPACE):
        conn.execute(
            "INSERT INTO kb.namespace_grants (role_name, namespace) SELECT %s, %s "
            "WHERE NOT EXISTS (SELECT 1 FROM kb.namespace_grants WHERE role_name = %s AND namespace = %s)",
            [TENANT, namespace, TENANT, namespace],
        )
    have = conn.execute("SELECT count(*) FROM kb.documents WHERE namespace = %s", [CHAIN_NAMESPACE]).fetchone()[0]
    if chain and have != chain:
        conn.execute("DELETE FROM kb.documents WHERE namespace = %s", [CHAIN_NAMESPACE])
        for v in range(1, chain + 1):
            conn.execute(
                "INSERT INTO kb.documents (namespace, source, title, body, status, supersedes) "
                "VALUES (%s, %s, 'Expense policy', %s, 'active', %s)",
                [
                    CHAIN_NAMESPACE,
                    f"policy-v{v:04d}.md",
                    f"# Expense policy\n\nHotels are reimbursed up to {100 + v} EUR per night.",
                    f"policy-v{v - 1:04d}.md" if v > 1 else None,
                ],
            )
        conn.execute("SELECT kb.refresh_lexical_stats()")


def timed(conn, sql: str, params: list) -> tuple[float, list]:
    start = time.perf_counter()
    rows = conn.execute(sql, params).fetchall()
    return (time.perf_counter() - start) * 1000, rows


def measure(owner, tenant, bare, queries, model: tuple[str, int], candidates: int, ef_search: int, chain: int) -> dict:
    name, dims = model
    bare_hnsw = (
        f"SELECT chunk_id FROM kb.embeddings WHERE model = '{name}' "
        f"ORDER BY embedding::vector({dims}) <=> %s::text::vector({dims}) LIMIT %s"
    )
    bare_bm25 = "SELECT chunk_id FROM kb_node.lexical_candidates(%s::text[], now(), NULL, '{}', 100)"
    # the dense leg's own function with the lifecycle filter, one scan over every language (no
    # language correction): what the leg asks of the index, without the pipeline around it
    bare_dense = (
        f"SELECT chunk_id FROM kb_node.dense_candidates(%s::text, '{name}', {dims}, now(), NULL, '{{}}', %s, "
        "'{}'::kb.language_moment[])"
    )
    retrieve = "SELECT chunk_id FROM kb_retrieve(%s, 10, NULL, %s)"
    series: dict[str, dict[str, list[float]]] = {}
    mismatches: list[dict] = []
    for n, (kind, q) in enumerate(queries):
        s = series.setdefault(kind, {})
        # the query's vector as the database embeds it (the active model, hash or bundled): one
        # embedding's cost is a series of its own, so the pipeline's can be told from it
        ms_embed, embedded = timed(bare, "SELECT kb.embed_query(%s, %s)", [q, name])
        s.setdefault("embed_query", []).append(ms_embed)
        vec = embedded[0][0]
        terms = lexical.query_terms(q)
        for mode in MODES:
            # who goes first alternates within each kind of query (short and long alternate, so
            # n // 2): the second call finds in memory the pages the first one read
            if n // 2 % 2 == 0:
                ms_owner, rows_owner = timed(owner, retrieve, [q, mode])
                ms_tenant, rows_tenant = timed(tenant, retrieve, [q, mode])
            else:
                ms_tenant, rows_tenant = timed(tenant, retrieve, [q, mode])
                ms_owner, rows_owner = timed(owner, retrieve, [q, mode])
            s.setdefault(f"owner_{mode}", []).append(ms_owner)
            s.setdefault(f"tenant_{mode}", []).append(ms_tenant)
            if rows_owner != rows_tenant:
                mismatches.append({"query": q, "mode": mode, "owner": rows_owner[:3], "tenant": rows_tenant[:3]})
        s.setdefault("bare_bm25", []).append(timed(bare, bare_bm25, [terms])[0])
        s.setdefault("bare_hnsw_10", []).append(timed(bare, bare_hnsw, [vec, 10])[0])
        bare.execute(f"SET hnsw.ef_search = {max(ef_search, candidates * 3 // 2)}")
        s.setdefault("bare_hnsw_leg", []).append(timed(bare, bare_hnsw, [vec, candidates])[0])
        s.setdefault("bare_dense_leg", []).append(timed(bare, bare_dense, [vec, candidates])[0])
        bare.execute(f"SET hnsw.ef_search = {ef_search}")
        if chain and n % 4 == 0:
            question = [
                "SELECT source FROM kb_retrieve('hotel reimbursed per night', 3, %s, 'hybrid')",
                [CHAIN_NAMESPACE],
            ]
            c = series.setdefault("chain", {})
            c.setdefault("owner_hybrid", []).append(timed(owner, *question)[0])
            c.setdefault("tenant_hybrid", []).append(timed(tenant, *question)[0])
    return {
        "latency_ms": {kind: {k: pct(v) for k, v in s.items()} for kind, s in series.items()},
        "tenant_rows_differ": len(mismatches),
        "mismatch_examples": mismatches[:3],
    }


def breakdown(conn, queries, mode: str, top: int = 14) -> dict:
    """Where a kb_retrieve call's time goes, per query: each function's own time (without the
    functions it calls) and calls, from track_functions, the owner's queries in one transaction
    (pg_stat_xact_user_functions counts that transaction). Timing every call adds to every call,
    so the figures say where the time goes, not how long a call takes; ``wall`` is the calls'
    own time in the same pass."""
    counts = "SELECT schemaname || '.' || funcname, calls, self_time FROM pg_stat_xact_user_functions"
    conn.execute("SET track_functions = 'all'")
    try:
        with conn.transaction():
            # the view also holds what earlier transactions have not flushed yet: the difference counts
            before = {name: (calls, self_ms) for name, calls, self_ms in conn.execute(counts).fetchall()}
            wall = sum(
                timed(conn, "SELECT chunk_id FROM kb_retrieve(%s, 10, NULL, %s)", [q, mode])[0] for _, q in queries
            )
            after = conn.execute(counts).fetchall()
    finally:
        conn.execute("RESET track_functions")
    n = len(queries)
    spent = [(name, calls - before.get(name, (0, 0))[0], ms - before.get(name, (0, 0))[1]) for name, calls, ms in after]
    out = {"wall": round(wall / n, 3)}
    for name, calls, self_ms in sorted(spent, key=lambda r: -r[2])[:top]:
        out[name] = {"self_ms": round(self_ms / n, 3), "calls": round(calls / n, 2)}
    return out


def ratios(latency: dict) -> dict:
    out = {}
    for kind, s in latency.items():
        if kind == "chain":
            out[kind] = {"tenant_over_owner_hybrid_p50": _div(s["tenant_hybrid"]["p50"], s["owner_hybrid"]["p50"])}
            continue
        bare = s["bare_bm25"]["p95"] + s["bare_hnsw_10"]["p95"]
        embed = s["embed_query"]
        out[kind] = {
            "owner_hybrid_p95_over_bare_bm25_plus_hnsw_p95": _div(s["owner_hybrid"]["p95"], bare),
            "tenant_hybrid_p95_over_bare_bm25_plus_hnsw_p95": _div(s["tenant_hybrid"]["p95"], bare),
            # without one query embedding, against lexical mode plus a bare top-10 HNSW scan
            "owner_hybrid_less_embed_p50_over_lexical_plus_hnsw_p50": _div(
                s["owner_hybrid"]["p50"] - embed["p50"], s["owner_lexical"]["p50"] + s["bare_hnsw_10"]["p50"]
            ),
            "owner_hybrid_less_embed_p95_over_lexical_plus_hnsw_p95": _div(
                s["owner_hybrid"]["p95"] - embed["p95"], s["owner_lexical"]["p95"] + s["bare_hnsw_10"]["p95"]
            ),
            "tenant_hybrid_less_embed_p50_over_lexical_plus_hnsw_p50": _div(
                s["tenant_hybrid"]["p50"] - embed["p50"], s["tenant_lexical"]["p50"] + s["bare_hnsw_10"]["p50"]
            ),
            "tenant_hybrid_less_embed_p95_over_lexical_plus_hnsw_p95": _div(
                s["tenant_hybrid"]["p95"] - embed["p95"], s["tenant_lexical"]["p95"] + s["bare_hnsw_10"]["p95"]
            ),
            "owner_dense_p50_minus_embed_and_bare_hnsw_leg_p50_ms": round(
                s["owner_dense"]["p50"] - embed["p50"] - s["bare_hnsw_leg"]["p50"], 2
            ),
            "tenant_dense_p50_minus_embed_and_bare_hnsw_leg_p50_ms": round(
                s["tenant_dense"]["p50"] - embed["p50"] - s["bare_hnsw_leg"]["p50"], 2
            ),
            "owner_dense_p50_minus_bare_hnsw_leg_p50_ms": round(s["owner_dense"]["p50"] - s["bare_hnsw_leg"]["p50"], 2),
            "owner_dense_p50_minus_bare_dense_leg_p50_ms": round(
                s["owner_dense"]["p50"] - s["bare_dense_leg"]["p50"], 2
            ),
        }
        for mode in MODES:
            out[kind][f"tenant_over_owner_{mode}_p50"] = _div(s[f"tenant_{mode}"]["p50"], s[f"owner_{mode}"]["p50"])
            out[kind][f"tenant_over_owner_{mode}_p95"] = _div(s[f"tenant_{mode}"]["p95"], s[f"owner_{mode}"]["p95"])
    return out


def _div(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def table(report: dict) -> str:
    lines = [f"{'series':<28}{'kind':<7}{'p50 ms':>9}{'p95 ms':>9}"]
    for kind, s in report["latency_ms"].items():
        for name, p in s.items():
            lines.append(f"{name:<28}{kind:<7}{p['p50']:>9.2f}{p['p95']:>9.2f}")
    lines.append("")
    for kind, r in report["ratios"].items():
        for name, value in r.items():
            lines.append(f"{kind:<7}{name:<60}{value}")
    lines.append(f"tenant rows differing from the owner's: {report['tenant_rows_differ']}")
    for mode, parts in report["breakdown_ms_per_query"].items():
        lines.append(f"\nwhere the owner's {mode} call goes (per query, track_functions on): wall {parts['wall']} ms")
        for name, part in parts.items():
            if name != "wall":
                lines.append(f"  {name:<44}{part['self_ms']:>8.3f} ms{part['calls']:>8.2f} calls")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=default_dsn(), help="the server (default %(default)s)")
    ap.add_argument("--db", required=True, help="a database built by bench.retrieval")
    ap.add_argument("--queries", type=int, default=100, help="half short, half long")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--chain", type=int, default=0, help="versions of the chained policy (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    dsn = dsn_for(args.dsn, args.db)
    with psycopg.connect(dsn, autocommit=True, row_factory=tuple_row) as owner:
        set_up_tenant(owner, args.chain)
        with (
            psycopg.connect(dsn, autocommit=True, row_factory=tuple_row) as tenant,
            psycopg.connect(dsn, autocommit=True, row_factory=tuple_row) as bare,
        ):
            tenant.execute(f"SET ROLE {TENANT}")
            model = owner.execute("SELECT name, dimensions FROM kb.models WHERE active").fetchone()
            settings = dict(
                owner.execute(
                    "SELECT key, value #>> '{}' FROM kb.settings WHERE key IN ('candidates_per_leg', 'hnsw_ef_search')"
                ).fetchall()
            )
            candidates = max(10 * 5, int(settings["candidates_per_leg"]))
            ef_search = int(settings["hnsw_ef_search"])
            # the bare legs' own session, so that its settings never touch the two retrieving ones
            bare.execute(f"SET hnsw.ef_search = {ef_search}")
            bare.execute("SET jit = off")
            queries = sample_queries(owner, args.queries + args.warmup, args.seed)
            measure(owner, tenant, bare, queries[: args.warmup], model, candidates, ef_search, args.chain)
            result = measure(owner, tenant, bare, queries[args.warmup :], model, candidates, ef_search, args.chain)
            result["breakdown_ms_per_query"] = {
                mode: breakdown(owner, queries[args.warmup :], mode) for mode in ("hybrid", "dense")
            }
            commit = owner.execute("SELECT count(*) FROM kb.chunks").fetchone()[0]
    report = {
        "database": args.db,
        "chunks": commit,
        "model": {"name": model[0], "dimensions": model[1]},
        "queries": args.queries,
        "chain_versions": args.chain,
        "candidates": candidates,
        "ef_search": ef_search,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        **result,
    }
    report["ratios"] = ratios(report["latency_ms"])
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
