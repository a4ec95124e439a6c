-- Files into the database (issue 13). Any SQL client adds a file with
-- kb.ingest_file(namespace, source, bytes, ...) or by writing its bytes to
-- kb.documents.file: the BEFORE trigger below parses them (in a child process
-- of the backend, pgkb_plpy.parsers) into body, which the ingest trigger
-- chunks as any text. A file that cannot be parsed is still stored, with
-- ingest_status 'failed' and parse_error naming the problem; it has no chunks
-- and kb.reparse_files() tries again. docs/INGEST.md has the details.

-- The largest file parsed (the setting file_max_bytes); larger ones are stored
-- and marked failed without reaching Python. Its default is
-- pgkb_plpy.parsers.MAX_FILE_BYTES (a test compares them).
CREATE OR REPLACE FUNCTION kb.file_max_bytes()
RETURNS bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT (kb.setting('file_max_bytes') #>> '{}')::bigint $$;
COMMENT ON FUNCTION kb.file_max_bytes() IS
'Largest file (bytes) kb.documents.file is parsed from (the setting file_max_bytes); a larger one is stored and marked failed.';

-- The limits a parse runs under, by their setting names (docs/INGEST.md); the
-- parser names the setting in every error a limit causes.
CREATE OR REPLACE FUNCTION kb.file_limits()
RETURNS jsonb
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT jsonb_object_agg(k.key, kb.setting(k.key))
    FROM unnest(ARRAY[
        'file_max_bytes', 'file_max_pages', 'file_parse_timeout_s', 'file_max_expansion_ratio', 'ocr_max_pages'
    ]) AS k (key)
$$;
COMMENT ON FUNCTION kb.file_limits() IS
'The limits of kb.settings a file is parsed under (file_max_bytes, file_max_pages, file_parse_timeout_s, file_max_expansion_ratio, ocr_max_pages), as one jsonb object; stored with each parse (kb.documents.parse_limits).';

-- The conversion version of each format (pgkb_plpy.parsers.FORMAT_VERSIONS)
-- and of the chunker (pgkb_plpy.chunker.CHUNKER_VERSION): documents built with
-- other versions are stale (kb.stale_documents).
CREATE OR REPLACE FUNCTION kb.parser_versions()
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT '{"pdf": "4", "docx": "3", "xlsx": "1", "pptx": "1", "html": "3", "markdown": "1", "text": "1"}'::jsonb
$$;
COMMENT ON FUNCTION kb.parser_versions() IS
'Current version of pgkb''s conversion of each file format (pgkb_plpy.parsers.FORMAT_VERSIONS); a document parsed with another is stale.';

CREATE OR REPLACE FUNCTION kb.parser_version_current(p_parser_version text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- "<format>/<version>" against kb.parser_versions(); false for NULL (never parsed)
    SELECT coalesce(
        p_parser_version = split_part(p_parser_version, '/', 1) || '/'
        || (kb.parser_versions() ->> split_part(p_parser_version, '/', 1)),
        false
    )
$$;
COMMENT ON FUNCTION kb.parser_version_current(text) IS
'Whether a document''s parser_version ("<format>/<version>") is the installed conversion of its format (kb.parser_versions).';

CREATE OR REPLACE FUNCTION kb.chunker_version()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT '4'::text $$;
COMMENT ON FUNCTION kb.chunker_version() IS
'Current version of the chunking rules (pgkb_plpy.chunker.CHUNKER_VERSION); a document chunked with another is stale.';

CREATE OR REPLACE FUNCTION kb.page_of(p_page_starts integer[], p_offset integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT CASE WHEN p_page_starts IS NOT NULL THEN
        (SELECT count(*)::integer FROM unnest(p_page_starts) AS s (start) WHERE s.start <= p_offset)
    END
$$;
COMMENT ON FUNCTION kb.page_of(integer[], integer) IS
'The 1-based page holding character p_offset of a body whose pages start at p_page_starts (NULL without pages).';

CREATE OR REPLACE FUNCTION kb.trg_documents_parse_file()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    parsed jsonb;
    limits jsonb := kb.file_limits();
    -- kb.ocr_pending sets pgkb.ocr_run for its own statement: read the scanned pages now;
    -- any other parse (an INSERT) only lists them, so that it never waits on OCR
    ocr_mode text := CASE WHEN current_setting('pgkb.ocr_run', true) = 'on' THEN 'run' ELSE 'defer' END;
BEGIN
    -- runs as the owner: writers may not execute the PL/Python parser directly
    NEW.byte_size := octet_length(NEW.file);
    NEW.file_sha256 := encode(sha256(NEW.file), 'hex');
    NEW.file_name := coalesce(NEW.file_name, NEW.source);
    IF NEW.byte_size > (limits ->> 'file_max_bytes')::bigint THEN
        parsed := jsonb_build_object(
            'ok', false,
            'error', format(
                'too_large: the file is %s bytes; the limit file_max_bytes is %s (kb.settings)',
                NEW.byte_size, limits ->> 'file_max_bytes'
            )
        );
    ELSE
        parsed := kb.py_parse_file(NEW.file, NEW.file_name, NEW.content_type, limits, ocr_mode);
    END IF;
    IF ocr_mode = 'run' AND TG_OP = 'UPDATE' AND NOT (parsed ->> 'ok')::boolean AND OLD.parse_error IS NULL
        AND OLD.page_starts IS NOT NULL AND NEW.file IS NOT DISTINCT FROM OLD.file THEN
        -- the OCR run failed (time, memory, a crash): keep the text and chunks the document has,
        -- say so on each page it was to read, and stop the worker from claiming it again
        NEW.parse_warnings := nullif(coalesce((
            SELECT jsonb_agg(w.value) FROM jsonb_array_elements(OLD.parse_warnings) AS w (value)
            WHERE w.value ->> 'kind' <> 'ocr_pending'
        ), '[]') || coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'page', p.page::integer, 'kind', 'ocr_failed',
                'message', format('page %s: OCR failed: %s', p.page, parsed ->> 'error')
            ))
            FROM jsonb_array_elements_text(OLD.ocr -> 'pending_pages') AS p (page)
        ), '[]'), '[]');
        NEW.ocr := coalesce(OLD.ocr, '{}') || jsonb_build_object('status', 'failed', 'error', parsed ->> 'error');
        NEW.ocr_status := NULL;
        RETURN NEW;
    END IF;
    NEW.parsed_at := now();
    NEW.parse_limits := limits;
    NEW.parser := parsed ->> 'parser';
    NEW.parser_version := parsed ->> 'parser_version';
    NEW.content_type := coalesce(parsed ->> 'content_type', NEW.content_type);
    NEW.parse_warnings := CASE WHEN jsonb_array_length(coalesce(parsed -> 'warnings', '[]')) > 0
        THEN parsed -> 'warnings' END;
    NEW.ocr := CASE WHEN jsonb_typeof(parsed -> 'ocr') = 'object' THEN parsed -> 'ocr' END;
    NEW.ocr_status := CASE
        WHEN jsonb_array_length(coalesce(NEW.ocr -> 'pending_pages', '[]')) > 0 THEN 'pending'
        WHEN NEW.ocr ->> 'status' = 'done' THEN 'done' END;
    IF (parsed ->> 'ok')::boolean THEN
        NEW.body := parsed ->> 'text';
        NEW.title := coalesce(NEW.title, parsed ->> 'title');
        NEW.page_starts := NULL;
        IF jsonb_typeof(parsed -> 'page_starts') = 'array' THEN
            NEW.page_starts := ARRAY(SELECT jsonb_array_elements_text(parsed -> 'page_starts')::integer);
        END IF;
        IF kb.is_blank(NEW.body) THEN
            -- every page is a scan waiting for OCR: a stand-in, never chunked (no page_starts)
            NEW.body := format('[%s awaits OCR of %s pages]', NEW.file_name,
                jsonb_array_length(NEW.ocr -> 'pending_pages'));
        END IF;
        NEW.parse_error := NULL;
    ELSE
        NEW.parse_error := parsed ->> 'error';
        NEW.page_starts := NULL;
        -- a stand-in (body may not be blank); a document whose file failed is never chunked
        NEW.body := format('[%s could not be parsed] %s', NEW.file_name, NEW.parse_error);
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_parse_file() IS
'BEFORE INSERT/UPDATE OF file on kb.documents: parses the file''s bytes (in a child process, pgkb_plpy.parsers) under kb.file_limits() into body, title, content_type, page_starts, parse_warnings; image-only PDF pages are left for OCR (ocr_status pending) unless kb.ocr_pending runs it; a failure is kept in parse_error and the document stays stored. SECURITY DEFINER (the parser is not executable by writers).';

-- named to fire before documents_before, which hashes the body it sets
DROP TRIGGER IF EXISTS documents_0_parse_file ON kb.documents;
CREATE TRIGGER documents_0_parse_file BEFORE INSERT OR UPDATE OF file ON kb.documents
FOR EACH ROW WHEN (new.file IS NOT NULL)
EXECUTE FUNCTION kb.trg_documents_parse_file();

CREATE OR REPLACE FUNCTION kb.ingest_file(
    p_namespace text,
    p_source text,
    p_content bytea,
    p_content_type text DEFAULT NULL,
    p_title text DEFAULT NULL,
    p_metadata jsonb DEFAULT '{}',
    p_status text DEFAULT 'active',
    p_doc_type text DEFAULT NULL,
    p_version text DEFAULT NULL,
    p_effective_from date DEFAULT NULL,
    p_effective_to date DEFAULT NULL,
    p_supersedes text DEFAULT NULL,
    p_origin text DEFAULT NULL
)
RETURNS TABLE (document_id bigint, source text, ingest_status text, ingest_error text, changed boolean)
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- the name as given is kept in file_name; source is its NFC form, trimmed
    v_source text := normalize(btrim(p_source), nfc);
    v_sha text := encode(sha256(p_content), 'hex');
    existing record;
    v_id bigint;
    v_changed boolean := true;
BEGIN
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'kb.ingest_file: content is NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT d.id, d.file_sha256, d.parser_version, d.parse_error INTO existing
    FROM kb.documents AS d WHERE d.namespace = p_namespace AND d.source = v_source;
    IF NOT FOUND THEN
        INSERT INTO kb.documents AS d (namespace, source, file, file_name, content_type, title, metadata, status,
            doc_type, version, effective_from, effective_to, supersedes, origin)
        VALUES (p_namespace, v_source, p_content, p_source, p_content_type, p_title, coalesce(p_metadata, '{}'),
            coalesce(p_status, 'active'), p_doc_type, p_version, p_effective_from, p_effective_to, p_supersedes,
            p_origin)
        RETURNING d.id INTO v_id;
    ELSIF existing.file_sha256 IS NOT DISTINCT FROM v_sha AND existing.parse_error IS NULL
        AND kb.parser_version_current(existing.parser_version) THEN
        -- the same bytes, parsed with the current rules: only the other fields may change
        UPDATE kb.documents AS d
        SET title = coalesce(p_title, d.title), metadata = coalesce(p_metadata, '{}'),
            status = coalesce(p_status, 'active'), doc_type = p_doc_type, version = p_version,
            effective_from = p_effective_from, effective_to = p_effective_to, supersedes = p_supersedes,
            origin = p_origin, removed_at = NULL
        WHERE d.id = existing.id
            AND (coalesce(p_title, d.title), coalesce(p_metadata, '{}'), coalesce(p_status, 'active'), p_doc_type,
                p_version, p_effective_from, p_effective_to, p_supersedes, p_origin, NULL::timestamptz)
            IS DISTINCT FROM (d.title, d.metadata, d.status, d.doc_type, d.version, d.effective_from,
                d.effective_to, d.supersedes, d.origin, d.removed_at);
        v_changed := FOUND;
        v_id := existing.id;
    ELSE
        UPDATE kb.documents AS d
        SET file = p_content, file_name = p_source, content_type = p_content_type,
            title = p_title, -- NULL: the parser's title
            metadata = coalesce(p_metadata, '{}'), status = coalesce(p_status, 'active'), doc_type = p_doc_type,
            version = p_version, effective_from = p_effective_from, effective_to = p_effective_to,
            supersedes = p_supersedes, origin = p_origin, removed_at = NULL
        WHERE d.id = existing.id;
        v_id := existing.id;
    END IF;
    RETURN QUERY
    SELECT d.id, d.source, d.ingest_status, d.ingest_error, v_changed FROM kb.documents AS d WHERE d.id = v_id;
END;
$$;
COMMENT ON FUNCTION kb.ingest_file(
    text, text, bytea, text, text, jsonb, text, text, text, date, date, text, text
) IS
'Adds or replaces the document (namespace, source) from a file''s bytes (PDF, DOCX, HTML, Markdown, text; the content decides the format, a contradicting name or content type is an error); source is NFC-normalised, the name as given kept in file_name. Unchanged bytes are not parsed again. A file that cannot be parsed is stored with ingest_status failed and the problem in ingest_error. Runs with the caller''s rights.';

CREATE OR REPLACE FUNCTION kb.parse_retry_reason(
    p_parse_error text, p_parser_version text, p_parse_limits jsonb, p_failed_only boolean
)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- why parsing a stored file again can give another outcome now, or NULL:
    -- a deterministic failure (corrupt, encrypted, type_mismatch ...) with the same
    -- conversion and limits fails the same way again
    SELECT CASE
        WHEN p_parser_version IS NOT NULL AND NOT kb.parser_version_current(p_parser_version)
            AND (p_parse_error IS NOT NULL OR NOT p_failed_only)
            THEN 'conversion changed'
        WHEN p_parse_error IS NULL THEN NULL
        WHEN p_parse_limits IS NULL THEN 'parsed before limits were recorded'
        -- the limit each kind of failure can come from: retried once that limit has changed
        WHEN (p_parse_limits -> l.key) IS DISTINCT FROM (kb.file_limits() -> l.key) THEN l.key || ' changed'
    END
    FROM (SELECT CASE split_part(p_parse_error, ':', 1)
        WHEN 'too_large' THEN 'file_max_bytes'
        WHEN 'too_many_pages' THEN 'file_max_pages'
        WHEN 'timeout' THEN 'file_parse_timeout_s'
        WHEN 'zip_bomb' THEN 'file_max_expansion_ratio'
        WHEN 'no_text_layer' THEN 'ocr_max_pages'
        END AS key) AS l
$$;
COMMENT ON FUNCTION kb.parse_retry_reason(text, text, jsonb, boolean) IS
'Why a stored file''s parse may turn out otherwise now, or NULL: its conversion changed, or it failed on a limit (too_large: file_max_bytes, too_many_pages: file_max_pages, timeout: file_parse_timeout_s, zip_bomb: file_max_expansion_ratio, no_text_layer: ocr_max_pages) that has changed since, or it was parsed before limits were recorded. kb.reparse_files retries only those; a deterministic failure (corrupt, encrypted, type_mismatch, a crash) with nothing changed fails alike again.';

CREATE OR REPLACE FUNCTION kb.reparse_files(p_namespace text DEFAULT NULL, p_failed_only boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    ids bigint[];
    batch bigint[];
    batch_size constant integer := 10;
    done integer := 0;
    failed integer := 0;
    started timestamptz := clock_timestamp();
BEGIN
    -- only files whose outcome can differ now (kb.parse_retry_reason); SET file = file fires the
    -- parse trigger, and only chunks whose text changed are re-embedded
    ids := ARRAY(
        SELECT d.id FROM kb.documents AS d
        WHERE d.file IS NOT NULL
            AND (p_namespace IS NULL OR d.namespace = p_namespace)
            AND kb.parse_retry_reason(d.parse_error, d.parser_version, d.parse_limits, p_failed_only) IS NOT NULL
        ORDER BY d.id
    );
    FOR i IN 1 .. coalesce(array_length(ids, 1), 0) BY batch_size LOOP
        batch := ids[i:i + batch_size - 1];
        UPDATE kb.documents AS d SET file = d.file WHERE d.id = ANY(batch);
        done := done + cardinality(batch);
        failed := failed + (SELECT count(*) FROM kb.documents AS d WHERE d.id = ANY(batch) AND d.parse_error IS NOT NULL);
        RAISE NOTICE 'kb.reparse_files: % of % files parsed again (% failed), % s',
            done, cardinality(ids), failed, round(extract(EPOCH FROM clock_timestamp() - started)::numeric, 1);
    END LOOP;
    RETURN done;
END;
$$;
COMMENT ON FUNCTION kb.reparse_files(text, boolean) IS
'Parses again the stored files whose outcome can differ now (kb.parse_retry_reason: parsed with an older conversion, or failed on a limit that has changed since; unless p_failed_only, also successful files of an older conversion), of one namespace or all, in batches of 10 with a progress NOTICE after each; returns how many. A deterministic failure with nothing changed is left alone. Runs with the caller''s rights.';

CREATE OR REPLACE FUNCTION kb.reindex_documents(p_namespace text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    reparsed integer := kb.reparse_files(p_namespace, false);
    rechunked integer;
BEGIN
    -- clearing chunker_version makes the ingest trigger chunk the document again
    UPDATE kb.documents AS d SET chunker_version = NULL
    WHERE (p_namespace IS NULL OR d.namespace = p_namespace)
        AND d.chunker_version IS DISTINCT FROM kb.chunker_version() AND d.chunker_version IS NOT NULL;
    GET DIAGNOSTICS rechunked = ROW_COUNT;
    RETURN reparsed + rechunked;
END;
$$;
COMMENT ON FUNCTION kb.reindex_documents(text) IS
'Brings stale documents (kb.stale_documents) up to date: re-parses files parsed with an older conversion and re-chunks documents chunked with an older chunker; only chunks whose text changed are re-embedded. Returns the number of documents redone.';

CREATE OR REPLACE VIEW kb.stale_documents WITH (security_invoker = true) AS
SELECT
    d.id AS document_id,
    d.namespace,
    d.source,
    d.parser,
    d.parser_version,
    d.chunker_version,
    (d.file IS NOT NULL AND NOT kb.parser_version_current(d.parser_version)) AS parser_stale,
    coalesce(d.chunker_version <> kb.chunker_version(), true) AS chunker_stale
FROM kb.documents AS d
WHERE
    (d.file IS NOT NULL AND NOT kb.parser_version_current(d.parser_version))
    OR coalesce(d.chunker_version <> kb.chunker_version(), true);
COMMENT ON VIEW kb.stale_documents IS
'Documents parsed or chunked with rules older than the installed ones (kb.parser_versions, kb.chunker_version); kb.reindex_documents() brings them up to date.';

CREATE OR REPLACE VIEW kb.document_files WITH (security_invoker = true) AS
SELECT
    d.id AS document_id,
    d.namespace,
    d.source,
    d.file_name,
    d.content_type,
    d.byte_size,
    d.file_sha256,
    d.parser,
    d.parser_version,
    d.parse_error,
    cardinality(d.page_starts) AS pages,
    d.parsed_at,
    d.ingest_status,
    jsonb_array_length(coalesce(d.parse_warnings, '[]')) AS warnings,
    d.ocr_status,
    d.ocr
FROM kb.documents AS d
WHERE d.file IS NOT NULL;
COMMENT ON VIEW kb.document_files IS
'Documents added as files, without their bytes: name as given, detected content type, size, parser and version, pages, the parse error if any, how many warnings (kb.file_warnings), OCR status and record (engine, confidence per page).';

CREATE OR REPLACE VIEW kb.file_warnings WITH (security_invoker = true) AS
SELECT
    d.namespace,
    d.source,
    d.id AS document_id,
    (w.value ->> 'page')::integer AS page,
    w.value ->> 'kind' AS kind,
    w.value ->> 'message' AS message,
    d.parsed_at
FROM kb.documents AS d
CROSS JOIN LATERAL jsonb_array_elements(d.parse_warnings) AS w (value)
WHERE d.parse_warnings IS NOT NULL;
COMMENT ON VIEW kb.file_warnings IS
'What the parser could not do in a stored file, one row per page or sheet: no_text (a page without text), ocr_pending, ocr_unreadable (OCR read nothing or with low confidence), ocr_limit (past ocr_max_pages), ocr_failed (the OCR run failed; the text kept), ocr_off, ocr_unavailable, table_not_parsed, empty_sheet. Rows of the documents the caller may read (security_invoker).';

CREATE OR REPLACE VIEW kb.ocr_queue WITH (security_invoker = true) AS
SELECT
    d.id AS document_id,
    d.namespace,
    d.source,
    d.ingest_status,
    (
        SELECT array_agg(p.page::integer ORDER BY p.page::integer)
        FROM jsonb_array_elements_text(d.ocr -> 'pending_pages') AS p (page)
    ) AS pages,
    d.parsed_at AS since
FROM kb.documents AS d
WHERE d.ocr_status = 'pending';
COMMENT ON VIEW kb.ocr_queue IS
'Documents whose image-only PDF pages wait for OCR (pgkb worker or kb.ocr_pending), with the pages; their ingest_status is pending. Rows of the documents the caller may read (security_invoker).';

CREATE OR REPLACE FUNCTION kb.ocr_pending(p_limit integer DEFAULT 1)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    ids bigint[];
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'kb.ocr_pending: the limit must be between 1 and 100 (got %)', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- claims like the embedding queue: concurrent workers never take the same document
    ids := ARRAY(
        SELECT d.id FROM kb.documents AS d
        WHERE d.ocr_status = 'pending' AND d.file IS NOT NULL
        ORDER BY d.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    );
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    -- the parse trigger reads the scanned pages in this statement only
    PERFORM set_config('pgkb.ocr_run', 'on', true);
    UPDATE kb.documents AS d SET file = d.file WHERE d.id = ANY(ids);
    PERFORM set_config('pgkb.ocr_run', '', true);
    -- OCR that added no text leaves the body as it was (no re-chunk): the status still moves on
    PERFORM kb.refresh_ingest_status(ids);
    RETURN cardinality(ids);
END;
$$;
COMMENT ON FUNCTION kb.ocr_pending(integer) IS
'Reads by OCR the image-only pages of up to p_limit documents waiting for it (kb.ocr_queue) that the caller may update, skipping those another worker holds: parses their files again with OCR, which re-chunks and indexes them; returns how many documents. pgkb worker calls it between embedding batches. Runs with the caller''s rights.';
