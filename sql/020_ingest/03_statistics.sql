-- BM25 statistics: which documents count (the current versions), the term and
-- corpus statistics recounted per namespace, and their refresh when due. Written
-- only here, as the owner, so they describe every tenant's rows whoever
-- triggers them.

-- No SET search_path: a SET clause stops PostgreSQL from inlining a SQL
-- function, and this one must become part of the counting queries (a
-- semi-join, not a call per chunk). Every name is schema-qualified.
CREATE OR REPLACE FUNCTION kb.counts_in_statistics(p_document_id bigint)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (SELECT 1 FROM kb.statistics_documents AS s WHERE s.document_id = p_document_id)
$$;
COMMENT ON FUNCTION kb.counts_in_statistics(bigint) IS
'Whether the corpus statistics (BM25 df, N, average length; language moments) count a document''s chunks: it is in kb.statistics_documents, i.e. shared and current now. The one spelling of the rule for every count. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb.recount_statistics_documents()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    counted bigint[] := ARRAY(SELECT kb.visible_documents(now(), NULL, '{}', true));
    calendar text := kb.setting('calendar_time_zone') #>> '{}';
    today date := (now() AT TIME ZONE calendar)::date;
    moved_ids bigint[];
    moved_namespaces text[];
BEGIN
    -- The statistics describe what a question asked now can see, whoever
    -- asks: the shared documents current today. Drafts, superseded, expired
    -- and future versions would dilute them (a chain of forty versions alone
    -- in a namespace makes its current version look ordinary to BM25 and to
    -- the dense leg's z-score). The chunks of documents entering or leaving
    -- the set are added to their namespace's changed_chunks, which decides
    -- when its document frequencies and language moments are recounted.
    WITH now_counted AS MATERIALIZED (
        SELECT d.id, d.namespace FROM unnest(counted) AS k (id) INNER JOIN kb.documents AS d ON k.id = d.id
    ),
    leaving AS (
        DELETE FROM kb.statistics_documents AS s
        WHERE NOT EXISTS (SELECT 1 FROM now_counted AS n WHERE n.id = s.document_id AND n.namespace = s.namespace)
        RETURNING s.document_id, s.namespace
    )
    SELECT array_agg(l.document_id), array_agg(l.namespace) INTO moved_ids, moved_namespaces FROM leaving AS l;
    -- a separate statement: a document that changed namespace leaves under
    -- its old one above and enters under its new one here
    WITH entering AS (
        INSERT INTO kb.statistics_documents (document_id, namespace)
        SELECT d.id, d.namespace FROM unnest(counted) AS k (id) INNER JOIN kb.documents AS d ON k.id = d.id
        ORDER BY d.id
        ON CONFLICT (document_id) DO NOTHING
        RETURNING document_id, namespace
    )
    SELECT coalesce(moved_ids, '{}') || array_agg(e.document_id),
        coalesce(moved_namespaces, '{}') || array_agg(e.namespace)
    INTO moved_ids, moved_namespaces
    FROM entering AS e;
    -- each moved document counts its chunks, and one for itself (a change even without chunks)
    UPDATE kb.lexical_stats AS st
    SET changed_chunks = st.changed_chunks + x.n
    FROM (
        SELECT m.namespace, count(c.id) + count(DISTINCT m.id) AS n
        FROM unnest(moved_ids, moved_namespaces) AS m (id, namespace)
        LEFT JOIN kb.chunks AS c ON m.id = c.document_id
        WHERE m.id IS NOT NULL
        GROUP BY m.namespace
    ) AS x
    WHERE st.namespace = x.namespace;
    -- the next instant a shared document enters or leaves force by its dates
    -- alone (days in the knowledge base's calendar, as kb.in_force reads them)
    UPDATE kb.statistics_schedule
    SET refreshed_at = now(),
        next_change = (
            SELECT min(v.at)
            FROM kb.documents AS d
            CROSS JOIN LATERAL (VALUES
                (CASE WHEN d.effective_from > today THEN d.effective_from::timestamp AT TIME ZONE calendar END),
                (CASE WHEN d.effective_to >= today THEN (d.effective_to + 1)::timestamp AT TIME ZONE calendar END),
                (CASE WHEN d.removed_at > now() THEN d.removed_at END)
            ) AS v (at)
            WHERE d.reader_ids IS NULL AND d.status <> 'draft'
        );
END;
$$;
COMMENT ON FUNCTION kb.recount_statistics_documents() IS
'Recomputes kb.statistics_documents, the documents the corpus statistics count (shared, current now: kb.visible_documents with shared_only), adds the chunks of documents that entered or left it to their namespace''s changed_chunks, and records in kb.statistics_schedule when the set next changes by the calendar alone. As the owner (SECURITY DEFINER); returns nothing.';

CREATE OR REPLACE FUNCTION kb.recount_term_stats(p_namespaces text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- kb.recount_lexical_stats runs it for the namespaces that changed by a
    -- tenth since their last recount. A namespace's watermark is the largest
    -- chunk id of all (read before the counts, so a chunk is counted here or by
    -- the lexical leg, never by both): every chunk of the namespace up to it is
    -- counted here.
    INSERT INTO kb.lexical_stats (namespace, chunk_count, total_length)
    SELECT c.namespace, count(*), sum(c.lexical_length)
    FROM kb.chunks AS c
    WHERE (p_namespaces IS NULL OR c.namespace = any(p_namespaces))
        AND kb.counts_in_statistics(c.document_id)
    GROUP BY c.namespace
    ORDER BY c.namespace
    ON CONFLICT (namespace) DO NOTHING;
    UPDATE kb.lexical_stats AS s
    SET terms_max_chunk_id = w.id,
        terms_chunk_count = (
            SELECT count(*) FROM kb.chunks AS c
            WHERE c.namespace = s.namespace AND kb.counts_in_statistics(c.document_id)
        )
    FROM (SELECT coalesce(max(c.id), 0) AS id FROM kb.chunks AS c) AS w
    WHERE p_namespaces IS NULL OR s.namespace = any(p_namespaces);
    DELETE FROM kb.lexical_terms AS lt WHERE p_namespaces IS NULL OR lt.namespace = any(p_namespaces);
    -- O(the namespaces' postings): from their chunks, so that a small namespace
    -- costs little next to a large one; planned for the namespaces at hand
    -- (EXECUTE), so that a large one is read by a scan rather than by probes
    EXECUTE $sql$
        INSERT INTO kb.lexical_terms (term, namespace, df)
        SELECT lp.term, c.namespace, count(*)
        FROM kb.chunks AS c
        INNER JOIN kb.lexical_stats AS s ON c.namespace = s.namespace
        INNER JOIN kb.lexical_postings AS lp ON c.id = lp.chunk_id
        WHERE ($1 IS NULL OR c.namespace = any($1)) AND c.id <= s.terms_max_chunk_id
            AND kb.counts_in_statistics(c.document_id)
        GROUP BY lp.term, c.namespace
    $sql$ USING p_namespaces;
END;
$$;
COMMENT ON FUNCTION kb.recount_term_stats(text[]) IS
'Recounts the BM25 document frequencies of the namespaces named (NULL: all) into kb.lexical_terms, per namespace, up to a new watermark, in time proportional to their postings, over all rows whoever calls it (SECURITY DEFINER); returns nothing, so that no caller learns about namespaces it may not see.';

CREATE OR REPLACE FUNCTION kb.refresh_term_stats(p_namespaces text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_term_stats(p_namespaces);
    -- counted as the caller: the terms of the namespaces its policy shows
    SELECT count(*) FROM kb.lexical_terms AS lt WHERE p_namespaces IS NULL OR lt.namespace = any(p_namespaces);
$$;
COMMENT ON FUNCTION kb.refresh_term_stats(text[]) IS
'Recounts the BM25 document frequencies of the namespaces named (NULL: all; kb.recount_term_stats); returns the number of (term, namespace) rows among those the caller may see.';

CREATE OR REPLACE FUNCTION kb.recount_lexical_stats()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    moved text[];
BEGIN
    -- one refresh at a time (kb.maybe_refresh_lexical_stats skips while one runs)
    PERFORM pg_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint);
    -- which documents count: shared and current now (kb.counts_in_statistics).
    -- A role that may not read a private document must not see its words
    -- counted, nor its scores move because of it; a question asked now sees
    -- no draft, superseded, expired or future version.
    PERFORM kb.recount_statistics_documents();
    -- every namespace with chunks, and zeros for those whose chunks are gone
    -- (their row keeps the recount bookkeeping)
    INSERT INTO kb.lexical_stats AS s (namespace, chunk_count, total_length, refreshed_at)
    SELECT coalesce(c.namespace, o.namespace), coalesce(c.n, 0), coalesce(c.total, 0), now()
    FROM (
        SELECT c.namespace, count(*) AS n, sum(c.lexical_length) AS total
        FROM kb.chunks AS c
        WHERE kb.counts_in_statistics(c.document_id)
        GROUP BY c.namespace
    ) AS c
    FULL JOIN kb.lexical_stats AS o ON c.namespace = o.namespace
    ORDER BY 1
    ON CONFLICT (namespace) DO UPDATE
    SET chunk_count = excluded.chunk_count, total_length = excluded.total_length, refreshed_at = excluded.refreshed_at;
    -- a namespace whose counted chunks changed by a tenth (versions replaced,
    -- documents entering or leaving force) has its document frequencies and
    -- language moments recounted, however its size moved: a new version
    -- replacing the old leaves the count as it was but not the words
    WITH reset AS (
        UPDATE kb.lexical_stats AS s SET changed_chunks = 0
        WHERE s.changed_chunks > 0.1 * s.chunk_count
        RETURNING s.namespace
    )
    SELECT array_agg(r.namespace ORDER BY r.namespace) INTO moved FROM reset AS r;
    -- recount the document frequencies of a namespace once it has grown or
    -- shrunk by a tenth, small ones included (their recount is cheap, and a
    -- namespace never counted would make the lexical leg count the postings
    -- of every namespace a reader sees); while the whole corpus is below
    -- 1,000 chunks the lexical leg simply counts them all
    PERFORM kb.recount_term_stats(array_agg(s.namespace))
    FROM kb.lexical_stats AS s
    CROSS JOIN (
        SELECT sum(a.chunk_count) AS chunks, sum(a.terms_chunk_count) AS counted FROM kb.lexical_stats AS a
    ) AS corpus
    WHERE (abs(s.chunk_count - s.terms_chunk_count) > 0.1 * s.terms_chunk_count OR s.namespace = any(moved))
        AND greatest(corpus.chunks, corpus.counted) >= 1000
    HAVING count(*) > 0;
    IF cardinality(moved) > 0 THEN
        DELETE FROM kb.language_statistics AS l WHERE l.namespace = any(moved);
        PERFORM kb.recount_language_statistics(NULL);
    END IF;
END;
$$;
COMMENT ON FUNCTION kb.recount_lexical_stats() IS
'Recomputes which documents the statistics count (kb.recount_statistics_documents) and the BM25 corpus statistics of every namespace (chunk count, total length; document frequencies of a namespace whose counted chunks grew, shrank or changed by a tenth, once the corpus has 1,000 chunks; its language moments too on such a change) over all rows, whoever calls it (SECURITY DEFINER); returns nothing, so that no caller learns about namespaces it may not see.';

CREATE OR REPLACE FUNCTION kb.refresh_lexical_stats()
RETURNS SETOF kb.lexical_stats
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT kb.recount_lexical_stats();
    -- read as the caller: the rows of the namespaces its policy shows
    SELECT s.* FROM kb.lexical_stats AS s ORDER BY s.namespace;
$$;
COMMENT ON FUNCTION kb.refresh_lexical_stats() IS
'Recomputes the BM25 corpus statistics of every namespace (kb.recount_lexical_stats) and returns those of the namespaces the caller may see, one row each. Run after bulk loads (pgkb ingest and backfill do).';
CREATE OR REPLACE FUNCTION kb.refresh_statistics_if_due()
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- A document enters or leaves force on a date with no write at all: the
    -- statistics follow at the first call after that instant (pgkb worker
    -- calls it while idle), never waiting on a recount already running.
    -- Returns nothing: whether it recounted would tell a writer that some
    -- namespace, perhaps another tenant's, had a document change force.
    SELECT kb.recount_lexical_stats()
    FROM kb.statistics_schedule AS s
    WHERE s.next_change <= now() AND pg_try_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint)
$$;
COMMENT ON FUNCTION kb.refresh_statistics_if_due() IS
'Recounts the corpus statistics (kb.recount_lexical_stats) when a document has entered or left force by its dates since the last count (kb.statistics_schedule.next_change has passed) and no recount is running; returns nothing. pgkb worker calls it while idle.';

CREATE OR REPLACE FUNCTION kb.maybe_refresh_lexical_stats()
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Small corpora: always (cheap). Large ones: at most once a minute, and a
    -- writer that finds another refresh running skips instead of waiting.
    SELECT kb.recount_lexical_stats()
    FROM (
        SELECT coalesce(sum(l.chunk_count), 0) AS n, max(l.refreshed_at) AS refreshed_at
        FROM kb.lexical_stats AS l
    ) AS s
    WHERE CASE WHEN s.n < 2000 OR s.refreshed_at IS NULL OR s.refreshed_at < now() - interval '60 seconds'
        THEN pg_try_advisory_xact_lock('kb.lexical_stats'::regclass::oid::bigint) ELSE false END
$$;
COMMENT ON FUNCTION kb.maybe_refresh_lexical_stats() IS
'Refreshes BM25 statistics from the ingest trigger: always while the corpus is small, else at most once a minute, never waiting on another writer.';
