"""Front matter keys that govern retrieval (docs/INGEST.md, pgkb_plpy/front_matter.py), as the
database applies them to any SQL client's rows and as `pgkb ingest` sends them:

* ``rag_include: false`` keeps a document stored but out of retrieval, in every mode and leg,
  with ``ingest_status = 'excluded'``; back to true, it is indexed again;
* ``concept_keys`` and backticked terms count ``concept_term_weight`` times in the BM25 term
  frequencies; changing the keys rewrites the postings without re-embedding;
* ``aliases``/``synonyms`` make a query that uses one find the document, under the document's
  lifecycle (a superseded version's aliases match nothing) and its tenant's isolation;
* the same keys in the front matter of a body inserted by SQL count (metadata wins), and a value
  a key may not hold is refused with the key named, losing nothing that was stored."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from helpers import acting_as, count_rows, insert_document, sources, temporary_role

from harness import loader
from harness.config import PLPYTHON_DIR
from harness.retrieval import MODES, retrieve

SUFFIX = uuid.uuid4().hex[:8]


def _front_matter_module():
    spec = importlib.util.spec_from_file_location("front_matter_under_test", PLPYTHON_DIR / "front_matter.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fm = _front_matter_module()


def document(conn, source: str, namespace: str = "default") -> dict:
    return conn.execute(
        "SELECT id, ingest_status, ingest_error, chunk_count, metadata FROM kb.documents "
        "WHERE namespace = %s AND source = %s",
        (namespace, source),
    ).fetchone()


def postings_tf(conn, source: str, term: str) -> list[int]:
    rows = conn.execute(
        """SELECT lp.tf FROM kb.lexical_postings AS lp JOIN kb.documents AS d ON d.id = lp.document_id
           WHERE d.source = %s AND lp.term = %s ORDER BY lp.chunk_id""",
        (source, term),
    ).fetchall()
    return [r["tf"] for r in rows]


# ----------------------------------------------------------------- rag_include


def test_rag_include_false_document_is_never_retrieved(fresh_db):
    insert_document(fresh_db, "kept.md", "# Quarzite rota\n\nThe quarzite rotation runs weekly.")
    insert_document(
        fresh_db,
        "hidden.md",
        "# Quarzite notes\n\nquarzite quarzite quarzite rotation notes, private.",
        metadata={"rag_include": False},
    )
    hidden = document(fresh_db, "hidden.md")
    assert (hidden["ingest_status"], hidden["chunk_count"], hidden["ingest_error"]) == ("excluded", 0, None)
    assert count_rows(fresh_db, "kb.chunks WHERE document_id = %s", hidden["id"]) == 0
    for mode in MODES:
        for filters in ({}, {"include_history": True}, {"metadata": {"rag_include": False}}):
            found = sources(retrieve(fresh_db, "quarzite rotation", mode=mode, filters=filters))
            assert "hidden.md" not in found, (mode, filters)
    assert sources(retrieve(fresh_db, "quarzite rotation", mode="lexical")) == ["kept.md"]
    status = fresh_db.execute("SELECT excluded, documents, indexed FROM kb.ingest_status").fetchone()
    assert (status["excluded"], status["documents"], status["indexed"]) == (1, 2, 1)


def test_rag_include_back_to_true_indexes_the_document_and_false_again_removes_its_chunks(fresh_db):
    doc_id = insert_document(fresh_db, "toggle.md", "Flibbertine procedure.", metadata={"rag_include": False})
    assert retrieve(fresh_db, "flibbertine", mode="lexical") == []
    fresh_db.execute("UPDATE kb.documents SET metadata = '{\"rag_include\": true}' WHERE id = %s", (doc_id,))
    assert document(fresh_db, "toggle.md")["ingest_status"] == "indexed"
    assert sources(retrieve(fresh_db, "flibbertine", mode="lexical")) == ["toggle.md"]
    fresh_db.execute("UPDATE kb.documents SET metadata = '{\"rag_include\": false}' WHERE id = %s", (doc_id,))
    assert document(fresh_db, "toggle.md")["ingest_status"] == "excluded"
    assert count_rows(fresh_db, "kb.chunks WHERE document_id = %s", doc_id) == 0
    assert count_rows(fresh_db, "kb.lexical_postings WHERE document_id = %s", doc_id) == 0
    assert retrieve(fresh_db, "flibbertine", mode="lexical") == []


def test_excluded_document_stays_excluded_when_statuses_are_recomputed(fresh_db):
    doc_id = insert_document(fresh_db, "x.md", "Excluded text.", metadata={"rag_include": False})
    fresh_db.execute("SELECT kb.refresh_ingest_status(ARRAY[%s]::bigint[])", (doc_id,))
    fresh_db.execute("SELECT kb.activate_model('hash-64')")
    assert document(fresh_db, "x.md")["ingest_status"] == "excluded"


def test_rag_include_false_in_the_front_matter_of_a_body_inserted_by_sql_is_honoured(fresh_db):
    body = "---\ntitle: Private\nrag_include: no  # YAML 1.1 false\n---\n# Private\n\nZymurgic secrets."
    insert_document(fresh_db, "body-fm.md", body)
    assert document(fresh_db, "body-fm.md")["ingest_status"] == "excluded"
    assert retrieve(fresh_db, "zymurgic", mode="lexical") == []


def test_metadata_wins_over_the_body_front_matter(fresh_db):
    body = "---\nrag_include: false\n---\nZymurgic public text."
    insert_document(fresh_db, "both.md", body, metadata={"rag_include": True})
    assert document(fresh_db, "both.md")["ingest_status"] == "indexed"
    assert sources(retrieve(fresh_db, "zymurgic", mode="lexical")) == ["both.md"]


# ------------------------------------------------------- concept keys, backticks


def test_concept_keys_count_concept_term_weight_times_in_every_chunk(fresh_db):
    weight = fresh_db.execute("SELECT (kb.setting('concept_term_weight') #>> '{}')::int AS w").fetchone()["w"]
    assert weight > 1
    insert_document(fresh_db, "plain.md", "The gearbox needs oil. Gearbox checks monthly.")
    insert_document(
        fresh_db,
        "keyed.md",
        "The gearbox needs oil. Service monthly.",
        metadata={"concept_keys": ["gearbox", "gear.ratio_max"]},
    )
    assert postings_tf(fresh_db, "keyed.md", "gearbox") == [1 + weight]
    assert postings_tf(fresh_db, "keyed.md", "gear.ratio_max") == [weight]
    assert postings_tf(fresh_db, "keyed.md", "ratio") == [1]
    assert postings_tf(fresh_db, "keyed.md", "lubric") == []
    assert sources(retrieve(fresh_db, "gearbox", mode="lexical"))[0] == "keyed.md"


def test_backticked_terms_count_concept_term_weight_times(fresh_db):
    weight = fresh_db.execute("SELECT (kb.setting('concept_term_weight') #>> '{}')::int AS w").fetchone()["w"]
    insert_document(fresh_db, "code.md", "Set `session.ttl_seconds` to 60; the session ends after that.")
    assert postings_tf(fresh_db, "code.md", "session.ttl_seconds") == [weight]
    assert postings_tf(fresh_db, "code.md", "session") == [2]  # the identifier weighs whole, not its parts
    assert postings_tf(fresh_db, "code.md", "end") == [1]


def test_chunk_length_counts_each_occurrence_once_whatever_its_weight(fresh_db):
    insert_document(fresh_db, "a.md", "alpha beta gamma")
    insert_document(fresh_db, "b.md", "`alpha` beta gamma")
    lengths = fresh_db.execute(
        "SELECT d.source, c.lexical_length FROM kb.chunks c JOIN kb.documents d ON d.id = c.document_id ORDER BY 1"
    ).fetchall()
    assert [r["lexical_length"] for r in lengths] == [3, 3]


def test_changing_concept_keys_rewrites_the_postings_without_re_embedding(fresh_db):
    doc_id = insert_document(fresh_db, "k.md", "Valve maintenance guide.", metadata={"concept_keys": ["valve"]})
    before = fresh_db.execute(
        "SELECT e.chunk_id, e.embedded_at FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id "
        "WHERE c.document_id = %s",
        (doc_id,),
    ).fetchall()
    fresh_db.execute('UPDATE kb.documents SET metadata = \'{"concept_keys": ["actuator"]}\' WHERE id = %s', (doc_id,))
    assert postings_tf(fresh_db, "k.md", "valv") == [1]
    assert postings_tf(fresh_db, "k.md", "actuat") != []
    after = fresh_db.execute(
        "SELECT e.chunk_id, e.embedded_at FROM kb.embeddings e JOIN kb.chunks c ON c.id = e.chunk_id "
        "WHERE c.document_id = %s",
        (doc_id,),
    ).fetchall()
    assert after == before and before
    assert sources(retrieve(fresh_db, "actuator", mode="lexical")) == ["k.md"]


# ------------------------------------------------------------------- aliases


def test_a_query_using_an_alias_or_synonym_finds_the_document(fresh_db):
    insert_document(
        fresh_db,
        "sso.md",
        "# Single sign-on\n\nEmployees log in once for every internal tool.",
        metadata={"aliases": ["SSO", "统一登录"], "synonyms": ["federated login"]},
    )
    insert_document(fresh_db, "other.md", "# Printers\n\nThe printer on floor two is broken.")
    for query in ("SSO", "统一登录", "federated"):
        assert sources(retrieve(fresh_db, query, mode="lexical"))[:1] == ["sso.md"], query
        assert sources(retrieve(fresh_db, query, mode="auto"))[:1] == ["sso.md"], query


def test_aliases_of_a_superseded_version_match_only_when_that_version_applied(fresh_db):
    insert_document(
        fresh_db,
        "vpn-v1.md",
        "Connect with the old client.",
        metadata={"aliases": ["Grommetnet"]},
        effective_from="2024-01-01",
    )
    insert_document(
        fresh_db, "vpn-v2.md", "Connect with the new client.", effective_from="2025-01-01", supersedes="vpn-v1.md"
    )
    assert retrieve(fresh_db, "grommetnet", mode="lexical", as_of="2025-06-01") == []
    assert sources(retrieve(fresh_db, "grommetnet", mode="lexical", as_of="2024-06-01")) == ["vpn-v1.md"]


def test_an_excluded_documents_aliases_match_nothing(fresh_db):
    insert_document(fresh_db, "ex.md", "Some text.", metadata={"aliases": ["Snarkwidget"], "rag_include": False})
    assert retrieve(fresh_db, "snarkwidget", mode="lexical") == []


def test_one_tenants_aliases_and_concept_keys_do_not_reach_another(fresh_db):
    fresh_db.execute("UPDATE kb.settings SET value = 'true' WHERE key = 'tenant_isolation'")
    insert_document(
        fresh_db,
        "merger.md",
        "Board notes.",
        namespace="globex",
        metadata={"aliases": [f"glxalias{SUFFIX}"], "concept_keys": [f"glxconcept{SUFFIX}"]},
    )
    insert_document(fresh_db, "a.md", "Acme handbook.", namespace="acme")
    reader = f"acme_reader_{SUFFIX}"
    with temporary_role(fresh_db, reader) as name:
        fresh_db.execute(f"GRANT pgkb_reader TO {name}")
        fresh_db.execute("INSERT INTO kb.namespace_grants (role_name, namespace) VALUES (%s, 'acme')", (name,))
        with acting_as(fresh_db, name):
            for query in (f"glxalias{SUFFIX}", f"glxconcept{SUFFIX}"):
                assert retrieve(fresh_db, query, mode="lexical") == [], query
                # the dense leg may still find acme's own passage: the hash vector of a random
                # token is near it by chance, which says nothing about globex
                for mode in MODES:
                    assert {r["namespace"] for r in retrieve(fresh_db, query, mode=mode)} <= {"acme"}, (query, mode)
            seen = fresh_db.execute("SELECT count(*) AS n FROM kb.lexical_postings WHERE term LIKE 'glx%%'").fetchone()[
                "n"
            ]
            assert seen == 0


# ---------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"concept_keys": "gearbox"}, "concept_keys"),
        ({"aliases": [["nested"]]}, "aliases"),
        ({"synonyms": [""]}, "synonyms"),
        ({"rag_include": "no"}, "rag_include"),
    ],
)
def test_a_bad_retrieval_key_is_refused_naming_the_key_and_loses_nothing(fresh_db, metadata, key):
    doc_id = insert_document(fresh_db, "ok.md", "Stored gearbox text.")
    with pytest.raises(psycopg.errors.CheckViolation) as err:
        with fresh_db.transaction():
            fresh_db.execute(
                "UPDATE kb.documents SET metadata = %s WHERE id = %s", (psycopg.types.json.Jsonb(metadata), doc_id)
            )
    assert key in err.value.diag.message_primary and "ok.md" in err.value.diag.message_primary
    with pytest.raises(psycopg.errors.CheckViolation):
        with fresh_db.transaction():
            insert_document(fresh_db, "new.md", "New text.", metadata=metadata)
    assert document(fresh_db, "ok.md")["ingest_status"] == "indexed"
    assert document(fresh_db, "new.md") is None
    assert sources(retrieve(fresh_db, "gearbox", mode="lexical")) == ["ok.md"]


def test_metadata_nested_deeper_than_python_reads_is_refused_by_name_and_loses_nothing(fresh_db):
    doc_id = insert_document(fresh_db, "ok.md", "Stored gearbox text.")
    deep = '{"a": ' * 2000 + "1" + "}" * 2000  # as JSON text: the client's own encoder stops near 1,000
    with pytest.raises(psycopg.errors.CheckViolation) as err:
        with fresh_db.transaction():
            fresh_db.execute(
                "INSERT INTO kb.documents (namespace, source, body, metadata) "
                "VALUES ('default', 'deep.md', %s, %s::jsonb)",
                ("Deep gearbox text.", deep),
            )
    assert "metadata nests deeper" in err.value.diag.message_primary and "deep.md" in err.value.diag.message_primary
    assert document(fresh_db, "deep.md") is None
    assert document(fresh_db, "ok.md")["id"] == doc_id and document(fresh_db, "ok.md")["ingest_status"] == "indexed"
    assert sources(retrieve(fresh_db, "gearbox", mode="lexical")) == ["ok.md"]


def test_a_bad_key_in_a_bodys_front_matter_is_refused_naming_the_key(fresh_db):
    with pytest.raises(psycopg.errors.CheckViolation) as err:
        insert_document(fresh_db, "b.md", "---\nconcept_keys: gearbox\n---\nText.")
    assert "concept_keys" in err.value.diag.message_primary


# ----------------------------------------------------------------- the loader


def test_pgkb_ingest_sends_the_keys_in_metadata_and_the_database_applies_them(fresh_db, dsn, tmp_path):
    (tmp_path / "private.md").write_text("---\ntitle: Private\nrag_include: false\n---\nOrnithopter plans.\n")
    (tmp_path / "public.md").write_text(
        "---\ntitle: Public\nconcept_keys: [ornithopter]\naliases: [flapper]\n---\nOrnithopter overview.\n"
    )
    summary = loader.ingest(dsn, [str(tmp_path)], progress=False)
    assert summary.failed == []
    assert document(fresh_db, "private.md")["ingest_status"] == "excluded"
    assert sources(retrieve(fresh_db, "ornithopter", mode="lexical")) == ["public.md"]
    assert sources(retrieve(fresh_db, "flapper", mode="lexical")) == ["public.md"]


def test_pgkb_ingest_reports_a_bad_key_with_file_and_line_and_loads_the_others(fresh_db, dsn, tmp_path):
    (tmp_path / "bad.md").write_text("---\ntitle: Bad\n\nconcept_keys: ornithopter\n---\nText.\n")
    (tmp_path / "good.md").write_text("---\ntitle: Good\n---\nOrnithopter text.\n")
    summary = loader.ingest(dsn, [str(tmp_path)], progress=False)
    assert [f["file"] for f in summary.failed] == [str(tmp_path / "bad.md")]
    assert f"{tmp_path / 'bad.md'}:4: front matter concept_keys must be a list" in summary.failed[0]["error"]
    assert summary.synced == ["good.md"]


# ----------------------------------------------- the rules, without a database


def test_front_matter_block_reader_takes_the_yaml_the_keys_need():
    lines = [
        "title: 'x: y'",
        "rag_include: Off",
        "concept_keys: [alpha_key, 'beta, gamma', \"δ\"]  # comment",
        "aliases:",
        "  - SSO",
        "  - '统一登录'",
        "synonyms: []",
        "other: [ignored",
    ]
    assert fm.read_block(lines) == {
        "rag_include": False,
        "concept_keys": ["alpha_key", "beta, gamma", "δ"],
        "aliases": ["SSO", "统一登录"],
        "synonyms": [],
    }


@pytest.mark.parametrize("line", ["concept_keys: |", "aliases: {a: b}", "aliases: [a, [b]]", "aliases: [a, b"])
def test_front_matter_block_reader_refuses_yaml_it_does_not_read(line):
    with pytest.raises(fm.RetrievalKeyError, match=line.split(":")[0]):
        fm.read_block([line])


def test_retrieval_options_merge_aliases_and_synonyms_and_default_to_included():
    options = fm.retrieval_options({"aliases": ["a"], "synonyms": [2024], "concept_keys": None})
    assert options == fm.RetrievalOptions(rag_include=True, concept_keys=(), aliases=("a", "2024"))
    assert fm.retrieval_options({"rag_include": False}).rag_include is False


def test_loader_and_check_read_the_rules_from_the_same_module():
    assert loader.front_matter.RETRIEVAL_KEYS == fm.RETRIEVAL_KEYS
    assert Path(loader.front_matter.__file__) == PLPYTHON_DIR / "front_matter.py"
