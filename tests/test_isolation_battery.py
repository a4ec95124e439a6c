"""Tenant-isolation battery. With tenant_isolation on, tenant A (a reader and a writer role)
learns nothing about tenant B, whatever A touches. The objects come from the catalogue
(pg_class, pg_proc and the roles' privileges), so a new table, view or function is covered the
day it is created:

* every relation A's roles may read shows A exactly the same rows whether B's documents exist
  or not (so no row, count or statistic of B), and none of its text names B;
* every relation A's roles may write changes only A's rows, and a write aimed at B fails the
  same way whether B's row exists or not (no duplicate-key or foreign-key oracle);
* every SECURITY DEFINER function A's roles may call, in every schema pgkb creates, is one
  reviewed here, with the reason it cannot leak; the ones that take plain arguments give A the
  same answer with or without B; the pipeline's internals, which read every tenant's rows as the
  owner, are not callable by A at all; none that A's reader may call writes a row (but its own
  log row) or keeps a lock (but its reads') to the end of A's transaction, so no reader stalls a
  writer of B;
* a lifecycle link A's writer makes to B's document (`supersedes`) retires nothing and closes no
  cycle for B's readers, and A's write fails or succeeds alike whether B's document exists;
* retrieval in every mode returns and explains A's documents only, and explains it exactly alike
  with or without B (BM25 statistics are per namespace, under row-level security);
* A's admin (pgkb_admin granted A's namespace) reads the same judgments, golden cases and
  evaluation runs and results with or without B's (pgkb_admin's other rights are global:
  settings, models, the retrieval log; docs/RELIABILITY.md).

Every rule holds for both ways B can be kept from A (``separation``): B's documents in a
namespace A is not granted, and B's documents in A's own namespace, private to B's roles
(kb.documents.readers)."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import psycopg
import pytest
from helpers import acting_as, insert_document, temporary_role
from psycopg.types.json import Jsonb

from harness.retrieval import MODES, explain, retrieve

SUFFIX = uuid.uuid4().hex[:8]
B_NAMESPACE = "globex"
B_WORD = "glxmarkerword"
B_SOURCE = "b/merger-plan.md"
B_SECRET = f"sk-{SUFFIX}-battery"
# text that exists only in B's documents or B's secrets; A must never see any of it
B_MARKERS = (B_NAMESPACE, B_WORD, B_SOURCE, B_SECRET)

# The schemas pgkb creates (kb_shard only on a shard coordinator): the catalogue queries cover them all.
PGKB_SCHEMAS = ["kb", "kb_pipeline", "public", "kb_shard"]

# SECURITY DEFINER functions a reader or writer may call, and why each cannot leak another
# tenant's data. A sample call (None: not callable with plain arguments) is compared with and
# without B's documents.
REVIEWED_DEFINERS = {
    "kb_retrieve(text,integer,text,text,jsonb,timestamp with time zone,text[],integer,boolean)": (
        "the reader's door: every leg reads only kb.read_scope of the session's role, never an argument",
        "(SELECT array_agg(source || ':' || score ORDER BY rank) FROM kb_retrieve('refund days', 5, NULL, 'lexical'))",
    ),
    "kb_retrieve_explain(text,integer,text,text,jsonb,timestamp with time zone,text[],integer,boolean)": (
        "the reader's door, as kb_retrieve",
        "(kb_retrieve_explain('refund days 退款', 5, NULL, 'hybrid') - 'timings_ms')",
    ),
    "kb.shard_corpus(text[],text)": (
        "a shard's door: statistics over kb.read_scope of the session's role",
        "kb.shard_corpus(ARRAY['refund', 'day'], 'hash-64')",
    ),
    "kb.shard_stage_candidates(text,integer,text,jsonb,timestamp with time zone,text[],jsonb)": (
        "a shard's door: every leg over kb.read_scope of the session's role",
        "kb.shard_stage_candidates('refund days', 5, 'lexical', '{}', '2030-01-01', NULL, "
        """'{"stages": [{"lexical": {"terms": ["refund", "day"]}}, {"lexical": {"terms": ["refund"]}}]}')""",
    ),
    "kb.shard_passages(jsonb)": (
        "a shard's door: rows of the ranked hits in kb.read_scope of the session's role only",
        "(SELECT count(*) FROM kb.shard_passages('[]'))",
    ),
    "kb.query_terms(text)": ("pure: terms of its argument", "kb.query_terms('refund glxmarkerword')"),
    "kb.analyze_query(text,text[])": ("pure: analysis of its arguments", "kb.analyze_query('refund days', NULL)"),
    "kb.snippets(text[],text,integer)": ("pure: snippets of the passages given", "kb.snippets(ARRAY['a b'], 'a', 20)"),
    "kb.snippet(text,text,integer)": ("pure: snippet of the passage given", "kb.snippet('a b', 'a', 20)"),
    "kb.answer_check(text,text,text[])": (
        "pure: reads only the passages given, no table",
        "kb.answer_check('price', 'How much does the refund cost?', ARRAY['A refund costs CNY 5.'])",
    ),
    "kb.embed_query(text,text)": ("pure: the query's vector from the model named", "kb.embed_query('x', 'hash-64')"),
    "kb.tenant_isolation_on()": ("one global switch, no tenant data", "kb.tenant_isolation_on()"),
    "kb.answerability_model()": (
        "the knowledge base's one answerability model (coefficients, no tenant data; who fitted it stays unread)",
        "kb.answerability_model()",
    ),
    "kb.language_moments(text,text,text[],integer,text)": (
        "a door of the coordinator's steps: statistics of the namespaces named that kb.read_scope gives the session",
        "kb.language_moments('hash-64', kb.embed_query('refund days', 'hash-64'), NULL, 1, 'refund days')",
    ),
    "kb.recount_lexical_stats()": ("writers only; recomputes every namespace's BM25 statistics, returns nothing", None),
    "kb.recount_term_stats(text[])": ("writers only; recounts document frequencies, returns nothing", None),
    "kb.maybe_refresh_lexical_stats()": ("writers only; returns nothing", None),
    "kb.recount_statistics_documents()": (
        "writers only; recomputes which documents every namespace's statistics count, returns nothing",
        None,
    ),
    "kb.refresh_statistics_if_due()": ("writers only; recounts when a date was crossed, returns nothing", None),
    "kb.recount_language_statistics(text)": (
        "writers only; recomputes every namespace's language statistics of a model, returns nothing",
        None,
    ),
    "kb.maybe_refresh_language_statistics()": ("writers only; returns nothing", None),
    "kb.embed_queue_batch_as(text,integer,boolean,name)": (
        "writers only; embeds the namespaces of a role the session may become, counts of those only",
        None,
    ),
}

# Relations a tenant role may write, and why their keys cannot answer questions about B.
REVIEWED_WRITABLE = {
    "kb.documents": "row-level security checks the namespace before any key; (namespace, source) is unique",
    "kb.glossary": "row-level security checks the namespace before any key; the unique key starts with the namespace",
    "kb.judgments": (
        "row-level security checks the namespace, the judging role and that the caller may read the judged document "
        "before any key; the unique key starts with the namespace and the judging role, so a write meets only the "
        "caller's own rows; updates reach only status, review and retirement columns, through the review doors"
    ),
}

ROLES = {
    "acme_reader": ("pgkb_reader", "acme"),
    "acme_writer": ("pgkb_writer", "acme"),
    "acme_admin": ("pgkb_admin", "acme"),
    "globex_reader": ("pgkb_reader", B_NAMESPACE),
    "globex_writer": ("pgkb_writer", B_NAMESPACE),
    "globex_admin": ("pgkb_admin", B_NAMESPACE),
}
A_ROLES = ("acme_reader", "acme_writer")


def role(name: str) -> str:
    return f"{name}_{SUFFIX}"


# How B's documents are kept from A: the namespace they are stored in, and the SQL condition
# that picks them out of kb.documents (d).
SEPARATIONS = {
    "namespace": (B_NAMESPACE, f"d.namespace = '{B_NAMESPACE}'"),
    "readers": ("acme", "d.reader_ids IS NOT NULL"),
}


@pytest.fixture(params=list(SEPARATIONS))
def separation(request) -> str:
    return request.param


@pytest.fixture
def world(fresh_db, separation):
    """Two tenants with documents, grants, a retrieval logged for each, and a model secret. B's
    documents live in B's namespace, or (separation "readers") in A's, readable by B's roles only."""
    conn = fresh_db
    b_namespace = SEPARATIONS[separation][0]
    conn.execute(
        "SELECT kb.register_model('ollama-secret', 'ollama', 'bge-m3', 16, %s, false)", (Jsonb({"api_key": B_SECRET}),)
    )
    for source, body in (
        ("a/refund.md", "# Refund policy\n\nAcme refunds are possible within 14 days. 退款期限十四天。"),
        ("a/travel.md", "# Travel\n\nAcme hotels are reimbursed up to 600 CNY per night."),
    ):
        insert_document(conn, source, body, namespace="acme")
    conn.execute("UPDATE kb.settings SET value = 'true' WHERE key IN ('tenant_isolation', 'retrieval_log')")
    with ExitStack() as stack:
        for name, (group, namespace) in ROLES.items():
            stack.enter_context(temporary_role(conn, role(name), f"NOLOGIN IN ROLE {group}"))
            namespace = b_namespace if namespace == B_NAMESPACE else namespace
            conn.execute(
                "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role(name), namespace)
            )
        b_readers = None if separation == "namespace" else [role(n) for n in ROLES if n.startswith("globex")]
        for source, body in (
            ("b/refund.md", "# Refund policy\n\nGlobex refunds are possible within 30 days. 退款期限三十天。"),
            (B_SOURCE, f"# Merger\n\nThe {B_WORD} merger closes in May; refunds stop then."),
        ):
            insert_document(conn, source, body, namespace=b_namespace, readers=b_readers)
        for name in ("acme_reader", "globex_reader"):
            with acting_as(conn, role(name)):
                retrieve(conn, f"refund {B_WORD}", mode="lexical")
        # B's admin judges B's documents and stores an evaluation of them (the lab's golden set and runs)
        with acting_as(conn, role("globex_admin")):
            conn.execute(
                "SELECT kb.record_judgment(%s, %s, %s, 'relevant', p_asked_in => %s)",
                (b_namespace, f"when does the {B_WORD} merger close", B_SOURCE, b_namespace),
            )
            run_id = conn.execute(
                "INSERT INTO kb.eval_runs (dataset, mode, metrics) VALUES ('cases:globex.json', 'lexical', "
                "'{\"cases\": 1}') RETURNING id"
            ).fetchone()["id"]
            conn.execute(
                "INSERT INTO kb.eval_results (run_id, case_id, query, expected, returned, namespace)"
                " VALUES (%s, 'merger', %s, ARRAY[%s], ARRAY[%s], %s)",
                (run_id, f"{B_WORD} merger", B_SOURCE, B_SOURCE, b_namespace),
            )
        # as on a shard whose coordinator reaches it as each caller: the shard doors are the tenants' too
        conn.execute("SELECT kb.open_shard_doors(NULL)")
        yield conn


def readable_relations(conn, grantee: str) -> list[str]:
    return [
        r["rel"]
        for r in conn.execute(
            """SELECT c.oid::regclass::text AS rel FROM pg_catalog.pg_class AS c
               INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
               WHERE n.nspname = ANY(%s)
                 AND c.relkind IN ('r', 'v', 'm', 'p') AND has_table_privilege(%s, c.oid, 'SELECT')
               ORDER BY 1""",
            (PGKB_SCHEMAS, grantee),
        )
    ]


def view_of(conn, grantee: str) -> dict[str, list[str]]:
    """What ``grantee`` reads from every relation it may read: its rows as JSON, sorted, without
    timestamp columns (when something was refreshed is not tenant data)."""
    seen: dict[str, list[str]] = {}
    for rel in readable_relations(conn, grantee):
        columns = [
            r["attname"]
            for r in conn.execute(
                """SELECT a.attname FROM pg_catalog.pg_attribute AS a
                   WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
                     AND a.atttypid NOT IN ('timestamptz'::regtype, 'timestamp'::regtype)
                   ORDER BY a.attnum""",
                (rel,),
            )
        ]
        select = ", ".join(psycopg.sql.Identifier(c).as_string(conn) for c in columns) or "1"
        with acting_as(conn, grantee):
            rows = conn.execute(f"SELECT to_jsonb(t)::text AS j FROM (SELECT {select} FROM {rel}) AS t").fetchall()
        seen[rel] = sorted(r["j"] for r in rows)
    return seen


def remove_tenant_b(conn, separation: str) -> None:
    conn.execute(f"DELETE FROM kb.documents AS d WHERE {SEPARATIONS[separation][1]}")
    conn.execute("DELETE FROM kb.retrieval_log WHERE role_name LIKE 'globex%%'")
    conn.execute("DELETE FROM kb.eval_runs WHERE role_name LIKE 'globex%%'")
    conn.execute("DELETE FROM kb.judgments WHERE judged_by LIKE 'globex%%'")
    conn.execute("DELETE FROM kb.model_secrets")


@pytest.mark.parametrize("name", A_ROLES)
def test_every_relation_shows_tenant_a_the_same_rows_with_or_without_tenant_b(world, separation, name):
    before = view_of(world, role(name))
    remove_tenant_b(world, separation)
    after = view_of(world, role(name))
    assert before.keys() == after.keys()
    differing = {rel for rel in before if before[rel] != after[rel]}
    assert not differing, {rel: (before[rel], after[rel]) for rel in differing}


@pytest.mark.parametrize("name", A_ROLES)
def test_no_relation_tenant_a_reads_names_tenant_b_or_its_secrets(world, name):
    for rel, rows in view_of(world, role(name)).items():
        text = "\n".join(rows).lower()
        assert not [m for m in B_MARKERS if m.lower() in text], rel


EVALUATION_RELATIONS = ("kb.eval_runs", "kb.eval_results", "kb.eval_run_summary", "kb.eval_metric_trend")
JUDGMENT_RELATIONS = ("kb.judgments", "kb.judged_cases")


def test_tenant_as_admin_reads_the_same_judgments_and_evaluations_with_or_without_tenant_b(world, separation):
    name = role("acme_admin")
    relations = EVALUATION_RELATIONS + JUDGMENT_RELATIONS
    assert set(relations) <= set(readable_relations(world, name))
    with acting_as(world, role("globex_admin")):  # B's rows are there for B: the test can fail
        assert world.execute("SELECT count(*) AS n FROM kb.eval_results").fetchone()["n"] == 1
        assert world.execute("SELECT count(*) AS n FROM kb.judged_cases").fetchone()["n"] == 1
    before = {rel: rows for rel, rows in view_of(world, name).items() if rel in relations}
    text = "\n".join(row for rows in before.values() for row in rows).lower()
    assert not [m for m in B_MARKERS if m.lower() in text]
    remove_tenant_b(world, separation)
    after = {rel: rows for rel, rows in view_of(world, name).items() if rel in relations}
    assert before == after


@pytest.mark.parametrize("mode", MODES)
def test_retrieval_returns_and_explains_tenant_a_only(world, mode):
    for query in (f"refund {B_WORD}", "merger closes in May", "refunds days 退款期限"):
        with acting_as(world, role("acme_reader")):
            rows = retrieve(world, query, k=10, mode=mode)
            answer = explain(world, query, k=10, mode=mode)
        assert {r["namespace"] for r in rows} <= {"acme"}
        text = (str(rows) + str({k: v for k, v in answer.items() if k not in ("query", "analysis", "stages")})).lower()
        assert not [m for m in B_MARKERS if m.lower() in text and m.lower() not in query.lower()], query


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_retrieval_explains_tenant_a_the_same_with_or_without_tenant_b(world, separation, mode):
    def answers():
        with acting_as(world, role("acme_reader")):
            return [
                {k: v for k, v in explain(world, q, k=10, mode=mode).items() if k != "timings_ms"}
                for q in (f"acme refund {B_WORD}", "refunds days")
            ]

    before = answers()
    remove_tenant_b(world, separation)
    assert answers() == before


def test_tenant_roles_write_only_reviewed_relations(world):
    writable = {
        r["rel"]
        for r in world.execute(
            """SELECT c.oid::regclass::text AS rel FROM pg_catalog.pg_class AS c
               INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
               CROSS JOIN unnest(%s::text[]) AS g (grantee)
               WHERE n.nspname = ANY(%s)
                 AND c.relkind IN ('r', 'v', 'm', 'p')
                 AND (has_any_column_privilege(g.grantee, c.oid, 'INSERT')
                      OR has_any_column_privilege(g.grantee, c.oid, 'UPDATE')
                      OR has_table_privilege(g.grantee, c.oid, 'DELETE')
                      OR has_table_privilege(g.grantee, c.oid, 'TRUNCATE'))""",
            ([role(n) for n in A_ROLES], PGKB_SCHEMAS),
        )
    }
    assert writable == set(REVIEWED_WRITABLE)


def test_writes_of_tenant_a_touch_only_its_own_rows(world, separation):
    count_b = f"SELECT count(*) AS n FROM kb.documents AS d WHERE {SEPARATIONS[separation][1]}"
    b_rows = world.execute(count_b).fetchone()
    for statement in ("UPDATE kb.documents SET title = title", "DELETE FROM kb.documents"):
        with world.transaction(force_rollback=True), acting_as(world, role("acme_writer")):
            cur = world.execute(statement)
            assert cur.rowcount == 2, statement
            world.execute("RESET ROLE")
            assert world.execute(count_b).fetchone() == b_rows


# Within one namespace a source names one document, so a writer of the namespace who inserts
# the source a private document holds learns that the name is taken (docs/RELIABILITY.md);
# this rule is about namespaces.
@pytest.mark.parametrize("separation", ["namespace"], indirect=True)
def test_a_write_aimed_at_tenant_b_fails_alike_whether_or_not_the_row_exists(world):
    outcomes = []
    for source in (B_SOURCE, "b/no-such-document.md"):
        for statement, params in (
            ("INSERT INTO kb.documents (namespace, source, body) VALUES (%s, %s, 'x')", (B_NAMESPACE, source)),
            ("UPDATE kb.documents SET namespace = %s, source = %s WHERE source = 'a/travel.md'", (B_NAMESPACE, source)),
        ):
            with acting_as(world, role("acme_writer")), pytest.raises(psycopg.Error) as err:
                world.execute(statement, params)
            outcomes.append((statement, type(err.value), err.value.diag.message_primary))
    assert outcomes[:2] == outcomes[2:]
    assert all(kind is psycopg.errors.InsufficientPrivilege for _, kind, _ in outcomes)


def test_a_judgment_aimed_at_tenant_b_fails_alike_whether_or_not_the_document_exists(world, separation):
    namespace = SEPARATIONS[separation][0]
    outcomes = []
    for source in (B_SOURCE, "b/no-such-document.md"):
        for name in A_ROLES:
            with acting_as(world, role(name)), pytest.raises(psycopg.Error) as err:
                world.execute("SELECT kb.record_judgment(%s, 'merger', %s, 'relevant')", (namespace, source))
            # The error names the source the caller typed; what follows the name must not differ.
            outcomes.append((name, type(err.value), err.value.diag.message_primary.replace(source, "<source>")))
    assert outcomes[: len(A_ROLES)] == outcomes[len(A_ROLES) :]
    assert all(kind is psycopg.errors.InsufficientPrivilege for _, kind, _ in outcomes)


def test_every_definer_function_tenant_roles_may_call_is_reviewed(world):
    callable_definers = {
        r["fn"]
        for r in world.execute(
            """SELECT DISTINCT p.oid::regprocedure::text AS fn FROM pg_catalog.pg_proc AS p
               INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               CROSS JOIN unnest(%s::text[]) AS g (grantee)
               WHERE n.nspname = ANY(%s) AND p.prosecdef
                 AND p.prorettype <> 'trigger'::regtype AND has_function_privilege(g.grantee, p.oid, 'EXECUTE')""",
            ([role(n) for n in A_ROLES], PGKB_SCHEMAS),
        )
    }
    assert callable_definers == set(REVIEWED_DEFINERS)


def test_reviewed_definer_functions_answer_tenant_a_alike_with_or_without_tenant_b(world, separation):
    calls = [call for _, call in REVIEWED_DEFINERS.values() if call]

    def answers():
        with acting_as(world, role("acme_reader")):
            return [world.execute(f"SELECT {call}::text AS v").fetchone()["v"] for call in calls]

    before = answers()
    remove_tenant_b(world, separation)
    assert answers() == before


def test_no_tenant_role_may_run_a_pipeline_internal_directly(world):
    """The legs, the pipeline and the log writer read every tenant's rows as the owner behind the
    gateways; called directly they would skip the scope, the request's bounds and the log. They are
    the functions of kb_node; kb_pipeline holds only the steps a shard coordinator runs as its caller."""
    internals = [
        r["f"]
        for r in world.execute(
            """SELECT p.oid::regprocedure::text AS f FROM pg_proc AS p
               WHERE p.pronamespace = 'kb_node'::regnamespace"""
        ).fetchall()
    ]
    assert any(f.startswith("kb_node.retrieve_core(") for f in internals)
    assert any(f.startswith("kb_node.lexical_candidates(") for f in internals)
    internals += [
        "kb.visible_documents(timestamp with time zone,text[],jsonb,boolean)",
        "kb.log_retrieval(jsonb,kb.retrieval_row[],text,integer)",
    ]
    for name in A_ROLES:
        allowed = world.execute(
            "SELECT f FROM unnest(%s::text[]) AS f WHERE has_function_privilege(%s, f::regprocedure, 'EXECUTE')",
            (internals, role(name)),
        ).fetchall()
        assert allowed == [], name
    with acting_as(world, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
        world.execute("SELECT * FROM kb_node.trigram_candidates('refund', now(), NULL, '{}', 10)")


def test_a_shard_passage_call_naming_another_tenants_chunk_returns_nothing(world, separation):
    b_chunk = world.execute(
        "SELECT c.id, c.namespace FROM kb.chunks AS c INNER JOIN kb.documents AS d ON d.id = c.document_id"
        f" WHERE {SEPARATIONS[separation][1]} LIMIT 1"
    ).fetchone()
    hit = Jsonb([{"chunk_id": b_chunk["id"], "namespace": b_chunk["namespace"], "final_score": 1, "rank": 1}])
    call = "SELECT count(*) AS n FROM kb.shard_passages(%s)"
    assert world.execute(call, (hit,)).fetchone()["n"] == 1, "the owner gets the passage"
    with acting_as(world, role("acme_reader")):
        assert world.execute(call, (hit,)).fetchone()["n"] == 0


def test_a_role_that_may_not_read_documents_gets_a_named_error_from_the_gateway(world):
    with temporary_role(world, f"outsider_{SUFFIX}", "NOLOGIN"), acting_as(world, f"outsider_{SUFFIX}"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not read kb.documents"):
            retrieve(world, "refund days", mode="lexical")


def test_no_definer_function_a_reader_may_call_writes_a_row_or_keeps_a_lock_beyond_its_call(world):
    """Called inside an open transaction of A's reader, each one leaves at most the share locks of
    its reads: nothing that makes a writer wait until A commits. (With the log on, a retrieval
    door writes its own log row: test_observability.)"""
    reader = role("acme_reader")
    world.execute("UPDATE kb.settings SET value = 'false' WHERE key = 'retrieval_log'")
    callable_definers = {
        r["fn"]
        for r in world.execute(
            """SELECT p.oid::regprocedure::text AS fn FROM pg_catalog.pg_proc AS p
               INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               WHERE n.nspname = ANY(%s) AND p.prosecdef AND p.prorettype <> 'trigger'::regtype
                 AND has_function_privilege(%s, p.oid, 'EXECUTE')""",
            (PGKB_SCHEMAS, reader),
        )
    }
    assert callable_definers and all(REVIEWED_DEFINERS[fn][1] for fn in callable_definers), "a sample call each"
    for fn in sorted(callable_definers):
        with world.transaction(force_rollback=True), acting_as(world, reader):
            world.execute(f"SELECT {REVIEWED_DEFINERS[fn][1]}::text AS v").fetchone()
            # a row written or locked (SELECT FOR UPDATE) gives the transaction an id
            written = world.execute("SELECT pg_current_xact_id_if_assigned()::text AS x").fetchone()["x"]
            held = world.execute(
                """SELECT coalesce(array_agg(DISTINCT l.locktype || ' ' || l.mode || ' '
                                            || coalesce(l.relation::regclass::text, '')), '{}') AS l
                   FROM pg_locks AS l
                   WHERE l.pid = pg_backend_pid() AND l.granted
                     AND NOT (l.locktype = 'relation' AND l.mode = 'AccessShareLock')
                     AND l.locktype NOT IN ('virtualxid', 'transactionid')"""
            ).fetchone()["l"]
        assert (written, held) == (None, []), fn


@pytest.mark.parametrize("separation", ["readers"], indirect=True)
def test_a_lifecycle_link_of_tenant_a_to_tenant_b_retires_nothing_and_closes_no_cycle(world):
    """B's documents are private in A's namespace: A's writer naming one in `supersedes` (or
    closing a cycle through one that names A's) changes nothing B's readers see, and A's writes
    succeed alike whether B's document exists or not."""
    world.execute("UPDATE kb.documents SET supersedes = 'a/travel.md' WHERE source = %s", (B_SOURCE,))

    def a_writes(source: str) -> None:
        with acting_as(world, role("acme_writer")):
            insert_document(
                world, source, "# Notice\n\nThe canteen opens at eight.", namespace="acme", supersedes=B_SOURCE
            )
            world.execute("UPDATE kb.documents SET supersedes = %s WHERE source = 'a/travel.md'", (B_SOURCE,))

    a_writes("a/notice.md")
    with acting_as(world, role("globex_reader")):
        assert B_SOURCE in [r["source"] for r in retrieve(world, f"{B_WORD} merger", mode="lexical")]
    world.execute("UPDATE kb.documents SET supersedes = NULL WHERE source = 'a/travel.md'")
    world.execute("DELETE FROM kb.documents WHERE source = %s", (B_SOURCE,))
    a_writes("a/notice-2.md")


def test_every_door_that_reads_as_the_owner_logs_its_call_unless_it_is_a_shard_door(world):
    """A SECURITY DEFINER function A's reader may call that enters the pipeline (kb.enter_pipeline:
    it reads every tenant's rows as the owner) writes one log row per call. The shard doors
    (kb.shard_doors) write none: they are executable only by the roles a coordinator connects as,
    and the coordinator logs the retrieval."""
    reader = role("acme_reader")
    doors = [
        r["fn"]
        for r in world.execute(
            """SELECT p.oid::regprocedure::text AS fn FROM pg_catalog.pg_proc AS p
               INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
               WHERE n.nspname = ANY(%s) AND p.prosecdef AND p.prosrc LIKE '%%kb.enter_pipeline()%%'
                 AND has_function_privilege(%s, p.oid, 'EXECUTE')
                 AND NOT p.oid::regprocedure = ANY(kb.shard_doors())
               ORDER BY 1""",
            (PGKB_SCHEMAS, reader),
        )
    ]
    assert {d.split("(")[0] for d in doors} >= {"kb_retrieve", "kb_retrieve_explain"}
    logged = "SELECT count(*) AS n FROM kb.retrieval_log"
    for door in doors:
        before = world.execute(logged).fetchone()["n"]
        with acting_as(world, reader):
            world.execute(f"SELECT {REVIEWED_DEFINERS[door][1]}::text AS v").fetchone()
        assert world.execute(logged).fetchone()["n"] == before + 1, door


def test_no_stored_setting_bent_past_its_range_breaks_tenant_as_retrieval_or_shows_it_b(world):
    """Every key of the shipped catalogue, its stored value bent past the range trigger (as an earlier
    release or a restored dump could leave it: a number out of any range, a null) or its row
    deleted: A's reader still retrieves, and only A's documents; isolation reads as on (fails closed)."""
    bent_value = {"number": "1e308", "integer": "2147483647", "text": "null", "boolean": "null"}
    shipped = world.execute("SELECT key, value_type FROM kb.settings_shipped() ORDER BY key").fetchall()
    assert len(shipped) > 30 and {s["value_type"] for s in shipped} <= set(bent_value)
    for setting in shipped:
        bends = [
            ("UPDATE kb.settings SET value = %s WHERE key = %s", (bent_value[setting["value_type"]], setting["key"])),
            ("DELETE FROM kb.settings WHERE key = %s", (setting["key"],)),
        ]
        for statement, params in bends:
            with world.transaction(force_rollback=True):
                world.execute("ALTER TABLE kb.settings DISABLE TRIGGER USER")
                world.execute(statement, params)
                world.execute("ALTER TABLE kb.settings ENABLE TRIGGER USER")
                with acting_as(world, role("acme_reader")):
                    found = {r["source"] for r in retrieve(world, f"refund {B_WORD}", mode="lexical")}
                    isolated = world.execute("SELECT kb.tenant_isolation_on() AS on").fetchone()["on"]
            assert isolated and found and all(s.startswith("a/") for s in found), (statement, params, found)
