-- Retrieval log writer and the views BI tools read (docs/OBSERVABILITY.md has example queries).

CREATE OR REPLACE FUNCTION kb.visible_sources(p_sources text[])
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Each entry is namespace || '/' || source of a document the caller can
    -- see (row-level security applies: SECURITY INVOKER). Either part may
    -- hold '/', so every split at a '/' is tried, each an index probe. A list
    -- longer than a retrieval returns (k <= 1000), or an entry longer than a
    -- namespace and a source can be, names no document.
    SELECT cardinality(p_sources) <= 1000 AND NOT EXISTS (
        SELECT 1 FROM unnest(p_sources) AS s (entry)
        WHERE length(s.entry) > 10000 OR NOT EXISTS (
            SELECT 1
            FROM unnest(string_to_array(s.entry, NULL)) WITH ORDINALITY AS c (ch, pos)
            INNER JOIN kb.documents AS d
                ON d.namespace = left(s.entry, c.pos::integer - 1) AND d.source = substr(s.entry, c.pos::integer + 1)
            WHERE c.ch = '/'
        )
    )
$$;
COMMENT ON FUNCTION kb.visible_sources(text[]) IS
'Whether every namespace/source in the list names a document the current role can see; the retrieval log accepts only such rows.';

CREATE OR REPLACE FUNCTION kb.retrieval_log_state()
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- One answer to "is this call logged?", for kb.log_retrieval and for the
    -- explain output: on a hot standby PostgreSQL refuses every INSERT, so
    -- retrieval there works and is not logged; a read-only transaction on a
    -- primary could write the log if it were not read-only, so with the log
    -- on kb.log_retrieval refuses it (the log is never skipped on a primary).
    SELECT CASE
        WHEN NOT (kb.setting('retrieval_log') #>> '{}')::boolean THEN 'off'
        WHEN pg_is_in_recovery() THEN 'skipped: hot standby'
        WHEN current_setting('transaction_read_only')::boolean THEN 'refused: read-only transaction'
        ELSE 'logged'
    END
$$;
COMMENT ON FUNCTION kb.retrieval_log_state() IS
'Whether a kb_retrieve call in this transaction is logged to kb.retrieval_log: logged, off (setting retrieval_log), skipped: hot standby (nothing can be written there), or refused: read-only transaction (on a primary with the log on: kb.log_retrieval raises).';

CREATE OR REPLACE FUNCTION kb.log_retrieval(p_explain jsonb, p_rows kb.retrieval_row[], p_namespace text, p_k integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- Called by the gateways, as the owner (no other role may execute it or
    -- insert into the log): the row names the session's role
    -- (kb.session_role) and its login. A hot standby retrieves without
    -- logging (PostgreSQL refuses any INSERT there); a read-only transaction
    -- on a primary is refused while the log is on, so no retrieval there
    -- escapes it.
    CASE kb.retrieval_log_state()
        WHEN 'logged' THEN
            NULL;
        WHEN 'refused: read-only transaction' THEN
            RAISE EXCEPTION 'kb_retrieve: the retrieval log is on (setting retrieval_log) and this transaction is read-only'
                USING ERRCODE = 'read_only_sql_transaction',
                HINT = 'retrieve outside a read-only transaction (on a primary every retrieval is logged), '
                    'from a hot standby, or turn the setting retrieval_log off';
        ELSE
            RETURN;
    END CASE;
    -- A private document's name goes to private_sources with its readers,
    -- which kb.retrieval_log_sources shows to those readers only.
    WITH returned AS (
        SELECT DISTINCT r.namespace || '/' || r.source AS name, d.reader_ids
        FROM unnest(p_rows) AS r
        LEFT JOIN kb.documents AS d ON d.id = r.document_id
    )
    INSERT INTO kb.retrieval_log (
        role_name, session_role, query_hash, namespace, mode_requested, mode, k, result_count, low_confidence, no_evidence,
        sources, private_sources, timings_ms, total_ms
    )
    SELECT
        kb.session_role(),
        session_user,
        encode(sha256(convert_to(p_explain ->> 'query', 'UTF8')), 'hex'),
        p_namespace,
        p_explain ->> 'mode_requested',
        p_explain ->> 'mode',
        p_k,
        cardinality(p_rows),
        (p_explain ->> 'low_confidence')::boolean,
        (p_explain ->> 'no_evidence')::boolean,
        ARRAY(SELECT r.name FROM returned AS r WHERE r.reader_ids IS NULL ORDER BY r.name),
        coalesce((
            SELECT jsonb_agg(jsonb_build_object('source', r.name, 'reader_ids', to_jsonb(r.reader_ids)) ORDER BY r.name)
            FROM returned AS r WHERE r.reader_ids IS NOT NULL
        ), '[]'),
        p_explain -> 'timings_ms',
        (p_explain #>> '{timings_ms,total}')::double precision;
END;
$$;
COMMENT ON FUNCTION kb.log_retrieval(jsonb, kb.retrieval_row[], text, integer) IS
'Appends one kb_retrieve call to kb.retrieval_log (for the gateways: it names the session''s role) when the setting retrieval_log is true (query stored only as a hash); raises in a read-only transaction on a primary while the log is on; writes nothing on a hot standby.';

CREATE OR REPLACE VIEW kb.retrieval_latency_daily AS
SELECT
    date_trunc('day', l.logged_at) AS day,
    l.mode,
    count(*) AS queries,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY l.total_ms) AS p50_ms,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY l.total_ms) AS p95_ms,
    percentile_cont(0.99) WITHIN GROUP (ORDER BY l.total_ms) AS p99_ms,
    avg((l.timings_ms ->> 'embed')::double precision) AS avg_embed_ms,
    avg((l.timings_ms ->> 'lexical')::double precision) AS avg_lexical_ms,
    avg((l.timings_ms ->> 'dense')::double precision) AS avg_dense_ms
FROM kb.retrieval_log AS l
GROUP BY date_trunc('day', l.logged_at), l.mode;
COMMENT ON VIEW kb.retrieval_latency_daily IS 'kb_retrieve latency percentiles per day and mode, from kb.retrieval_log.';

CREATE OR REPLACE VIEW kb.retrieval_zero_results AS
SELECT
    l.query_hash,
    l.namespace,
    count(*) AS times,
    max(l.logged_at) AS last_seen,
    bool_or(l.no_evidence) AS no_evidence
FROM kb.retrieval_log AS l
WHERE l.result_count = 0
GROUP BY l.query_hash, l.namespace;
COMMENT ON VIEW kb.retrieval_zero_results IS 'Queries (by hash) that returned nothing: gaps in the knowledge base.';

CREATE OR REPLACE VIEW kb.retrieval_log_sources AS
-- Owner-run (the only reader of private_sources): each logged call's returned
-- documents, a private one named only to the roles that may read it
-- (kb.may_read_document of the session's role), to the others counted.
SELECT
    l.id AS log_id,
    l.logged_at,
    l.sources || array(
        SELECT p.value ->> 'source'
        FROM jsonb_array_elements(l.private_sources) AS p
        WHERE kb.may_read_document(array(SELECT jsonb_array_elements_text(p.value -> 'reader_ids')::oid))
        ORDER BY p.value ->> 'source'
    ) AS sources,
    jsonb_array_length(l.private_sources) - (
        SELECT count(*)::integer
        FROM jsonb_array_elements(l.private_sources) AS p
        WHERE kb.may_read_document(array(SELECT jsonb_array_elements_text(p.value -> 'reader_ids')::oid))
    ) AS private_unnamed
FROM kb.retrieval_log AS l;
COMMENT ON VIEW kb.retrieval_log_sources IS
'The documents each logged kb_retrieve call returned (log_id: kb.retrieval_log.id): shared ones by namespace/source, a private one (naming readers) only when the session''s role may read it, else counted in private_unnamed.';

CREATE OR REPLACE VIEW kb.retrieval_top_sources AS
SELECT
    s.source,
    count(*) AS times_returned,
    max(l.logged_at) AS last_returned
FROM kb.retrieval_log_sources AS l
CROSS JOIN LATERAL unnest(l.sources) AS s (source)
GROUP BY s.source;
COMMENT ON VIEW kb.retrieval_top_sources IS 'How often each document (namespace/source) was returned by kb_retrieve.';

CREATE OR REPLACE VIEW kb.retrieval_low_confidence_daily AS
SELECT
    date_trunc('day', l.logged_at) AS day,
    count(*) AS queries,
    avg(l.low_confidence::integer) AS low_confidence_share,
    avg((l.result_count = 0)::integer) AS zero_result_share
FROM kb.retrieval_log AS l
GROUP BY date_trunc('day', l.logged_at);
COMMENT ON VIEW kb.retrieval_low_confidence_daily IS 'Share of low-confidence and zero-result retrievals per day.';
