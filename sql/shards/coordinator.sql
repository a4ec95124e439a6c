-- A shard coordinator (docs/SCALING.md, "Shards"): a pgkb database that holds
-- no documents, only which namespace lives on which shard (each shard a normal
-- pgkb database), and answers retrievals over all of them with PL/Proxy.
-- Installed by `pgkb shards init` (re-running it changes nothing), not by
-- migrate: only a coordinator needs the plproxy extension.
--
-- With a namespace, a retrieval goes to the one shard holding it, which has
-- all of that namespace's statistics: its answer is the single node's. Over
-- all namespaces (namespace NULL) one node's statistics are sums and pools over
-- namespaces that now live on different shards: kb_pipeline.retrieve_over_shards
-- (sql/046_shard_coordinator_steps.sql) gathers on every shard at once (RUN ON
-- ALL, the PL/Proxy functions below) and judges, fuses, ranks and explains
-- with the node's own steps. A shard that does not answer fails the call with
-- the shard's name: there is no partial answer.

CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE SCHEMA IF NOT EXISTS kb_shard;
COMMENT ON SCHEMA kb_shard IS
'A pgkb shard coordinator: the shards, the namespace map and the PL/Proxy functions that fan retrievals and writes out to them.';

CREATE TABLE IF NOT EXISTS kb_shard.shards (
    shard_no integer PRIMARY KEY CHECK (shard_no >= 0 AND shard_no < 256),
    name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    connect_string text NOT NULL UNIQUE
);
COMMENT ON TABLE kb_shard.shards IS
'The shard databases: number (its PL/Proxy partition), name and libpq connect string (without user: the user mapping of the server pgkb_shards gives it). kb_shard.configure turns them into the server.';

CREATE TABLE IF NOT EXISTS kb_shard.namespaces (
    namespace text PRIMARY KEY CHECK (namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    shard_no integer NOT NULL REFERENCES kb_shard.shards (shard_no)
);
COMMENT ON TABLE kb_shard.namespaces IS
'Which shard holds each namespace: a namespace lives wholly on one shard, so its statistics do too. Writes are routed by it; a namespace found on a shard without a row here fails a retrieval.';

-- Tenants use the coordinator as themselves (kb_shard.configure without a
-- user: each caller reaches the shards as its own role, whose row-level
-- security there decides what it sees). The map is read under the policy of
-- the documents, so a tenant sees only its own namespaces' rows: another
-- tenant's namespace is as unknown to it as one that does not exist. Connect
-- strings are readable by every caller (they name the shard that did not
-- answer in errors), so they must hold no secret: passwords go in the
-- coordinator server's .pgpass or pg_hba.
GRANT USAGE ON SCHEMA kb_shard TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb_shard.shards, kb_shard.namespaces TO pgkb_reader, pgkb_writer, pgkb_admin;
ALTER TABLE kb_shard.namespaces ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_namespace ON kb_shard.namespaces;
CREATE POLICY tenant_namespace ON kb_shard.namespaces
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR namespaces.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);

CREATE OR REPLACE FUNCTION kb_shard.partitions(p_shards integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- PL/Proxy maps a partition number with a bit mask, so it wants a power of two
    SELECT CASE WHEN p_shards <= 1 THEN 1 ELSE (2 ^ ceil(log(2, p_shards::numeric)))::integer END
$$;
COMMENT ON FUNCTION kb_shard.partitions(integer) IS
'PL/Proxy partitions for this many shards: the next power of two (PL/Proxy requires one); the partitions past the shards repeat shards'' connect strings.';

CREATE OR REPLACE FUNCTION kb_shard.configure(p_user text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shards integer := (SELECT count(*) FROM kb_shard.shards);
    partitions integer := kb_shard.partitions((SELECT count(*) FROM kb_shard.shards)::integer);
    options text;
BEGIN
    -- Partition i is shard i; partitions past the last shard repeat shard
    -- (i mod shards)'s connect string. PL/Proxy gives partitions with equal
    -- connect strings one connection, and RUN ON ALL runs once per connection,
    -- so every shard answers once; a namespace's partition is its shard's
    -- number, which the bit mask leaves alone.
    IF shards = 0 THEN
        RAISE EXCEPTION 'pgkb shards: no shards to configure'
            USING HINT = 'pgkb shards add NAME CONNECT-STRING first';
    END IF;
    IF (SELECT max(s.shard_no) FROM kb_shard.shards AS s) <> shards - 1 THEN
        RAISE EXCEPTION 'pgkb shards: shard numbers must be 0 to % without gaps', shards - 1;
    END IF;
    SELECT string_agg(format('p%s %L', p.n, s.connect_string), ', ' ORDER BY p.n)
    INTO options
    FROM generate_series(0, partitions - 1) AS p (n)
    INNER JOIN kb_shard.shards AS s ON s.shard_no = p.n % shards;
    DROP SERVER IF EXISTS pgkb_shards CASCADE;
    EXECUTE format('CREATE SERVER pgkb_shards FOREIGN DATA WRAPPER plproxy OPTIONS ('
        'connection_lifetime %L, disable_binary %L, %s)', '1800', '1', options);
    IF p_user IS NULL THEN
        CREATE USER MAPPING FOR PUBLIC SERVER pgkb_shards;
    ELSE
        EXECUTE format('CREATE USER MAPPING FOR PUBLIC SERVER pgkb_shards OPTIONS (user %L)', p_user);
    END IF;
    GRANT USAGE ON FOREIGN SERVER pgkb_shards TO PUBLIC;
    RETURN partitions;
END;
$$;
COMMENT ON FUNCTION kb_shard.configure(text) IS
'(Re)creates the PL/Proxy server pgkb_shards from kb_shard.shards (a power of two of partitions, repeating shards'' connect strings past the last) and its user mapping (p_user: the role the shards are reached as; NULL: each caller''s own). Returns the number of partitions.';
REVOKE EXECUTE ON FUNCTION kb_shard.configure(text) FROM public;

CREATE OR REPLACE FUNCTION kb_shard.partition_of(p_namespace text)
RETURNS integer
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shard integer := (SELECT n.shard_no FROM kb_shard.namespaces AS n WHERE n.namespace = p_namespace);
BEGIN
    IF shard IS NULL THEN
        RAISE EXCEPTION 'pgkb shards: namespace "%" is not mapped to a shard', p_namespace
            USING HINT = 'pgkb shards map NAMESPACE SHARD (kb_shard.namespaces) before writing to or reading it';
    END IF;
    RETURN shard;
END;
$$;
COMMENT ON FUNCTION kb_shard.partition_of(text) IS
'The PL/Proxy partition (shard number) of a namespace; an error naming the namespace when it is not mapped.';

-- The PL/Proxy functions: each runs its TARGET (or SELECT) on the shards.

CREATE OR REPLACE FUNCTION kb_shard.corpus_on_shards(p_terms text[], p_model text)
RETURNS SETOF jsonb
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    TARGET kb.shard_corpus;
$$;
COMMENT ON FUNCTION kb_shard.corpus_on_shards(text[], text) IS
'Round 1 of a retrieval over all namespaces: every shard''s BM25 sizes and df of the terms and whether it has the model''s vectors (kb.shard_corpus), one row per shard.';

DROP FUNCTION IF EXISTS kb_shard.stage_candidates_on_shards(text, integer, text, jsonb, timestamptz, text[], jsonb);
CREATE OR REPLACE FUNCTION kb_shard.stage_candidates_on_shards(
    p_query text, p_k integer, p_mode text, p_filters jsonb, p_as_of timestamptz, p_context text[], p_inputs jsonb
)
RETURNS SETOF jsonb
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    TARGET kb.shard_stage_candidates;
$$;
COMMENT ON FUNCTION kb_shard.stage_candidates_on_shards(text, integer, text, jsonb, timestamptz, text[], jsonb) IS
'Round 2: every shard''s candidates of every stage, with the coordinator''s inputs (kb.shard_stage_candidates), one row per shard.';

DROP FUNCTION IF EXISTS kb_shard.passages_on_shards(
    jsonb, text, double precision, double precision, integer, double precision, integer
);
CREATE OR REPLACE FUNCTION kb_shard.passages_on_shards(p_ranked jsonb)
RETURNS SETOF kb.retrieval_row
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    TARGET kb.shard_passages;
$$;
COMMENT ON FUNCTION kb_shard.passages_on_shards(jsonb) IS
'Round 3: every shard''s rows of the coordinator''s ranked hits that it holds (kb.shard_passages).';

CREATE OR REPLACE FUNCTION kb_shard.retrieve_in_namespace(
    query text,
    k integer,
    namespace text,
    mode text,
    filters jsonb,
    as_of timestamptz,
    context text[],
    max_per_document integer,
    merge_adjacent boolean
)
RETURNS SETOF kb.retrieval_row
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON kb_shard.partition_of(namespace);
    TARGET kb_retrieve;
$$;
COMMENT ON FUNCTION kb_shard.retrieve_in_namespace(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'kb_retrieve on the one shard holding the namespace: it holds all of the namespace''s statistics, so the answer is the single node''s.';

CREATE OR REPLACE FUNCTION kb_shard.retrieve_explain_in_namespace(
    query text,
    k integer,
    namespace text,
    mode text,
    filters jsonb,
    as_of timestamptz,
    context text[],
    max_per_document integer,
    merge_adjacent boolean
)
RETURNS jsonb
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON kb_shard.partition_of(namespace);
    TARGET kb_retrieve_explain;
$$;
COMMENT ON FUNCTION kb_shard.retrieve_explain_in_namespace(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'kb_retrieve_explain on the one shard holding the namespace (which logs the call there).';

CREATE OR REPLACE FUNCTION kb_shard.upsert_document_on_shard(p_namespace text, p_document jsonb)
RETURNS TABLE (id bigint, ingest_status text, ingest_error text)
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON kb_shard.partition_of(p_namespace);
    SELECT u.id, u.ingest_status, u.ingest_error FROM kb.upsert_document(p_document) AS u;
$$;
COMMENT ON FUNCTION kb_shard.upsert_document_on_shard(text, jsonb) IS
'Writes one document (kb.upsert_document) on the shard of its namespace; an unmapped namespace is an error.';

CREATE OR REPLACE FUNCTION kb_shard.refresh_statistics_on_shards()
RETURNS SETOF bigint
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    SELECT (SELECT count(*) FROM kb.refresh_lexical_stats()) + (SELECT count(*) FROM kb.refresh_language_statistics())
        AS refresh_statistics_on_shards;
$$;
COMMENT ON FUNCTION kb_shard.refresh_statistics_on_shards() IS
'Refreshes every shard''s BM25 and language statistics (after a load); per shard the number of statistics rows.';

CREATE OR REPLACE FUNCTION kb_shard.language_statistics_on_shards()
RETURNS SETOF jsonb
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    SELECT to_jsonb(s) AS language_statistics_on_shards FROM kb.language_statistics AS s;
$$;
COMMENT ON FUNCTION kb_shard.language_statistics_on_shards() IS
'Every shard''s kb.language_statistics rows, as jsonb (kb_shard.sync_statistics copies them).';

CREATE OR REPLACE FUNCTION kb_shard.glossary_on_shards()
RETURNS SETOF jsonb
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    SELECT jsonb_build_object('namespace', g.namespace, 'concept', g.concept, 'term', g.term, 'lang', g.lang)
        AS glossary_on_shards
    FROM kb.glossary AS g;
$$;
COMMENT ON FUNCTION kb_shard.glossary_on_shards() IS
'Every shard''s glossary entries (kb_shard.sync_statistics copies them).';

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

DROP FUNCTION IF EXISTS kb_shard.global_chunk_id(jsonb, bigint);
DROP FUNCTION IF EXISTS kb_shard.retrieve_over_shards(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean);

CREATE OR REPLACE FUNCTION kb_shard.log_retrieval(p_explain jsonb, p_rows kb.retrieval_row[], p_k integer)
RETURNS void
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The coordinator runs as its caller (each caller reaches the shards as
    -- itself), and the log is written with the owner's rights only: this is
    -- its door. Unlike a node's, where only the retrieval doors write it, a
    -- role on a coordinator can call it with rows of its own making; the row
    -- still names the session's role, so it can only speak for itself
    -- (docs/SCALING.md, "Shards").
    SELECT kb.log_retrieval(p_explain, p_rows, NULL, p_k)
$$;
COMMENT ON FUNCTION kb_shard.log_retrieval(jsonb, kb.retrieval_row[], integer) IS
'The coordinator''s retrieval log writer (kb.log_retrieval with the owner''s rights) for retrievals over all namespaces; the row names the session''s role.';

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
    -- hold. All namespaces: kb_pipeline.retrieve_over_shards, logged here.
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
            FROM kb_pipeline.retrieve_over_shards(query, k, mode, filters, as_of, context, max_per_document,
                merge_adjacent, explain) AS x;
            PERFORM kb_shard.log_retrieval(found_explain, found_rows, k);
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
'What kb_shard.retrieve and kb_shard.retrieve_explain share, as jsonb (rows, explain): with a namespace the shard holding it answers (kb_retrieve or kb_retrieve_explain there); over all namespaces kb_pipeline.retrieve_over_shards, logged here. A shard that cannot be reached fails the call with an error naming it.';

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
