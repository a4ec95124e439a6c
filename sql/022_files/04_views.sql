-- What readers see of files: their facts (kb.document_files), the parsers'
-- warnings (kb.file_warnings), the pages waiting for OCR (kb.ocr_queue) and
-- the OCR worker's door (kb.ocr_pending).

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
'What the parser could not do in a stored file, one row per page or sheet: name_mismatch (the name or declared type said another format than the content, which decided; page NULL), no_text (a page without text), ocr_pending, ocr_unreadable (OCR read nothing or with low confidence), ocr_limit (past ocr_max_pages), ocr_failed (the OCR run failed; the text kept), ocr_off, ocr_unavailable, table_not_parsed, empty_sheet, box_not_indexed (an HTML block inside the article left out as an ad, author box or the like). Rows of the documents the caller may read (security_invoker).';

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
