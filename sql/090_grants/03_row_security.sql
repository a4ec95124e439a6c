-- Row-level security: the second wall, for every way in other than the
-- retrieval doors (which read as the owner and apply the scope themselves).

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

-- Who sees which runs: a role its own runs (and those of roles it belongs
-- to), a role that reads every namespace all of them; a case's row also
-- needs its namespace to be the role's. Runs stored before runs named their
-- role (role_name NULL) are seen only by roles that read every namespace.
CREATE OR REPLACE FUNCTION kb.eval_run_visible(p_role name)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR p_role = current_user
        OR EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles AS r
            WHERE r.rolname = p_role AND pg_has_role(current_user, r.oid, 'MEMBER')
        )
$$;
COMMENT ON FUNCTION kb.eval_run_visible(name) IS
'Whether the current role may see an evaluation run made by p_role: its own or a role it belongs to, or any when it reads every namespace (kb.allowed_namespaces NULL).';

ALTER TABLE kb.eval_runs ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS visible_runs ON kb.eval_runs;
CREATE POLICY visible_runs ON kb.eval_runs FOR SELECT USING (kb.eval_run_visible(eval_runs.role_name));
DROP POLICY IF EXISTS own_runs_insert ON kb.eval_runs;
CREATE POLICY own_runs_insert ON kb.eval_runs FOR INSERT WITH CHECK (eval_runs.role_name = current_user);

ALTER TABLE kb.eval_results ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS visible_results ON kb.eval_results;
CREATE POLICY visible_results ON kb.eval_results FOR SELECT
USING (
    EXISTS (SELECT 1 FROM kb.eval_runs AS r WHERE r.id = eval_results.run_id)
    AND (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR eval_results.namespace IS NULL
        OR eval_results.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
);
DROP POLICY IF EXISTS own_results_insert ON kb.eval_results;
CREATE POLICY own_results_insert ON kb.eval_results FOR INSERT
WITH CHECK (
    EXISTS (SELECT 1 FROM kb.eval_runs AS r WHERE r.id = eval_results.run_id AND r.role_name = current_user)
);

-- evaluations run from the lab run as its role: pgkb_admin stores them
GRANT INSERT ON kb.eval_runs, kb.eval_results TO pgkb_admin;
