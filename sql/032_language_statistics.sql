-- The language correction of the dense leg: per model, namespace and language
-- group, the mean and covariance of the stored vectors (kb.language_statistics,
-- kept here), and a query's offset and scale per group (kb.language_moments),
-- with which the dense leg z-scores similarities within each language
-- (pgkb_plpy/language_statistics.py explains why and how).
--
-- Freshness, like the BM25 statistics: after every statement that stores or
-- deletes vectors, a group whose number of vectors has changed by
-- language_statistics_drift (a share) since its statistics were computed is
-- recomputed; while the model has fewer than 2,000 vectors every statement
-- checks, above that at most once a minute (a writer finding a recount running
-- skips it). kb.embed_pending and kb.activate_model recount at their end. So
-- statistics describe the corpus of at most a minute ago within the drift; a
-- language group new to a namespace is searched from its first recount.

CREATE OR REPLACE FUNCTION kb.passage_languages()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT ARRAY['en', 'other', 'zh'] $$;
COMMENT ON FUNCTION kb.passage_languages() IS
'The language groups of passages (pgkb_plpy.query_analysis.passage_language): one partial HNSW index each per model.';

CREATE OR REPLACE FUNCTION kb.hnsw_language_index_name(p_model text, p_language text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT left(kb.hnsw_index_name(p_model), 54) || '_' || p_language $$;
COMMENT ON FUNCTION kb.hnsw_language_index_name(text, text) IS 'Name of the partial HNSW index of one model and language group.';

CREATE OR REPLACE FUNCTION kb.model_hnsw_indexes(p_model text)
RETURNS TABLE (language text, index_name text)
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- the model's index (the dense leg without language correction, language
    -- NULL), then one per language group (with it)
    SELECT lang.code, coalesce(kb.hnsw_language_index_name(p_model, lang.code), kb.hnsw_index_name(p_model))
    FROM unnest(ARRAY[NULL] || kb.passage_languages()) WITH ORDINALITY AS lang (code, n)
    ORDER BY lang.n
$$;
COMMENT ON FUNCTION kb.model_hnsw_indexes(text) IS
'The names of a model''s partial HNSW indexes: its own (language NULL) and one per language group (kb.passage_languages).';

CREATE OR REPLACE FUNCTION kb.hnsw_build_options()
RETURNS text
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    m integer := (kb.setting('hnsw_m') #>> '{}')::integer;
    ef integer := (kb.setting('hnsw_ef_construction') #>> '{}')::integer;
BEGIN
    -- pgvector's own limits, checked here so that the error names the setting
    IF m NOT BETWEEN 2 AND 100 THEN
        RAISE EXCEPTION 'pgkb: setting hnsw_m = % is outside pgvector''s range 2..100', m
            USING HINT = 'UPDATE kb.settings SET value = ''16'' WHERE key = ''hnsw_m''';
    END IF;
    IF ef NOT BETWEEN 4 AND 1000 OR ef < 2 * m THEN
        RAISE EXCEPTION 'pgkb: setting hnsw_ef_construction = % is outside 4..1000 or below 2 x hnsw_m (%)', ef, 2 * m
            USING HINT = 'pgvector needs ef_construction >= 2 x m';
    END IF;
    RETURN format('m = %s, ef_construction = %s', m, ef);
END;
$$;
COMMENT ON FUNCTION kb.hnsw_build_options() IS
'The WITH options of the HNSW indexes built from now on, from the settings hnsw_m and hnsw_ef_construction; refuses values pgvector would refuse, naming the setting.';

CREATE OR REPLACE FUNCTION kb.hnsw_indexes()
RETURNS TABLE (model text, index_name text, built_with text, settings_say text)
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- every HNSW index of every model (the model's own and one per language
    -- group), the options it was built with and those the settings give now,
    -- both spelled "m = 16, ef_construction = 64"
    SELECT m.name, c.relname::text,
        format('m = %s, ef_construction = %s',
            coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) AS o WHERE o LIKE 'm=%'), '16'),
            coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) AS o WHERE o LIKE 'ef_construction=%'),
                '64')),
        kb.hnsw_build_options()
    FROM kb.models AS m
    CROSS JOIN LATERAL kb.model_hnsw_indexes(m.name) AS h
    INNER JOIN pg_catalog.pg_class AS c ON c.relname = h.index_name AND c.relnamespace = 'kb'::regnamespace
    ORDER BY m.name, c.relname
$$;
COMMENT ON FUNCTION kb.hnsw_indexes() IS
'The HNSW indexes of the models, the options each was built with (built_with; pgvector''s defaults m 16, ef_construction 64 where none is recorded) and those the settings hnsw_m and hnsw_ef_construction give now (settings_say); pgkb reindex-hnsw rebuilds the indexes where they differ.';

CREATE OR REPLACE FUNCTION kb.ensure_hnsw_indexes(p_model text)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    dims integer := (SELECT m.dimensions FROM kb.models AS m WHERE m.name = p_model);
    options text := kb.hnsw_build_options();
    idx record;
BEGIN
    -- the dense leg repeats each predicate literally so that the planner
    -- picks the index. An index that exists keeps the options it was built
    -- with: a rebuild takes minutes on a large corpus, so it is asked for
    -- (pgkb reindex-hnsw), never implied
    FOR idx IN SELECT * FROM kb.model_hnsw_indexes(p_model) LOOP
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON kb.embeddings USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
            'WITH (%s) WHERE model = %L%s',
            idx.index_name, dims, options, p_model,
            CASE WHEN idx.language IS NOT NULL THEN format(' AND language = %L', idx.language) ELSE '' END
        );
    END LOOP;
END;
$$;
COMMENT ON FUNCTION kb.ensure_hnsw_indexes(text) IS
'Creates the partial HNSW indexes of a model that do not exist yet, with the options of the settings hnsw_m and hnsw_ef_construction: one over all its vectors and one per language group, which the language-corrected dense leg scans (kb.register_model and every migrate call it; building them on a large corpus takes minutes).';

CREATE OR REPLACE FUNCTION kb.trg_embeddings_language()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    NEW.language := (SELECT c.language FROM kb.chunks AS c WHERE c.id = NEW.chunk_id);
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_embeddings_language() IS
'BEFORE INSERT on kb.embeddings: the vector''s language group is its chunk''s.';

DROP TRIGGER IF EXISTS embeddings_language ON kb.embeddings;
CREATE TRIGGER embeddings_language BEFORE INSERT ON kb.embeddings
FOR EACH ROW EXECUTE FUNCTION kb.trg_embeddings_language();

CREATE OR REPLACE FUNCTION kb.recount_language_statistics(p_model text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    target text := coalesce(p_model, (SELECT m.name FROM kb.models AS m WHERE m.active));
BEGIN
    IF target IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock('kb.language_statistics'::regclass::oid::bigint);
    PERFORM kb.py_recount_language_statistics(target,
        (kb.setting('language_statistics_drift') #>> '{}')::float8,
        (kb.setting('language_statistics_sample') #>> '{}')::integer);
END;
$$;
COMMENT ON FUNCTION kb.recount_language_statistics(text) IS
'Recomputes the stale language statistics of a model (default: the active one) over every tenant''s vectors, as the owner (SECURITY DEFINER), one recount at a time; returns nothing, so that no caller learns about namespaces it may not see.';

CREATE OR REPLACE FUNCTION kb.maybe_refresh_language_statistics()
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_language_statistics(s.model)
    FROM (
        SELECT m.name AS model, coalesce(sum(l.vectors), 0) AS n, max(l.refreshed_at) AS refreshed_at
        FROM kb.models AS m
        LEFT JOIN kb.language_statistics AS l ON m.name = l.model
        WHERE m.active
        GROUP BY m.name
    ) AS s
    WHERE CASE WHEN s.n < 2000 OR s.refreshed_at IS NULL OR s.refreshed_at < now() - interval '60 seconds'
        THEN pg_try_advisory_xact_lock('kb.language_statistics'::regclass::oid::bigint) ELSE false END
$$;
COMMENT ON FUNCTION kb.maybe_refresh_language_statistics() IS
'Refreshes the active model''s language statistics after vectors change: always while it has fewer than 2,000 vectors, else at most once a minute, never waiting on another recount.';

CREATE OR REPLACE FUNCTION kb.trg_embeddings_language_statistics()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.maybe_refresh_language_statistics();
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_embeddings_language_statistics() IS
'AFTER INSERT/DELETE (per statement) on kb.embeddings: keeps the language statistics in step (kb.maybe_refresh_language_statistics).';

DROP TRIGGER IF EXISTS embeddings_language_statistics ON kb.embeddings;
CREATE TRIGGER embeddings_language_statistics AFTER INSERT OR DELETE ON kb.embeddings
FOR EACH STATEMENT EXECUTE FUNCTION kb.trg_embeddings_language_statistics();

CREATE OR REPLACE VIEW kb.language_statistics_status WITH (security_invoker = true) AS
SELECT
    s.model,
    s.namespace,
    s.language,
    s.vectors AS vectors_at_refresh,
    coalesce(n.vectors, 0) AS vectors_now,
    round((coalesce(n.vectors, 0) - s.vectors)::numeric / s.vectors, 4) AS drift,
    s.sampled,
    s.refreshed_at
FROM kb.language_statistics AS s
LEFT JOIN LATERAL (
    SELECT count(*) AS vectors
    FROM kb.embeddings AS e
    INNER JOIN kb.chunks AS c ON e.chunk_id = c.id
    WHERE e.model = s.model AND c.namespace = s.namespace AND c.language = s.language
        -- as the statistics count: shared documents current now (pgkb_plpy.language_statistics)
        AND kb.counts_in_statistics(c.document_id)
) AS n ON true;
COMMENT ON VIEW kb.language_statistics_status IS
'The language statistics the caller may see, per model, namespace and language group: vectors when computed and now, the drift between (a share; recomputed at language_statistics_drift), the sample size and when.';

CREATE OR REPLACE FUNCTION kb.refresh_language_statistics(p_model text DEFAULT NULL)
RETURNS SETOF kb.language_statistics_status
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_language_statistics(p_model);
    SELECT s.* FROM kb.language_statistics_status AS s
    WHERE s.model = coalesce(p_model, (SELECT m.name FROM kb.models AS m WHERE m.active))
    ORDER BY s.namespace, s.language;
$$;
COMMENT ON FUNCTION kb.refresh_language_statistics(text) IS
'Recomputes the stale language statistics of a model (default: the active one; kb.recount_language_statistics) and returns those the caller may see. pgkb backfill and eval run it after loading.';

CREATE OR REPLACE FUNCTION kb.language_moments(
    p_model text, p_query_vector text, p_namespaces text[], p_min_vectors integer, p_query text
)
RETURNS kb.language_moment[]
LANGUAGE plpgsql
STABLE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    scope text[] := kb.read_scope(NULL);
BEGIN
    -- A door (the shard coordinator's steps call it as their caller): the
    -- statistics are read as the owner, over the namespaces asked for that
    -- the session's role may read (kb.read_scope), with the bounds of a query
    -- on every argument, before any PL/Python runs.
    IF length(p_query_vector) > kb.max_vector_chars() THEN
        RAISE EXCEPTION 'kb.language_moments: the query vector must be at most % characters (got %)',
            kb.max_vector_chars(), length(p_query_vector)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF cardinality(p_namespaces) > kb.max_namespaces() THEN
        RAISE EXCEPTION 'kb.language_moments: % namespaces named; at most %', cardinality(p_namespaces),
            kb.max_namespaces()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM kb.bounded_text('kb.language_moments', 'the query', p_query);
    PERFORM kb.bounded_text('kb.language_moments', 'the model', p_model);
    -- a role that may not read the statistics gets no correction rather than an error
    IF NOT has_table_privilege(kb.session_role(), 'kb.language_statistics', 'SELECT') THEN
        RETURN '{}';
    END IF;
    RETURN (
        SELECT coalesce(array_agg(m ORDER BY m.language), '{}')
        FROM kb.py_language_moments(p_model, p_query_vector,
            CASE
                WHEN scope IS NULL THEN p_namespaces
                WHEN p_namespaces IS NULL THEN scope
                ELSE ARRAY(SELECT n FROM unnest(p_namespaces) AS n WHERE n = ANY(scope))
            END,
            p_min_vectors, p_query) AS m
    );
END;
$$;
COMMENT ON FUNCTION kb.language_moments(text, text, text[], integer, text) IS
'The query''s offset and scale per language group over the statistics of the namespaces named that the session''s role may read (NULL: all it may read), for the vector each group is searched with (query_vector: the query without its language''s mean in groups of another language, NULL for the query itself); empty when there are too few vectors for a correction. SECURITY DEFINER, bounded: a vector of at most kb.max_vector_chars characters, at most kb.max_namespaces namespaces, a query of at most kb_pipeline.max_query_chars.';
