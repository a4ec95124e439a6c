-- Privileges. Readers reach retrieval through its doors (kb_retrieve,
-- kb_retrieve_explain, the shard parts of 045_shard_parts.sql: SECURITY
-- DEFINER, working out the caller's scope themselves, 040_reader_gateways.sql).
-- EXECUTE is revoked from PUBLIC on
-- * every plpython3u function of the kb schema (the trigger functions still
--   fire for whoever may write documents: triggers are not subject to EXECUTE
--   checks); the shard coordinator, which runs as its caller, reaches them
--   through the SECURITY DEFINER wrappers of 040;
-- * every function of kb_pipeline but the steps a shard coordinator runs as
--   its caller (pure, or reading only what every reader may read): the others
--   read every tenant's rows as the owner, and called directly would skip the
--   scope, the bounds of kb_pipeline.validated_request and the retrieval log;
-- * kb's functions that read rows for the pipeline as the owner.

DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc AS p
        INNER JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
        INNER JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
        WHERE (n.nspname = 'kb' AND (l.lanname = 'plpython3u' OR p.proname IN (
            'read_scope', 'visible_documents', 'visible_candidate', 'log_retrieval'
        )))
        OR (n.nspname = 'kb_pipeline' AND NOT p.proname = ANY(kb_pipeline.coordinator_steps()))
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
END;
$$;
GRANT USAGE ON SCHEMA kb_pipeline TO public;
-- empty: the lock every retrieval door takes, also as its caller (the shard coordinator)
GRANT SELECT ON kb.pipeline_door TO public;

-- The roles (pgkb_reader, pgkb_writer, pgkb_admin) are sql/001_roles.sql's.

GRANT USAGE ON SCHEMA kb TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb.documents, kb.chunks, kb.embeddings, kb.lexical_postings, kb.lexical_stats, kb.lexical_terms,
kb.statistics_documents, kb.language_statistics, kb.language_statistics_status, kb.document_files, kb.stale_documents, kb.models,
kb.settings, kb.settings_catalogue, kb.embedding_providers, kb.embed_queue, kb.model_readiness, kb.ingest_status,
kb.file_warnings, kb.ocr_queue
TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT INSERT, UPDATE, DELETE ON kb.documents TO pgkb_writer, pgkb_admin;
-- the record of tenant_isolation's changes: written by its trigger only (as the owner), read by admins
REVOKE ALL ON kb.tenant_isolation_changes FROM public, pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb.tenant_isolation_changes TO pgkb_admin;
-- Derived tables are written by the trigger path only (SECURITY DEFINER, as
-- the owner): a writer able to insert a posting learns from a duplicate-key or
-- foreign-key outcome which words another tenant's chunks hold, and one able
-- to write the statistics poisons every tenant's scores. Revoked explicitly,
-- since earlier releases granted them and grants outlive a migrate.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON kb.chunks, kb.embeddings, kb.lexical_postings, kb.lexical_terms,
kb.lexical_stats, kb.statistics_documents, kb.statistics_schedule, kb.language_statistics, kb.embed_queue
FROM public, pgkb_reader, pgkb_writer, pgkb_admin;
GRANT EXECUTE ON FUNCTION kb.plpython_init() TO pgkb_writer, pgkb_admin;
-- OCR runs a parser as the owner for every document it claims: the writers' job, not a reader's
REVOKE EXECUTE ON FUNCTION kb.ocr_pending(integer) FROM public;
GRANT EXECUTE ON FUNCTION kb.ocr_pending(integer) TO pgkb_writer, pgkb_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.settings, kb.models, kb.namespace_grants, kb.model_secrets TO pgkb_admin;
-- what each provider's similarities mean is no secret, and every retrieval reads it
GRANT SELECT ON kb.embedding_providers TO public;
GRANT SELECT ON ALL TABLES IN SCHEMA kb TO pgkb_admin;

-- Functions that run as the owner and write or recompute shared state: only
-- the roles whose job that is may call them (a reader starting full recounts
-- of the statistics would be a denial of service).
REVOKE EXECUTE ON FUNCTION kb.store_model(text, text, text, integer, jsonb, boolean) FROM public;
REVOKE EXECUTE ON FUNCTION kb.register_model(text, text, text, integer, jsonb, boolean), kb.activate_model(text),
kb.ensure_hnsw_indexes(text),
kb.refresh_lexical_stats(), kb.refresh_term_stats(text[]), kb.maybe_refresh_lexical_stats(),
kb.recount_lexical_stats(), kb.recount_term_stats(text[]), kb.recount_statistics_documents(), kb.refresh_statistics_if_due(),
kb.recount_language_statistics(text), kb.maybe_refresh_language_statistics(), kb.refresh_language_statistics(text),
kb.embed_queue_batch(text, integer, boolean), kb.embed_queue_batch_as(text, integer, boolean, name)
FROM public;
GRANT EXECUTE ON FUNCTION kb.register_model(text, text, text, integer, jsonb, boolean), kb.activate_model(text),
kb.ensure_hnsw_indexes(text)
TO pgkb_admin;
GRANT EXECUTE ON FUNCTION kb.refresh_lexical_stats(), kb.refresh_term_stats(text[]), kb.maybe_refresh_lexical_stats(),
kb.recount_lexical_stats(), kb.recount_term_stats(text[]), kb.recount_statistics_documents(), kb.refresh_statistics_if_due(),
kb.recount_language_statistics(text), kb.maybe_refresh_language_statistics(), kb.refresh_language_statistics(text),
kb.embed_queue_batch(text, integer, boolean), kb.embed_queue_batch_as(text, integer, boolean, name)
TO pgkb_writer, pgkb_admin;

-- Namespace grants. A grant names a role; the trigger records its oid (0 for
-- PUBLIC) and refuses a role that does not exist, so a dropped role leaves a
-- row that matches nobody (never an error in everyone's retrieval) and a new
-- role reusing the name inherits nothing.
CREATE OR REPLACE FUNCTION kb.trg_namespace_grants_role()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.role_name = 'public' THEN
        NEW.role_id := 0;
    ELSE
        NEW.role_id := (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = NEW.role_name);
        IF NEW.role_id IS NULL THEN
            RAISE EXCEPTION 'pgkb: cannot grant namespace % to role "%": no such role', NEW.namespace, NEW.role_name
                USING ERRCODE = 'undefined_object',
                    HINT = 'create the role first; ''public'' grants the namespace to every role';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_namespace_grants_role() IS
'BEFORE INSERT/UPDATE on kb.namespace_grants: binds the grant to the role''s oid (0 = PUBLIC) and refuses a role that does not exist, so that dropping a role can never break other tenants'' retrieval.';

DROP TRIGGER IF EXISTS namespace_grants_role ON kb.namespace_grants;
CREATE TRIGGER namespace_grants_role BEFORE INSERT OR UPDATE ON kb.namespace_grants
FOR EACH ROW EXECUTE FUNCTION kb.trg_namespace_grants_role();

-- Document readers, bound the same way: a name becomes the role's oid when
-- the list is written ('public': 0), and an unknown role is refused.
CREATE OR REPLACE FUNCTION kb.trg_documents_readers()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    unknown text;
BEGIN
    IF NEW.readers IS NULL THEN
        NEW.reader_ids := NULL;
        RETURN NEW;
    END IF;
    SELECT r.name INTO unknown
    FROM unnest(NEW.readers) AS r (name)
    WHERE r.name IS NULL OR r.name <> 'public' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS x WHERE x.rolname = r.name)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgkb: document %/% names reader "%": no such role', NEW.namespace, NEW.source, unknown
            USING ERRCODE = 'undefined_object', COLUMN = 'readers',
                HINT = 'readers lists role names (''public'': every role that may read the namespace); NULL: no restriction';
    END IF;
    NEW.reader_ids := ARRAY(
        SELECT DISTINCT CASE WHEN r.name = 'public' THEN 0::oid ELSE (SELECT x.oid FROM pg_catalog.pg_roles AS x WHERE x.rolname = r.name) END
        FROM unnest(NEW.readers) AS r (name)
        ORDER BY 1
    );
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_readers() IS
'BEFORE INSERT/UPDATE OF readers on kb.documents: binds the readers'' names to role oids (reader_ids; ''public'' is 0) and refuses a name that is no role, so that a dropped role matches nobody and a new role of the same name inherits nothing.';

DROP TRIGGER IF EXISTS documents_readers ON kb.documents;
CREATE TRIGGER documents_readers BEFORE INSERT OR UPDATE OF readers, reader_ids ON kb.documents
FOR EACH ROW EXECUTE FUNCTION kb.trg_documents_readers();

CREATE OR REPLACE FUNCTION kb.member_role_ids(p_role name)
RETURNS oid[]
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- from the membership catalogue, not pg_has_role: a role dropped meanwhile
    -- is simply absent instead of an error
    WITH RECURSIVE member_of (id) AS (
        SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role
        UNION
        SELECT m.roleid FROM pg_catalog.pg_auth_members AS m INNER JOIN member_of AS o ON m.member = o.id
    )
    SELECT ARRAY(SELECT o.id FROM member_of AS o) || '{0}'::oid[]
$$;
COMMENT ON FUNCTION kb.member_role_ids(name) IS
'Oids of p_role and every role it is a member of, directly or not, and 0 (PUBLIC): the roles whose namespace grants apply to p_role.';

CREATE OR REPLACE FUNCTION kb.tenant_isolation_on()
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Fails closed: only a row saying false turns isolation off. A missing
    -- row or a null value means on (the tables' owner and roles that bypass
    -- row-level security still see everything: kb.allowed_namespaces).
    SELECT NOT coalesce((SELECT s.value = 'false'::jsonb FROM kb.settings AS s WHERE s.key = 'tenant_isolation'), false)
$$;
COMMENT ON FUNCTION kb.tenant_isolation_on() IS
'Whether tenant isolation is on: off only while kb.settings holds tenant_isolation = false (a fresh install''s default); a missing row or a null value means on. Every change is recorded in kb.tenant_isolation_changes. SECURITY DEFINER so that policies work for roles that may not read kb.settings.';

-- Readers see their own grants (those kb.allowed_namespaces needs), admins all.
ALTER TABLE kb.namespace_grants ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON kb.namespace_grants TO public;
DROP POLICY IF EXISTS own_grants ON kb.namespace_grants;
CREATE POLICY own_grants ON kb.namespace_grants FOR SELECT
USING (namespace_grants.role_id = any((SELECT kb.member_role_ids(current_user))::oid[]));
DROP POLICY IF EXISTS admin_grants ON kb.namespace_grants;
CREATE POLICY admin_grants ON kb.namespace_grants TO pgkb_admin USING (true) WITH CHECK (true);

CREATE OR REPLACE FUNCTION kb.trg_settings_tenant_isolation_audit()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- with the owner's rights: an admin who may change settings may not write the record of it
    IF TG_OP = 'DELETE' AND OLD.key = 'tenant_isolation'
        OR TG_OP = 'INSERT' AND NEW.key = 'tenant_isolation'
        OR TG_OP = 'UPDATE' AND NEW.key = 'tenant_isolation' AND NEW.value IS DISTINCT FROM OLD.value THEN
        INSERT INTO kb.tenant_isolation_changes (role_name, login, operation, old_value, new_value)
        VALUES (kb.session_role(), session_user, TG_OP, CASE WHEN TG_OP <> 'INSERT' THEN OLD.value END,
            CASE WHEN TG_OP <> 'DELETE' THEN NEW.value END);
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_tenant_isolation_audit() IS
'Records every change of the setting tenant_isolation (insert, a changed value, delete) in kb.tenant_isolation_changes, with the owner''s rights.';

CREATE OR REPLACE TRIGGER settings_tenant_isolation_audit
AFTER INSERT OR UPDATE OR DELETE ON kb.settings
FOR EACH ROW EXECUTE FUNCTION kb.trg_settings_tenant_isolation_audit();

CREATE OR REPLACE FUNCTION kb.allowed_namespaces(p_role name)
RETURNS text[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- SECURITY INVOKER: the caller reads only the grants of its own roles
    -- (the policy of kb.namespace_grants), and may ask only about itself or a
    -- role it belongs to, so no one learns what other tenants were granted.
    -- (the owner of kb.documents, e.g. inside the retrieval gateways, may ask about any role)
    IF p_role IS DISTINCT FROM current_user AND NOT pg_has_role(current_user, p_role, 'MEMBER')
        AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class AS c
            WHERE c.oid = 'kb.documents'::regclass), 'USAGE') THEN
        RAISE EXCEPTION 'pgkb: kb.allowed_namespaces(%) may be asked only about the current role or a role it is a member of', p_role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- NULL = no restriction: isolation off, or a role the policies do not
    -- apply to (superuser, BYPASSRLS, the tables' owner), such as a worker
    -- run by the owner
    IF NOT kb.tenant_isolation_on()
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role AND (r.rolsuper OR r.rolbypassrls))
        OR pg_has_role(p_role, (SELECT c.relowner FROM pg_catalog.pg_class AS c WHERE c.oid = 'kb.documents'::regclass),
            'USAGE') THEN
        RETURN NULL;
    END IF;
    -- the grants ('*' grants every namespace)
    RETURN (
        SELECT CASE WHEN bool_or(g.namespace = '*') THEN NULL ELSE coalesce(array_agg(DISTINCT g.namespace), '{}') END
        FROM kb.namespace_grants AS g
        WHERE g.role_id = ANY(kb.member_role_ids(p_role))
    );
END;
$$;
COMMENT ON FUNCTION kb.allowed_namespaces(name) IS
'Namespaces p_role (the current role or one it belongs to) may see when tenant_isolation is on (NULL: all); used by the row-level security policies, which pass current_user, and by kb.read_scope.';

ALTER TABLE kb.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.lexical_postings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embed_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.lexical_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.lexical_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.language_statistics ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.statistics_documents ENABLE ROW LEVEL SECURITY;

-- A document naming readers is seen only by them (whatever tenant_isolation
-- says: a list of readers is a promise of its own); a writer may write only
-- documents it may read. Its chunks and postings follow it: the EXISTS
-- applies the documents' policy to each row a role reads directly (the
-- retrieval doors read as the owner and apply kb.may_read_document instead).
DROP POLICY IF EXISTS tenant_namespace ON kb.documents;
CREATE POLICY tenant_namespace ON kb.documents
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR documents.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND (documents.reader_ids IS NULL OR documents.reader_ids && (SELECT kb.member_role_ids(current_user)))
);
DROP POLICY IF EXISTS tenant_namespace ON kb.chunks;
CREATE POLICY tenant_namespace ON kb.chunks
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR chunks.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.id = chunks.document_id)
);
DROP POLICY IF EXISTS tenant_namespace ON kb.lexical_postings;
CREATE POLICY tenant_namespace ON kb.lexical_postings
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR lexical_postings.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.id = lexical_postings.document_id)
);
-- BM25 statistics are kept per namespace so that these policies can apply:
-- a reader's N, average length and document frequencies are sums over the
-- namespaces it may see, never counts of another tenant's words
DROP POLICY IF EXISTS tenant_namespace ON kb.lexical_stats;
CREATE POLICY tenant_namespace ON kb.lexical_stats
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR lexical_stats.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
DROP POLICY IF EXISTS tenant_namespace ON kb.lexical_terms;
CREATE POLICY tenant_namespace ON kb.lexical_terms
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR lexical_terms.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
-- the language statistics likewise: a reader's dense scores are corrected
-- with the vectors of the namespaces it may see, never another tenant's
-- which documents the statistics count: the lexical leg reads it as the
-- caller for chunks newer than their namespace's recount
DROP POLICY IF EXISTS tenant_namespace ON kb.statistics_documents;
CREATE POLICY tenant_namespace ON kb.statistics_documents
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR statistics_documents.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
DROP POLICY IF EXISTS tenant_namespace ON kb.language_statistics;
CREATE POLICY tenant_namespace ON kb.language_statistics
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR language_statistics.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
-- vectors and queue rows follow their chunk (whose own policy applies inside the subquery)
DROP POLICY IF EXISTS tenant_namespace ON kb.embeddings;
CREATE POLICY tenant_namespace ON kb.embeddings
USING (EXISTS (SELECT 1 FROM kb.chunks AS c WHERE c.id = embeddings.chunk_id));
DROP POLICY IF EXISTS tenant_namespace ON kb.embed_queue;
CREATE POLICY tenant_namespace ON kb.embed_queue
USING (EXISTS (SELECT 1 FROM kb.chunks AS c WHERE c.id = embed_queue.chunk_id));

-- The retrieval log is written by the gateways only (kb.log_retrieval, as
-- the owner, naming the session's role): no other role may insert, so no
-- tenant can add rows, invent counts or name another tenant's sources. The
-- policy is the second wall, should INSERT ever be granted: a row must be
-- attributed to the role inserting it, while the log is on, and name only
-- documents that role can see.
ALTER TABLE kb.retrieval_log ENABLE ROW LEVEL SECURITY;
REVOKE INSERT ON kb.retrieval_log FROM public;
DROP POLICY IF EXISTS own_retrievals ON kb.retrieval_log;
CREATE POLICY own_retrievals ON kb.retrieval_log FOR INSERT
WITH CHECK (
    retrieval_log.role_name = current_user
    AND retrieval_log.session_role = session_user
    AND retrieval_log.logged_at = now()
    AND (SELECT (kb.setting('retrieval_log') #>> '{}')::boolean)
    AND kb.visible_sources(retrieval_log.sources)
);
-- who may read the log is decided by the SELECT privilege alone (pgkb_admin, BI roles)
DROP POLICY IF EXISTS read_log ON kb.retrieval_log;
CREATE POLICY read_log ON kb.retrieval_log FOR SELECT USING (true);
