-- The reader's door. Who is asking (kb.session_role) and which namespaces
-- that role may read (kb.read_scope): the retrieval gateways (044, 045) run
-- as the owner and apply that scope in every leg. And SECURITY DEFINER SQL
-- functions over the PL/Python functions of 010_plpython.sql, which readers
-- may not call themselves (090_grants.sql revokes them), for the code that
-- still runs as its caller (the shard coordinator).

CREATE OR REPLACE FUNCTION kb.enter_pipeline()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- Held to the end of the transaction: a migrate re-creating kb_pipeline
    -- waits for it (sql/040_pipeline_schema.sql). Taking a table lock also
    -- makes this backend read the catalogue changes committed meanwhile, so
    -- the door's next statement calls the kb_pipeline that exists now.
    LOCK TABLE kb.pipeline_door IN ACCESS SHARE MODE;
END;
$$;
COMMENT ON FUNCTION kb.enter_pipeline() IS
'Every retrieval door''s first step: ACCESS SHARE on kb.pipeline_door to the end of the transaction, so that a migrate never re-creates kb_pipeline under a retrieval in flight (sql/040_pipeline_schema.sql).';

CREATE OR REPLACE FUNCTION kb.session_role()
RETURNS name
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The role the session acts as: the one SET ROLE chose, else the login.
    -- Unlike current_user it is the same inside a SECURITY DEFINER function,
    -- and a session can set it only to a role its login is a member of.
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user)::name
$$;
COMMENT ON FUNCTION kb.session_role() IS
'The role the session acts as (SET ROLE''s, else the login), also inside SECURITY DEFINER functions: whose namespaces the retrieval gateways read (kb.read_scope) and whom the retrieval log names.';

CREATE OR REPLACE FUNCTION kb.read_scope(p_namespace text)
RETURNS text[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    who name := kb.session_role();
    allowed text[];
BEGIN
    -- The gateways run as the owner, so the reader's own right to read
    -- documents is checked here, as a SELECT of its own would check it.
    IF NOT has_table_privilege(who, 'kb.documents', 'SELECT') THEN
        RAISE EXCEPTION 'kb_retrieve: permission denied: role % may not read kb.documents', who
            USING ERRCODE = 'insufficient_privilege',
            HINT = 'GRANT pgkb_reader TO the role (and, with tenant_isolation on, a namespace in kb.namespace_grants)';
    END IF;
    allowed := kb.allowed_namespaces(who);
    IF p_namespace IS NULL THEN
        RETURN allowed;
    END IF;
    -- a namespace the role may not read gives what a namespace with no documents gives: nothing
    RETURN CASE WHEN allowed IS NULL OR p_namespace = ANY(allowed) THEN ARRAY[p_namespace] ELSE '{}' END;
END;
$$;
COMMENT ON FUNCTION kb.read_scope(text) IS
'The namespaces a retrieval by the session''s role (kb.session_role) may read: the one asked for if the role may read it, else none; without one, every namespace the role may read (NULL: all). Refuses a role without SELECT on kb.documents. Every leg of the pipeline applies it.';


CREATE OR REPLACE FUNCTION kb.query_terms(p_text text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_query_terms(p_text) $$;
COMMENT ON FUNCTION kb.query_terms(text) IS 'BM25 terms of a query (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.analyze_query(p_query text, p_context text[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_analyze_query(p_query, p_context) $$;
COMMENT ON FUNCTION kb.analyze_query(text, text[]) IS 'Query analysis (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.snippets(p_contents text[], p_query text, p_width integer DEFAULT 200)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_snippets(p_contents, p_query, p_width) $$;
COMMENT ON FUNCTION kb.snippets(text[], text, integer) IS
'Query-aware snippets of several passages in one call (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.snippet(p_content text, p_query text, p_width integer DEFAULT 200)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT (kb.py_snippets(ARRAY[p_content], p_query, p_width))[1] $$;
COMMENT ON FUNCTION kb.snippet(text, text, integer) IS 'Query-aware snippet (SECURITY DEFINER wrapper for readers).';

CREATE OR REPLACE FUNCTION kb.embed_query(p_query text, p_model text)
RETURNS text
LANGUAGE sql
STABLE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_embed_query(p_query, p_model) $$;
COMMENT ON FUNCTION kb.embed_query(text, text) IS
'Query vector (pgvector text form) from the named model''s provider (SECURITY DEFINER wrapper for readers).';
