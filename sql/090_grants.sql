-- Privileges. kb_retrieve and kb_retrieve_explain are SECURITY INVOKER and run
-- with the caller's rights; they reach PL/Python only through the SECURITY
-- DEFINER wrappers of 040_retrieve.sql (kb.query_terms, kb.analyze_query,
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
