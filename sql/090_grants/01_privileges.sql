-- Privileges. Readers reach retrieval through its doors (kb_retrieve,
-- kb_retrieve_explain, the shard doors of 045_shard/01_shard_doors.sql: SECURITY
-- DEFINER, working out the caller's scope themselves, 041_reader_gateways.sql).
-- EXECUTE is revoked from PUBLIC on
-- * every plpython3u function of the kb schema (the trigger functions still
--   fire for whoever may write documents: triggers are not subject to EXECUTE
--   checks); the shard coordinator, which runs as its caller, reaches them
--   through the SECURITY DEFINER wrappers of 041_reader_gateways.sql;
-- * every function of kb_node: they read every tenant's rows as the owner,
--   and called directly would skip the scope, the bounds of
--   kb_pipeline.validated_request and the retrieval log (kb_pipeline holds the
--   steps a shard coordinator runs as its caller: pure, or reading only what
--   every reader may read);
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
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
END;
$$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA kb_node FROM public;
-- the shard doors: the roles of kb.shard_door_roles only (045_shard/04_door_access.sql)
SELECT kb.grant_shard_doors();
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
-- pgkb_admin sets values; the trigger settings_value_in_range keeps ranges, types
-- and rows (sql/005_settings/02_accessors.sql). TRUNCATE fires no row trigger, and
-- a role's own trigger on kb.settings could rewrite what is stored: neither is granted.
REVOKE TRUNCATE, TRIGGER, REFERENCES ON kb.settings FROM public, pgkb_reader, pgkb_writer, pgkb_admin;
-- what each provider's similarities mean is no secret, and every retrieval reads it
GRANT SELECT ON kb.embedding_providers TO public;
GRANT SELECT ON ALL TABLES IN SCHEMA kb TO pgkb_admin;
-- The log's private sources are read through kb.retrieval_log_sources only,
-- which names each to the roles that may read it: every other column of the
-- log is granted, that one is not.
REVOKE SELECT ON kb.retrieval_log FROM public, pgkb_reader, pgkb_writer, pgkb_admin;
DO $$
BEGIN
    EXECUTE format('GRANT SELECT (%s) ON kb.retrieval_log TO pgkb_admin', (
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
        FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = 'kb.retrieval_log'::regclass AND a.attnum > 0 AND NOT a.attisdropped
            AND a.attname <> 'private_sources'
    ));
END;
$$;

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
