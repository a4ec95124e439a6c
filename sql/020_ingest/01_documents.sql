-- Ingest: triggers on kb.documents, model registry, deferred embedding, BM25 statistics.
-- Chunks, postings, vectors, the queue and the statistics are derived from the
-- documents and written only here, by SECURITY DEFINER functions running as the
-- owner: no writer may write them (090_grants/), statistics describe every
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
