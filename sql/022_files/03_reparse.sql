-- Parsing again: why a document's parse may be retried (kb.parse_retry_reason),
-- kb.reparse_files and kb.reindex_documents, and the documents parsed or chunked
-- with older rules (kb.stale_documents).

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

CREATE OR REPLACE FUNCTION kb.ocr_pages_skipped(p_parse_warnings jsonb, p_parse_limits jsonb)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- an ocr_limit warning says image-only pages were not read; a higher limit now reads them
    SELECT coalesce(
        p_parse_warnings @> '[{"kind": "ocr_limit"}]'
        AND (p_parse_limits ->> 'ocr_max_pages')::integer < (kb.file_limits() ->> 'ocr_max_pages')::integer,
        false
    )
$$;
COMMENT ON FUNCTION kb.ocr_pages_skipped(jsonb, jsonb) IS
'Whether a parse (its parse_warnings and parse_limits) skipped image-only pages under an ocr_max_pages lower than today''s, so that parsing it again reads them (kb.reparse_files, kb.stale_documents).';

CREATE OR REPLACE FUNCTION kb.parse_would_differ(
    p_parse_error text, p_parser_version text, p_parse_limits jsonb, p_parse_warnings jsonb
)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.parse_retry_reason(p_parse_error, p_parser_version, p_parse_limits, false) IS NOT NULL
        OR kb.ocr_pages_skipped(p_parse_warnings, p_parse_limits)
$$;
COMMENT ON FUNCTION kb.parse_would_differ(text, text, jsonb, jsonb) IS
'Whether parsing a stored file again (its parse_error, parser_version, parse_limits, parse_warnings) can turn out otherwise now: kb.parse_retry_reason or kb.ocr_pages_skipped. The same bytes sent again are parsed again only then (kb.ingest_file), and only then is a file stale (kb.stale_documents): a failure that would fail alike is reported once, not retried on every folder run.';

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
            AND (kb.parse_retry_reason(d.parse_error, d.parser_version, d.parse_limits, p_failed_only) IS NOT NULL
                OR kb.ocr_pages_skipped(d.parse_warnings, d.parse_limits))
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
'Parses again the stored files whose outcome can differ now (kb.parse_retry_reason: parsed with an older conversion, or failed on a limit that has changed since; unless p_failed_only, also successful files of an older conversion; and PDFs with image-only pages skipped by an ocr_max_pages lower than today''s, whose pages then wait for OCR), of one namespace or all, in batches of 10 with a progress NOTICE after each; returns how many. A deterministic failure with nothing changed is left alone. Runs with the caller''s rights.';

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

CREATE OR REPLACE FUNCTION kb.rebuild_lexical_terms()
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    installed integer := (kb.py_dictionary_source() ->> 'terms_version')::integer;
    rebuilt integer;
BEGIN
    -- The postings and the glossary's terms were made with the term rules of
    -- the setting lexical_terms_version; when the installed rules
    -- (pgkb_plpy.lexical.TERMS_VERSION) differ, queries and postings would
    -- not match, so every document is chunked again with them (only chunks
    -- whose text changed are re-embedded) and every glossary entry's terms
    -- recomputed, in the caller's transaction. pgkb migrate calls this.
    IF (kb.setting('lexical_terms_version') #>> '{}')::integer = installed THEN
        RETURN 0;
    END IF;
    UPDATE kb.settings SET value = to_jsonb(installed) WHERE key = 'lexical_terms_version';
    -- clearing chunker_version chunks a document again (the trigger
    -- documents_sync_update); one that has none yet (stored before the
    -- chunker was versioned) is given a placeholder first, so that every
    -- document is cleared
    UPDATE kb.documents SET chunker_version = 'before terms version ' || installed WHERE chunker_version IS NULL;
    UPDATE kb.documents SET chunker_version = NULL;
    GET DIAGNOSTICS rebuilt = ROW_COUNT;
    UPDATE kb.glossary SET terms = '{}';
    RETURN rebuilt;
END;
$$;
COMMENT ON FUNCTION kb.rebuild_lexical_terms() IS
'When the installed term rules (pgkb_plpy.lexical.TERMS_VERSION) differ from those the postings were built with (setting lexical_terms_version): records the installed version, chunks every document again and recomputes the glossary''s terms; returns how many documents, 0 when the versions agree. The owner''s; pgkb migrate runs it.';
REVOKE EXECUTE ON FUNCTION kb.rebuild_lexical_terms() FROM public;

CREATE OR REPLACE VIEW kb.stale_documents WITH (security_invoker = true) AS
SELECT
    d.id AS document_id,
    d.namespace,
    d.source,
    d.parser,
    d.parser_version,
    d.chunker_version,
    (
        d.file IS NOT NULL AND kb.parse_would_differ(d.parse_error, d.parser_version, d.parse_limits, d.parse_warnings)
    ) AS parser_stale,
    (d.parse_error IS NULL AND d.chunker_version IS DISTINCT FROM kb.chunker_version()) AS chunker_stale
FROM kb.documents AS d
-- a failed parse is listed only while parsing it again can turn out otherwise
WHERE
    (d.file IS NOT NULL AND kb.parse_would_differ(d.parse_error, d.parser_version, d.parse_limits, d.parse_warnings))
    OR (d.parse_error IS NULL AND d.chunker_version IS DISTINCT FROM kb.chunker_version());
COMMENT ON VIEW kb.stale_documents IS
'Documents whose stored file would parse otherwise now (parser_stale: kb.parse_retry_reason, kb.ocr_pages_skipped) or whose text was chunked with rules older than the installed ones (chunker_stale: kb.chunker_version); a failure that would fail alike again is not listed. kb.reindex_documents() brings them up to date.';
