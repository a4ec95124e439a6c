"""Roles and namespace isolation: with tenant_isolation on, no result, snippet, count or
explain output of one tenant reaches another, in any mode; readers cannot run PL/Python or
change settings and models; writers ingest only into their namespaces and never write the
derived tables; statistics, grants, the retrieval log, provider secrets and python_path
hold whatever one tenant or a careless admin does.

Roles are cluster-wide and other test runs share the cluster, so every role name carries
this run's suffix (``role("acme_reader")``)."""

from __future__ import annotations

import shutil
import uuid
from contextlib import ExitStack

import psycopg
import pytest
from fake_ollama import FakeOllama
from helpers import TEST_HOST, TEST_PORT, acting_as, count_rows, insert_document, temporary_role
from psycopg.types.json import Jsonb

from harness.config import MIGRATIONS_DIR
from harness.migrate import migrate
from harness.retrieval import MODES, explain, retrieve

SUFFIX = uuid.uuid4().hex[:8]
DERIVED_TABLES = (
    "kb.chunks",
    "kb.embeddings",
    "kb.lexical_postings",
    "kb.lexical_terms",
    "kb.lexical_stats",
    "kb.embed_queue",
)


def role(name: str) -> str:
    """This run's name of the test role ``name``."""
    return f"{name}_{SUFFIX}"


ROLES = {
    "acme_reader": ("pgkb_reader", "acme"),
    "globex_reader": ("pgkb_reader", "globex"),
    "acme_writer": ("pgkb_writer", "acme"),
    "globex_writer": ("pgkb_writer", "globex"),
}


@pytest.fixture
def tenants(fresh_db):
    insert_document(
        fresh_db,
        "a/refund.md",
        "# Refund policy\n\nAcme refunds are possible within 14 days. 退款期限十四天。",
        namespace="acme",
    )
    insert_document(
        fresh_db,
        "b/refund.md",
        "# Refund policy\n\nGlobex refunds are possible within 30 days. 退款期限三十天。 glxsecretword",
        namespace="globex",
    )
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    with ExitStack() as stack:
        for name, (group, namespace) in ROLES.items():
            stack.enter_context(temporary_role(fresh_db, role(name), f"NOLOGIN IN ROLE {group}"))
            fresh_db.execute(
                "INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, %s)", (role(name), namespace)
            )
        yield fresh_db


@pytest.mark.parametrize("mode", MODES)
def test_no_result_snippet_or_explain_of_another_tenant(tenants, mode):
    with acting_as(tenants, role("acme_reader")):
        rows = retrieve(tenants, "refund days 退款期限", k=10, mode=mode)
        assert rows and {r["namespace"] for r in rows} == {"acme"}
        assert all("Globex" not in (r["content"] + (r["snippet"] or "")) for r in rows)
        answer = explain(tenants, "Globex refunds 30 days", k=10, mode=mode)
        assert "globex" not in str(answer["results"]).lower()
        assert count_rows(tenants, "kb.documents") == 1
        assert count_rows(tenants, "kb.chunks WHERE namespace = 'globex'") == 0
        assert count_rows(tenants, "kb.lexical_postings WHERE namespace = 'globex'") == 0
    with acting_as(tenants, role("globex_reader")):
        rows = retrieve(tenants, "refund days", k=10, mode=mode)
        assert {r["namespace"] for r in rows} == {"globex"}


def test_reader_cannot_read_other_vectors_run_plpython_or_change_settings(tenants):
    own = count_rows(tenants, "kb.embeddings")
    with acting_as(tenants, role("acme_reader")):
        visible = count_rows(tenants, "kb.embeddings")
    assert 0 < visible < own
    for statement in (
        "SELECT kb.py_query_terms('x')",
        "UPDATE kb.settings SET value = 'false' WHERE key = 'tenant_isolation'",
        "SELECT kb.activate_model('hash-64')",
        f"INSERT INTO kb.namespace_grants VALUES ('{role('acme_reader')}', 'globex')",
    ):
        with acting_as(tenants, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(statement)


def test_writer_ingests_into_its_namespace_only(tenants):
    with acting_as(tenants, role("acme_writer")):
        insert_document(tenants, "a/new.md", "# New\n\nAcme onboarding takes three days.", namespace="acme")
        rows = retrieve(tenants, "onboarding days", k=3, mode="lexical")
        assert rows and rows[0]["source"] == "a/new.md"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            insert_document(tenants, "b/evil.md", "# Evil\n\nPlanted text.", namespace="globex")
    assert count_rows(tenants, "kb.documents WHERE source = 'b/evil.md'") == 0


def test_isolation_off_by_default_keeps_plain_readers_working(fresh_db):
    insert_document(fresh_db, "x.md", "# X\n\nRefunds take 14 days.", namespace="acme")
    plain = role("plain_reader")
    with temporary_role(fresh_db, plain, "NOLOGIN IN ROLE pgkb_reader"), acting_as(fresh_db, plain):
        assert retrieve(fresh_db, "refunds days", k=3)


def test_every_function_pins_search_path_and_ignores_a_malicious_one(fresh_db):
    """Only the functions written to be inlined into their callers go without a pinned search_path
    (a SET clause prevents inlining): plain SQL, not SECURITY DEFINER, and they say so in their comment."""
    unpinned = fresh_db.execute(
        """SELECT p.oid::regprocedure::text AS fn, l.lanname, p.prosecdef,
                  coalesce(obj_description(p.oid, 'pg_proc'), '') LIKE '%Inlined%' AS says_inlined
           FROM pg_proc AS p
           JOIN pg_namespace AS n ON n.oid = p.pronamespace
           JOIN pg_language AS l ON l.oid = p.prolang
           WHERE (n.nspname IN ('kb', 'kb_pipeline', 'kb_node') OR p.proname IN ('kb_retrieve', 'kb_retrieve_explain'))
             AND p.prokind = 'f'
             AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%')
           ORDER BY 1"""
    ).fetchall()
    assert sorted(r["fn"] for r in unpinned) == [
        "kb.counts_in_statistics(bigint)",
        "kb.in_force(text,date,date,timestamp with time zone,timestamp with time zone)",
        "kb.may_read_document(oid[])",
        "kb.supersedes_link_holds(oid[],oid[])",
        "kb.visible_candidate(bigint,timestamp with time zone,text[],jsonb,boolean)",
        "kb_node.bm25_weight(double precision,integer,integer,double precision,double precision,double precision)",
        "kb_node.glossary_match_terms(jsonb)",
        "kb_node.lexical_term_weights(text[],jsonb,jsonb,integer,double precision)",
        "kb_pipeline.calibrate(double precision,double precision,double precision)",
        "kb_pipeline.leg_hit_of(bigint,bigint,double precision,double precision,boolean,double precision,"
        "double precision,boolean,text,double precision)",
        "kb_pipeline.noise_z(bigint)",
    ]
    assert all(r["lanname"] == "sql" and not r["prosecdef"] and r["says_inlined"] for r in unpinned)
    insert_document(fresh_db, "x.md", "# X\n\nRefunds take 14 days.")
    fresh_db.execute("CREATE SCHEMA evil")
    try:
        # shadows functions and an operator the retrieval code uses, for anyone who resolves names through evil
        fresh_db.execute("CREATE FUNCTION evil.btrim(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        fresh_db.execute("CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql AS $$ SELECT 1/0 || '' $$")
        fresh_db.execute("CREATE TABLE evil.documents (id int)")
        fresh_db.execute("SET search_path = evil, public")
        rows = retrieve(fresh_db, "refunds days", k=3)
        assert [r["source"] for r in rows] == ["x.md"]
    finally:
        fresh_db.execute("RESET search_path")
        fresh_db.execute("DROP SCHEMA evil CASCADE")


# -- derived tables and statistics: written by the trigger path only ----------------------------------


@pytest.mark.parametrize("table", DERIVED_TABLES)
@pytest.mark.parametrize("group", ["acme_writer", "acme_reader"])
def test_no_tenant_role_may_write_a_derived_table(tenants, table, group):
    column = tenants.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "AND attidentity = '' AND attgenerated = '' "
        "ORDER BY attnum LIMIT 1",
        (table,),
    ).fetchone()["attname"]
    for statement in (
        f"INSERT INTO {table} DEFAULT VALUES",
        f"UPDATE {table} SET {column} = {column}",
        f"DELETE FROM {table}",
        f"TRUNCATE {table}",
    ):
        with acting_as(tenants, role(group)), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(statement)


def test_a_writer_cannot_tell_which_words_another_tenants_chunks_hold(tenants):
    """The duplicate-key / foreign-key outcome of inserting a posting was an oracle."""
    globex_chunk = tenants.execute("SELECT id FROM kb.chunks WHERE namespace = 'globex' LIMIT 1").fetchone()["id"]
    for term in ("glxsecretword", "nowhere-at-all"):
        with acting_as(tenants, role("acme_writer")), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(
                "INSERT INTO kb.lexical_postings (term, chunk_id, document_id, namespace, tf, chunk_length) "
                "VALUES (%s, %s, 1, 'acme', 1, 1)",
                (term, globex_chunk),
            )


def test_statistics_count_every_tenant_whoever_triggers_them(tenants):
    chunks = count_rows(tenants, "kb.chunks")
    tenants.execute("SELECT kb.refresh_term_stats()")
    terms = count_rows(tenants, "kb.lexical_terms")
    with acting_as(tenants, role("acme_writer")):
        insert_document(tenants, "a/new.md", "# New\n\nAcme onboarding takes three days.", namespace="acme")
        tenants.execute("SELECT kb.refresh_lexical_stats()")
        tenants.execute("SELECT kb.refresh_term_stats()")
    added = count_rows(tenants, "kb.chunks") - chunks
    stats = tenants.execute(
        "SELECT sum(chunk_count)::int AS chunk_count, sum(terms_chunk_count)::int AS terms_chunk_count "
        "FROM kb.lexical_stats"
    ).fetchone()
    assert stats == {"chunk_count": chunks + added, "terms_chunk_count": chunks + added}
    assert count_rows(tenants, "kb.lexical_terms") > terms
    assert count_rows(tenants, "kb.lexical_terms WHERE term = 'glxsecretword'") == 1
    with acting_as(tenants, role("globex_reader")):
        assert [r["source"] for r in retrieve(tenants, "glxsecretword", mode="lexical")] == ["b/refund.md"]


def test_readers_cannot_start_recounts_of_the_statistics(tenants):
    for call in ("kb.refresh_lexical_stats()", "kb.refresh_term_stats()", "kb.maybe_refresh_lexical_stats()"):
        with acting_as(tenants, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(f"SELECT {call}")


def test_a_tenant_worker_embeds_only_its_own_namespaces(tenants):
    tenants.execute("UPDATE kb.settings SET value = '\"deferred\"' WHERE key = 'embed_mode'")
    insert_document(tenants, "a/later.md", "# Later\n\nAcme text embedded later.", namespace="acme")
    insert_document(tenants, "b/later.md", "# Later\n\nGlobex text embedded later.", namespace="globex")
    queued = "kb.embed_queue AS q JOIN kb.chunks AS c ON c.id = q.chunk_id WHERE c.namespace = %s"
    globex_queued = count_rows(tenants, queued, "globex")
    assert count_rows(tenants, queued, "acme") > 0 and globex_queued > 0
    with acting_as(tenants, role("acme_writer")):
        outcome = tenants.execute("SELECT kb.embed_queue_batch('hash-64', 100) AS o").fetchone()["o"]
        assert (
            outcome["claimed"]
            == outcome["embedded"]
            == count_rows(
                tenants, "kb.chunks WHERE document_id = (SELECT id FROM kb.documents WHERE source = 'a/later.md')"
            )
        )
        tenants.execute("CALL kb.embed_pending(10)")
    assert count_rows(tenants, queued, "acme") == 0
    assert count_rows(tenants, queued, "globex") == globex_queued
    tenants.execute("CALL kb.embed_pending(10)")  # the owner's worker: every namespace
    assert count_rows(tenants, queued, "globex") == 0
    with acting_as(tenants, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
        tenants.execute("SELECT kb.embed_queue_batch('hash-64', 100)")


# -- namespace grants -----------------------------------------------------------------------------


def test_allowed_namespaces_answers_only_about_the_callers_own_roles(tenants):
    with acting_as(tenants, role("acme_reader")):
        mine = tenants.execute("SELECT kb.allowed_namespaces(current_user) AS n").fetchone()["n"]
        assert mine == ["acme"]
        assert {r["namespace"] for r in tenants.execute("SELECT namespace FROM kb.namespace_grants")} == {"acme"}
    for other in ("postgres", role("globex_reader"), "pgkb_admin"):
        with acting_as(tenants, role("acme_reader")), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute("SELECT kb.allowed_namespaces(%s)", (other,))


def test_a_dropped_role_or_a_public_grant_breaks_no_retrieval(tenants):
    gone = role("gone")
    tenants.execute(f"CREATE ROLE {gone} NOLOGIN")
    tenants.execute("INSERT INTO kb.namespace_grants VALUES (%s, 'tmpns')", (gone,))
    tenants.execute(f"DROP ROLE {gone}")
    tenants.execute("INSERT INTO kb.namespace_grants VALUES ('public', 'shared')")
    insert_document(tenants, "s/faq.md", "# Shared\n\nRefunds are explained in the shared FAQ.", namespace="shared")
    for name, own in (("acme_reader", "acme"), ("globex_reader", "globex")):
        with acting_as(tenants, role(name)):
            namespaces = {r["namespace"] for r in retrieve(tenants, "refunds", k=10, mode="lexical")}
            assert namespaces == {own, "shared"}
    # a new role that reuses the dropped name inherits nothing
    with temporary_role(tenants, gone, "NOLOGIN IN ROLE pgkb_reader"), acting_as(tenants, gone):
        assert tenants.execute("SELECT kb.allowed_namespaces(current_user) AS n").fetchone()["n"] == ["shared"]


def test_a_grant_to_a_role_that_does_not_exist_is_refused(tenants):
    with pytest.raises(psycopg.errors.UndefinedObject, match="no such role"):
        tenants.execute("INSERT INTO kb.namespace_grants VALUES (%s, 'acme')", (role("never_created"),))


# -- the retrieval log ----------------------------------------------------------------------------

LOG_EXPLAIN = {"query": "x", "mode_requested": "auto", "mode": "lexical", "timings_ms": {"total": 1.0}}


def test_log_rows_are_attributed_to_the_tenant_role(tenants):
    tenants.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    with acting_as(tenants, role("acme_reader")):
        assert retrieve(tenants, "refund days", mode="lexical")
    row = tenants.execute("SELECT role_name, session_role, sources FROM kb.retrieval_log").fetchone()
    assert row == {"role_name": role("acme_reader"), "session_role": "postgres", "sources": ["acme/a/refund.md"]}


def test_no_one_can_forge_a_log_row_about_another_tenants_sources(tenants):
    tenants.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    forged_row = Jsonb({"rank": 1, "namespace": "globex", "source": "b/refund.md", "chunk_id": 1, "document_id": 1})
    with acting_as(tenants, role("acme_reader")):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute(
                "SELECT kb.log_retrieval(%s, ARRAY[jsonb_populate_record(NULL::kb.retrieval_row, %s)], NULL, 5)",
                (Jsonb(LOG_EXPLAIN), forged_row),
            )
        for columns, values in (
            ("sources", "ARRAY['globex/b/refund.md']"),
            ("role_name", f"'{role('globex_reader')}'"),
            ("logged_at", "now() - interval '1 day'"),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                tenants.execute(
                    "INSERT INTO kb.retrieval_log (query_hash, mode_requested, mode, k, result_count, "
                    f"low_confidence, no_evidence, timings_ms, total_ms, {columns}) "
                    f"VALUES ('h', 'auto', 'lexical', 5, 1, false, false, '{{}}', 1, {values})"
                )
    assert count_rows(tenants, "kb.retrieval_log") == 0


def test_a_session_cannot_switch_the_retrieval_log_off(tenants):
    tenants.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'retrieval_log'")
    with acting_as(tenants, role("acme_reader")):
        tenants.execute("SET pgkb.retrieval_log = 'false'")
        try:
            retrieve(tenants, "refund days", mode="lexical")
        finally:
            tenants.execute("RESET pgkb.retrieval_log")
    assert count_rows(tenants, "kb.retrieval_log") == 1


# -- provider secrets -----------------------------------------------------------------------------


def test_provider_secrets_reach_the_provider_and_no_reader_or_writer(tenants):
    secret = f"sk-{SUFFIX}-do-not-leak"
    with FakeOllama(dimensions=8, api_key=secret) as srv:
        tenants.execute(
            "SELECT kb.register_model('ollama-8', 'ollama', 'nomic-embed-text', 8, %s, true)",
            (Jsonb({"base_url": srv.url, "api_key": secret, "max_retries": 0}),),
        )
        assert tenants.execute("SELECT options FROM kb.models WHERE name = 'ollama-8'").fetchone()["options"] == {
            "base_url": srv.url,
            "max_retries": 0,
        }
        with acting_as(tenants, role("acme_writer")):
            insert_document(tenants, "a/keyed.md", "# Keyed\n\nAcme vectors need the key.", namespace="acme")
        assert count_rows(tenants, "kb.embeddings WHERE model = 'ollama-8'") > 0  # the server accepted the key
        with acting_as(tenants, role("acme_reader")):
            answer = explain(tenants, "Acme vectors need the key", mode="dense")  # the query vector needs it too
        assert [r["source"] for r in answer["results"]] == ["a/keyed.md"]
        assert secret not in str(answer)
    for name in ("acme_reader", "acme_writer"):
        with acting_as(tenants, role(name)), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute("SELECT * FROM kb.model_secrets")


def test_credentials_in_a_provider_url_never_reach_an_error(tenants):
    with FakeOllama(dimensions=8, mode="always_500") as srv:
        url = srv.url.replace("http://", "http://svc:pw-" + SUFFIX + "@")
        tenants.execute(
            "SELECT kb.register_model('ollama-8', 'ollama', 'nomic-embed-text', 8, %s, true)",
            (Jsonb({"base_url": url, "max_retries": 0, "timeout_s": 2}),),
        )
        assert (
            "base_url"
            not in tenants.execute("SELECT options FROM kb.models WHERE name = 'ollama-8'").fetchone()["options"]
        )
        with acting_as(tenants, role("acme_writer")):
            insert_document(tenants, "a/fails.md", "# Fails\n\nThis embedding fails.", namespace="acme")
            errors = [
                r["last_error"]
                for r in tenants.execute("SELECT last_error FROM kb.embed_queue WHERE last_error IS NOT NULL")
            ]
    assert errors and all("pw-" + SUFFIX not in e and "***" in e for e in errors)


def test_a_migration_moves_existing_secrets_out_of_model_options(tmp_path):
    """Migration 0010 on a database of the release before: secrets move, stale grants go."""
    old = tmp_path / "migrations"
    old.mkdir()
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if path.name < "0010":
            shutil.copy(path, old / path.name)
    (tmp_path / "sql").mkdir()
    name = f"pgkb_secrets_{SUFFIX}"
    admin = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING UTF8')
    dsn = f"postgresql://postgres@{TEST_HOST}:{TEST_PORT}/{name}"
    try:
        migrate(dsn, migrations_dir=old, sql_dir=tmp_path / "sql")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO kb.models (name, provider, model, dimensions, options) "
                "VALUES ('ol', 'ollama', 'm', 8, %s)",
                (Jsonb({"api_key": "sk-old", "base_url": "http://u:p@host:1", "timeout_s": 3}),),
            )
            conn.execute("INSERT INTO kb.namespace_grants VALUES (%s, 'gone')", (role("dropped_long_ago"),))
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT options FROM kb.models WHERE name = 'ol'").fetchone()[0] == {"timeout_s": 3}
            assert conn.execute("SELECT secrets FROM kb.model_secrets WHERE model = 'ol'").fetchone()[0] == {
                "api_key": "sk-old",
                "base_url": "http://u:p@host:1",
            }
            assert conn.execute("SELECT count(*) FROM kb.namespace_grants").fetchone()[0] == 0
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- admins: models yes, python_path no -----------------------------------------------------------


def test_pgkb_admin_registers_and_activates_models(tenants):
    admin = role("kb_admin")
    with temporary_role(tenants, admin, "NOLOGIN IN ROLE pgkb_admin"), acting_as(tenants, admin):
        tenants.execute("SELECT kb.register_model('hash-32', 'hash', 'hash', 32, '{}', false)")
        tenants.execute("SELECT kb.activate_model('hash-32')")
        assert tenants.execute("SELECT name FROM kb.models WHERE active").fetchone()["name"] == "hash-32"
    assert count_rows(tenants, "kb.embed_queue WHERE model = 'hash-32'") == count_rows(tenants, "kb.chunks")
    assert count_rows(tenants, "kb.documents WHERE ingest_status = 'pending'") == count_rows(tenants, "kb.documents")
    for name in ("acme_reader", "acme_writer"):
        with acting_as(tenants, role(name)), pytest.raises(psycopg.errors.InsufficientPrivilege):
            tenants.execute("SELECT kb.register_model('hash-16', 'hash', 'hash', 16, '{}', false)")


def test_only_a_superuser_or_the_owner_may_change_python_path(tenants):
    admin = role("kb_admin")
    path = tenants.execute("SELECT value FROM kb.settings WHERE key = 'python_path'").fetchone()["value"]
    with temporary_role(tenants, admin, "NOLOGIN IN ROLE pgkb_admin"):
        for statement in (
            "UPDATE kb.settings SET value = '\"/tmp/evil\"' WHERE key = 'python_path'",
            "DELETE FROM kb.settings WHERE key = 'python_path'",
            "UPDATE kb.settings SET key = 'python_path' WHERE key = 'bm25_b'",
        ):
            with acting_as(tenants, admin), pytest.raises(psycopg.errors.InsufficientPrivilege, match="python_path"):
                tenants.execute(statement)
        with acting_as(tenants, admin):
            tenants.execute("UPDATE kb.settings SET value = '0.5' WHERE key = 'bm25_b'")  # other settings: yes
            tenants.execute("UPDATE kb.settings SET description = description")  # python_path unchanged: yes
    tenants.execute("UPDATE kb.settings SET value = %s WHERE key = 'python_path'", (Jsonb(path),))  # superuser
    assert tenants.execute("SELECT value FROM kb.settings WHERE key = 'python_path'").fetchone()["value"] == path
