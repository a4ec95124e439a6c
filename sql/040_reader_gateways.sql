-- The reader's door to the in-database Python: SECURITY DEFINER SQL functions
-- over the PL/Python functions of 010_plpython.sql, which readers may not call
-- themselves (090_grants.sql revokes them). kb_retrieve runs as its caller and
-- reaches PL/Python only through these.

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
