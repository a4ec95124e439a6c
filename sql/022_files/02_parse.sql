-- A file's parse: the BEFORE trigger on kb.documents.file (in a child process of
-- the backend) and kb.ingest_file, the door any SQL client adds a file through.

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
    run_limits jsonb := limits;
    ocr_failed jsonb;
BEGIN
    IF ocr_mode = 'run' THEN
        -- an OCR run's time limit grows with the pages it reads (kb.ocr_run_timeout_s)
        run_limits := limits || jsonb_build_object('file_parse_timeout_s', kb.ocr_run_timeout_s(
            limits, CASE WHEN TG_OP = 'UPDATE' THEN jsonb_array_length(OLD.ocr -> 'pending_pages') END));
    END IF;
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
        parsed := kb.py_parse_file(NEW.file, NEW.file_name, NEW.content_type, run_limits, ocr_mode);
    END IF;
    IF ocr_mode = 'run' AND TG_OP = 'UPDATE' AND NOT (parsed ->> 'ok')::boolean AND OLD.parse_error IS NULL
        AND NEW.file IS NOT DISTINCT FROM OLD.file THEN
        -- the OCR run failed (time, memory, a crash): say so on each page it was to read
        ocr_failed := nullif(coalesce((
            SELECT jsonb_agg(w.value) FROM jsonb_array_elements(OLD.parse_warnings) AS w (value)
            WHERE w.value ->> 'kind' <> 'ocr_pending'
        ), '[]') || coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'page', p.page::integer, 'kind', 'ocr_failed',
                'message', format('page %s: OCR failed: %s', p.page, parsed ->> 'error')
            ))
            FROM jsonb_array_elements_text(OLD.ocr -> 'pending_pages') AS p (page)
        ), '[]'), '[]');
        IF OLD.page_starts IS NOT NULL THEN
            -- keep the text and chunks the document has, and stop the worker from claiming it again
            NEW.parse_warnings := ocr_failed;
            NEW.ocr := coalesce(OLD.ocr, '{}') || jsonb_build_object('status', 'failed', 'error', parsed ->> 'error');
            NEW.ocr_status := NULL;
            RETURN NEW;
        END IF;
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
        -- a document all of whose pages are scans has no text to keep: it fails, and its pages say why
        IF ocr_failed IS NOT NULL THEN
            NEW.parse_warnings := ocr_failed;
            NEW.ocr := coalesce(OLD.ocr, '{}')
                || jsonb_build_object('status', 'failed', 'error', parsed ->> 'error', 'pending_pages', '[]'::jsonb);
        END IF;
        -- a stand-in (body may not be blank); a document whose file failed is never chunked
        NEW.body := format('[%s could not be parsed] %s', NEW.file_name, NEW.parse_error);
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_parse_file() IS
'BEFORE INSERT/UPDATE OF file on kb.documents: parses the file''s bytes (in a child process, pgkb_plpy.parsers) under kb.file_limits() into body, title, content_type, page_starts, parse_warnings; image-only PDF pages are left for OCR (ocr_status pending) unless kb.ocr_pending runs it, under a time limit that grows with the pages read (kb.ocr_run_timeout_s); a failure is kept in parse_error and the document stays stored; a failed OCR run leaves an ocr_failed warning on each page it was to read (and keeps the text of the other pages). SECURITY DEFINER (the parser is not executable by writers).';

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
    SELECT d.id, d.file_sha256, d.parser_version, d.parse_error, d.parse_limits, d.parse_warnings INTO existing
    FROM kb.documents AS d WHERE d.namespace = p_namespace AND d.source = v_source;
    IF NOT FOUND THEN
        INSERT INTO kb.documents AS d (namespace, source, file, file_name, content_type, title, metadata, status,
            doc_type, version, effective_from, effective_to, supersedes, origin)
        VALUES (p_namespace, v_source, p_content, p_source, p_content_type, p_title, coalesce(p_metadata, '{}'),
            coalesce(p_status, 'active'), p_doc_type, p_version, p_effective_from, p_effective_to, p_supersedes,
            p_origin)
        RETURNING d.id INTO v_id;
    ELSIF existing.file_sha256 IS NOT DISTINCT FROM v_sha
        AND NOT kb.parse_would_differ(
            existing.parse_error, existing.parser_version, existing.parse_limits, existing.parse_warnings
        ) THEN
        -- the same bytes, whose parse would come out the same (a success with the current rules,
        -- or a failure with nothing changed since): only the other fields may change
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
'Adds or replaces the document (namespace, source) from a file''s bytes (PDF, DOCX, XLSX, PPTX, images by OCR, HTML, Markdown, text; the content decides the format whenever it is one read here, the name or content type only among the text formats; a legacy Office file is refused naming the format to save it as); source is NFC-normalised, the name as given kept in file_name. Unchanged bytes are not parsed again. A file that cannot be parsed is stored with ingest_status failed and the problem in ingest_error. Runs with the caller''s rights.';
