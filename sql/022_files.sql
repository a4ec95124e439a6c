-- Files into the database (issue 13). Any SQL client adds a file with
-- kb.ingest_file(namespace, source, bytes, ...) or by writing its bytes to
-- kb.documents.file: the BEFORE trigger below parses them (in a child process
-- of the backend, pgkb_plpy.parsers) into body, which the ingest trigger
-- chunks as any text. A file that cannot be parsed is still stored, with
-- ingest_status 'failed' and parse_error naming the problem; it has no chunks
-- and kb.reparse_files() tries again. docs/INGEST.md has the details.

-- The largest file parsed; larger ones are stored and marked failed without
-- reaching Python. The literal is pgkb_plpy.parsers.MAX_FILE_BYTES (a test
-- compares them).
CREATE OR REPLACE FUNCTION kb.file_max_bytes()
RETURNS bigint
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 67108864::bigint $$;
COMMENT ON FUNCTION kb.file_max_bytes() IS
'Largest file (bytes) kb.documents.file is parsed from (pgkb_plpy.parsers.MAX_FILE_BYTES); a larger one is stored and marked failed.';

-- The conversion version of each format (pgkb_plpy.parsers.FORMAT_VERSIONS)
-- and of the chunker (pgkb_plpy.chunker.CHUNKER_VERSION): documents built with
-- other versions are stale (kb.stale_documents).
CREATE OR REPLACE FUNCTION kb.parser_versions()
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT '{"pdf": "3", "docx": "3", "html": "3", "markdown": "1", "text": "1"}'::jsonb $$;
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
BEGIN
    -- runs as the owner: writers may not execute the PL/Python parser directly
    NEW.byte_size := octet_length(NEW.file);
    NEW.file_sha256 := encode(sha256(NEW.file), 'hex');
    NEW.file_name := coalesce(NEW.file_name, NEW.source);
    IF NEW.byte_size > kb.file_max_bytes() THEN
        parsed := jsonb_build_object(
            'ok', false,
            'error', format('too_large: the file is %s bytes; the limit is %s', NEW.byte_size, kb.file_max_bytes())
        );
    ELSE
        parsed := kb.py_parse_file(NEW.file, NEW.file_name, NEW.content_type);
    END IF;
    NEW.parsed_at := now();
    NEW.parser := parsed ->> 'parser';
    NEW.parser_version := parsed ->> 'parser_version';
    NEW.content_type := coalesce(parsed ->> 'content_type', NEW.content_type);
    IF (parsed ->> 'ok')::boolean THEN
        NEW.body := parsed ->> 'text';
        NEW.title := coalesce(NEW.title, parsed ->> 'title');
        NEW.page_starts := NULL;
        IF jsonb_typeof(parsed -> 'page_starts') = 'array' THEN
            NEW.page_starts := ARRAY(SELECT jsonb_array_elements_text(parsed -> 'page_starts')::integer);
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
'BEFORE INSERT/UPDATE OF file on kb.documents: parses the file''s bytes (in a child process, pgkb_plpy.parsers) into body, title, content_type, page_starts; a failure is kept in parse_error and the document stays stored. SECURITY DEFINER (the parser is not executable by writers).';

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

CREATE OR REPLACE FUNCTION kb.reparse_files(p_namespace text DEFAULT NULL, p_failed_only boolean DEFAULT false)
RETURNS integer
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- SET file = file fires the parse trigger; only chunks whose text changed are re-embedded
    WITH redone AS (
        UPDATE kb.documents AS d SET file = d.file
        WHERE d.file IS NOT NULL
            AND (p_namespace IS NULL OR d.namespace = p_namespace)
            AND (d.parse_error IS NOT NULL OR (NOT p_failed_only AND NOT kb.parser_version_current(d.parser_version)))
        RETURNING 1
    )
    SELECT count(*)::integer FROM redone
$$;
COMMENT ON FUNCTION kb.reparse_files(text, boolean) IS
'Parses again the stored files that failed and (unless p_failed_only) those parsed with an older conversion (kb.parser_versions), of one namespace or all; returns how many. Runs with the caller''s rights.';

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
    d.ingest_status
FROM kb.documents AS d
WHERE d.file IS NOT NULL;
COMMENT ON VIEW kb.document_files IS
'Documents added as files, without their bytes: name as given, detected content type, size, parser and version, pages, the parse error if any.';
