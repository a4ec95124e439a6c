-- Views for status and BI tools.

CREATE OR REPLACE VIEW kb.model_readiness WITH (security_invoker = true) AS
SELECT
    m.name AS model,
    m.provider,
    m.dimensions,
    m.active,
    (SELECT count(*) FROM kb.embeddings AS e WHERE e.model = m.name) AS embedded,
    (SELECT count(*) FROM kb.embed_queue AS q WHERE q.model = m.name AND q.last_error IS NULL) AS pending,
    (SELECT count(*) FROM kb.embed_queue AS q WHERE q.model = m.name AND q.last_error IS NOT NULL) AS failed,
    (
        SELECT count(*) FROM kb.embeddings AS e
        WHERE e.model = m.name AND NOT m.active
    ) AS stale,
    (SELECT count(*) FROM kb.chunks) AS chunks
FROM kb.models AS m;
COMMENT ON VIEW kb.model_readiness IS
'Per model: vectors stored, chunks pending or failed, vectors not used for retrieval because the model is not active (stale).';

CREATE OR REPLACE VIEW kb.ingest_status WITH (security_invoker = true) AS
SELECT
    d.namespace,
    count(*) AS documents,
    count(*) FILTER (WHERE d.ingest_status = 'indexed') AS indexed,
    count(*) FILTER (WHERE d.ingest_status = 'pending') AS pending,
    count(*) FILTER (WHERE d.ingest_status = 'failed') AS failed,
    count(*) FILTER (WHERE d.removed_at IS NOT NULL) AS removed,
    sum(d.chunk_count) AS chunks,
    max(d.indexed_at) AS last_indexed_at,
    -- rag_include false: stored, out of retrieval (docs/INGEST.md)
    count(*) FILTER (WHERE d.ingest_status = 'excluded') AS excluded,
    -- pending because scanned pages wait for OCR (kb.ocr_queue)
    count(*) FILTER (WHERE d.ocr_status = 'pending') AS ocr_pending
FROM kb.documents AS d
GROUP BY d.namespace;
COMMENT ON VIEW kb.ingest_status IS
'Per namespace: documents by ingest status (excluded: rag_include false, stored but out of retrieval; ocr_pending: pending because scanned pages wait for OCR), chunks, last indexing time.';

CREATE OR REPLACE VIEW kb.ingest_failures WITH (security_invoker = true) AS
SELECT
    d.namespace,
    d.source,
    d.id AS document_id,
    c.id AS chunk_id,
    c.ordinal,
    q.model,
    q.error_kind,
    q.last_error,
    q.attempts,
    q.last_attempt_at
FROM kb.embed_queue AS q
INNER JOIN kb.chunks AS c ON c.id = q.chunk_id
INNER JOIN kb.documents AS d ON d.id = c.document_id
WHERE q.last_error IS NOT NULL
UNION ALL
-- a file that could not be parsed: its error reads "<kind>: <message>"
SELECT
    d.namespace,
    d.source,
    d.id AS document_id,
    NULL::bigint AS chunk_id,
    NULL::integer AS ordinal,
    NULL::text AS model,
    split_part(d.parse_error, ':', 1) AS error_kind,
    d.parse_error AS last_error,
    1 AS attempts,
    d.parsed_at AS last_attempt_at
FROM kb.documents AS d
WHERE d.parse_error IS NOT NULL;
COMMENT ON VIEW kb.ingest_failures IS
'Chunks whose embedding failed and files that could not be parsed, with the error; pgkb backfill retries both.';
