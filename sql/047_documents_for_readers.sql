-- Whole documents for readers (the MCP server's resources, any SQL client):
-- the documents current now (kb.current_documents), one document by its
-- source with its lifecycle and provenance (kb.read_document). Everything
-- here is SECURITY INVOKER: the caller's grants and the row-level security
-- of kb.documents decide which documents exist (sql/090_grants/03_row_security.sql). The
-- lifecycle rule is kb.document_is_current's (sql/030_lifecycle/01_visibility.sql).

CREATE OR REPLACE FUNCTION kb.document_lifecycle(p_document kb.documents, p_as_of timestamptz)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- current by the database's own rule; the other labels say which part of it failed
    SELECT CASE
        WHEN p_document.status = 'draft' THEN 'draft'
        WHEN p_document.removed_at IS NOT NULL AND p_document.removed_at <= p_as_of THEN 'removed'
        WHEN kb.document_is_current(p_document.id, p_as_of) THEN 'current'
        WHEN p_document.effective_from > (p_as_of AT TIME ZONE (kb.setting('calendar_time_zone') #>> '{}'))::date
            THEN 'future'
        WHEN p_document.effective_to < (p_as_of AT TIME ZONE (kb.setting('calendar_time_zone') #>> '{}'))::date
            THEN 'expired'
        WHEN p_document.status = 'deprecated' AND p_document.effective_to IS NULL THEN 'deprecated'
        ELSE 'superseded'
    END
$$;
COMMENT ON FUNCTION kb.document_lifecycle(kb.documents, timestamptz) IS
'The lifecycle of a document at as_of, in the words of docs/LIFECYCLE.md: current (kb.document_is_current), else draft, removed, future, expired, deprecated or superseded.';

CREATE OR REPLACE FUNCTION kb.document_provenance(p_document kb.documents)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- the document-level keys of a passage's provenance (kb_node.passage_provenance),
    -- every key always present (NULL where it does not apply: no file, no pages)
    SELECT jsonb_build_object(
        'file_name', p_document.file_name,
        'content_type', p_document.content_type,
        'byte_size', p_document.byte_size,
        'file_sha256', p_document.file_sha256,
        'parser', p_document.parser,
        'parser_version', p_document.parser_version,
        'parsed_at', p_document.parsed_at,
        'pages', cardinality(p_document.page_starts),
        'chunker_version', p_document.chunker_version,
        'content_hash', p_document.content_hash,
        'chunk_count', p_document.chunk_count,
        'ingest_status', p_document.ingest_status,
        'indexed_at', p_document.indexed_at,
        'origin', p_document.origin,
        'created_at', p_document.created_at,
        'updated_at', p_document.updated_at
    )
$$;
COMMENT ON FUNCTION kb.document_provenance(kb.documents) IS
'Where a whole document comes from: its file (name, content type, size, SHA-256), parser and version, pages, chunker version, content hash, chunks, ingest state and times, and the folder it was loaded from (origin).';

CREATE OR REPLACE VIEW kb.current_documents WITH (security_invoker = true) AS
SELECT
    d.id AS document_id,
    d.namespace,
    d.source,
    d.title,
    d.doc_type,
    d.status,
    d.version,
    d.effective_from,
    d.effective_to,
    d.supersedes,
    length(d.body) AS characters,
    d.ingest_status,
    d.updated_at
FROM kb.documents AS d
WHERE kb.document_is_current(d.id, now());
COMMENT ON VIEW kb.current_documents IS
'The documents current now (docs/LIFECYCLE.md) that the caller may read, without their text: what `pgkb mcp` lists as resources, in (namespace, source) order.';

CREATE OR REPLACE FUNCTION kb.read_document(p_namespace text, p_source text, p_as_of timestamptz DEFAULT now())
RETURNS TABLE (
    document_id bigint,
    namespace text,
    source text,
    title text,
    doc_type text,
    status text,
    version text,
    effective_from date,
    effective_to date,
    supersedes text,
    superseded_by text[],
    lifecycle text,
    metadata jsonb,
    body text,
    provenance jsonb
)
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- SECURITY INVOKER: a document the caller may not read does not exist here
    SELECT
        d.id, d.namespace, d.source, d.title, d.doc_type, d.status, d.version, d.effective_from, d.effective_to,
        d.supersedes,
        (SELECT array_agg(s.source ORDER BY s.source) FROM kb.documents AS s
            WHERE s.namespace = d.namespace AND s.supersedes = d.source
                AND kb.supersedes_link_holds(s.supersedes_writer_ids, d.reader_ids)),
        kb.document_lifecycle(d, p_as_of),
        d.metadata,
        d.body,
        kb.document_provenance(d)
    FROM kb.documents AS d
    WHERE d.namespace = kb.bounded_text('kb.read_document', 'the namespace', p_namespace)
        AND d.source = kb.bounded_text('kb.read_document', 'the source', p_source)
$$;
COMMENT ON FUNCTION kb.read_document(text, text, timestamptz) IS
'One whole document the caller may read, by namespace and source: its text, lifecycle at as_of (kb.document_lifecycle; default now), the sources that supersede it, metadata and provenance (kb.document_provenance). No row when it does not exist or is not the caller''s to read; namespace and source at most kb_pipeline.max_query_chars characters.';
