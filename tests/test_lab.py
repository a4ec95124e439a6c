"""pgkb lab, server side: every page and action through Starlette's TestClient against a real database,
as real roles with tenant isolation on (one world per module: two tenants, lifecycle traps, a document
with a table, code and Mermaid, stored evaluation runs). The browser tests (test_lab_browser.py) reuse
the world from here.

Roles are cluster-wide and other runs share the cluster, so every role name carries this run's suffix."""

from __future__ import annotations

import json
import re
import uuid
from contextlib import ExitStack
from html import unescape
from urllib.parse import urlencode

import psycopg
import pytest
from helpers import TEST_HOST, TEST_PORT, insert_document, temporary_role
from starlette.testclient import TestClient

from harness import evaluate
from harness.cli import build_parser
from harness.lab import loopback_hosts
from harness.lab import render as lab_render
from harness.lab.app import create_app

SUFFIX = uuid.uuid4().hex[:8]

MARKDOWN_BODY = """# Export guide

## Formats

| format | extension |
| --- | --- |
| comma separated | csv |
| spreadsheet | xlsx |

```python
def export(rows):
    return [r for r in rows if r.visible]
```

## Flow

```mermaid
graph TD
  A[Request export] --> B{Allowed?}
  B -->|yes| C[Write file]
```

## Broken flow

```mermaid
graph TD
  A[[[ this does not parse
```

<script>alert("raw html stays text")</script>
"""

ACME_DOCUMENTS = [
    # (source, body, fields)
    (
        "policies/refund-v1.md",
        "# Refund policy\n\n## Period\n\nCustomers may ask for a refund within 7 days of delivery.",
        {"title": "Refund policy v1", "doc_type": "policy", "version": "1", "effective_from": "2024-01-01"},
    ),
    (
        "policies/refund-v2.md",
        "# Refund policy\n\n## Period\n\nCustomers may ask for a refund within 14 days of delivery. "
        "客户自签收之日起 14 天内可申请退款。\n\n## Digital goods\n\n"
        "Digital goods are refunded only when not downloaded.",
        {
            "title": "Refund policy v2",
            "doc_type": "policy",
            "version": "2",
            "effective_from": "2025-01-01",
            "supersedes": "policies/refund-v1.md",
        },
    ),
    (
        "policies/refund-v3.md",
        "# Refund policy draft\n\nA refund within 30 days of delivery is being discussed.",
        {"title": "Refund policy v3 (draft)", "doc_type": "policy", "status": "draft", "version": "3"},
    ),
    (
        "policies/shipping-2023.md",
        "# Shipping\n\nParcels ship within 5 working days; express shipping costs extra.",
        {"title": "Shipping 2023", "doc_type": "policy", "effective_to": "2023-12-31"},
    ),
    (
        "policies/warranty-2099.md",
        "# Warranty\n\nEvery device has a warranty of ten years.",
        {"title": "Warranty 2099", "doc_type": "policy", "effective_from": "2099-01-01"},
    ),
    (
        "manuals/errors.md",
        "# Error codes\n\n## E-4031\n\nE-4031 means the session expired; sign in again. "
        "The refund page shows it when a refund form stays open too long.",
        {"title": "Error codes", "doc_type": "manual"},
    ),
    ("manuals/export.md", MARKDOWN_BODY, {"title": "Export guide", "doc_type": "manual"}),
    (
        "faq/returns.md",
        "# Returns FAQ\n\n## How do returns work?\n\nReturns and refunds: send the parcel back, "
        "then the refund is paid "
        "within 14 days. Refund questions go to the refund desk; refund, refund, refund.",
        {"title": "Returns FAQ", "doc_type": "faq"},
    ),
]
GLOBEX_DOCUMENTS = [
    (
        "globex/refund.md",
        "# Refund policy\n\nGlobex refunds are possible within 30 days. glxsecretword",
        {"title": "Globex refunds", "doc_type": "policy"},
    ),
    (
        "globex/plan.md",
        "# Secret plan\n\nglxsecretword: the refund desk moves to Springfield.",
        {"title": "Globex plan", "doc_type": "plan"},
    ),
]
ACME_CASES = [
    {
        "id": "refund-period",
        "category": "policy",
        "query": "refund within days of delivery",
        "expected": ["policies/refund-v2.md"],
        "forbidden": ["policies/refund-v1.md"],
    },
    {"id": "error-code", "category": "identifier", "query": "E-4031", "expected": ["manuals/errors.md"]},
    {"id": "nothing", "category": "unanswerable", "query": "zygomorphic xylophone quokka", "expected": []},
]
GLOBEX_CASES = [
    {"id": "globex-secret", "category": "secret", "query": "glxsecretword", "expected": ["globex/refund.md"]}
]

# role key -> (membership, namespace grant or None)
ROLES = {
    "acme_reader": ("pgkb_reader", "acme"),
    "acme_admin": ("pgkb_admin, pgkb_writer", "acme"),
    "globex_admin": ("pgkb_admin", "globex"),
    "empty_reader": ("pgkb_reader", "nothing-here"),
    "nobody": (None, None),
}


def role(name: str) -> str:
    """This run's name of the test role ``name``."""
    return f"lab_{name}_{SUFFIX}"


@pytest.fixture(scope="module")
def world(module_db, tmp_path_factory):
    """The module's database with both tenants' documents, evaluation runs and roles; tenant isolation on.
    Yields its DSN (as the superuser that owns the test cluster)."""
    conn = module_db
    dsn = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{conn.info.dbname}"
    for namespace, documents in (("acme", ACME_DOCUMENTS), ("globex", GLOBEX_DOCUMENTS)):
        for source, body, fields in documents:
            insert_document(conn, source, body, namespace=namespace, **fields)
    conn.execute("SELECT kb.refresh_lexical_stats()")
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with ExitStack() as stack:
        for name, (groups, namespace) in ROLES.items():
            options = f"NOLOGIN IN ROLE {groups}" if groups else "NOLOGIN"
            stack.enter_context(temporary_role(conn, role(name), options))
            if namespace:
                conn.execute(
                    "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role(name), namespace)
                )
        # each tenant's admin runs its cases twice (a trend): a role sees its own runs
        cases_dir = tmp_path_factory.mktemp("lab-cases")
        for namespace, cases in (("acme", ACME_CASES), ("globex", GLOBEX_CASES)):
            path = cases_dir / f"{namespace}.json"
            path.write_text(json.dumps(cases), encoding="utf-8")
            for _ in range(2):
                evaluate.evaluate(
                    dsn,
                    cases_file=str(path),
                    mode="lexical,hybrid",
                    k=10,
                    namespace=namespace,
                    progress=False,
                    role=role(f"{namespace}_admin"),
                )
        yield dsn
        conn.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'")


@pytest.fixture(scope="module")
def labs(world):
    """lab(name) -> a TestClient of the lab running as the role `name` (None: the superuser)."""
    clients: dict[str | None, TestClient] = {}

    def lab(name: str | None) -> TestClient:
        if name not in clients:
            app = create_app(world, role(name) if name else None)
            clients[name] = TestClient(app, raise_server_exceptions=True)
        return clients[name]

    yield lab
    for client in clients.values():
        client.app.state.database.close()


def text(response) -> str:
    """The page's visible text, roughly (tags removed, entities decoded)."""
    return unescape(re.sub(r"<[^>]+>", " ", response.text))


def result_sources(response) -> list[str]:
    return re.findall(r'<article class="result" data-source="([^"]+)"', response.text)


def url(path: str, **params) -> str:
    return f"{path}?{urlencode(params)}"


# -- query --------------------------------------------------------------------------------


def test_the_query_page_ranks_the_expected_source_first(labs):
    page = labs("acme_reader").get(url("/query", q="refund within days of delivery", namespace="acme"))
    assert page.status_code == 200
    assert result_sources(page)[0] == "policies/refund-v2.md"


def test_results_show_highlighted_snippet_section_version_dates_leg_ranks_and_match_type(labs):
    page = labs("acme_reader").get(url("/query", q="refund within days of delivery", mode="hybrid"))
    first = page.text.split('<article class="result"')[1]
    assert "<mark>" in first and "§ Refund policy v2 &gt; Refund policy &gt; Period" in first
    assert "version 2" in first and "2025-01-01 → open" in first
    assert re.search(r"lexical #1 · BM25 [0-9.]+", first) and re.search(
        r"dense #\d+ · (cosine|z-score) -?[0-9.]+", first
    )
    assert 'class="badge match"' in first


def test_the_namespace_choices_come_from_the_data_the_role_sees(labs):
    page = labs("acme_reader").get("/query")
    assert re.findall(r'<option value="([^"]*)"[^>]*>[^<]*\(\d+\)</option>', page.text) == ["acme"]
    assert "globex" not in page.text


def test_group_by_document_puts_each_documents_passages_under_one_heading(labs):
    params = {"q": "refund", "namespace": "acme", "mode": "lexical", "k": "10"}
    flat = labs("acme_reader").get(url("/query", **params))
    grouped = labs("acme_reader").get(url("/query", **params, group="1"))
    groups = re.findall(r'<section class="doc-group" data-document="(\d+)"', grouped.text)
    assert len(groups) == len(set(groups)) < len(result_sources(flat))
    assert sorted(result_sources(grouped)) == sorted(result_sources(flat))


def test_passages_render_markdown_tables_highlighted_code_and_mermaid_source_but_never_raw_html(labs):
    page = labs("acme_reader").get(url("/query", q="export formats csv spreadsheet", namespace="acme", k="3"))
    assert result_sources(page)[0] == "manuals/export.md"
    document_id = re.search(r'href="/documents/(\d+)">manuals/export.md', page.text).group(1)
    document = labs("acme_reader").get(f"/documents/{document_id}")
    assert "<table>" in document.text and "<td>xlsx</td>" in document.text
    assert '<pre class="highlight"><code class="language-python">' in document.text
    assert '<span class="k">def</span>' in document.text
    assert '<pre class="mermaid-source">graph TD' in document.text
    assert "<script>alert" not in document.text and "&lt;script&gt;alert" in document.text


def test_settings_apply_to_one_query_only_and_kb_settings_is_never_written(labs, module_db):
    before = module_db.execute("SELECT key, value FROM kb.settings ORDER BY key").fetchall()
    lab = labs("acme_reader")
    snippets_off = lab.get(url("/query", q="refund within days", namespace="acme", **{"set.snippets": "false"}))
    assert snippets_off.status_code == 200 and "<mark>" not in snippets_off.text
    assert "with snippets=false" in snippets_off.text
    again = lab.get(url("/query", q="refund within days", namespace="acme"))
    assert "<mark>" in again.text  # the next request (same pooled connection) has the default again
    assert module_db.execute("SELECT key, value FROM kb.settings ORDER BY key").fetchall() == before


def test_settings_that_a_session_may_not_override_are_not_offered_and_are_refused_by_name(labs):
    lab = labs("acme_reader")
    page = lab.get("/query")
    assert 'name="set.fusion"' in page.text and 'name="set.weight_dense"' in page.text
    for key in ("tenant_isolation", "retrieval_log", "python_path", "embed_mode"):
        assert f'name="set.{key}"' not in page.text
    refused = lab.get(url("/query", q="refund", **{"set.tenant_isolation": "false"}))
    assert refused.status_code == 400 and "setting 'tenant_isolation' cannot be set for one query" in text(refused)
    assert 'data-source="' not in refused.text


def test_a_setting_of_the_wrong_type_shows_the_databases_message(labs):
    page = labs("acme_reader").get(url("/query", q="refund", **{"set.weight_dense": "heavy"}))
    assert page.status_code == 400
    assert 'session setting pgkb.weight_dense = "heavy" is not a valid number' in text(page)


def test_a_query_the_database_refuses_shows_its_message_and_keeps_the_form(labs):
    page = labs("acme_reader").get(url("/query", q="refund", filters='{"colour": "red"}'))
    assert page.status_code == 400
    assert "colour" in text(page) and 'role="alert"' in page.text
    assert 'value="refund"' in page.text  # the question stays in the form
    bad_json = labs("acme_reader").get(url("/query", q="refund", filters="{not json"))
    assert bad_json.status_code == 400 and "filters is not JSON" in text(bad_json)
    bad_k = labs("acme_reader").get(url("/query", q="refund", k="many"))
    assert bad_k.status_code == 400 and "k must be a whole number" in text(bad_k)


def test_no_evidence_says_why(labs):
    page = labs("acme_reader").get(url("/query", q="zygomorphic xylophone quokka", namespace="acme", mode="lexical"))
    assert page.status_code == 200 and "data-no-evidence" in page.text
    assert 'data-answer="no evidence"' in page.text
    why = unescape(re.search(r"<p data-why>(.*?)</p>", page.text, re.S).group(1))
    assert why.startswith("probability ") and "below no_evidence_probability" in why and "no evidence" in why


def test_as_of_returns_the_version_that_applied_then(labs):
    page = labs("acme_reader").get(url("/query", q="refund within days of delivery", as_of="2024-06-01"))
    sources = result_sources(page)
    assert "policies/refund-v1.md" in sources and "policies/refund-v2.md" not in sources


def test_a_date_that_is_not_iso_is_refused_by_name_and_the_date_used_is_echoed(labs):
    lab = labs("acme_reader")
    refused = lab.get(url("/query", q="refund within days of delivery", as_of="01/07/2025"))
    assert refused.status_code == 400
    assert "as_of must be an ISO date such as 2025-07-01" in text(refused) and "'01/07/2025'" in text(refused)
    answered = lab.get(url("/query", q="refund within days of delivery", as_of="2024-06-01"))
    used = re.search(r'data-as-of="([^"]+)"', answered.text).group(1)
    assert used.startswith("2024-06-01 00:00:00") and f"at {used}" in text(answered)
    assert 'data-as-of="now"' in lab.get(url("/query", q="refund within days of delivery")).text


def test_follow_up_context_reaches_the_retrieval(labs):
    page = labs("acme_reader").get(url("/explain", q="and for digital goods?", context="refund period", mode="lexical"))
    assert page.status_code == 200 and "refund period" in text(page)


# -- explain ------------------------------------------------------------------------------


def test_explain_shows_analysis_stages_candidates_thresholds_and_a_timing_bar(labs):
    page = labs("acme_reader").get(url("/explain", q="refund within days of delivery", namespace="acme"))
    assert page.status_code == 200
    body = text(page)
    for heading in (
        "Query analysis",
        "Stages tried",
        "Thresholds",
        "Candidates per leg",
        "Timings",
        "Passages after fusion and boosts",
    ):
        assert heading in body
    assert "language" in body and "min_lexical_coverage" in body
    assert re.search(r'<span class="seg seg-\d" style="width: [0-9.]+%" title="lexical: ', page.text)
    assert "policies/refund-v2.md" in re.search(r"data-candidates>(.*?)</table>", page.text, re.S).group(1)


def test_explain_shows_each_passages_lifecycle_at_as_of(labs):
    page = labs("acme_reader").get(
        url("/explain", q="refund within days of delivery", namespace="acme", filters='{"include_history": true}')
    )
    passages = re.search(r"data-candidates>(.*?)</table>", page.text, re.S).group(1)
    row = re.search(r"policies/refund-v1.md</a>.*?</tr>", passages, re.S).group(0)
    assert "life-superseded" in row and "superseded by policies/refund-v2.md" in row


def test_explain_lists_hidden_versions_that_would_have_matched(labs):
    page = labs("acme_reader").get(url("/explain", q="refund within days of delivery", namespace="acme"))
    hidden = re.search(r"data-hidden>(.*?)</table>", page.text, re.S).group(1)
    assert "policies/refund-v1.md" in hidden and "superseded by policies/refund-v2.md" in hidden
    assert "policies/refund-v3.md" in hidden and "draft" in hidden


def test_explain_renders_keys_it_has_no_view_for(labs, monkeypatch):
    from harness.lab import queries

    real = queries.explain

    def with_new_keys(conn, request):
        answer = real(conn, request)
        answer["answerability"] = {"decision": "answer", "margin": 0.25}
        answer["language_correction"] = [{"language": "zh", "shift": 0.12}]
        return answer

    monkeypatch.setattr(queries, "explain", with_new_keys)
    page = labs("acme_reader").get(url("/explain", q="refund within days", namespace="acme"))
    extra = re.search(r"data-extra>(.*)", page.text, re.S).group(1)
    assert 'data-key="answerability"' in extra and "margin" in extra and "0.25" in extra
    assert 'data-key="language_correction"' in extra and "<th>shift</th>" in extra


def test_no_evidence_prefers_the_databases_own_answerability_reason():
    explain = {"no_evidence": True, "answerability": {"reason": "the question asks about a product we do not have"}}
    assert lab_render.no_evidence_reason(explain) == "the question asks about a product we do not have"


# -- compare ------------------------------------------------------------------------------


def test_compare_marks_rank_changes_between_two_settings(labs):
    params = {
        "q": "refund within days of delivery",
        "namespace": "acme",
        "k": "6",
        "a.mode": "lexical",
        "b.mode": "dense",
    }
    page = labs("acme_reader").get(url("/compare", **params))
    assert page.status_code == 200
    changed = int(re.search(r'data-changed="(\d+)"', page.text).group(1))
    assert changed > 0
    assert re.search(r'class="move (up|down|new)"', page.text)


def test_compare_of_identical_sides_marks_no_change(labs):
    params = {"q": "refund", "namespace": "acme", "a.mode": "lexical", "b.mode": "lexical"}
    page = labs("acme_reader").get(url("/compare", **params))
    assert 'data-changed="0"' in page.text and 'class="move up"' not in page.text


def test_compare_applies_each_sides_settings_to_its_side_only(labs):
    params = {
        "q": "refund within days",
        "namespace": "acme",
        "a.mode": "lexical",
        "b.mode": "lexical",
        "b.set.snippets": "false",
    }
    page = labs("acme_reader").get(url("/compare", **params))
    left, right = page.text.split('data-side="b"')
    assert "<mark>" in left and "<mark>" not in right


def test_compare_lets_each_side_ask_in_its_own_namespace_k_and_as_of_and_labels_z_scores(labs):
    params = {
        "q": "refund within days of delivery",
        "namespace": "acme",
        "a.mode": "lexical",
        "b.mode": "lexical",
        "a.as_of": "2024-06-01",
        "b.k": "1",
    }
    page = labs("acme_reader").get(url("/compare", **params))
    left, right = page.text.split('data-side="b"')
    assert "policies/refund-v1.md" in left and "policies/refund-v2.md" not in left.split("</h2>", 1)[1]
    assert right.count('class="result"') == 1
    assert "as of 2024-06-01" in left and "k 1" in right
    # with results on the page, the settings are folded so the results come right after the form
    assert '<details class="settings" open' not in page.text
    dense = labs("acme_reader").get(url("/compare", q="refund within days of delivery", namespace="acme", mode="dense"))
    labels = re.findall(r'data-leg="dense">dense #\d+ · (\S+)', dense.text)
    explained = labs("acme_reader").get(
        url("/query", q="refund within days of delivery", namespace="acme", mode="dense")
    )
    assert labels and set(labels) == set(re.findall(r'data-leg="dense">dense #\d+ · (\S+)', explained.text))


def test_a_judgment_on_compare_records_the_question_as_its_side_asked_it(labs, module_db):
    lab = labs("acme_admin")
    question = f"refund window {uuid.uuid4().hex[:6]}"
    data = {
        "token": lab.app.state.token,
        "q": question,
        "namespace": "acme",
        "a.mode": "lexical",
        "b.mode": "lexical",
        "b.as_of": "2024-06-01",
        "judge": json.dumps({"j": "forbidden", "ns": "acme", "src": "policies/refund-v2.md", "side": "b"}),
    }
    answer = lab.post("/compare/judge", data=data)
    assert answer.status_code == 200 and "data-judged" in answer.text, text(answer)[:400]
    row = module_db.execute("SELECT as_of FROM kb.judgments WHERE query = %s", (question,)).fetchone()
    assert str(row["as_of"]) == "2024-06-01"


def test_a_question_over_the_limit_is_answered_but_not_judged_and_says_why(labs):
    lab = labs("acme_admin")
    page = lab.post("/query", data={"q": LONG_QUESTION, "namespace": "acme"})
    assert page.status_code == 200 and "cannot be judged" in text(page) and 'name="judge"' not in page.text
    judged = lab.post(
        "/query/judge",
        data={
            "token": lab.app.state.token,
            "q": LONG_QUESTION,
            "namespace": "acme",
            "judge": json.dumps({"j": "relevant", "ns": "acme", "src": "policies/refund-v2.md"}),
        },
    )
    # a program-limit error is the limit it is, never "cannot reach the database"
    assert judged.status_code == 400 and "query must be at most 2000 characters" in text(judged)
    assert "Cannot reach" not in text(judged)


# -- documents ----------------------------------------------------------------------------


def documents_rows(page) -> dict[str, str]:
    return dict(re.findall(r'<tr data-source="([^"]+)">(.*?)</tr>', page.text, re.S))


def test_documents_show_status_lifecycle_ingest_state_and_chunks(labs):
    page = labs("acme_reader").get("/documents?namespace=acme")
    rows = documents_rows(page)
    assert len(rows) == len(ACME_DOCUMENTS)
    assert "superseded by policies/refund-v2.md" in rows["policies/refund-v1.md"]
    assert "life-current" in rows["policies/refund-v2.md"]
    assert "life-draft" in rows["policies/refund-v3.md"]
    assert "life-expired" in rows["policies/shipping-2023.md"]
    assert "life-future" in rows["policies/warranty-2099.md"]
    assert all("ingest-indexed" in r for r in rows.values())


def test_documents_filter_by_lifecycle_status_ingest_and_text(labs):
    lab = labs("acme_reader")
    assert list(documents_rows(lab.get("/documents?lifecycle=superseded"))) == ["policies/refund-v1.md"]
    assert list(documents_rows(lab.get("/documents?status=draft"))) == ["policies/refund-v3.md"]
    assert documents_rows(lab.get("/documents?ingest_status=failed")) == {}
    assert list(documents_rows(lab.get("/documents?text=warranty"))) == ["policies/warranty-2099.md"]
    assert "life-current" in documents_rows(lab.get("/documents?as_of=2024-06-01"))["policies/refund-v1.md"]


def test_a_document_page_lists_chunks_with_section_paths_tokens_and_vectors(labs, module_db):
    document_id = module_db.execute("SELECT id FROM kb.documents WHERE source = 'policies/refund-v2.md'").fetchone()
    page = labs("acme_reader").get(f"/documents/{document_id['id']}")
    assert page.status_code == 200 and "data-document-source>policies/refund-v2.md" in page.text
    chunks = re.search(r"data-chunks>(.*?)</table>", page.text, re.S).group(1)
    assert "Refund policy &gt; Period" in chunks and "Refund policy &gt; Digital goods" in chunks
    assert chunks.count('data-vector="yes"') == 2 and "hash-64" in page.text


def test_admin_actions_appear_only_for_roles_that_may_use_them(world, labs, module_db):
    module_db.execute("UPDATE kb.documents SET ingest_status = 'failed' WHERE source = 'manuals/errors.md'")
    try:
        document_id = module_db.execute("SELECT id FROM kb.documents WHERE source = 'manuals/errors.md'").fetchone()
        reader = labs("acme_reader").get(f"/documents/{document_id['id']}")
        admin = labs("acme_admin").get(f"/documents/{document_id['id']}")
        assert "data-retry" not in reader.text and "data-retry" in admin.text
        token = labs("acme_reader").app.state.token
        refused = labs("acme_reader").post("/actions/retry-failed", data={"token": token})
        assert refused.status_code == 403 and "may not run the embedding queue" in text(refused)
    finally:
        module_db.execute("UPDATE kb.documents SET ingest_status = 'indexed' WHERE source = 'manuals/errors.md'")


def test_retry_failed_embeds_the_queued_chunks(fresh_db, dsn):
    fresh_db.execute("UPDATE kb.settings SET value = '\"deferred\"' WHERE key = 'embed_mode'")
    insert_document(fresh_db, "later.md", "# Later\n\nEmbedded when the queue runs.")
    assert fresh_db.execute("SELECT ingest_status FROM kb.documents").fetchone()["ingest_status"] == "pending"
    client = TestClient(create_app(dsn, None))
    answer = client.post(
        "/actions/retry-failed", data={"token": client.app.state.token, "back": "/documents"}, follow_redirects=False
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/documents?done=retried"
    assert fresh_db.execute("SELECT ingest_status FROM kb.documents").fetchone()["ingest_status"] == "indexed"
    client.app.state.database.close()


def test_actions_need_this_processs_form_token(labs):
    answer = labs("acme_admin").post("/actions/retry-failed", data={"token": "guessed"})
    assert answer.status_code == 403 and "form token" in text(answer)
    started = labs("acme_admin").post("/eval/start", data={"source": "judged"})
    assert started.status_code == 403 and "form token" in text(started)


# -- evaluation ---------------------------------------------------------------------------


def test_the_eval_page_shows_metrics_per_mode_and_category_and_a_trend_chart(labs):
    page = labs("acme_admin").get("/eval")
    assert page.status_code == 200
    # two runs of each mode with the same settings: one line per configuration, one configuration per mode
    lines = re.findall(r'<polyline class="series" data-series="(\w+)" data-mode="(\w+)"', page.text)
    assert sorted(mode for _, mode in lines) == ["hybrid", "lexical"] and len({key for key, _ in lines}) == 2
    latest = re.search(r"data-latest>(.*?)</table>", page.text, re.S).group(1)
    for category in ("identifier", "policy", "unanswerable"):
        assert f"<td>{category}</td>" in latest
    # both sides of the decision, side by side: a hedge that raises one shows on the other
    assert page.text.index(">answered when found</th>") < page.text.index(">no-answer accuracy</th>")
    assert len(re.findall(r"<tr data-run=", page.text)) == 4


def test_an_eval_run_drills_down_to_cases_that_link_to_the_query_page(labs):
    lab = labs("acme_admin")
    run_id = re.search(r'<tr data-run="(\d+)"', lab.get("/eval").text).group(1)
    page = lab.get(f"/eval/{run_id}")
    assert page.status_code == 200 and "data-chart" in page.text and 'r="6"' in page.text  # this run highlighted
    cases = re.search(r"data-cases>(.*?)</table>", page.text, re.S).group(1)
    assert "refund-period" in cases and "policies/refund-v2.md" in cases and "<i>no evidence</i>" in cases
    link = unescape(re.search(r'<a href="([^"]+)" data-case-link>refund within days', cases).group(1))
    assert link.startswith("/query?") and "namespace=acme" in link and "q=refund+within+days+of+delivery" in link
    assert result_sources(lab.get(link))[0] == "policies/refund-v2.md"


def test_a_role_that_may_not_read_eval_runs_gets_a_clear_page(labs):
    page = labs("acme_reader").get("/eval")
    assert page.status_code == 403 and "may not read evaluation runs" in text(page)
    assert labs("acme_reader").get("/eval/1").status_code == 403


# -- row-level security -------------------------------------------------------------------

# What only globex's documents hold; the questions below never contain these words, so a page that shows
# one has shown globex's data (the question itself is echoed in forms and explain output).
GLOBEX_MARKERS = ("globex/", "springfield", "globex refunds", "globex plan", "30 days")
QUESTIONS = ("glxsecretword", "refund desk moves", "refunds possible within thirty", "secret plan")


def assert_nothing_of_globex(page) -> None:
    lowered = page.text.lower()
    assert not [w for w in GLOBEX_MARKERS if w in lowered], page.url


@pytest.mark.parametrize("mode", ["lexical", "dense", "hybrid", "auto"])
def test_a_tenants_lab_never_shows_another_tenants_results_or_candidates(labs, mode):
    lab = labs("acme_admin")
    for path in ("/query", "/explain"):
        for question in QUESTIONS:
            page = lab.get(url(path, q=question, mode=mode, k="20"))
            assert page.status_code == 200
            assert_nothing_of_globex(page)
    compare = lab.get(url("/compare", q="glxsecretword refund", **{"a.mode": mode, "b.mode": "lexical"}))
    assert_nothing_of_globex(compare)


def test_a_tenants_lab_never_shows_another_tenants_documents(labs, module_db):
    lab = labs("acme_admin")
    for path in ("/documents", "/documents?namespace=globex", "/documents?text=plan", "/query"):
        assert_nothing_of_globex(lab.get(path))
    globex_id = module_db.execute("SELECT id FROM kb.documents WHERE source = 'globex/plan.md'").fetchone()["id"]
    page = lab.get(f"/documents/{globex_id}")
    assert page.status_code == 404
    assert_nothing_of_globex(page)


def test_a_tenants_lab_never_shows_another_tenants_eval_runs(labs, module_db):
    acme = labs("acme_admin")
    assert_nothing_of_globex(acme.get("/eval"))
    globex_run = module_db.execute(
        "SELECT id FROM kb.eval_runs WHERE params ->> 'namespace' = 'globex' ORDER BY id LIMIT 1"
    ).fetchone()["id"]
    assert acme.get(f"/eval/{globex_run}").status_code == 404
    globex = labs("globex_admin").get("/eval")
    assert "glxsecretword" not in globex.text  # queries are on the run page, not the list
    assert "globex" in globex.text and "refund-period" not in labs("globex_admin").get(f"/eval/{globex_run}").text


def test_the_superuser_lab_sees_every_tenant(labs):
    page = labs(None).get("/documents")
    assert "globex/plan.md" in page.text and "policies/refund-v2.md" in page.text


# -- errors -------------------------------------------------------------------------------


def test_a_database_that_is_down_gives_a_clear_page():
    client = TestClient(create_app("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2", None))
    for path in ("/query", "/documents", "/eval"):
        page = client.get(path)
        assert page.status_code == 503 and "Cannot reach the database" in page.text
        assert "pgkb up" in text(page) and "Traceback" not in page.text


def test_a_role_that_cannot_be_set_gives_a_clear_page(world):
    client = TestClient(create_app(world, "no_such_role_" + SUFFIX))
    page = client.get("/query")
    assert page.status_code == 503 and "Cannot act as the lab&#39;s role" in page.text
    assert "PGKB_LAB_ROLE" in page.text and "does not exist" in page.text


def test_a_role_without_rights_gets_a_clear_page(labs):
    page = labs("nobody").get("/query?q=refund")
    assert page.status_code == 403 and "may not do this" in text(page)
    assert "permission denied" in text(page)


def test_an_empty_corpus_says_how_to_load_documents(labs):
    page = labs("empty_reader").get("/query")
    assert page.status_code == 200 and "data-empty-corpus" in page.text and "pgkb ingest" in text(page)
    documents = labs("empty_reader").get("/documents")
    assert "data-empty-corpus" in documents.text


def test_an_unknown_page_is_a_clear_404(labs):
    page = labs("acme_reader").get("/documents/999999999")
    assert page.status_code == 404 and "no document 999999999" in text(page)


# -- the app itself -----------------------------------------------------------------------


def test_no_page_loads_anything_from_another_host(labs):
    lab = labs("acme_admin")
    for path in ("/query?q=refund", "/explain?q=refund", "/compare?q=refund", "/documents", "/eval"):
        page = lab.get(path)
        assert not re.findall(r'(?:src|href)="(?:https?:)?//', page.text), path
    for asset in (
        "/static/lab.css",
        "/static/lab.js",
        "/static/highlight.css",
        "/static/vendor/mermaid/mermaid.min.js",
    ):
        assert lab.get(asset).status_code == 200


def test_the_lab_listens_on_loopback_by_default_and_refuses_foreign_host_headers(world):
    args = build_parser().parse_args(["lab"])
    assert (args.host, args.port) == ("127.0.0.1", 8765)
    client = TestClient(
        create_app(world, None, allowed_hosts=loopback_hosts("127.0.0.1")), base_url="http://evil.example"
    )
    assert client.get("/query").status_code == 400
    assert loopback_hosts("0.0.0.0") is None


def test_the_trend_chart_marks_each_run_and_skips_runs_without_the_metric():
    from datetime import datetime

    runs = [
        {"id": i, "started_at": datetime(2025, 1, i), "mode": "lexical", "metrics": {"ndcg@10": 0.5 + i / 10}}
        for i in (1, 2, 3)
    ] + [{"id": 4, "started_at": datetime(2025, 1, 4), "mode": "lexical", "metrics": {}}]
    svg = str(lab_render.trend_svg(runs, "ndcg@10", highlight_run=2))
    assert svg.count("<circle") == 3 and 'href="/eval/2"' in svg and 'r="6"' in svg and "/eval/4" not in svg


def test_pgkb_lab_refuses_a_role_name_postgresql_cannot_hold(monkeypatch, capsys):
    from harness import cli

    monkeypatch.setenv("PGKB_LAB_ROLE", "x" * 64)
    assert cli.main(["lab", "--port", "1"]) == 2
    assert "PGKB_LAB_ROLE is longer than 63 bytes" in capsys.readouterr().err


# -- safe by default ----------------------------------------------------------------------

LONG_QUESTION = "客户自签收之日起多少天内可以申请退款，数字商品下载以后还能退吗？" * 120  # 3,600 characters


def test_a_long_question_is_posted_and_answered_with_the_question_kept(labs):
    lab = labs("acme_reader")
    for path in ("/query", "/explain", "/compare"):
        page = lab.post(path, data={"q": LONG_QUESTION, "namespace": "acme"})
        assert page.status_code == 200, (path, text(page)[:500])
        assert f'value="{LONG_QUESTION}"' in page.text
    assert "data-answer=" in lab.post("/query", data={"q": LONG_QUESTION, "namespace": "acme"}).text


def test_the_question_forms_post_and_links_stay_for_short_questions(labs):
    page = labs("acme_reader").get(url("/query", q="refund", namespace="acme"))
    assert re.search(r'<form class="query" method="post" action="/query"', page.text)
    assert 'formaction="/explain"' in page.text and "data-permalink" in page.text
    long = labs("acme_reader").post("/query", data={"q": LONG_QUESTION})
    assert "data-permalink" not in long.text  # a link that long would not fit in a request line


def test_a_form_posted_from_another_site_is_refused(labs):
    lab = labs("acme_reader")
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        answer = lab.post("/query", data={"q": "refund"}, headers=headers)
        assert answer.status_code == 403 and "refused" in text(answer) and 'data-source="' not in answer.text
    same = lab.post("/query", data={"q": "refund"}, headers={"Origin": "http://testserver"})
    assert same.status_code == 200


def test_every_response_carries_content_security_and_frame_headers(labs):
    lab = labs("acme_reader")
    for path in ("/query", "/query?q=refund", "/documents", "/eval", "/no-such-page", "/static/lab.css"):
        headers = lab.get(path).headers
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_pgkb_lab_refuses_to_start_as_a_superuser_unless_told(world, monkeypatch, capsys):
    from harness import cli
    from harness.lab.database import LabDatabase, StartRefused

    monkeypatch.setenv("PGKB_DSN", world)
    monkeypatch.delenv("PGKB_LAB_ROLE", raising=False)
    assert cli.main(["lab", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "a superuser" in err and "row-level security would not apply" in err and "--allow-superuser" in err
    db = LabDatabase(world, None)
    try:
        with pytest.raises(StartRefused):
            db.check_start(allow_superuser=False)
        assert db.check_start(allow_superuser=True)["superuser"] is True
    finally:
        db.close()
    assert LabDatabase(world, role("acme_reader")).check_start(allow_superuser=False)["superuser"] is False


def test_a_superusers_lab_says_in_every_footer_that_row_level_security_does_not_apply(labs):
    superuser = labs(None).get("/documents")
    assert "data-bypass-rls" in superuser.text and "bypasses row-level security" in text(superuser)
    reader = labs("acme_reader").get("/documents")
    assert "data-bypass-rls" not in reader.text and "row-level security apply" in text(reader)


def test_pgkb_lab_refuses_a_role_that_does_not_exist(world, monkeypatch, capsys):
    from harness import cli

    monkeypatch.setenv("PGKB_DSN", world)
    monkeypatch.setenv("PGKB_LAB_ROLE", "no_such_role_" + SUFFIX)
    assert cli.main(["lab", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert f"no_such_role_{SUFFIX}" in err and "does not exist" in err


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("weight_dense", "-5", "weight_dense = -5 is outside its range 0 to 1"),
        ("rrf_k", "-60", "rrf_k = -60 is outside its range 1 to 1000"),
        ("hnsw_ef_search", "100000000", "hnsw_ef_search = 100000000 is outside its range 10 to 1000"),
        ("hnsw_ef_search", "1e8", 'hnsw_ef_search = "1e8" is not a valid integer'),
    ],
)
def test_an_out_of_range_setting_is_refused_with_its_name_and_range(labs, key, value, message):
    # lexical mode reads neither rrf_k nor hnsw_ef_search: a wrong value is refused all the same
    page = labs("acme_reader").get(url("/query", q="refund", mode="lexical", **{f"set.{key}": value}))
    assert page.status_code == 400 and message in text(page) and 'data-source="' not in page.text


def test_the_setting_controls_carry_the_catalogues_ranges(labs, module_db):
    page = labs("acme_reader").get("/query")
    for row in module_db.execute(
        "SELECT key, min_value, max_value FROM kb.settings_catalogue WHERE key IN ('weight_dense', 'rrf_k')"
    ):
        control = re.search(rf'<input name="set\.{row["key"]}"[^>]*>', page.text).group(0)
        assert f'min="{row["min_value"]}"' in control and f'max="{row["max_value"]}"' in control


def test_an_unknown_namespace_is_named_unknown(labs):
    for name in ("no-such-namespace", "globex"):  # globex exists, but not for this role
        page = labs("acme_reader").get(url("/query", q="refund", namespace=name))
        assert page.status_code == 400 and f"unknown namespace '{name}'" in text(page)
        assert "data-no-evidence" not in page.text and "sees: acme" in text(page)


# -- the answer first ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "question, mode",
    [
        ("refund within days of delivery", "lexical"),
        ("E-4031", "auto"),
        ("zygomorphic xylophone quokka", "dense"),
        ("zygomorphic xylophone quokka", "lexical"),
    ],
)
def test_the_query_page_states_kb_retrieves_own_decision_before_the_passages(labs, world, question, mode):
    page = labs("acme_reader").get(url("/query", q=question, namespace="acme", mode=mode))
    decision = re.search(r'data-answer="([^"]+)"', page.text)
    assert decision and page.text.index("data-answer=") < page.text.index("data-results")
    from harness import retrieval
    from harness.db import connect

    with connect(world) as conn:
        conn.execute(f"SET ROLE {role('acme_reader')}")
        rows = retrieval.retrieve(conn, question, namespace="acme", mode=mode)
    assert decision.group(1) == (rows[0]["answerability"] if rows else "no evidence")
    why = unescape(re.search(r"<p data-why>(.*?)</p>", page.text, re.S).group(1))
    assert why.startswith("probability ") and decision.group(1) in why


def test_the_explain_page_says_why_it_is_low_confidence_in_the_same_words(labs):
    params = {"q": "zygomorphic xylophone quokka", "namespace": "acme", "mode": "dense"}
    query = labs("acme_reader").get(url("/query", **params))
    explain = labs("acme_reader").get(url("/explain", **params))
    decision = re.search(r'data-answer="([^"]+)"', query.text).group(1)
    assert re.search(r'data-answer="([^"]+)"', explain.text).group(1) == decision
    assert 'class="badge good">confident' not in explain.text


def test_result_cards_show_the_lifecycle_at_as_of_not_the_stored_status(labs):
    history = '{"include_history": true}'
    page = labs("acme_reader").get(
        url("/query", q="refund within days of delivery", namespace="acme", filters=history, k="10")
    )
    cards = dict(re.findall(r'<article class="result" data-source="([^"]+)"(.*?)</article>', page.text, re.S))
    assert 'data-lifecycle="superseded"' in cards["policies/refund-v1.md"]
    assert "superseded by policies/refund-v2.md" in cards["policies/refund-v1.md"]
    assert 'data-lifecycle="current"' in cards["policies/refund-v2.md"]
    then = labs("acme_reader").get(
        url("/query", q="refund within days of delivery", namespace="acme", filters=history, as_of="2024-06-01")
    )
    cards = dict(re.findall(r'<article class="result" data-source="([^"]+)"(.*?)</article>', then.text, re.S))
    assert 'data-lifecycle="current"' in cards["policies/refund-v1.md"]
    assert 'data-lifecycle="future"' in cards["policies/refund-v2.md"]


def test_the_dense_score_is_labelled_with_what_it_holds(labs, world):
    from harness import retrieval
    from harness.db import connect

    question = "refund within days of delivery"
    page = labs("acme_reader").get(url("/query", q=question, namespace="acme", mode="dense"))
    legs = re.findall(r'data-leg="dense">dense #\d+ · ([a-z-]+) ', page.text)
    with connect(world) as conn:
        conn.execute(f"SET ROLE {role('acme_reader')}")
        explained = retrieval.explain(conn, question, namespace="acme", mode="dense")
    corrected = bool((explained.get("language_correction") or {}).get("groups"))
    assert legs and set(legs) == {"z-score" if corrected else "cosine"}


def test_snippets_are_rendered_not_raw_markdown():
    html_ = str(
        lab_render.snippet("## Formats\n\n| format | «csv» |\n| --- | --- |\n| **bold** | [site](http://x.y) |")
    )
    assert html_ == "Formats format · <mark>csv</mark> bold".replace("bold", "<strong>bold</strong> · site")
    assert "&lt;script&gt;" in str(lab_render.snippet("<script>alert(1)</script>"))


def test_snippets_on_the_query_page_carry_no_markdown_syntax(labs):
    page = labs("acme_reader").get(url("/query", q="comma separated spreadsheet xlsx", namespace="acme", k="3"))
    snippets = re.findall(r'<p class="snippet">(.*?)</p>', page.text, re.S)
    assert snippets and not [s for s in snippets if "|" in s or "##" in s or "---" in s]


# -- evaluations from the page ------------------------------------------------------------

TUNING_CASES = ACME_CASES + [
    {
        "id": "refund-then",
        "category": "lifecycle",
        "query": "refund within days of delivery",
        "namespace": "acme",
        "as_of": "2024-06-01",
        "context": ["what is the refund policy?"],
        "expected": ["policies/refund-v1.md"],
        "forbidden": ["policies/refund-v2.md"],
    }
]


def start_run(lab, cases, name: str, *, modes=("lexical",), **fields):
    """Upload cases as `name` and start a run from the eval page; wait for it; the finished job."""
    data = {"token": lab.app.state.token, "modes": list(modes), **fields}
    files = {"upload": (name, json.dumps(cases).encode(), "application/json")}
    answer = lab.post("/eval/start", data=data, files=files, follow_redirects=False)
    assert answer.status_code == 303, text(answer)[:600]
    job = lab.app.state.jobs.get(int(answer.headers["location"].rsplit("/", 1)[1]))
    from helpers import wait_for

    wait_for(lambda: job.state != "running", timeout=60)
    assert job.state == "finished", job.error
    return job


def test_an_evaluation_started_from_the_page_stores_its_complete_configuration_and_each_cases_request(labs, module_db):
    lab = labs("acme_admin")
    job = start_run(lab, TUNING_CASES, "acme-tuning.json", k="50", namespace="acme", **{"set.weight_dense": "0.3"})
    progress = lab.get(f"/eval/jobs/{job.id}")
    assert 'data-job="finished"' in progress.text and "4 of 4 cases asked" in text(progress)
    run = module_db.execute("SELECT * FROM kb.eval_runs WHERE id = %s", (job.run_ids["lexical"],)).fetchone()
    in_force = module_db.execute("SELECT key FROM kb.settings_catalogue WHERE session_override").fetchall()
    config = run["configuration"]
    assert config["complete"] is True and config["k"] == 50
    assert set(config["settings"]) == {r["key"] for r in in_force} and config["settings"]["weight_dense"] == 0.3
    case = module_db.execute(
        "SELECT * FROM kb.eval_results WHERE run_id = %s AND case_id = 'refund-then'", (run["id"],)
    ).fetchone()
    assert (case["namespace"], case["as_of"], case["context"], case["k"]) == (
        "acme",
        "2024-06-01",
        ["what is the refund policy?"],
        50,
    )
    assert case["forbidden"] == ["policies/refund-v2.md"]


def test_a_case_link_asks_the_case_again_exactly_as_the_run_asked_it(labs, module_db):
    lab = labs("acme_admin")
    job = start_run(lab, TUNING_CASES, "acme-tuning.json", k="50", namespace="acme", **{"set.weight_dense": "0.3"})
    run_id = job.run_ids["lexical"]
    page = lab.get(f"/eval/{run_id}")
    row = re.search(r'<tr data-case="refund-then".*?</tr>', page.text, re.S).group(0)
    link = unescape(re.search(r'<a href="([^"]+)" data-case-link>', row).group(1))
    for part in ("namespace=acme", "as_of=2024-06-01", "k=50", "mode=lexical", "set.weight_dense=0.3"):
        assert part in link, (part, link)
    assert "context=what+is+the+refund+policy" in link
    stored = module_db.execute(
        "SELECT returned FROM kb.eval_results WHERE run_id = %s AND case_id = 'refund-then'", (run_id,)
    ).fetchone()["returned"]
    asked = lab.get(link)
    assert stored[0] == "policies/refund-v1.md"
    assert list(dict.fromkeys(result_sources(asked))) == stored[: len(set(result_sources(asked)))]


def test_a_role_that_is_not_pgkb_admin_is_told_it_may_not_run_evaluations(labs, world, module_db):
    reader = labs("acme_reader")
    answer = reader.post("/eval/start", data={"token": reader.app.state.token, "source": "judged"})
    assert answer.status_code == 403 and "may not run evaluations" in text(answer) and "pgkb_admin" in text(answer)
    module_db.execute(f"GRANT SELECT ON kb.eval_runs, kb.eval_results TO {role('acme_reader')}")
    try:
        page = reader.get("/eval")
        assert page.status_code == 200 and "data-may-not-run" in page.text and "data-start-run" not in page.text
    finally:
        module_db.execute(f"REVOKE SELECT ON kb.eval_runs, kb.eval_results FROM {role('acme_reader')}")
    assert "data-start-run" in labs("acme_admin").get("/eval").text


def test_an_evaluation_with_an_out_of_range_setting_is_refused_before_it_starts(labs):
    lab = labs("acme_admin")
    data = {"token": lab.app.state.token, "modes": ["lexical"], "set.rrf_k": "-60"}
    files = {"upload": ("bad.json", json.dumps(ACME_CASES).encode(), "application/json")}
    answer = lab.post("/eval/start", data=data, files=files, follow_redirects=False)
    assert answer.status_code == 400 and "rrf_k = -60 is outside its range 1 to 1000" in text(answer)


def test_evaluation_jobs_are_bounded_per_job_and_per_role_and_cancel_before_their_next_case(labs, world):
    from helpers import wait_for

    from harness.lab.jobs import MAX_CASE_K, MAX_QUEUED_PER_ROLE

    lab = labs("acme_admin")
    token = lab.app.state.token

    def start(cases, name, k="10", modes=("lexical",)):
        data = {"token": token, "modes": list(modes), "k": k, "namespace": "acme"}
        files = {"upload": (name, json.dumps(cases).encode(), "application/json")}
        return lab.post("/eval/start", data=data, files=files, follow_redirects=False)

    many = [{**ACME_CASES[0], "id": f"copy-{n}"} for n in range(MAX_CASE_K // 1000 + 1)]
    over = start(many, "many.json", k="1000")
    assert over.status_code == 400 and f"over the lab's bound of {MAX_CASE_K:,}" in text(over)

    # a job that cannot store its run holds the role's one running slot until the lock is released
    with psycopg.connect(world, autocommit=False) as holder:
        holder.execute("LOCK TABLE kb.eval_runs IN EXCLUSIVE MODE")
        running = lab.app.state.jobs.get(
            int(start(ACME_CASES, "held.json", modes=("lexical", "dense")).headers["location"].rsplit("/", 1)[1])
        )
        queued = [start(ACME_CASES, f"queued-{n}.json") for n in range(MAX_QUEUED_PER_ROLE)]
        assert all(answer.status_code == 303 for answer in queued)
        refused = start(ACME_CASES, "one-too-many.json")
        assert refused.status_code == 429 and f"at most {MAX_QUEUED_PER_ROLE}" in text(refused)
        first_queued = int(queued[0].headers["location"].rsplit("/", 1)[1])
        lab.post(f"/eval/jobs/{first_queued}/cancel", data={"token": token})
        assert lab.app.state.jobs.get(first_queued).state == "cancelled"
        wait_for(lambda: running.done == len(ACME_CASES), timeout=60)  # its first mode asked, waiting to store
        lab.post(f"/eval/jobs/{running.id}/cancel", data={"token": token})
        holder.rollback()
    wait_for(lambda: all(j.state not in ("queued", "running") for j in lab.app.state.jobs.recent()), timeout=120)
    assert running.state == "cancelled" and running.done == len(ACME_CASES)  # the second mode never began
    assert lab.app.state.jobs.get(first_queued).run_ids == {}
    assert set(running.run_ids) == {"lexical"}  # stored before the cancel, and said so
    page = lab.get(f"/eval/jobs/{running.id}").text
    assert "data-cancelled" in page and f"run #{running.run_ids['lexical']} (lexical)" in page


def test_the_trend_draws_one_line_per_configuration_not_per_mode(labs):
    lab = labs("acme_admin")
    start_run(lab, ACME_CASES, "acme-trend.json", namespace="acme")
    start_run(lab, ACME_CASES, "acme-trend.json", namespace="acme")
    start_run(lab, ACME_CASES, "acme-trend.json", namespace="acme", **{"set.fusion": "rrf"})
    page = lab.get("/eval?dataset=cases:acme-trend.json")
    lines = re.findall(r'<polyline class="series" data-series="(\w+)" data-mode="lexical" points="([^"]*)"', page.text)
    assert sorted(len(points.split()) for _, points in lines) == [1, 2]  # defaults twice, rrf once
    latest = re.search(r"data-latest>(.*?)</table>", page.text, re.S).group(1)
    assert len(re.findall(r"data-config=", latest)) == 2 and "fusion=rrf" in latest


def insert_run(
    conn, outcomes: dict[str, tuple[int | None, list[str]]], mode: str = "lexical", case_set: str = "v1"
) -> int:
    """A stored run of acme's admin, dataset cases:flips.json, whose case c passed (rank 1) or failed as
    outcomes say."""
    run_id = conn.execute(
        """INSERT INTO kb.eval_runs (dataset, mode, params, metrics, configuration, role_name, case_set_version,
               corpus_fingerprint)
           VALUES ('cases:flips.json', %s, '{"k": 10, "namespace": "acme"}', '{"cases": 3}',
                   '{"settings": {}, "k": 10, "complete": true}', %s, %s, 'c1') RETURNING id""",
        (mode, role("acme_admin"), case_set),
    ).fetchone()["id"]
    for case_id, (rank, returned) in outcomes.items():
        conn.execute(
            """INSERT INTO kb.eval_results (run_id, case_id, query, expected, returned, first_relevant_rank,
                   ndcg_10, namespace, k) VALUES (%s, %s, %s, ARRAY['a.md'], %s, %s, %s, 'acme', 10)""",
            (run_id, case_id, f"question {case_id}", returned, rank, 1.0 if rank == 1 else 0.0),
        )
    return run_id


def test_run_against_run_lists_the_flipped_cases_with_overlap_and_rank_biased_overlap(labs, module_db):
    left = insert_run(module_db, {"x": (1, ["a.md", "b.md"]), "y": (2, ["b.md", "a.md"]), "z": (1, ["a.md"])})
    right = insert_run(module_db, {"x": (2, ["b.md", "a.md"]), "y": (1, ["a.md", "b.md"]), "z": (1, ["a.md"])})
    page = labs("acme_admin").get(f"/eval/compare?a={left}&b={right}")
    assert page.status_code == 200
    flips = dict(re.findall(r'<tr data-case="(\w)" data-flip="(\w+)"', page.text))
    assert flips == {"x": "broken", "y": "fixed", "z": "none"}
    assert 'data-fixed="1" data-broken="1"' in page.text
    # the same documents in another order: overlap 1 (however short the lists), rank-biased overlap below 1
    assert float(re.search(r"data-overlap>([0-9.]+)<", page.text).group(1)) == 1.0
    rbo = float(re.search(r"data-rbo>([0-9.]+)<", page.text).group(1))
    assert 0.5 < rbo < 1
    assert "data-run-differences" not in page.text  # same case set, corpus and role: nothing to warn of


def test_runs_over_different_case_sets_say_so_first_and_compare_only_the_cases_asked_alike(labs, module_db):
    left = insert_run(module_db, {"x": (1, ["a.md"]), "y": (1, ["a.md"])}, case_set="v1")
    right = insert_run(module_db, {"x": (2, ["b.md", "a.md"]), "y": (1, ["a.md"]), "w": (1, ["a.md"])}, case_set="v2")
    module_db.execute(
        "UPDATE kb.eval_results SET expected = ARRAY['b.md'] WHERE run_id = %s AND case_id = 'x'", (right,)
    )
    page = labs("acme_admin").get(f"/eval/compare?a={left}&b={right}")
    assert page.status_code == 200
    warning = page.text.index("data-run-differences")
    assert warning < page.text.index("data-run-pair") and "the case sets differ" in page.text[warning:]
    flips = dict(re.findall(r'<tr data-case="(\w)" data-flip="(\w+)"', page.text))
    assert flips == {"y": "none"}  # x changed its expectation under the same id, w is in B only
    assert "1 changed under the same id: x" in text(page)


def test_rank_biased_overlap_and_overlap_at_k_match_hand_computed_values():
    from harness.lab import runs

    assert runs.rank_biased_overlap(list("abcde"), list("abcde")) == pytest.approx(1.0)
    assert runs.rank_biased_overlap(list("abc"), list("xyz")) == 0.0
    # swapping the first two of four: X = 0, 2, 3, 4 -> (0.1/0.9)(0.81 + 0.729 + 0.6561) + 0.6561
    assert runs.rank_biased_overlap(list("abcd"), list("bacd")) == pytest.approx(0.9)
    assert runs.overlap_at(list("abcd"), list("bxcy"), 4) == 0.5
    assert runs.overlap_at(list("abcd"), list("abcd"), 10) == 1.0  # identical four-passage lists at k 10
    assert runs.overlap_at(list("ab"), list("abcd"), 10) == 0.5
    assert runs.overlap_at([], [], 10) is None


def test_a_run_of_per_case_namespaces_is_shown_to_a_tenant_only_when_every_case_ran_in_its_namespaces(labs, module_db):
    acme_only = [dict(c, namespace="acme") for c in ACME_CASES]
    job = start_run(labs("acme_admin"), acme_only, "per-case.json")
    mixed = start_run(labs(None), acme_only + [dict(GLOBEX_CASES[0], namespace="globex")], "per-case.json")
    acme = labs("acme_admin")
    assert acme.get(f"/eval/{job.run_ids['lexical']}").status_code == 200
    assert acme.get(f"/eval/{mixed.run_ids['lexical']}").status_code == 404
    assert_nothing_of_globex(acme.get("/eval?dataset=cases:per-case.json"))


# -- judging ------------------------------------------------------------------------------


def judge_button(page, source: str, judgment: str) -> tuple[str, str]:
    """Where a result card's judge button posts the form (its formaction) and its value (what the browser sends)."""
    card = re.search(rf'<article class="result" data-source="{re.escape(source)}".*?</article>', page.text, re.S)
    button = re.search(
        rf"formaction=\"([^\"]+)\" name=\"judge\" value='([^']+)' class=\"judge-[^\"]*\" data-judgment=\"{judgment}\"",
        card.group(0),
    )
    return button.group(1), unescape(button.group(2))


def test_judging_a_result_records_it_as_the_lab_role_and_it_exports_as_a_golden_case(labs, module_db):
    lab = labs("acme_reader")
    question = {"q": "how long may a customer ask for a refund", "namespace": "acme", "as_of": "2025-06-01"}
    page = lab.post("/query", data=question)
    for source, judgment in (("policies/refund-v2.md", "relevant"), ("faq/returns.md", "not relevant")):
        action, value = judge_button(page, source, judgment)
        assert action == "/query/judge"  # a route that writes: POST only (tests/test_lab_post_only.py)
        page = lab.post(action, data={**question, "token": lab.app.state.token, "judge": value})
        assert page.status_code == 200 and "data-judged" in page.text
    card = re.search(r'<article class="result" data-source="policies/refund-v2.md".*?</article>', page.text, re.S)
    assert 'data-judge="relevant"' in card.group(0)
    assert "a suggestion until an admin accepts it" in text(page)
    stored = module_db.execute(
        "SELECT id, judged_by, origin, as_of::text, status, asked_in, shown FROM kb.judgments"
        " WHERE source = 'policies/refund-v2.md' AND query = %s",
        (question["q"],),
    ).fetchone()
    assert {k: stored[k] for k in ("judged_by", "origin", "as_of", "status", "asked_in")} == {
        "judged_by": role("acme_reader"),
        "origin": "lab",
        "as_of": "2025-06-01",
        "status": "suggested",
        "asked_in": "acme",
    }
    assert "acme/policies/refund-v2.md" in stored["shown"] and "acme/faq/returns.md" in stored["shown"]
    assert not [c for c in lab.get("/judgments/cases.json").json() if c["query"] == question["q"]]
    admin = labs("acme_admin")
    listed = admin.get("/judgments?state=suggested")
    assert f'data-judgment-id="{stored["id"]}" data-status="suggested"' in listed.text
    accepted = admin.post(
        "/judgments/action", data={"token": admin.app.state.token, "action": "accept", "id": str(stored["id"])}
    )
    assert accepted.status_code == 200 and 'data-done="accept"' in accepted.text
    exported = lab.get("/judgments/cases.json")
    assert exported.headers["content-disposition"].startswith("attachment")
    case = next(c for c in exported.json() if c["query"] == question["q"])
    assert case["expected"] == ["policies/refund-v2.md"] and case["namespace"] == "acme"
    assert case["as_of"] == "2025-06-01" and case["forbidden"] == []
    assert evaluate.cases_from(exported.json())[0].query  # the evaluator reads the export as it is
    assert "policies/refund-v2.md" in admin.get("/judgments").text  # a team sees its judgments


def test_a_judgment_without_this_processs_form_token_is_refused(labs, module_db):
    lab = labs("acme_reader")
    value = '{"j": "forbidden", "ns": "acme", "src": "manuals/errors.md"}'
    answer = lab.post("/query/judge", data={"q": "E-4031", "judge": value, "token": "guessed"})
    assert answer.status_code == 403
    assert module_db.execute(
        "SELECT count(*) AS n FROM kb.judgments WHERE source = 'manuals/errors.md'"
    ).fetchone() == {"n": 0}


def test_judgments_live_under_the_namespace_security_of_the_documents(labs, world, module_db):
    from harness.db import connect

    globex_value = '{"j": "relevant", "ns": "globex", "src": "globex/plan.md"}'
    refused = labs("acme_reader").post(
        "/query/judge", data={"q": "refund", "judge": globex_value, "token": labs("acme_reader").app.state.token}
    )
    assert refused.status_code == 403 and "row-level security" in text(refused)
    with connect(world) as conn:
        conn.execute(f"SET ROLE {role('globex_admin')}")
        conn.execute("SELECT kb.record_judgment('globex', 'secret plan', 'globex/plan.md', 'relevant')")
        conn.execute("RESET ROLE")
        conn.execute(f"SET ROLE {role('acme_reader')}")
        assert conn.execute("SELECT count(*) AS n FROM kb.judgments WHERE namespace = 'globex'").fetchone()["n"] == 0
        assert conn.execute("SELECT count(*) AS n FROM kb.judged_cases WHERE namespace = 'globex'").fetchone()["n"] == 0
    assert_nothing_of_globex(labs("acme_admin").get("/judgments"))
    assert_nothing_of_globex(labs("acme_admin").get("/judgments/cases.json"))
    assert "globex/plan.md" in labs("globex_admin").get("/judgments/cases.json").text


def test_an_application_records_feedback_from_sql_as_a_reader_and_an_admin_accepts_it(world):
    from harness.db import connect

    with connect(world) as conn:
        conn.execute(f"SET ROLE {role('acme_reader')}")
        first = conn.execute(
            "SELECT kb.record_judgment('acme', 'E-4031 meaning', 'manuals/errors.md', 'relevant', p_origin => 'chat')"
        ).fetchone()
        again = conn.execute(
            "SELECT kb.record_judgment('acme', 'E-4031 meaning', 'manuals/errors.md', 'relevant', p_origin => 'chat')"
        ).fetchone()
        assert first == again  # judging again alike keeps the live judgment
        case = conn.execute("SELECT state FROM kb.judged_cases WHERE query = 'E-4031 meaning'").fetchone()
        assert case is None  # a reader's judgment is a suggestion: no case yet
        conn.execute("RESET ROLE")
        conn.execute(f"SET ROLE {role('acme_admin')}")
        conn.execute("SELECT kb.review_judgment(%s, 'accepted')", (first["record_judgment"],))
        case = conn.execute("SELECT golden_case FROM kb.judged_cases WHERE query = 'E-4031 meaning'").fetchone()
        assert case["golden_case"]["expected"] == ["manuals/errors.md"]
        with pytest.raises(Exception, match="judgment must be relevant, not relevant, forbidden or no answer"):
            conn.execute("SELECT kb.record_judgment('acme', 'q', 'manuals/errors.md', 'thumbs up')")


def test_configurations_are_told_apart_by_what_differs_and_old_runs_by_their_overrides():
    from datetime import datetime

    from harness.lab import runs

    def run(i, mode, settings, complete=True):
        config = {"settings": settings, "k": 10, "complete": complete}
        key = f"{mode}-{sorted(settings.items())}-{complete}"
        return {
            "id": i,
            "started_at": datetime(2026, 1, i),
            "mode": mode,
            "model": "e5",
            "configuration": config,
            "configuration_key": key,
        }

    defaults = {"fusion": "linear", "weight_dense": 0.45, "rrf_k": 60}
    groups = runs.configurations(
        [
            run(1, "hybrid", {"fusion": "rrf"}, complete=False),
            run(2, "hybrid", defaults),
            run(3, "hybrid", {**defaults, "fusion": "rrf"}),
            run(4, "hybrid", defaults),
        ]
    )
    labels = {g["label"] for g in groups}
    assert labels == {"hybrid · fusion=linear", "hybrid · fusion=rrf", "hybrid · fusion=rrf · (overrides only)"}
    assert [len(g["runs"]) for g in groups if g["label"] == "hybrid · fusion=linear"] == [2]
