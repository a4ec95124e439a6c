-- Thin PL/Python wrappers over the modules in plpython/pgkb_plpy. They stay
-- owned by the migrating admin; readers reach them only through the SECURITY
-- DEFINER SQL functions that kb_retrieve uses.

CREATE OR REPLACE FUNCTION kb.plpython_init()
RETURNS void
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
import site
rows = plpy.execute("SELECT value #>> '{}' AS path FROM kb.settings WHERE key = 'python_path'")
path = rows[0]["path"] if rows else None
if path:
    site.addsitedir(path)
try:
    import pgkb_plpy  # noqa: F401
except ImportError as exc:
    plpy.error(
        "pgkb: cannot import pgkb_plpy (%s); kb.settings.python_path is %r. "
        "Run scripts/install.sh on the database host, then pgkb migrate." % (exc, path)
    )
GD["pgkb_ready"] = True
$$;
COMMENT ON FUNCTION kb.plpython_init() IS
'Adds the server-side venv (kb.settings python_path) to sys.path once per backend and imports pgkb_plpy.';

CREATE OR REPLACE FUNCTION kb.trg_documents_sync()
RETURNS trigger
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import ingest_db
ingest_db.sync_document(plpy, GD, SD, TD["new"])
return None
$$;
COMMENT ON FUNCTION kb.trg_documents_sync() IS
'AFTER INSERT/UPDATE OF title, body on kb.documents: re-chunk, index terms, embed only new chunk texts.';

CREATE OR REPLACE FUNCTION kb.embed_queue_batch(
    p_model text, p_batch_size integer, p_include_exhausted boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
import json
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import ingest_db
return json.dumps(ingest_db.embed_queue_batch(plpy, GD, SD, p_model, p_batch_size, p_include_exhausted))
$$;
COMMENT ON FUNCTION kb.embed_queue_batch(text, integer, boolean) IS
'Claims up to p_batch_size queued chunks of a model with SKIP LOCKED, embeds and stores them; returns counts and the error, if any.';

CREATE OR REPLACE FUNCTION kb.py_embed_query(p_query text, p_model text)
RETURNS text
LANGUAGE plpython3u
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import ingest_db
from pgkb_plpy.ingest import vector_literal
from pgkb_plpy import embedders
model = next((m for m in ingest_db.model_rows(plpy) if m["name"] == p_model), None)
if model is None:
    plpy.error("pgkb: unknown model %r" % p_model)
provider = ingest_db.provider_for(GD, model)
vector = provider.embed_query(p_query)
embedders.check_vectors([vector], 1, model["dimensions"], "%s:%s" % (model["provider"], model["model"]))
return vector_literal(vector)
$$;
COMMENT ON FUNCTION kb.py_embed_query(text, text) IS
'Embeds a query with the provider of the named model (the model whose stored vectors it will be compared with).';

CREATE OR REPLACE FUNCTION kb.py_query_terms(p_text text)
RETURNS text[]
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import lexical
return lexical.query_terms(p_text or "")
$$;
COMMENT ON FUNCTION kb.py_query_terms(text) IS
'BM25 terms of a query: stemmed English words, whole identifiers, CJK bigrams (same rules as indexing).';

CREATE OR REPLACE FUNCTION kb.py_analyze_query(p_query text, p_context text[])
RETURNS jsonb
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
import json
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import query_analysis
return json.dumps(query_analysis.analyze(p_query or "", list(p_context or [])), ensure_ascii=False)
$$;
COMMENT ON FUNCTION kb.py_analyze_query(text, text[]) IS
'Query analysis: language, short/long, identifiers, normalised question form, core terms, follow-up composition, stages.';

-- one snippet entry point: kb.py_snippets (below) serves single passages too
DROP FUNCTION IF EXISTS kb.py_snippet(text, text, integer);

CREATE OR REPLACE FUNCTION kb.py_snippets(p_contents text[], p_query text, p_width integer)
RETURNS text[]
LANGUAGE plpython3u
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb_ready" not in GD:
    plpy.execute("SELECT kb.plpython_init()")
from pgkb_plpy import snippets
return [snippets.make_snippet(c or "", p_query or "", width=p_width) for c in (p_contents or [])]
$$;
COMMENT ON FUNCTION kb.py_snippets(text[], text, integer) IS
'Snippets of several passages for one query, in one call.';
