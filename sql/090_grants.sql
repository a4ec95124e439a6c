-- Privileges. kb_retrieve and kb_retrieve_explain are SECURITY INVOKER and run
-- with the caller's rights; they reach PL/Python only through the SECURITY
-- DEFINER wrappers of 040_reader_gateways.sql (kb.query_terms, kb.analyze_query,
-- kb.snippet, kb.embed_query). The PL/Python functions themselves are not for
-- readers: EXECUTE is revoked from PUBLIC on every plpython3u function of the
-- kb schema (the trigger function still fires for whoever may write documents,
-- since triggers are not subject to EXECUTE checks).

DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc AS p
        INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
        INNER JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
        WHERE n.nspname = 'kb' AND l.lanname = 'plpython3u'
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
END;
$$;

-- Roles: pgkb_reader retrieves, pgkb_writer also writes documents (the ingest
-- trigger then writes chunks, postings, vectors as that role), pgkb_admin also
-- changes settings and models. Grant them to login roles.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_reader') THEN
        CREATE ROLE pgkb_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_writer') THEN
        CREATE ROLE pgkb_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_admin') THEN
        CREATE ROLE pgkb_admin NOLOGIN;
    END IF;
END;
$$;

GRANT USAGE ON SCHEMA kb TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb.documents, kb.chunks, kb.embeddings, kb.lexical_postings, kb.lexical_stats, kb.lexical_terms,
kb.models,
kb.settings, kb.settings_catalogue, kb.embedding_providers, kb.embed_queue, kb.model_readiness, kb.ingest_status
TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT INSERT, UPDATE, DELETE ON kb.documents, kb.chunks, kb.embeddings, kb.lexical_postings, kb.embed_queue
TO pgkb_writer, pgkb_admin;
GRANT UPDATE ON kb.lexical_stats TO pgkb_writer, pgkb_admin;
GRANT INSERT, DELETE ON kb.lexical_terms TO pgkb_writer, pgkb_admin;
GRANT EXECUTE ON FUNCTION kb.plpython_init(), kb.embed_queue_batch(text, integer, boolean)
TO pgkb_writer, pgkb_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.settings, kb.models, kb.namespace_grants TO pgkb_admin;
-- what each provider's similarities mean is no secret, and every retrieval reads it
GRANT SELECT ON kb.embedding_providers TO public;
GRANT SELECT ON ALL TABLES IN SCHEMA kb TO pgkb_admin;

CREATE OR REPLACE FUNCTION kb.allowed_namespaces(p_role name)
RETURNS text[]
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- NULL = no restriction (isolation off); else the namespaces granted to any role
    -- p_role is a member of ('*' grants every namespace). Policies pass current_user:
    -- inside this SECURITY DEFINER function current_user would be the owner.
    SELECT CASE
        WHEN NOT coalesce((SELECT (s.value #>> '{}')::boolean FROM kb.settings AS s
            WHERE s.key = 'tenant_isolation'), false) THEN NULL
        WHEN EXISTS (SELECT 1 FROM kb.namespace_grants AS g
            WHERE g.namespace = '*' AND pg_has_role(p_role, g.role_name, 'MEMBER')) THEN NULL
        ELSE coalesce(ARRAY(SELECT g.namespace FROM kb.namespace_grants AS g
            WHERE pg_has_role(p_role, g.role_name, 'MEMBER')), '{}')
    END
$$;
COMMENT ON FUNCTION kb.allowed_namespaces(name) IS
'Namespaces the current role may see when tenant_isolation is on (NULL: all); used by the row-level security policies.';

ALTER TABLE kb.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.lexical_postings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embed_queue ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS tenant_namespace ON kb.documents;
CREATE POLICY tenant_namespace ON kb.documents
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR documents.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
DROP POLICY IF EXISTS tenant_namespace ON kb.chunks;
CREATE POLICY tenant_namespace ON kb.chunks
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR chunks.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
DROP POLICY IF EXISTS tenant_namespace ON kb.lexical_postings;
CREATE POLICY tenant_namespace ON kb.lexical_postings
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR lexical_postings.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
-- vectors and queue rows follow their chunk (whose own policy applies inside the subquery)
DROP POLICY IF EXISTS tenant_namespace ON kb.embeddings;
CREATE POLICY tenant_namespace ON kb.embeddings
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR EXISTS (SELECT 1 FROM kb.chunks AS c WHERE c.id = embeddings.chunk_id)
);
DROP POLICY IF EXISTS tenant_namespace ON kb.embed_queue;
CREATE POLICY tenant_namespace ON kb.embed_queue
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR EXISTS (SELECT 1 FROM kb.chunks AS c WHERE c.id = embed_queue.chunk_id)
);
