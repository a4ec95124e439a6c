"""What the lab reads and does in the database: one function per question, each taking a connection.

Retrieval goes through harness.retrieval (kb_retrieve / kb_retrieve_explain), the path every other
client uses; nothing here ranks, filters or fuses in Python. Everything runs as the lab's role, so
row-level security decides which namespaces, documents, chunks and candidates appear. kb.eval_runs
has no namespace policy of its own: a role restricted to some namespaces sees only the runs whose
``params.namespace`` is one of them, or whose every case ran in one (see ``_VISIBLE_RUN``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import retrieval

# Session-overridable settings that matter to ingest, not to a query: not offered as query controls.
INGEST_SETTINGS = frozenset(
    {"embed_mode", "chunk_max_tokens", "chunk_overlap_tokens", "embed_batch_size", "embed_max_attempts"}
)

LIFECYCLES = ("current", "superseded", "draft", "expired", "future", "deprecated", "removed")
INGEST_STATES = ("indexed", "pending", "failed", "excluded")
STATUSES = ("active", "draft", "deprecated")

# The lifecycle at as_of is the database's word for it (kb.document_lifecycle, docs/LIFECYCLE.md).
_DOCUMENT_COLUMNS = """
    d.id, d.namespace, d.source, d.title, d.doc_type, d.status, d.version, d.effective_from, d.effective_to,
    d.supersedes, d.metadata, d.ingest_status, d.ingest_error, d.chunk_count, d.indexed_at, d.removed_at,
    d.updated_at, d.origin,
    kb.document_lifecycle(d, %(as_of)s::timestamptz) AS lifecycle,
    (SELECT array_agg(s.source ORDER BY s.source) FROM kb.documents AS s
     WHERE s.namespace = d.namespace AND s.supersedes = d.source) AS superseded_by
"""


def namespaces(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """The namespaces the role can see, with their counts (kb.ingest_status, row-level security applies)."""
    return conn.execute("SELECT * FROM kb.ingest_status ORDER BY namespace").fetchall()


def query_settings(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """The settings a query may override for itself: the catalogue's session-overridable keys, minus
    ingest ones, with the value in force, type, choices, description and range (min_value, max_value)."""
    rows = conn.execute(
        """SELECT key, value, value_type, default_value, choices, description, min_value, max_value
           FROM kb.settings_catalogue WHERE session_override ORDER BY key"""
    ).fetchall()
    return [r for r in rows if r["key"] not in INGEST_SETTINGS]


def max_query_chars(conn: psycopg.Connection) -> int:
    """Characters of a question kb_retrieve reads (a longer one is cut) and kb.record_judgment accepts."""
    return conn.execute("SELECT kb_pipeline.max_query_chars() AS n").fetchone()["n"]


def retrieve(conn: psycopg.Connection, request: retrieval.RetrievalRequest) -> list[dict[str, Any]]:
    """kb_retrieve for a request (harness.lab.forms.QueryForm.request())."""
    return retrieval.retrieve(conn, request)


def explain(conn: psycopg.Connection, request: retrieval.RetrievalRequest) -> dict[str, Any]:
    """kb_retrieve_explain for a request."""
    return retrieval.explain(conn, request)


def moment_used(conn: psycopg.Connection, as_of: Any) -> str:
    """The moment a request's as_of means to the database (its session time zone), to echo on the page:
    'now' when none was given."""
    if as_of is None:
        return "now"
    row = conn.execute(
        "SELECT to_char(%s::timestamptz, 'YYYY-MM-DD HH24:MI:SS TZ') AS moment", (str(as_of),)
    ).fetchone()
    return row["moment"]


def documents(
    conn: psycopg.Connection,
    *,
    namespace: str | None = None,
    status: str | None = None,
    lifecycle: str | None = None,
    ingest_status: str | None = None,
    doc_type: str | None = None,
    text: str | None = None,
    as_of: str | None = None,
    limit: int = 200,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """Documents the role can see, filtered, with their lifecycle at as_of (default now); and the total count."""
    where = ["true"]
    params: dict[str, Any] = {"as_of": as_of or "now", "limit": limit, "offset": offset}
    for column, value in (
        ("namespace", namespace),
        ("status", status),
        ("ingest_status", ingest_status),
        ("doc_type", doc_type),
    ):
        if value:
            where.append(f"d.{column} = %({column})s")
            params[column] = value
    if text:
        where.append("(d.source ILIKE %(text)s OR d.title ILIKE %(text)s)")
        params["text"] = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    outer = "true"
    if lifecycle:
        outer = "x.lifecycle = %(lifecycle)s"
        params["lifecycle"] = lifecycle
    rows = conn.execute(
        f"""SELECT *, count(*) OVER () AS total FROM (
                SELECT {_DOCUMENT_COLUMNS} FROM kb.documents AS d WHERE {" AND ".join(where)}
            ) AS x WHERE {outer}
            ORDER BY x.namespace, x.source LIMIT %(limit)s OFFSET %(offset)s""",
        params,
    ).fetchall()
    return rows, (rows[0]["total"] if rows else 0)


def document(conn: psycopg.Connection, document_id: int, as_of: str | None = None) -> dict[str, Any] | None:
    """One document the role can see (None otherwise), with its lifecycle at as_of."""
    return conn.execute(
        f"SELECT {_DOCUMENT_COLUMNS} FROM kb.documents AS d WHERE d.id = %(id)s",
        {"id": document_id, "as_of": as_of or "now"},
    ).fetchone()


def documents_by_id(conn: psycopg.Connection, ids: list[int], as_of: str | None = None) -> dict[int, dict[str, Any]]:
    """Documents by id (those the role can see), with their lifecycle at as_of."""
    if not ids:
        return {}
    rows = conn.execute(
        f"SELECT {_DOCUMENT_COLUMNS} FROM kb.documents AS d WHERE d.id = ANY(%(ids)s)",
        {"ids": list(ids), "as_of": as_of or "now"},
    ).fetchall()
    return {r["id"]: r for r in rows}


def chunks(conn: psycopg.Connection, document_id: int) -> list[dict[str, Any]]:
    """A document's chunks: section path, token count, whether the active model has a vector of it, and
    the embedding queue's state for it (pending, or failed with the error)."""
    return conn.execute(
        """SELECT c.id, c.ordinal, array_to_string(c.section_path, ' > ') AS section_path, c.token_count,
                  c.char_start, c.char_end, c.content,
                  EXISTS (SELECT 1 FROM kb.embeddings AS e
                          WHERE e.chunk_id = c.id AND e.model = (kb.active_model()).name) AS has_vector,
                  q.attempts, q.error_kind, q.last_error, q.chunk_id IS NOT NULL AS queued
           FROM kb.chunks AS c
           LEFT JOIN kb.embed_queue AS q ON q.chunk_id = c.id AND q.model = (kb.active_model()).name
           WHERE c.document_id = %s ORDER BY c.ordinal""",
        (document_id,),
    ).fetchall()


def active_model(conn: psycopg.Connection) -> dict[str, Any] | None:
    row = conn.execute("SELECT (kb.active_model()).*").fetchone()
    return row if row and row["name"] else None


def failures(conn: psycopg.Connection, namespace: str | None = None) -> list[dict[str, Any]]:
    """Chunks whose embedding failed (kb.ingest_failures), of one namespace or all the role can see."""
    return conn.execute(
        """SELECT * FROM kb.ingest_failures WHERE %(ns)s::text IS NULL OR namespace = %(ns)s
           ORDER BY last_attempt_at DESC NULLS LAST LIMIT 100""",
        {"ns": namespace},
    ).fetchall()


def permissions(conn: psycopg.Connection) -> dict[str, bool]:
    """What the role may do beyond reading documents: retry failed embeddings (run the embedding queue),
    read evaluation runs, read kb.ingest_failures (migrate grants it to pgkb_admin only)."""
    return conn.execute(
        """SELECT
             has_function_privilege('kb.embed_queue_batch(text, integer, boolean)', 'EXECUTE') AS retry,
             has_table_privilege('kb.eval_runs', 'SELECT') AND has_table_privilege('kb.eval_results', 'SELECT')
                 AS eval,
             has_table_privilege('kb.ingest_failures', 'SELECT') AS failures"""
    ).fetchone()


def retry_failed(conn: psycopg.Connection) -> None:
    """Embed every queued chunk of the active model the role may see, failed ones (even exhausted) included:
    kb.embed_pending, the procedure `pgkb backfill` calls. Runs outside a transaction block (it commits)."""
    conn.execute("CALL kb.embed_pending(32, NULL, true)")


# One trend line: a configuration over one case set (a changed case set starts a new line, never a "regression")
SERIES_KEY = "r.configuration_key || coalesce('_' || r.case_set_version, '') AS series_key"


def eval_runs(conn: psycopg.Connection, dataset: str | None = None) -> list[dict[str, Any]]:
    """Evaluation runs the role may see, newest first (row-level security of kb.eval_runs: a role sees its
    own runs; one that reads every namespace sees all)."""
    return conn.execute(
        f"""SELECT r.id, r.started_at, r.dataset, r.mode, r.model, r.git_commit, r.params, r.metrics,
                   r.metrics_by_category, r.configuration, r.configuration_key, r.role_name, r.case_set_version,
                   r.corpus_fingerprint, {SERIES_KEY}
            FROM kb.eval_runs AS r
            WHERE %(dataset)s::text IS NULL OR r.dataset = %(dataset)s
            ORDER BY r.started_at DESC, r.id DESC LIMIT 500""",
        {"dataset": dataset},
    ).fetchall()


def eval_run(conn: psycopg.Connection, run_id: int) -> dict[str, Any] | None:
    return conn.execute(f"SELECT r.*, {SERIES_KEY} FROM kb.eval_runs AS r WHERE r.id = %s", (run_id,)).fetchone()


def eval_results(conn: psycopg.Connection, run_id: int) -> list[dict[str, Any]]:
    """The cases of one run (call only for a run eval_run returned)."""
    return conn.execute(
        """SELECT * FROM kb.eval_results WHERE run_id = %s
           ORDER BY (first_relevant_rank IS NULL AND cardinality(expected) > 0) DESC, forbidden_hit DESC,
                    first_relevant_rank DESC NULLS LAST, case_id""",
        (run_id,),
    ).fetchall()


def may_run_eval(conn: psycopg.Connection) -> bool:
    """Whether the role may run evaluations from the lab: a member of pgkb_admin (it stores runs)."""
    return conn.execute("SELECT pg_has_role(current_user, 'pgkb_admin', 'MEMBER') AS ok").fetchone()["ok"]


def judging_queue(conn: psycopg.Connection, limit: int = 20) -> list[dict[str, Any]]:
    """The questions waiting for the role's judgment, most useful first (kb.judging_queue)."""
    return conn.execute("SELECT * FROM kb.judging_queue(%s)", (limit,)).fetchall()


def judged_cases(
    conn: psycopg.Connection, namespace: str | None = None, state: str | None = None
) -> list[dict[str, Any]]:
    """The golden cases the accepted judgments the role may read make (kb.judged_cases), newest first; of
    one state (ready, disputed, incomplete) when given."""
    return conn.execute(
        """SELECT * FROM kb.judged_cases
           WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s) AND (%(state)s::text IS NULL OR state = %(state)s)
           ORDER BY last_judged_at DESC, case_id""",
        {"ns": namespace, "state": state},
    ).fetchall()


def judgments_for(conn: psycopg.Connection, form: Any, namespaces: list[str]) -> dict[tuple[str, str | None], str]:
    """The role's live judgments of a form's question (with its earlier questions and as_of) in some
    namespaces: {(namespace, source): judgment}, source None for a "no answer" judgment."""
    if not namespaces:
        return {}
    arguments = form.arguments()
    rows = conn.execute(
        """SELECT j.namespace, j.source, j.judgment FROM kb.judgments AS j
           WHERE j.namespace = ANY (%(ns)s) AND j.judged_by = current_user AND j.retired_at IS NULL
             AND j.case_key = kb.judgment_case_key(
                 j.namespace, %(q)s, %(context)s::text[], %(as_of)s::timestamptz::date)""",
        {"ns": namespaces, "q": form.q, "context": arguments.get("context") or [], "as_of": form.as_of.strip() or None},
    ).fetchall()
    return {(r["namespace"], r["source"]): r["judgment"] for r in rows}


def record_judgment(
    conn: psycopg.Connection,
    *,
    namespace: str,
    query: str,
    source: str | None,
    judgment: str,
    context: list[str] | None,
    as_of: str | None,
    asked_in: str | None,
    shown: list[str],
) -> dict[str, Any]:
    """kb.record_judgment as the lab's role, origin 'lab': the live judgment's id and status (accepted, or
    suggested until an admin accepts it)."""
    judgment_id = conn.execute(
        """SELECT kb.record_judgment(%s, %s, %s, %s, %s, %s::timestamptz::date, 'lab',
               p_asked_in => %s, p_shown => %s) AS id""",
        (namespace, query, source, judgment, context, as_of, asked_in, shown),
    ).fetchone()["id"]
    return conn.execute("SELECT id, status FROM kb.judgments WHERE id = %s", (judgment_id,)).fetchone()


JUDGMENT_STATES = ("accepted", "suggested", "rejected", "retired")
JUDGMENT_ACTIONS = {
    "accept": "SELECT kb.review_judgment(%s, 'accepted')",
    "reject": "SELECT kb.review_judgment(%s, 'rejected')",
    "retire": "SELECT kb.retire_judgment(%s)",
    "restore": "SELECT kb.restore_judgment(%s)",
}


def judgments(
    conn: psycopg.Connection, namespace: str | None, state: str | None, text: str | None, limit: int = 200
) -> list[dict[str, Any]]:
    """The judgments the role may read, newest first: live ones of a status, or retired ones (state
    'retired': the history), in a namespace, whose question or source holds some text."""
    return conn.execute(
        """SELECT j.id, j.namespace, j.query, j.context, j.as_of, j.source, j.judgment, j.judged_by, j.judged_at,
                  j.rater_kind, j.status, j.reviewed_by, j.reviewed_at, j.retired_at, j.retired_by, j.asked_in,
                  j.origin, j.note, j.case_key
           FROM kb.judgments AS j
           WHERE (%(ns)s::text IS NULL OR j.namespace = %(ns)s)
             AND (%(state)s::text IS NULL AND j.retired_at IS NULL
                  OR %(state)s = 'retired' AND j.retired_at IS NOT NULL
                  OR j.retired_at IS NULL AND j.status = %(state)s)
             AND (%(text)s::text IS NULL OR strpos(lower(j.query), lower(%(text)s)) > 0
                  OR strpos(lower(j.source), lower(%(text)s)) > 0)
           ORDER BY coalesce(j.retired_at, j.judged_at) DESC, j.id DESC LIMIT %(limit)s""",
        {"ns": namespace, "state": state, "text": text, "limit": limit},
    ).fetchall()


def judgment_action(conn: psycopg.Connection, action: str, judgment_id: int) -> None:
    """Accept, reject, retire (delete, kept as history) or restore a judgment, as the lab's role."""
    conn.execute(JUDGMENT_ACTIONS[action], (judgment_id,))


def retire_case(conn: psycopg.Connection, namespace: str, case_id: str) -> int:
    """Delete a case: retire every live judgment of it the lab's role may change (kb.retire_case)."""
    return conn.execute("SELECT kb.retire_case(%s, %s) AS n", (namespace, case_id)).fetchone()["n"]
