"""Read-only facts about a benchmark database: its data, its settings, its installed SQL."""

from __future__ import annotations

import json

#: kb functions whose installed source the recall figures rest on (recall.functions_md5).
FUNCTIONS_CHECKED = ["dense_candidates", "setting", "filters_restrict", "visible_documents", "document_is_current"]


def setting(conn, key: str, default):
    """A pgkb setting as the retrieval functions read it: ``kb.setting(key)``, or, in schemas
    that still have it, ``kb.setting(key, default)``; as text."""
    if conn.execute("SELECT to_regprocedure('kb.setting(text)') IS NOT NULL").fetchone()[0]:
        return conn.execute("SELECT kb.setting(%s) #>> '{}'", [key]).fetchone()[0]
    return conn.execute("SELECT kb.setting(%s, %s::jsonb) #>> '{}'", [key, json.dumps(default)]).fetchone()[0]


def current_ef_search(conn) -> int:
    """The ef_search kb_node.dense_candidates uses: the hnsw_ef_search setting (default 100)."""
    return int(setting(conn, "hnsw_ef_search", 100))


def function_sources(conn, names: list[str] = FUNCTIONS_CHECKED) -> dict[str, str]:
    """md5 of source and SET clauses of the installed kb functions named ``names``."""
    rows = conn.execute(
        """SELECT format('kb.%%s/%%s', p.proname, p.pronargs),
                  md5(p.prosrc || coalesce(array_to_string(p.proconfig, ','), ''))
           FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname = 'kb' AND p.proname = ANY(%s) ORDER BY 1""",
        [names],
    ).fetchall()
    return dict(rows)


def data_stats(conn) -> dict:
    """Documents, chunks, postings, the share of chunks visible now, the database size."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM kb.documents),
                  (SELECT count(*) FROM kb.chunks),
                  (SELECT count(*) FROM kb.lexical_postings),
                  (SELECT count(*) FROM kb.chunks WHERE document_id IN
                      (SELECT kb.visible_documents(now(), NULL, '{}'))),
                  pg_size_pretty(pg_database_size(current_database()))"""
    ).fetchone()
    return {
        "documents": row[0],
        "chunks": row[1],
        "postings": row[2],
        "visible_chunks": row[3],
        "visible_fraction": round(row[3] / max(row[1], 1), 3),
        "database_size": row[4],
    }


def corpus_fingerprint(conn) -> dict:
    """What two copies of one corpus share: row counts and md5 over the documents' and chunks'
    content hashes in id order."""
    docs = conn.execute("SELECT count(*), md5(string_agg(content_hash, ',' ORDER BY id)) FROM kb.documents").fetchone()
    chunks = conn.execute("SELECT count(*), md5(string_agg(content_hash, ',' ORDER BY id)) FROM kb.chunks").fetchone()
    return {"documents": docs[0], "documents_md5": docs[1], "chunks": chunks[0], "chunks_md5": chunks[1]}


def index_counts(conn) -> dict:
    """Rows of what is derived from the chunks: vectors (all models) and BM25 postings."""
    return {
        "embeddings": conn.execute("SELECT count(*) FROM kb.embeddings").fetchone()[0],
        "postings": conn.execute("SELECT count(*) FROM kb.lexical_postings").fetchone()[0],
    }


def schema_identity(conn) -> dict:
    """Which retrieval SQL a database runs: its last migration and md5 over the source and SET
    clauses of every function in the kb and public schemas (extensions' functions excluded)."""
    last = conn.execute("SELECT max(filename) FROM kb.schema_migrations").fetchone()[0]
    row = conn.execute(
        """SELECT count(*), md5(string_agg(p.oid::regprocedure::text || ':' || p.prosrc
                                          || coalesce(array_to_string(p.proconfig, ','), ''), ';'
                                          ORDER BY p.oid::regprocedure::text))
           FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
           WHERE n.nspname IN ('kb', 'public')
             AND NOT EXISTS (SELECT 1 FROM pg_depend AS d
                             WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')"""
    ).fetchone()
    return {"last_migration": last, "functions": row[0], "functions_md5": row[1]}


def memory_facts(conn) -> dict:
    """Memory as this run saw it: the server's buffer settings, the sizes of the kb relations the
    dense and lexical legs read (heap with TOAST, each index), and the resident memory of this
    connection's backend (``/proc/<pid>/status``: VmRSS, of which RssShmem is shared buffers it
    touched and RssAnon its own, e.g. the loaded model); None where the server is not local."""
    settings = dict(
        conn.execute(
            """SELECT name, current_setting(name) FROM pg_settings
               WHERE name IN ('shared_buffers', 'effective_cache_size', 'work_mem', 'maintenance_work_mem')"""
        ).fetchall()
    )
    relations = {
        r[0]: {"bytes": r[1], "pretty": r[2]}
        for r in conn.execute(
            """SELECT c.oid::regclass::text, pg_total_relation_size(c.oid) - coalesce(
                          CASE WHEN c.relkind = 'r' THEN pg_indexes_size(c.oid) END, 0),
                      pg_size_pretty(pg_total_relation_size(c.oid) - coalesce(
                          CASE WHEN c.relkind = 'r' THEN pg_indexes_size(c.oid) END, 0))
               FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
               WHERE n.nspname = 'kb' AND c.relkind IN ('r', 'i')
                 AND pg_total_relation_size(c.oid) > 8 * 1024 * 1024
               ORDER BY 2 DESC"""
        ).fetchall()
    }
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    rss: dict | None = None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            rss = {
                k: v.strip()
                for k, v in (line.split(":", 1) for line in fh)
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")
            }
    except OSError:
        rss = None
    return {"settings": settings, "relations": relations, "backend_pid": pid, "backend_status": rss}
