-- Retrieval and writes through a coordinator: the statistics copied from
-- the shards (kb_shard.sync_statistics), a write routed to its namespace's shard
-- (kb_shard.upsert_document), the doors kb_shard.retrieve and
-- kb_shard.retrieve_explain (one shard's answer for a namespace, or
-- kb_pipeline.retrieve_over_shards over all of them) and their log.

CREATE OR REPLACE FUNCTION kb_shard.sync_statistics()
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    copied_statistics bigint;
    copied_glossary bigint;
BEGIN
    -- A copy of the shards' language statistics (per model, namespace and
    -- language group; a namespace lives on one shard, so no two shards share a
    -- row) lets kb.language_moments pool over all namespaces here exactly as it
    -- does on one node; a copy of the glossaries lets the coordinator expand a
    -- query once for all shards. Run after loads: a shard refreshes its
    -- statistics by drift, and so this copy describes the corpus as of the
    -- shards' last refresh, as a single node's statistics do.
    DELETE FROM kb.language_statistics;
    INSERT INTO kb.language_statistics
    SELECT r.*
    FROM kb_shard.language_statistics_on_shards() AS j (row_value)
    CROSS JOIN LATERAL jsonb_populate_record(NULL::kb.language_statistics, j.row_value) AS r
    WHERE r.model IN (SELECT m.name FROM kb.models AS m);
    GET DIAGNOSTICS copied_statistics = ROW_COUNT;
    DELETE FROM kb.glossary;
    INSERT INTO kb.glossary (namespace, concept, term, lang)
    SELECT DISTINCT j.entry ->> 'namespace', j.entry ->> 'concept', j.entry ->> 'term', j.entry ->> 'lang'
    FROM kb_shard.glossary_on_shards() AS j (entry)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS copied_glossary = ROW_COUNT;
    RETURN jsonb_build_object('language_statistics', copied_statistics, 'glossary', copied_glossary);
END;
$$;
COMMENT ON FUNCTION kb_shard.sync_statistics() IS
'Replaces the coordinator''s language statistics and glossary with copies of all shards'' (run after loads, after kb_shard.refresh_statistics_on_shards); returns the rows copied.';
REVOKE EXECUTE ON FUNCTION kb_shard.sync_statistics() FROM public;

CREATE OR REPLACE FUNCTION kb_shard.upsert_document(p_document jsonb)
RETURNS TABLE (id bigint, ingest_status text, ingest_error text)
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- the namespace must be named and mapped: a write never lands on a shard by default
    IF p_document ->> 'namespace' IS NULL THEN
        RAISE EXCEPTION 'pgkb shards: a document written through the coordinator must name its namespace'
            USING HINT = 'set namespace in the front matter or pass --namespace';
    END IF;
    RETURN QUERY SELECT u.id, u.ingest_status, u.ingest_error
        FROM kb_shard.upsert_document_on_shard(p_document ->> 'namespace', p_document) AS u;
END;
$$;
COMMENT ON FUNCTION kb_shard.upsert_document(jsonb) IS
'Ingest routed by namespace: writes the document (kb.upsert_document) on the shard its namespace is mapped to; an unnamed or unmapped namespace is an error.';

CREATE OR REPLACE FUNCTION kb_shard.answers(p_rows jsonb[], p_round text)
RETURNS jsonb[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    expected integer := (SELECT count(*) FROM kb_shard.shards);
BEGIN
    -- one answer per shard, or the call fails: a missing or repeated answer
    -- would change every statistic silently
    IF coalesce(cardinality(p_rows), 0) <> expected THEN
        RAISE EXCEPTION 'pgkb shards: % got % answers from % shards', p_round, coalesce(cardinality(p_rows), 0),
            expected
            USING HINT = 'run kb_shard.configure() after changing kb_shard.shards';
    END IF;
    RETURN p_rows;
END;
$$;
COMMENT ON FUNCTION kb_shard.answers(jsonb[], text) IS
'Checks that a round of a sharded retrieval got exactly one answer per shard (else an error), and returns them.';


CREATE OR REPLACE FUNCTION kb_shard.log_retrieval(p_explain jsonb, p_rows kb.retrieval_row[], p_k integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    scope text[] := kb.read_scope(NULL);
    bad text;
BEGIN
    -- The coordinator runs as its caller (each caller reaches the shards as
    -- itself), and the log is written with the owner's rights only: this is
    -- its door, called by kb_pipeline.retrieve_over_shards and executable by
    -- any caller. So a row is held to what that pipeline can produce: k as
    -- kb_retrieve's, at most k rows, each of a namespace mapped to a shard
    -- that the caller may read, timings of bounded size; it names the
    -- session's role, so it can only speak for itself (docs/SCALING.md).
    IF p_k IS NULL OR p_k NOT BETWEEN 1 AND 1000 THEN
        bad := format('k must be between 1 and 1000 (got %s)', coalesce(p_k::text, 'NULL'));
    ELSIF coalesce(cardinality(p_rows), 0) > p_k THEN
        bad := format('%s rows for k %s', cardinality(p_rows), p_k);
    ELSIF EXISTS (
        SELECT 1 FROM unnest(p_rows) AS r
        WHERE length(r.source) > 10000 OR NOT EXISTS (
            SELECT 1 FROM kb_shard.namespaces AS n
            WHERE n.namespace = r.namespace AND (scope IS NULL OR n.namespace = ANY(scope))
        )
    ) THEN
        bad := 'a row names a namespace the caller may not read, or none mapped to a shard';
    ELSIF pg_column_size(p_explain -> 'timings_ms') > 8192 THEN
        bad := 'the timings are larger than a retrieval''s';
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'kb_shard.log_retrieval: %', bad
            USING ERRCODE = 'invalid_parameter_value',
                HINT = 'the coordinator''s retrievals log themselves (kb_shard.retrieve); this door takes only their rows';
    END IF;
    PERFORM kb.log_retrieval(p_explain, p_rows, NULL, p_k);
END;
$$;
COMMENT ON FUNCTION kb_shard.log_retrieval(jsonb, kb.retrieval_row[], integer) IS
'The coordinator''s retrieval log writer (kb.log_retrieval with the owner''s rights), called by kb_pipeline.retrieve_over_shards: takes only what a retrieval produces (k in 1..1000, at most k rows, each of a mapped namespace the caller may read, timings of a retrieval''s size); the row names the session''s role.';

CREATE OR REPLACE FUNCTION kb_shard.shards_named_in(p_message text)
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- libpq names the server it could not reach by host and port (or socket
    -- file, which ends in the port): the shards whose connect string has it
    SELECT string_agg(format('%s (%s)', s.name, s.connect_string), ', ' ORDER BY s.shard_no)
    FROM kb_shard.shards AS s
    WHERE substring(s.connect_string FROM 'port=(\d+)') IS NOT NULL
        AND p_message ~ ('(port |\.s\.PGSQL\.)' || substring(s.connect_string FROM 'port=(\d+)') || '([^0-9]|$)')
$$;
COMMENT ON FUNCTION kb_shard.shards_named_in(text) IS
'The shards (name and connect string) whose port a connection error message names; NULL when none.';

CREATE OR REPLACE FUNCTION kb_shard.retrieve_here(
    query text,
    k integer,
    namespace text,
    mode text,
    filters jsonb,
    as_of timestamptz,
    context text[],
    max_per_document integer,
    merge_adjacent boolean,
    explain boolean
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    found_rows kb.retrieval_row[];
    found_explain jsonb;
    shard text;
BEGIN
    -- One namespace: its shard answers alone, exactly as one node would (and
    -- logs there); one the caller cannot see mapped (none, or another
    -- tenant's) gives no rows, as one node answers for a namespace it does not
    -- hold. All namespaces: kb_pipeline.retrieve_over_shards, which logs it.
    -- The answer as jsonb: rows (kb.retrieval_row[] as jsonb) and explain.
    -- A shard that stopped since this backend last asked it ends the call with
    -- its cached connection's last words ("REMOTE FATAL: terminating
    -- connection"), which do not say which shard it was; PL/Proxy drops that
    -- connection, so the second attempt connects afresh and a shard still down
    -- is named by its host and port. Retrieval writes nothing on the shards,
    -- so trying again is safe. No variable here is of a kb_pipeline type (see
    -- kb_retrieve): a migrate re-creates that schema.
    PERFORM kb.enter_pipeline();
    FOR attempt IN 1 .. 2 LOOP
        BEGIN
            IF namespace IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM kb_shard.namespaces AS n WHERE n.namespace = retrieve_here.namespace
            ) THEN
                RETURN jsonb_build_object('rows', '[]'::jsonb, 'explain', NULL);
            ELSIF namespace IS NOT NULL AND explain THEN
                RETURN jsonb_build_object('rows', '[]'::jsonb, 'explain', kb_shard.retrieve_explain_in_namespace(query,
                    k, namespace, mode, filters, as_of, context, max_per_document, merge_adjacent));
            ELSIF namespace IS NOT NULL THEN
                RETURN jsonb_build_object('rows', coalesce((SELECT jsonb_agg(to_jsonb(r) ORDER BY r.rank)
                    FROM kb_shard.retrieve_in_namespace(query, k, namespace, mode, filters, as_of, context,
                        max_per_document, merge_adjacent) AS r), '[]'), 'explain', NULL);
            END IF;
            SELECT x.rows, x.explain INTO found_rows, found_explain
            FROM kb_pipeline.retrieve_over_shards(kb_pipeline.validated_request(query, k, NULL, mode, filters, as_of,
                context, max_per_document, merge_adjacent), explain) AS x;
            RETURN jsonb_build_object('rows', coalesce(to_jsonb(found_rows), '[]'), 'explain', found_explain);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE WHEN attempt = 1 AND SQLERRM LIKE '% REMOTE FATAL: %';
            -- a shard that cannot be reached fails the call by its name: never a partial answer
            shard := CASE WHEN SQLERRM LIKE 'PL/Proxy function %' THEN kb_shard.shards_named_in(SQLERRM) END;
            IF shard IS NULL THEN
                RAISE;
            END IF;
            RAISE EXCEPTION 'pgkb shards: shard % did not answer; no partial answer is given', shard
                USING DETAIL = SQLERRM, HINT = 'start the shard, or fix its connect string (pgkb shards list)';
        END;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION kb_shard.retrieve_here(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean, boolean) IS
'What kb_shard.retrieve and kb_shard.retrieve_explain share, as jsonb (rows, explain): with a namespace the shard holding it answers (kb_retrieve or kb_retrieve_explain there); over all namespaces kb_pipeline.retrieve_over_shards, logged on the coordinator. A shard that cannot be reached fails the call with an error naming it.';

CREATE OR REPLACE FUNCTION kb_shard.retrieve(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL,
    max_per_document integer DEFAULT NULL,
    merge_adjacent boolean DEFAULT NULL
)
RETURNS SETOF kb.retrieval_row
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT r.*
    FROM jsonb_populate_recordset(NULL::kb.retrieval_row, kb_shard.retrieve_here(query, k, namespace, mode, filters,
        as_of, context, max_per_document, merge_adjacent, false) -> 'rows') AS r
    ORDER BY r.rank
$$;
COMMENT ON FUNCTION kb_shard.retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'kb_retrieve over a sharded corpus, same arguments and rows: with a namespace, kb_retrieve on the shard holding it (no rows for a namespace the caller sees no mapping of); over all namespaces kb_pipeline.retrieve_over_shards, ranking like one node holding every shard''s documents, logged here. A shard that cannot be reached fails the call with an error naming it.';

CREATE OR REPLACE FUNCTION kb_shard.retrieve_explain(
    query text,
    k integer DEFAULT 8,
    namespace text DEFAULT NULL,
    mode text DEFAULT 'auto',
    filters jsonb DEFAULT '{}',
    as_of timestamptz DEFAULT now(),
    context text[] DEFAULT NULL,
    max_per_document integer DEFAULT NULL,
    merge_adjacent boolean DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- as kb_retrieve_explain: the explain object and the results without the passage text
    SELECT CASE WHEN x.answer -> 'explain' IS NULL OR namespace IS NOT NULL THEN x.answer -> 'explain'
        ELSE (x.answer -> 'explain') || jsonb_build_object('results', coalesce((
            SELECT jsonb_agg(r.value - 'content' - 'snippet' ORDER BY (r.value ->> 'rank')::integer)
            FROM jsonb_array_elements(x.answer -> 'rows') AS r
        ), '[]'), 'retrieval_log', kb.retrieval_log_state()) END
    FROM (SELECT kb_shard.retrieve_here(query, k, namespace, mode, filters, as_of, context, max_per_document,
        merge_adjacent, true) AS answer) AS x
$$;
COMMENT ON FUNCTION kb_shard.retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'kb_retrieve_explain over a sharded corpus: with a namespace, that of the shard holding it; over all namespaces the explain object of kb_pipeline.retrieve_over_shards (the node''s, with the shards'' gathering timed as shards_gather) and its results. NULL for a namespace the caller sees no mapping of.';
