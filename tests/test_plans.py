"""The plans the retrieval legs are written for: the functions meant to be inlined are inlined
(no per-row call), and with sequential scans disabled each leg can use the index it is written
for. Nested plans are read with auto_explain, sent to the client as notices."""

from __future__ import annotations

import json

import pytest
from helpers import insert_document


@pytest.fixture
def plans(rolled_back_db):
    """Runs a statement and returns {query text: plan as JSON text} of every statement it ran inside."""
    for i in range(30):
        insert_document(rolled_back_db, f"doc-{i}.md", f"# Doc {i}\n\nRefunds take {i} days. Policy E-40{i:02d}.")
    rolled_back_db.execute("LOAD 'auto_explain'")
    for name, value in {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_verbose": "on",
        "auto_explain.log_level": "notice",
        "auto_explain.log_format": "json",
        "enable_seqscan": "off",
    }.items():
        rolled_back_db.execute(f"SET LOCAL {name} = '{value}'")
    notices: list[str] = []
    rolled_back_db.add_notice_handler(lambda d: notices.append(d.message_primary))

    def run(statement: str) -> dict[str, str]:
        notices.clear()
        rolled_back_db.execute(statement).fetchall()
        explained = [json.loads(n[n.index("{") :]) for n in notices if "plan:" in n]
        return {e["Query Text"]: json.dumps(e["Plan"]) for e in explained}

    yield run
    rolled_back_db.execute("RESET ALL")


@pytest.mark.parametrize(
    "function",
    [
        "kb.in_force(",
        "kb.visible_candidate(",
        "kb_node.bm25_weight(",
        "kb_pipeline.calibrate(",
        "kb_pipeline.noise_z(",
        "kb_node.lexical_term_weights(",
        "kb_node.glossary_match_terms(",
    ],
)
def test_the_inlined_functions_never_appear_as_calls_in_a_plan(plans, function):
    explained = plans("SELECT * FROM kb_retrieve('refunds days', mode => 'hybrid')")
    queries = "\n".join(explained)
    assert "kb.visible_candidate(" in queries and "kb_node.bm25_weight(" in queries, "auto_explain saw the legs"
    assert not [q for q, plan in explained.items() if function in plan]


def test_the_dense_leg_scans_the_models_hnsw_index_with_visibility_inside(plans):
    explained = plans("SELECT * FROM kb_retrieve('refunds days', mode => 'dense')")
    dense = next(plan for q, plan in explained.items() if "ORDER BY e.embedding" in q)
    assert '"Index Name": "embeddings_hnsw_hash_64' in dense
    assert "kb.document_is_current" in dense, "the visibility condition runs in the leg's own plan"


def test_the_language_corrected_dense_leg_scans_each_groups_own_hnsw_index(plans, rolled_back_db):
    for i in range(10):
        insert_document(rolled_back_db, f"zh-{i}.md", f"# 退款 {i}\n\n退款需要 {i} 个工作日完成。")
    rolled_back_db.execute("UPDATE kb.embedding_providers SET language_correction = true WHERE provider = 'hash'")
    rolled_back_db.execute("SET LOCAL pgkb.language_min_vectors = 5")
    rolled_back_db.execute("SET LOCAL pgkb.no_evidence_cutoff = false")
    explained = plans("SELECT * FROM kb_retrieve('refunds days', mode => 'dense')")
    dense = next(plan for q, plan in explained.items() if "e.language = 'en'" in q)
    # the model's partial index of the group, not the whole model's index filtered
    assert '"Index Name": "embeddings_hnsw_hash_64' in dense and '_en"' in dense
    assert any("e.language = 'zh'" in q for q in explained), "one scan per language group"


def test_the_lexical_leg_reads_postings_best_impact_first(plans):
    explained = plans("SELECT * FROM kb_retrieve('refunds days', mode => 'lexical')")
    lexical = next(plan for q, plan in explained.items() if "FROM kb.lexical_postings AS lp" in q)
    assert '"Index Name": "lexical_postings_impact"' in lexical


def test_filters_make_visibility_one_hashed_subplan(plans):
    explained = plans(
        """SELECT * FROM kb_retrieve('refunds days', mode => 'dense', filters => '{"source_prefix": ""}')"""
    )
    dense = next(plan for q, plan in explained.items() if "ORDER BY e.embedding" in q)
    assert "hashed SubPlan" in dense and "kb.visible_documents" in dense


def test_a_vector_of_768_dimensions_stays_in_its_row_not_in_toast(rolled_back_db):
    """The dense leg reads every candidate's vector: one out of line would cost a TOAST lookup each."""
    rolled_back_db.execute("SELECT kb.register_model('hash-768', 'hash', 'hash', 768, '{}', true)")

    toast = rolled_back_db.execute(
        "SELECT reltoastrelid::regclass::text AS name FROM pg_class WHERE oid = 'kb.embeddings'::regclass"
    ).fetchone()["name"]

    def toast_rows():
        # Live rows, not relation size: pages freed by other tests' rolled-back rows would hide growth.
        return rolled_back_db.execute(f"SELECT count(*) AS n FROM {toast}").fetchone()["n"]

    before = toast_rows()
    for i in range(20):
        insert_document(rolled_back_db, f"wide-{i}.md", f"# Wide {i}\n\nRefunds take {i} days.")
    stored = rolled_back_db.execute(
        """SELECT count(*) AS n, min(vector_dims(embedding)) AS dims, min(pg_column_size(embedding)) AS bytes
           FROM kb.embeddings WHERE model = 'hash-768'"""
    ).fetchone()
    assert stored["n"] >= 20 and stored["dims"] == 768
    assert stored["bytes"] == 8 + 4 * 768, "stored uncompressed"
    assert toast_rows() == before
