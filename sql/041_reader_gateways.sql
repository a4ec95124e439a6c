-- The reader's door. Who is asking (kb.session_role) and which namespaces
-- that role may read (kb.read_scope): the retrieval gateways (044, 045) run
-- as the owner and apply that scope in every leg. And SECURITY DEFINER SQL
-- functions over the PL/Python functions of 010_plpython.sql, which readers
-- may not call themselves (090_grants/01_privileges.sql revokes them), for the code that
-- still runs as its caller (the shard coordinator).

CREATE OR REPLACE FUNCTION kb.enter_pipeline()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- Held to the end of the transaction: a migrate re-creating kb_pipeline
    -- waits for it (sql/040_pipeline/00_schema.sql). Taking a table lock also
    -- makes this backend read the catalogue changes committed meanwhile, so
    -- the door's next statement calls the kb_pipeline that exists now.
    LOCK TABLE kb.pipeline_door IN ACCESS SHARE MODE;
END;
$$;
COMMENT ON FUNCTION kb.enter_pipeline() IS
'Every retrieval door''s first step: ACCESS SHARE on kb.pipeline_door to the end of the transaction, so that a migrate never re-creates kb_pipeline under a retrieval in flight (sql/040_pipeline/00_schema.sql).';

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


CREATE OR REPLACE FUNCTION kb.bounded_text(p_function text, p_argument text, p_text text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- the bound kb_retrieve puts on a query (kb_pipeline.max_query_chars), for
    -- every door that takes text from a reader: a longer one is refused by
    -- name before any PL/Python runs
    IF length(p_text) > kb_pipeline.max_query_chars() THEN
        RAISE EXCEPTION '%: % must be at most % characters (got %)', p_function, p_argument,
            kb_pipeline.max_query_chars(), length(p_text)
            USING ERRCODE = 'program_limit_exceeded', HINT = 'kb_retrieve cuts a query at the same length';
    END IF;
    RETURN p_text;
END;
$$;
COMMENT ON FUNCTION kb.bounded_text(text, text, text) IS
'The text itself, or a named error when it is longer than a query may be (kb_pipeline.max_query_chars): the bound every reader door puts on text before PL/Python runs.';

CREATE OR REPLACE FUNCTION kb.max_vector_chars()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 200000 $$;
COMMENT ON FUNCTION kb.max_vector_chars() IS
'The longest vector text a reader door accepts: a 16,000-dimension vector (pgvector''s largest) at 12 characters a number.';

CREATE OR REPLACE FUNCTION kb.max_namespaces()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 10000 $$;
COMMENT ON FUNCTION kb.max_namespaces() IS
'The most namespaces one call to a reader door may name.';

CREATE OR REPLACE FUNCTION kb.query_terms(p_text text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.py_query_terms(kb.bounded_text('kb.query_terms', 'the text', p_text)) $$;
COMMENT ON FUNCTION kb.query_terms(text) IS
'BM25 terms of a query (SECURITY DEFINER wrapper for readers; at most kb_pipeline.max_query_chars characters).';

CREATE OR REPLACE FUNCTION kb.analyze_query(p_query text, p_context text[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF cardinality(p_context) > kb_pipeline.max_context_turns() THEN
        RAISE EXCEPTION 'kb.analyze_query: context has % turns; at most %', cardinality(p_context),
            kb_pipeline.max_context_turns()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM kb.bounded_text('kb.analyze_query', 'a context turn', t.turn) FROM unnest(p_context) AS t (turn);
    RETURN kb.py_analyze_query(kb.bounded_text('kb.analyze_query', 'the query', p_query), p_context);
END;
$$;
COMMENT ON FUNCTION kb.analyze_query(text, text[]) IS
'Query analysis (SECURITY DEFINER wrapper for readers; the query and each context turn at most kb_pipeline.max_query_chars characters, at most kb_pipeline.max_context_turns turns).';

CREATE OR REPLACE FUNCTION kb.max_snippet_chars()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 200000 $$;
COMMENT ON FUNCTION kb.max_snippet_chars() IS
'The most characters of passages one kb.snippets call reads: 0.6 s of PL/Python at worst (every word a match of a 2,000-character query of 400 terms, 3 µs a character), 0.2 s on plain mixed Chinese and English text; tests/test_bounded_doors.py times the worst case.';

CREATE OR REPLACE FUNCTION kb.max_snippet_passages()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 1000 $$;
COMMENT ON FUNCTION kb.max_snippet_passages() IS
'The most passages one kb.snippets call takes: kb_retrieve''s largest k.';

CREATE OR REPLACE FUNCTION kb.snippets(p_contents text[], p_query text, p_width integer DEFAULT 200)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    total bigint := (SELECT coalesce(sum(length(c)), 0) FROM unnest(p_contents) AS c);
BEGIN
    IF cardinality(p_contents) > kb.max_snippet_passages() THEN
        RAISE EXCEPTION 'kb.snippets: % passages; at most %', cardinality(p_contents), kb.max_snippet_passages()
            USING ERRCODE = 'program_limit_exceeded', HINT = 'ask for fewer passages';
    END IF;
    IF total > kb.max_snippet_chars() THEN
        RAISE EXCEPTION 'kb.snippets: the passages hold % characters; at most %', total, kb.max_snippet_chars()
            USING ERRCODE = 'program_limit_exceeded', HINT = 'ask for fewer or shorter passages';
    END IF;
    IF p_width NOT BETWEEN 1 AND 2000 THEN
        RAISE EXCEPTION 'kb.snippets: width must be between 1 and 2000 (got %)', p_width
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN kb.py_snippets(p_contents, kb.bounded_text('kb.snippets', 'the query', p_query), p_width);
END;
$$;
COMMENT ON FUNCTION kb.snippets(text[], text, integer) IS
'Query-aware snippets of several passages in one call (SECURITY DEFINER wrapper for readers; at most kb.max_snippet_passages passages holding at most kb.max_snippet_chars characters, a query of at most kb_pipeline.max_query_chars, width 1 to 2000).';

CREATE OR REPLACE FUNCTION kb.answer_check(p_answer_type text, p_question text, p_passages text[])
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    total bigint := (SELECT coalesce(sum(length(c)), 0) FROM unnest(p_passages) AS c);
BEGIN
    -- the judge reads the top 3 passages of a call; a few more are allowed, never a corpus
    IF cardinality(p_passages) > 10 THEN
        RAISE EXCEPTION 'kb.answer_check: % passages; at most 10', cardinality(p_passages)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF total > kb.max_snippet_chars() THEN
        RAISE EXCEPTION 'kb.answer_check: the passages hold % characters; at most %', total, kb.max_snippet_chars()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF length(p_answer_type) > 16 THEN
        RAISE EXCEPTION 'kb.answer_check: unknown answer type'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN kb.py_answer_check(p_answer_type, kb.bounded_text('kb.answer_check', 'the question', p_question),
        p_passages);
END;
$$;
COMMENT ON FUNCTION kb.answer_check(text, text, text[]) IS
'Whether passages hold a value of a question''s answer type bound to its subject (kb.py_answer_check; SECURITY DEFINER wrapper for the shard coordinator, which runs as its caller: at most 10 passages holding at most kb.max_snippet_chars characters, a question of at most kb_pipeline.max_query_chars). Reads no table.';

CREATE OR REPLACE FUNCTION kb.snippet(p_content text, p_query text, p_width integer DEFAULT 200)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT (kb.snippets(ARRAY[p_content], p_query, p_width))[1] $$;
COMMENT ON FUNCTION kb.snippet(text, text, integer) IS
'Query-aware snippet of one passage (kb.snippets, with its bounds).';

CREATE OR REPLACE FUNCTION kb.embed_query(p_query text, p_model text)
RETURNS text
LANGUAGE plpgsql
STABLE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- Only the active model, for anyone but the tables' owner: an inactive one
    -- may be a paid provider, or one whose stored key the admin kept for later.
    IF NOT EXISTS (SELECT 1 FROM kb.models AS m WHERE m.name = p_model AND m.active)
        AND NOT pg_has_role(kb.session_role(), (SELECT c.relowner FROM pg_catalog.pg_class AS c
            WHERE c.oid = 'kb.documents'::regclass), 'USAGE') THEN
        RAISE EXCEPTION 'kb.embed_query: model "%" is not the active model', left(p_model, 64)
            USING ERRCODE = 'insufficient_privilege',
            HINT = 'readers embed with the active model only (SELECT name FROM kb.models WHERE active)';
    END IF;
    RETURN kb.py_embed_query(kb.bounded_text('kb.embed_query', 'the query', p_query), p_model);
END;
$$;
COMMENT ON FUNCTION kb.embed_query(text, text) IS
'Query vector (pgvector text form) from the named model''s provider (SECURITY DEFINER wrapper for readers: the active model only, unless the session acts as the tables'' owner; a query of at most kb_pipeline.max_query_chars characters).';
