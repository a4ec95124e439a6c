-- Files into the database. Any SQL client adds a file with
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

-- An OCR run reads up to ocr_max_pages pages at about 2.5 s of CPU each (docs/INGEST.md):
-- a fixed limit would either cut a long run or let a broken parse run long, so the limit of
-- a run grows with the pages it reads.
CREATE OR REPLACE FUNCTION kb.ocr_run_timeout_s(p_limits jsonb, p_pages integer)
RETURNS integer
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT (p_limits ->> 'file_parse_timeout_s')::integer
        + (kb.setting('ocr_page_timeout_s') #>> '{}')::integer
        * least(coalesce(p_pages, (p_limits ->> 'ocr_max_pages')::integer), (p_limits ->> 'ocr_max_pages')::integer)
$$;
COMMENT ON FUNCTION kb.ocr_run_timeout_s(jsonb, integer) IS
'Wall-clock seconds an OCR run (kb.ocr_pending) of p_pages pages may take under the limits p_limits (kb.file_limits()): file_parse_timeout_s plus ocr_page_timeout_s for each page read, at most ocr_max_pages (all of them when p_pages is NULL).';

-- The conversion version of each format (pgkb_plpy.parsers.formats.FORMATS)
-- and of the chunker (pgkb_plpy.chunker.CHUNKER_VERSION): documents built with
-- other versions are stale (kb.stale_documents). Literals, so that these stay
-- IMMUTABLE without Python; tests/unit/test_formats.py compares them.
CREATE OR REPLACE FUNCTION kb.parser_versions()
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT '{"pdf": "7", "docx": "4", "xlsx": "3", "pptx": "2", "image": "1", "html": "4", "markdown": "1", "text": "1"}'::jsonb
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
AS $$ SELECT '5'::text $$;
COMMENT ON FUNCTION kb.chunker_version() IS
'Current version of the chunking rules (pgkb_plpy.chunker.CHUNKER_VERSION); a document chunked with another is stale.';
