-- A shard coordinator (docs/SCALING.md, "Shards"): a pgkb database that holds
-- no documents, only which namespace lives on which shard (each shard a normal
-- pgkb database), and answers retrievals over all of them with PL/Proxy.
-- Installed by `pgkb shards init` (re-running it changes nothing), not by
-- migrate: only a coordinator needs the plproxy extension.
--
-- With a namespace, a retrieval goes to the one shard holding it, which has
-- all of that namespace's statistics: its answer is the single node's. Over
-- all namespaces (namespace NULL) one node's statistics are sums and pools over
-- namespaces that now live on different shards, so kb_shard.retrieve runs in
-- three rounds, each on every shard at once (RUN ON ALL):
--   1. BM25 sizes and document frequencies of every stage's terms
--      (kb.shard_corpus), summed here;
--   2. every stage's legs ranked with those sums, with the query vector and
--      its language moments computed here once, from a copy of all shards'
--      language statistics (kb_shard.sync_statistics) that pools as one node
--      does (kb.shard_stage_candidates); here the legs are merged, each
--      stage judged (kb.stage_evidence), the best chosen, the abstention
--      decided and the hits fused (kb.fuse) over all shards' candidates;
--   3. the passages of the fused hits, with their freshness ranks among all
--      candidates (kb.shard_passages); here the shards' top k are merged.
-- A shard that does not answer fails the call with the shard's name: there is
-- no partial answer.

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

CREATE OR REPLACE FUNCTION kb_shard.stage_candidates_on_shards(
    p_query text, p_k integer, p_mode text, p_filters jsonb, p_as_of timestamptz, p_context text[], p_corpus jsonb
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
'Round 2: every shard''s candidates of every stage, ranked with the whole corpus''s statistics (kb.shard_stage_candidates), one row per shard.';

CREATE OR REPLACE FUNCTION kb_shard.passages_on_shards(
    p_hits jsonb,
    p_core_terms text,
    p_boost_identifier double precision,
    p_boost_title double precision,
    p_k integer,
    p_freshness_margin double precision,
    p_max_per_document integer
)
RETURNS SETOF kb.retrieval_row
LANGUAGE plproxy
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    CLUSTER 'pgkb_shards';
    RUN ON ALL;
    TARGET kb.shard_passages;
$$;
COMMENT ON FUNCTION kb_shard.passages_on_shards(jsonb, text, double precision, double precision, integer, double precision, integer) IS
'Round 3: every shard''s top k passages of the fused hits that are its own (kb.shard_passages).';

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

CREATE OR REPLACE FUNCTION kb_shard.global_chunk_id(p_answer jsonb, p_chunk_id bigint)
RETURNS bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- chunk ids are per shard: the coordinator knows a chunk by its id x 256 +
    -- the shard number of its namespace (from the shard's answer)
    SELECT p_chunk_id * 256 + kb_shard.partition_of(p_answer -> 'chunks' -> p_chunk_id::text ->> 'namespace')
$$;
COMMENT ON FUNCTION kb_shard.global_chunk_id(jsonb, bigint) IS
'A chunk of a shard''s answer (kb.shard_stage_candidates) as the coordinator knows it: id x 256 + the shard number of its namespace, unique over all shards.';

CREATE OR REPLACE FUNCTION kb_shard.retrieve_over_shards(
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
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    request kb.retrieval_request := kb.validated_request(query, k, namespace, mode, filters, as_of, context,
        max_per_document, merge_adjacent);
    settings kb.retrieval_settings := kb.read_retrieval_settings();
    cap integer := kb.assembly_max_per_document(request);
    model text := (SELECT m.name FROM kb.models AS m WHERE m.active);
    analysis jsonb;
    stage_queries text[];
    stage_terms text[];
    expansion record;
    glossaries jsonb := '[]';
    all_terms text[] := '{}';
    parts jsonb[];
    plan kb.retrieval_plan;
    given jsonb := '[]';
    query_vector text;
    moments kb.language_moment[];
    chunks jsonb;
    identifier_ids bigint[];
    stage kb.retrieval_stage;
    stages kb.retrieval_stage[] := '{}';
    best kb.retrieval_stage;
    any_bm25 boolean;
    fused kb.fused_hit[];
    hits jsonb;
    rows kb.retrieval_row[];
BEGIN
    IF kb.assembly_merge_adjacent(request) THEN
        RAISE EXCEPTION 'kb_shard.retrieve: merge_adjacent is not supported over all namespaces of a sharded corpus'
            USING HINT = 'pass merge_adjacent => false, or a namespace (its shard answers as kb_retrieve does)';
    END IF;

    -- round 1: the BM25 statistics of every stage's terms, and of the terms
    -- the glossary adds (expanded here, over the copy of all shards' glossaries)
    analysis := kb.analyze_query(request.query, request.context);
    stage_queries := ARRAY(SELECT jsonb_array_elements_text(analysis -> 'stages'));
    FOR stage_no IN 1 .. coalesce(cardinality(stage_queries), 0) LOOP
        stage_terms := kb.query_terms(stage_queries[stage_no]);
        all_terms := all_terms || stage_terms;
        IF request.mode_requested <> 'dense' AND (kb.setting('glossary_expansion') #>> '{}')::boolean THEN
            expansion := kb.glossary_expansion_of_terms(stage_terms, NULL,
                (kb.setting('glossary_max_terms') #>> '{}')::integer);
            all_terms := all_terms || coalesce(expansion.added_terms, '{}');
            glossaries := glossaries || jsonb_build_array(expansion.explain);
        ELSE
            glossaries := glossaries || jsonb_build_array(NULL::jsonb);
        END IF;
    END LOOP;
    parts := kb_shard.answers(ARRAY(SELECT c FROM kb_shard.corpus_on_shards(all_terms, model) AS c), 'round 1');
    request.corpus := jsonb_build_object(
        'lexical', jsonb_build_object(
            'chunk_count', (SELECT sum((p -> 'lexical' ->> 'chunk_count')::numeric) FROM unnest(parts) AS p),
            'total_length', (SELECT sum((p -> 'lexical' ->> 'total_length')::numeric) FROM unnest(parts) AS p),
            'df', (SELECT coalesce(jsonb_object_agg(d.term, d.df), '{}') FROM (
                SELECT e.key AS term, sum(e.value::text::numeric) AS df
                FROM unnest(parts) AS p CROSS JOIN LATERAL jsonb_each(p -> 'lexical' -> 'df') AS e
                GROUP BY e.key) AS d)),
        'model_ready', (SELECT bool_or((p ->> 'model_ready')::boolean) FROM unnest(parts) AS p));
    plan := kb.plan_retrieval(request, settings);

    -- the query vector of every stage and its language moments, pooled over
    -- the copy of all shards' language statistics: computed once, here
    FOR stage_no IN 1 .. coalesce(cardinality(plan.stages), 0) LOOP
        query_vector := NULL;
        moments := '{}';
        IF plan.mode IN ('dense', 'hybrid') THEN
            BEGIN
                query_vector := kb.embed_query(plan.stages[stage_no], (plan.model).name);
            EXCEPTION WHEN OTHERS THEN
                IF request.mode_requested = 'dense' THEN
                    RAISE;
                END IF;
            END;
            IF query_vector IS NOT NULL AND plan.language_correction THEN
                moments := kb.language_moments((plan.model).name, query_vector, NULL, settings.language_min_vectors,
                    plan.stages[stage_no]);
            END IF;
        END IF;
        given := given || jsonb_build_array(jsonb_build_object('query_vector', query_vector,
            'language_moments', to_jsonb(moments),
            'glossary', CASE WHEN plan.mode IN ('lexical', 'hybrid') THEN glossaries -> (stage_no - 1) END));
    END LOOP;
    request.corpus := request.corpus || jsonb_build_object('stages', given);

    -- round 2: every shard's candidates of every stage, ranked with the sums
    parts := kb_shard.answers(ARRAY(SELECT c FROM kb_shard.stage_candidates_on_shards(request.query, request.k,
        request.mode_requested, request.filters, request.as_of, request.context, request.corpus) AS c), 'round 2');
    -- chunk ids are per shard: here a chunk is known by id x 256 + shard number
    chunks := (
        SELECT coalesce(jsonb_object_agg(x.gid::text, x.chunk || jsonb_build_object('gid', x.gid)), '{}')
        FROM (
            SELECT e.value AS chunk, kb_shard.global_chunk_id(p, e.key::bigint) AS gid
            FROM unnest(parts) AS p CROSS JOIN LATERAL jsonb_each(p -> 'chunks') AS e
        ) AS x
    );
    identifier_ids := ARRAY(
        SELECT x.gid FROM (
            SELECT kb_shard.global_chunk_id(p, (i.value ->> 'chunk_id')::bigint) AS gid,
                (i.value ->> 'matched')::integer AS matched
            FROM unnest(parts) AS p
            CROSS JOIN LATERAL jsonb_array_elements(p -> 'identifiers') AS i
        ) AS x
        ORDER BY x.matched DESC, x.gid
        LIMIT plan.candidates
    );
    FOR stage_no IN 1 .. coalesce(cardinality(plan.stages), 0) LOOP
        stage := ROW(stage_no, plan.stages[stage_no], NULL, false, '{}', '{}', NULL, NULL, 0, '{}', 0, 0, 0,
            NULL, NULL, NULL, '{}', 0, 0, NULL);
        stage.terms := CASE WHEN jsonb_typeof(parts[1] -> 'stages' -> (stage_no - 1) -> 'terms') = 'array' THEN
            ARRAY(SELECT jsonb_array_elements_text(parts[1] -> 'stages' -> (stage_no - 1) -> 'terms')) END;
        stage.skipped := coalesce((parts[1] -> 'stages' -> (stage_no - 1) ->> 'skipped')::boolean, false);
        stage.glossary := given -> (stage_no - 1) -> 'glossary';
        stage.language_moments := ARRAY(
            SELECT jsonb_populate_record(NULL::kb.language_moment, m.moment)
            FROM jsonb_array_elements(given -> (stage_no - 1) -> 'language_moments') WITH ORDINALITY AS m (moment, n)
            ORDER BY m.n
        );
        stages := stages || stage;
        CONTINUE WHEN stage.skipped;
        -- each leg: the best candidates of all shards, as one node's leg
        -- would have found them (a trigram list only when BM25 found nothing anywhere)
        SELECT bool_or(NOT h.trigram) INTO any_bm25
        FROM unnest(parts) AS p
        CROSS JOIN LATERAL jsonb_populate_recordset(NULL::kb.leg_hit, p -> 'stages' -> (stage_no - 1) -> 'lexical') AS h;
        stage.lexical := ARRAY(
            SELECT ROW(x.gid, row_number() OVER (ORDER BY x.score DESC, x.gid), x.score, x.coverage, x.trigram,
                x.similarity, x.evidence, x.other_language)::kb.leg_hit
            FROM (
                SELECT h.*, kb_shard.global_chunk_id(p, h.chunk_id) AS gid
                FROM unnest(parts) AS p
                CROSS JOIN LATERAL jsonb_populate_recordset(NULL::kb.leg_hit,
                    p -> 'stages' -> (stage_no - 1) -> 'lexical') AS h
                WHERE h.trigram = NOT coalesce(any_bm25, false)
                ORDER BY h.score DESC, gid
                LIMIT plan.candidates
            ) AS x
            ORDER BY x.score DESC, x.gid
        );
        -- dense: per language group scanned, the candidates nearest to the
        -- group's query vector (the order of its HNSW scan), then by score
        stage.dense := ARRAY(
            SELECT ROW(y.gid, row_number() OVER (ORDER BY y.score DESC, y.gid), y.score, y.coverage, y.trigram,
                y.similarity, y.evidence, y.other_language)::kb.leg_hit
            FROM (
                SELECT x.*, row_number() OVER (PARTITION BY x.grp ORDER BY x.similarity DESC, x.gid) AS nth
                FROM (
                    SELECT h.*, g.gid, CASE WHEN cardinality(stage.language_moments) > 0
                        THEN chunks -> g.gid::text ->> 'language' ELSE '' END AS grp
                    FROM unnest(parts) AS p
                    CROSS JOIN LATERAL jsonb_populate_recordset(NULL::kb.leg_hit,
                        p -> 'stages' -> (stage_no - 1) -> 'dense') AS h
                    CROSS JOIN LATERAL (SELECT kb_shard.global_chunk_id(p, h.chunk_id) AS gid) AS g
                ) AS x
            ) AS y
            WHERE y.nth <= plan.candidates
            ORDER BY y.score DESC, y.gid
        );
        stage := kb.stage_evidence(stage, plan, settings, cardinality(identifier_ids) > 0, ARRAY(
            SELECT chunks -> h.chunk_id::text ->> 'language' FROM unnest(stage.dense) WITH ORDINALITY AS h
            ORDER BY h.ordinality));
        stages[stage_no] := stage;
        IF best IS NULL OR stage.evidence > best.evidence THEN
            best := stage;
        END IF;
        EXIT WHEN stage.evidence >= 1;
    END LOOP;
    IF kb.abstains(best.evidence, settings) THEN
        RETURN;
    END IF;
    fused := ARRAY(SELECT kb.fuse(best.lexical, best.dense, identifier_ids, settings.fusion, plan.weight_lexical,
        plan.weight_dense, settings.rrf_k));
    -- the freshness rank among all candidates' documents, as kb.passages ranks them on one node
    hits := (
        SELECT coalesce(jsonb_agg(to_jsonb(r.f) || jsonb_build_object('chunk_id', (r.chunk ->> 'chunk_id')::bigint,
            'namespace', r.chunk ->> 'namespace', 'freshness', r.freshness)), '[]')
        FROM (
            SELECT f, c.chunk, CASE WHEN count(*) OVER () > 1 THEN percent_rank() OVER (
                ORDER BY (c.chunk ->> 'effective_from')::date NULLS FIRST, (c.chunk ->> 'created_at')::timestamptz)
                ELSE 0 END AS freshness
            FROM unnest(fused) AS f
            CROSS JOIN LATERAL (SELECT chunks -> f.chunk_id::text AS chunk) AS c
        ) AS r
    );

    -- round 3: each shard's top k passages of its hits; merged here: one row per
    -- distinct text, a document's chunks past the cap after all others, top k
    rows := ARRAY(SELECT r FROM kb_shard.passages_on_shards(hits, plan.analysis ->> 'core_terms',
        settings.boost_identifier, settings.boost_title, request.k, settings.freshness_margin, cap) AS r);
    rows := ARRAY(
        SELECT jsonb_populate_record(z.row_value, jsonb_build_object('rank', z.new_rank))
        FROM (
            SELECT y.row_value, row_number() OVER (ORDER BY y.over_cap, y.score DESC, y.gid) AS new_rank
            FROM (
                SELECT x.*, coalesce(row_number() OVER (PARTITION BY x.gid % 256, x.document_id
                    ORDER BY x.score DESC, x.gid) > cap, false) AS over_cap
                FROM (
                    SELECT DISTINCT ON (w.provenance ->> 'content_hash') w.*
                    FROM (
                        SELECT r AS row_value, r.score, r.document_id, r.provenance,
                            r.chunk_id * 256 + kb_shard.partition_of(r.namespace) AS gid
                        FROM unnest(rows) AS r
                    ) AS w
                    ORDER BY w.provenance ->> 'content_hash', w.score DESC, w.gid
                ) AS x
            ) AS y
        ) AS z
        WHERE z.new_rank <= request.k
        ORDER BY z.new_rank
    );
    IF settings.snippets AND cardinality(rows) > 0 THEN
        rows := kb.with_snippets(rows, best.query);
    END IF;
    rows := kb.with_answer(rows, kb.answerability(best.evidence, settings), best.evidence);
    RETURN QUERY SELECT r.* FROM unnest(rows) AS r ORDER BY r.rank;
END;
$$;
COMMENT ON FUNCTION kb_shard.retrieve_over_shards(
    text, integer, text, text, jsonb, timestamptz, text[], integer, boolean
) IS
'kb_shard.retrieve over all namespaces: three rounds on every shard (BM25 sums; every stage''s legs ranked with them, merged, judged and fused here; passages with freshness ranks over all candidates, merged here), so that it ranks like one node holding every shard''s documents. merge_adjacent is refused.';

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
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shard text;
BEGIN
    -- A shard that stopped since this backend last asked it ends the call with
    -- its cached connection's last words ("REMOTE FATAL: terminating
    -- connection"), which do not say which shard it was; PL/Proxy drops that
    -- connection, so the second attempt connects afresh and a shard still down
    -- is named by its host and port. Retrieval writes nothing on the shards,
    -- so trying again is safe.
    FOR attempt IN 1 .. 2 LOOP
        BEGIN
            -- one namespace: its shard answers alone, exactly as one node would;
            -- one the caller cannot see mapped (none, or another tenant's) gives
            -- no rows, as one node answers for a namespace it does not hold
            IF namespace IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM kb_shard.namespaces AS n WHERE n.namespace = retrieve.namespace
            ) THEN
                RETURN;
            ELSIF namespace IS NOT NULL THEN
                RETURN QUERY SELECT r.* FROM kb_shard.retrieve_in_namespace(query, k, namespace, mode, filters,
                    as_of, context, max_per_document, merge_adjacent) AS r ORDER BY r.rank;
            ELSE
                RETURN QUERY SELECT r.* FROM kb_shard.retrieve_over_shards(query, k, namespace, mode, filters,
                    as_of, context, max_per_document, merge_adjacent) AS r ORDER BY r.rank;
            END IF;
            RETURN;
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
COMMENT ON FUNCTION kb_shard.retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'kb_retrieve over a sharded corpus, same arguments and rows: with a namespace, kb_retrieve on the shard holding it (no rows for a namespace the caller sees no mapping of); over all namespaces kb_shard.retrieve_over_shards, ranking like one node holding every shard''s documents. A shard that cannot be reached fails the call with an error naming it.';
