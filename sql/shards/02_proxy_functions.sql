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
