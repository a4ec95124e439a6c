"""Long version histories and the dense leg, with the active model: does the HNSW scan still reach
the current version's chunks, and does the dense leg still see evidence for them?

The versions of one document have near-identical chunks: an unchanged section gives the same
vector in every version, a changed one a near-identical one. HNSW is approximate and not built for
many near-duplicates (an element can fall out of the graph's reach), and the dense leg z-scores a
similarity within its language group from the statistics of every stored vector, hidden versions
included. For each chain length this stores a chain of versions of a four-section policy (three
English sections, one Chinese; each version changes one figure and supersedes the one before) in
one namespace, asks one question per section in dense mode, k = 3, and records per question:

* `found_hnsw`: the current version is among the results of the plan kb_retrieve uses (HNSW);
* `found_exact`: the same with index scans disabled, an exact sort of every visible vector: the
  baseline, in the same run;
* `evidence_z`, `min_z`: the dense leg's best z-score in its language group and the threshold it
  must reach (kb_retrieve_explain, stage 1); below it the dense leg reports no evidence (none
  when the group has fewer than language_min_vectors vectors: raw cosine, no z-score);
* `found_hybrid`: the current version is among the hybrid results (the lexical leg beside it).

`--past` adds, per chain length of at least 2, the question asked at a date in the past: the chain
is stored with dates (version i in force from day i), and every question is asked `as_of` the
day the middle version was current. The statistics count the versions current now, so that
retrieval ranks with the latest version's statistics (an approximation); the baseline, in the same
run, is the chain stored only up to the middle version in another namespace, whose statistics are
those of that day exactly. `--past-background NS[,NS]` first copies the documents those namespaces
count now into both (the sample corpus: `engineering,policies,support`), so that the chain is
asked inside a corpus whose language groups are z-scored. Per question: the version in force found
(dense, hybrid) and the dense evidence z in both, and their difference: the measured error of the approximation.

`--background N` first stores N SciFact abstracts in the namespace (kept between runs: only
the missing ones are inserted; about 9 minutes per 1,000 with the default model on these
machines), so that the chain is a small part of a real corpus. The chain is deleted at the end.

    /opt/pgkb/venv/bin/python bench/version_chains.py [--dsn DSN] [--namespace bench-chains]
        [--versions 1,3,10,40,100] [--background 1000] [--past [--past-background NS,..]]
        [--datasets ../shared/datasets]

The JSON report goes to stdout (and --out), a table to stderr."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path

from harness.config import load_settings
from harness.db import connect
from harness.retrieval import explain, retrieve

REPO = Path(__file__).resolve().parents[1]
SECTIONS = [
    (
        "Refund window",
        "Customers may request a refund within {refund} days of delivery; opened goods are final.",
    ),
    ("Travel expenses", "Meals on business trips are reimbursed up to {meals} euros per day; hotels need a receipt."),
    ("Remote work", "Employees may work remotely {remote} days per week after probation, with approval."),
    ("退款流程", "客户自签收之日起 {refund} 天内可申请退款，财务部门在 {days} 个工作日内处理。"),
]
QUESTIONS = [
    "How many days do customers have to ask for a refund?",
    "How much are meals reimbursed on business trips?",
    "How many days a week can employees work from home?",
    "退款需要多少个工作日处理？",
]
CHAIN_PREFIX = "chain-policy-v"


def chain_bodies(versions: int, seed: int = 1) -> list[str]:
    """The bodies of a chain: every version changes one figure of the one before."""
    rng = random.Random(seed)
    figures = {"refund": 14, "meals": 40, "remote": 2, "days": 5}
    bodies = []
    for _ in range(versions):
        figures[rng.choice(sorted(figures))] += 1
        sections = "\n\n".join(f"## {h}\n\n{t.format(**figures)}" for h, t in SECTIONS)
        bodies.append("# Company policy\n\n" + sections)
    return bodies


def store_background(conn, namespace: str, datasets: Path, n: int) -> int:
    """The first n SciFact abstracts in the namespace, those missing inserted; returns how many are there."""
    have = {
        r["source"]
        for r in conn.execute(
            "SELECT source FROM kb.documents WHERE namespace = %s AND source LIKE 'scifact-%%'", (namespace,)
        ).fetchall()
    }
    rows = []
    with gzip.open(datasets / "scifact" / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            d = json.loads(line)
            if f"scifact-{d['_id']}.md" not in have:
                rows.append((namespace, f"scifact-{d['_id']}.md", f"# {d['title']}\n\n{d['text']}"))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO kb.documents (namespace, source, body) VALUES (%s, %s, %s)", rows)
    return len(have) + len(rows)


def delete_chain(conn, namespace: str) -> None:
    conn.execute("DELETE FROM kb.documents WHERE namespace = %s AND source LIKE %s", (namespace, CHAIN_PREFIX + "%"))


def store_chain(conn, namespace: str, versions: int, stored: int | None = None, dated: bool = False) -> str:
    """Stores the first `stored` (default all) versions of a chain of `versions`; with `dated`,
    version i is in force from day i after PAST_START. Returns the last stored one's source."""
    previous = None
    for i, body in enumerate(chain_bodies(versions)[:stored]):
        source = f"{CHAIN_PREFIX}{i:03d}.md"
        conn.execute(
            """INSERT INTO kb.documents (namespace, source, body, supersedes, effective_from)
               VALUES (%s, %s, %s, %s, %s::date + %s::integer)""",
            (namespace, source, body, previous, PAST_START if dated else None, i if dated else None),
        )
        previous = source
    return previous


PAST_START = "2024-01-01"


def found_sources(
    conn, question: str, namespace: str, mode: str, exact: bool = False, as_of: str | None = None
) -> list[str]:
    with conn.transaction():
        if exact:
            conn.execute("SET LOCAL enable_indexscan = off")
        rows = retrieve(conn, question, k=3, namespace=namespace, mode=mode, as_of=as_of)
    return [r["source"] for r in rows]


def asked_in_the_past(conn, namespace: str, source: str, as_of: str) -> list[dict]:
    """Per question asked as_of: the version in force found (dense, hybrid, k = 3), the dense evidence z."""
    out = []
    for question in QUESTIONS:
        stage = explain(conn, question, k=3, namespace=namespace, mode="dense", as_of=as_of)["stages"][0]
        found = {
            mode: source in found_sources(conn, question, namespace, mode, as_of=as_of) for mode in ("dense", "hybrid")
        }
        z = stage.get("dense_evidence_z")
        out.append({"found_dense": found["dense"], "found_hybrid": found["hybrid"], "evidence_z": z})
    return out


def copy_background(conn, namespace: str, sources: list[str]) -> None:
    """The documents the namespaces `sources` count in their statistics now, copied into `namespace`."""
    conn.execute(
        """INSERT INTO kb.documents (namespace, source, title, body)
           SELECT %s, d.source || '#' || d.id, d.title, d.body FROM kb.documents AS d
           WHERE d.namespace = ANY(%s) AND kb.counts_in_statistics(d.id) AND d.body IS NOT NULL""",
        (namespace, sources),
    )


def measure_past(conn, namespace: str, versions: int, background: list[str]) -> dict:
    """The chain dated, asked as of the middle version's day: ranked with today's statistics (the
    latest version counted) against a namespace holding the chain only up to that version."""
    today, exact = f"{namespace}-past", f"{namespace}-past-exact"
    middle = versions // 2
    as_of = conn.execute(
        "SELECT ((%s::date + %s::integer) + time '12:00')::text AS d", (PAST_START, middle)
    ).fetchone()["d"]
    # both namespaces are the benchmark's own: emptied before and after
    for ns in (today, exact):
        conn.execute("DELETE FROM kb.documents WHERE namespace = %s", (ns,))
        copy_background(conn, ns, background)
    store_chain(conn, today, versions, dated=True)
    source = store_chain(conn, exact, versions, stored=middle + 1, dated=True)
    # the documents counted first (the versions in force now), then the moments of what they hold
    conn.execute("SELECT kb.recount_lexical_stats()").fetchall()
    conn.execute("SELECT kb.refresh_language_statistics()").fetchall()
    questions = []
    with_today = asked_in_the_past(conn, today, source, as_of)
    with_exact = asked_in_the_past(conn, exact, source, as_of)
    for q, t, e in zip(QUESTIONS, with_today, with_exact, strict=True):
        z_error = None if t["evidence_z"] is None or e["evidence_z"] is None else t["evidence_z"] - e["evidence_z"]
        questions.append({"question": q, "todays_statistics": t, "exact_statistics": e, "z_error": z_error})
    for ns in (today, exact):
        conn.execute("DELETE FROM kb.documents WHERE namespace = %s", (ns,))
    return {"versions": versions, "as_of": as_of, "version_in_force": source, "questions": questions}


def measure(conn, namespace: str, versions: int) -> dict:
    delete_chain(conn, namespace)
    current = store_chain(conn, namespace, versions)
    conn.execute("SELECT kb.refresh_language_statistics()").fetchall()
    questions = []
    for question in QUESTIONS:
        stage = explain(conn, question, k=3, namespace=namespace, mode="dense")["stages"][0]
        questions.append(
            {
                "question": question,
                "found_hnsw": current in found_sources(conn, question, namespace, "dense"),
                "found_exact": current in found_sources(conn, question, namespace, "dense", exact=True),
                "found_hybrid": current in found_sources(conn, question, namespace, "hybrid"),
                "evidence_z": stage.get("dense_evidence_z"),
                "min_z": stage.get("dense_min_z"),
            }
        )
    distinct = conn.execute(
        """SELECT count(*) AS vectors, count(DISTINCT e.embedding::text) AS distinct_vectors
           FROM kb.embeddings AS e JOIN kb.chunks AS c ON c.id = e.chunk_id
           JOIN kb.documents AS d ON d.id = c.document_id
           WHERE d.namespace = %s AND d.source LIKE %s""",
        (namespace, CHAIN_PREFIX + "%"),
    ).fetchone()
    delete_chain(conn, namespace)
    return {"versions": versions, **distinct, "questions": questions}


def table(report: dict) -> str:
    """Per chain length: questions whose current version was found, and of the questions z-scored
    (a language group of at least language_min_vectors vectors) those with evidence."""
    lines = ["versions  vectors  distinct  found hnsw  found exact  z >= min z  found hybrid"]
    for run in report["runs"]:
        qs = run["questions"]
        scored = [q for q in qs if q["evidence_z"] is not None and q["min_z"] is not None]
        evident = sum(q["evidence_z"] >= q["min_z"] for q in scored)
        lines.append(
            f"{run['versions']:>8}  {run['vectors']:>7}  {run['distinct_vectors']:>8}"
            f"  {sum(q['found_hnsw'] for q in qs):>8}/{len(qs)}  {sum(q['found_exact'] for q in qs):>9}/{len(qs)}"
            f"  {evident:>8}/{len(scored)}  {sum(q['found_hybrid'] for q in qs):>10}/{len(qs)}"
        )
    for run in report.get("past", []):
        qs = run["questions"]
        errors = [abs(q["z_error"]) for q in qs if q["z_error"] is not None]
        found = {
            f"{mode} {stats}": sum(q[f"{stats}_statistics"][f"found_{mode}"] for q in qs)
            for mode in ("dense", "hybrid")
            for stats in ("todays", "exact")
        }
        lines.append(
            f"as of the middle of {run['versions']} versions, found (today's statistics / exact):"
            f" dense {found['dense todays']}/{found['dense exact']} of {len(qs)},"
            f" hybrid {found['hybrid todays']}/{found['hybrid exact']} of {len(qs)},"
            + (f" max |z error| {max(errors):.3f}" if errors else " no z-scores (too few vectors)")
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="default: the embedded cluster's pgkb database")
    parser.add_argument("--namespace", default="bench-chains")
    parser.add_argument("--versions", default="1,3,10,40,100")
    parser.add_argument("--background", type=int, default=0, help="SciFact abstracts stored in the namespace first")
    parser.add_argument("--past", action="store_true", help="also ask as of a past date (see above)")
    parser.add_argument("--past-background", default="", help="namespaces copied under the past chains")
    parser.add_argument("--datasets", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "version_chains.json")
    args = parser.parse_args()
    with connect(args.dsn or load_settings().dsn) as conn:
        model = conn.execute("SELECT name FROM kb.models WHERE active").fetchone()["name"]
        background = store_background(conn, args.namespace, args.datasets, args.background) if args.background else 0
        report = {
            "benchmark": "version_chains",
            "model": model,
            "namespace": args.namespace,
            "background_documents": background,
            "runs": [measure(conn, args.namespace, int(n)) for n in args.versions.split(",")],
        }
        if args.past:
            lengths = [int(n) for n in args.versions.split(",") if int(n) >= 2]
            background = [ns for ns in args.past_background.split(",") if ns]
            report["past"] = [measure_past(conn, args.namespace, n, background) for n in lengths]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    print(json.dumps(report, ensure_ascii=False, indent=2))
    print(table(report), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
