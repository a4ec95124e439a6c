"""kb_retrieve_explain on a fixed corpus, against an expected output a reviewer can diff
(tests/expected/kb_retrieve_explain.out, as pgvector keeps test/expected): a change to the pipeline
shows up as a change of that file, field by field. Times, timestamps and what varies between two
runs of the same database (timings, the dates rows were written) are masked.

After an intended change, write the file again and read the diff:
`PGKB_WRITE_EXPECTED=1 scripts/test.sh tests/test_explain_expected.py`, then `git diff tests/expected`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import insert_document, insert_refund_corpus

EXPECTED = Path(__file__).parent / "expected" / "kb_retrieve_explain.out"

CALLS = [
    ("退款期限是几天？", "hybrid", None),
    ("How many days do customers have to ask for a refund?", "hybrid", None),
    ("E-4031", "auto", None),
    ("refund deadline", "lexical", "public"),
    ("automatic approval of small refunds", "dense", None),
]


def masked(value, key: str = ""):
    """The explain object without what differs from run to run: times and timestamps."""
    if isinstance(value, dict):
        return {k: masked(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if value is not None and (key.endswith("_ms") or key == "timings_ms" or key in {"total", "started"}):
        return "<ms>"
    if value is not None and (key.endswith("_at") or key == "as_of"):
        return "<timestamp>"
    return value


def masked_timings(explain: dict) -> dict:
    explain = dict(explain)
    if "timings_ms" in explain:
        explain["timings_ms"] = sorted(explain["timings_ms"])  # which steps ran, not how long
    return masked(explain)


def expected_output(conn) -> str:
    out = []
    for query, mode, namespace in CALLS:
        explain = conn.execute(
            "SELECT kb_retrieve_explain(%s, k => 3, mode => %s, namespace => %s)::jsonb AS e", (query, mode, namespace)
        ).fetchone()["e"]
        out.append(f"-- kb_retrieve_explain({query!r}, k => 3, mode => {mode!r}, namespace => {namespace!r})")
        out.append(json.dumps(masked_timings(explain), ensure_ascii=False, indent=2))
    return "\n".join(out) + "\n"


def load_corpus(conn) -> None:
    insert_refund_corpus(conn)
    insert_document(
        conn,
        "support/errors.md",
        "# Error codes\n\n## E-4031\n\nE-4031 means the payment gateway timed out; retry after 30 seconds.\n\n"
        "## E-5002\n\nE-5002 means the card was declined.",
        title="Error codes",
        namespace="public",
    )
    insert_document(
        conn,
        "policies/退款政策.md",
        "# 退款政策\n\n## 退款期限\n\n客户可在收货后 14 天内申请退款。\n\n## 审批\n\n50 欧元以下的退款自动批准。",
        title="退款政策",
        namespace="public",
    )
    conn.execute("SELECT kb.refresh_lexical_stats()")


def test_kb_retrieve_explain_matches_the_expected_output(fresh_db):
    load_corpus(fresh_db)
    actual = expected_output(fresh_db)
    if os.environ.get("PGKB_WRITE_EXPECTED"):
        EXPECTED.parent.mkdir(exist_ok=True)
        EXPECTED.write_text(actual, encoding="utf-8")
    assert actual == EXPECTED.read_text(encoding="utf-8"), (
        "kb_retrieve_explain changed: PGKB_WRITE_EXPECTED=1 writes the new output; then read git diff tests/expected"
    )
