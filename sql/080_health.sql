-- Health checks that fail fast: what must hold for kb_retrieve and ingest to work, one row
-- per check with its state and the fix. `pgkb doctor`, `pgkb status`, `pgkb up`,
-- `pgkb migrate` and the MCP kb_status tool all read kb.health().

CREATE OR REPLACE FUNCTION kb.settings_health()
RETURNS TABLE (check_name text, state text, detail text, fix text)
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- A stored value that is missing or bad is not in force (kb.setting_in_force
    -- reads its fallback), so retrieval works: degraded, naming what is stored
    -- (shortened: a value of 300 digits would hide the rest)
    SELECT 'settings', CASE WHEN count(p.problem) = 0 THEN 'ok' ELSE 'degraded' END,
        CASE WHEN count(p.problem) = 0 THEN format('%s settings, every stored value valid', count(*))
            ELSE string_agg(format('%s: %s, %s in force%s', p.key,
                CASE WHEN p.stored IS NULL OR p.stored = 'null' THEN p.problem
                    WHEN jsonb_typeof(p.stored) = 'number' AND length(p.stored::text) > 16
                        THEN format('stored %s is %s', btrim(to_char((p.stored #>> '{}')::numeric, '9.99EEEE')), p.problem)
                    ELSE format('stored %s is %s', left(p.stored::text, 40), p.problem) END,
                p.fallback, CASE WHEN p.fallback <> p.default_value THEN ' (fails closed)' ELSE '' END), '; '
                ORDER BY p.key) FILTER (WHERE p.problem IS NOT NULL) END,
        CASE WHEN count(p.problem) > 0 THEN format(
            'UPDATE kb.settings SET value = default_value WHERE key IN (%s), or a valid value (SELECT * FROM kb.settings_catalogue WHERE stored_problem IS NOT NULL); pgkb migrate writes a missing row again (tenant_isolation on a fresh install only)',
            string_agg(quote_literal(p.key), ', ' ORDER BY p.key) FILTER (WHERE p.problem IS NOT NULL)) END
    FROM (
        SELECT c.key, s.value AS stored, c.default_value, kb.setting_value_error(c, s.value) AS problem,
            kb.setting_fallback(c) AS fallback
        FROM kb.settings_shipped() AS c
        LEFT JOIN kb.settings AS s ON s.key = c.key
    ) AS p;
$$;
COMMENT ON FUNCTION kb.settings_health() IS
'The settings check of kb.health: degraded while a stored value is missing or bad (kb.setting_value_error), naming each with the value in force instead (its default; true for tenant_isolation and retrieval_log, which fail closed) and the statement that fixes it.';

CREATE OR REPLACE FUNCTION kb.health()
RETURNS TABLE (check_name text, state text, detail text, fix text)
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY INVOKER
SET search_path = pg_catalog, public, pg_temp
AS $$
-- Runs with the caller's rights, so a tenant's role sees its own queue and vectors only; a
-- check the role may not perform is reported as 'skipped', never as another tenant's facts.
-- state: ok, degraded (retrieval works, something needs attention) or failed (it does not).
DECLARE
    ext record;
    model kb.models;
    vector_text text;
    stored_dims integer[];
    stats_chunks bigint;
    stats_refreshed timestamptz;
    chunks bigint;
    n bigint;
    oldest timestamptz;
    failure text;
BEGIN
    FOR ext IN
        SELECT wanted.name, e.extversion
        FROM unnest(ARRAY['vector', 'pg_trgm', 'plpython3u']) AS wanted (name)
        LEFT JOIN pg_catalog.pg_extension AS e ON e.extname = wanted.name
    LOOP
        RETURN QUERY SELECT 'extension ' || ext.name,
            CASE WHEN ext.extversion IS NULL THEN 'failed' ELSE 'ok' END,
            coalesce('version ' || ext.extversion, 'not installed'),
            CASE WHEN ext.extversion IS NULL THEN 'install it (scripts/install.sh), then pgkb migrate' END;
    END LOOP;

    BEGIN
        PERFORM kb.query_terms('pgkb doctor');
        RETURN QUERY SELECT 'in-database python', 'ok',
            format('pgkb_plpy %s at %s', kb.plpython_expected_version(),
                (SELECT s.value #>> '{}' FROM kb.settings AS s WHERE s.key = 'python_path')),
            NULL::text;
    EXCEPTION WHEN OTHERS THEN
        RETURN QUERY SELECT 'in-database python', 'failed', SQLERRM,
            'run scripts/install.sh on the database host, then pgkb migrate; reconnect sessions opened before';
    END;

    BEGIN
        RETURN QUERY SELECT * FROM kb.settings_health();
    EXCEPTION WHEN insufficient_privilege THEN
        RETURN QUERY SELECT 'settings', 'skipped', SQLERRM, NULL::text;
    END;

    SELECT m.* INTO model FROM kb.models AS m WHERE m.active;
    IF model.name IS NULL THEN
        RETURN QUERY SELECT 'active model', 'degraded', 'no active model: retrieval is lexical only',
            'SELECT kb.register_model(...) and kb.activate_model(name)';
    ELSE
        BEGIN
            vector_text := kb.embed_query('pgkb doctor', model.name);
            RETURN QUERY SELECT 'active model', 'ok',
                format('%s (%s:%s, %s dimensions) embeds a query', model.name, model.provider, model.model,
                    model.dimensions),
                NULL::text;
        EXCEPTION WHEN OTHERS THEN
            RETURN QUERY SELECT 'active model', 'failed', format('%s cannot embed: %s', model.name, SQLERRM),
                'check the provider (Ollama: server reachable, model pulled) or activate another model';
        END;
        BEGIN
            stored_dims := ARRAY(
                SELECT DISTINCT vector_dims(e.embedding) FROM kb.embeddings AS e WHERE e.model = model.name
            );
            RETURN QUERY SELECT 'stored vectors', CASE
                    WHEN stored_dims <@ ARRAY[model.dimensions] THEN 'ok' ELSE 'failed' END,
                format('%s: vectors of %s dimensions stored, model has %s', model.name,
                    coalesce(nullif(array_to_string(stored_dims, ', '), ''), 'no'), model.dimensions),
                CASE WHEN NOT stored_dims <@ ARRAY[model.dimensions]
                    THEN 'register the model under a new name with the right dimensions and backfill it' END;
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN QUERY SELECT 'stored vectors', 'skipped', SQLERRM, NULL::text;
        END;
    END IF;

    RETURN QUERY
    SELECT 'hnsw index ' || m.name,
        CASE WHEN i.indisvalid THEN 'ok' WHEN m.active THEN 'failed' ELSE 'degraded' END,
        CASE WHEN i.indexrelid IS NULL THEN 'missing' WHEN NOT i.indisvalid THEN 'invalid' ELSE 'present and valid' END
            || ' (' || kb.hnsw_index_name(m.name) || ')',
        CASE WHEN NOT coalesce(i.indisvalid, false)
            THEN format('SELECT kb.register_model(%L, %L, %L, %s) re-creates it (REINDEX if invalid)',
                m.name, m.provider, m.model, m.dimensions) END
    FROM kb.models AS m
    LEFT JOIN pg_catalog.pg_class AS c
        ON c.relname = kb.hnsw_index_name(m.name) AND c.relnamespace = 'kb'::regnamespace
    LEFT JOIN pg_catalog.pg_index AS i ON i.indexrelid = c.oid
    ORDER BY m.name;

    BEGIN
        RETURN QUERY
        SELECT 'hnsw options ' || h.model, CASE WHEN bool_and(h.built_with = h.settings_say) THEN 'ok' ELSE 'degraded' END,
            string_agg(format('%s: %s', h.index_name, h.built_with), '; ' ORDER BY h.index_name)
                || format(' (the settings say %s)', min(h.settings_say)),
            CASE WHEN NOT bool_and(h.built_with = h.settings_say)
                THEN format('pgkb reindex-hnsw --model %s (rebuilds them concurrently)', h.model) END
        FROM kb.hnsw_indexes() AS h
        GROUP BY h.model
        ORDER BY h.model;
    EXCEPTION WHEN raise_exception THEN
        RETURN QUERY SELECT 'hnsw options', 'failed', SQLERRM, 'set hnsw_m and hnsw_ef_construction within pgvector''s ranges';
    END;

    BEGIN
        -- per namespace, summed over those the caller may see
        SELECT coalesce(sum(s.chunk_count), 0), min(s.refreshed_at) INTO stats_chunks, stats_refreshed
        FROM kb.lexical_stats AS s;
        -- against the chunks the statistics count by their own rule: of the shared, current documents
        -- (drafts, superseded, expired and private versions are rightly left out)
        SELECT count(*) INTO chunks FROM kb.chunks AS c
        WHERE c.document_id IN (SELECT kb.visible_documents(now(), NULL, '{}', true));
        RETURN QUERY SELECT 'bm25 statistics',
            CASE WHEN abs(stats_chunks - chunks) <= greatest(0.1 * chunks, 10) THEN 'ok' ELSE 'degraded' END,
            format('statistics count %s chunks (refreshed %s), the current shared documents hold %s', stats_chunks,
                coalesce(to_char(stats_refreshed, 'YYYY-MM-DD HH24:MI'), 'never'), chunks),
            CASE WHEN abs(stats_chunks - chunks) > greatest(0.1 * chunks, 10)
                THEN 'SELECT kb.refresh_lexical_stats()' END;
    EXCEPTION WHEN insufficient_privilege THEN
        RETURN QUERY SELECT 'bm25 statistics', 'skipped', SQLERRM, NULL::text;
    END;

    BEGIN
        SELECT count(*), min(q.enqueued_at) INTO n, oldest FROM kb.embed_queue AS q
        WHERE q.model = model.name AND q.last_error IS NULL;
        RETURN QUERY SELECT 'embedding queue', CASE WHEN n = 0 THEN 'ok' ELSE 'degraded' END,
            format('%s chunks waiting%s', n, CASE WHEN n > 0 THEN ', oldest since ' || oldest::text ELSE '' END),
            CASE WHEN n > 0 THEN 'pgkb backfill (or CALL kb.embed_pending())' END;
        SELECT count(*), min(q.last_attempt_at) INTO n, oldest FROM kb.embed_queue AS q
        WHERE q.model = model.name AND q.last_error IS NOT NULL;
        SELECT coalesce(q.error_kind || ': ', '') || q.last_error INTO failure FROM kb.embed_queue AS q
        WHERE q.model = model.name AND q.last_error IS NOT NULL
        ORDER BY q.last_attempt_at NULLS LAST LIMIT 1;
        RETURN QUERY SELECT 'embedding failures', CASE WHEN n = 0 THEN 'ok' ELSE 'degraded' END,
            CASE WHEN n = 0 THEN 'none' ELSE format('%s chunks failed, oldest at %s: %s', n, oldest, failure) END,
            CASE WHEN n > 0 THEN 'fix the cause (kb.ingest_failures), then pgkb backfill' END;
    EXCEPTION WHEN insufficient_privilege THEN
        RETURN QUERY SELECT 'embedding queue', 'skipped', SQLERRM, NULL::text;
    END;
END;
$$;
COMMENT ON FUNCTION kb.health() IS
'Health checks, one row each (ok, degraded, failed or skipped, with the fix): extensions, in-database Python, the settings (a stored value missing or bad, and so not in force), the active model embedding a query, stored vector dimensions, HNSW indexes, BM25 statistics, the embedding queue and its oldest failure.';
