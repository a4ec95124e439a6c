-- What a shard answers a coordinator (sql/shards/coordinator.sql and
-- kb_pipeline.retrieve_over_shards, 03_coordinator_steps.sql;
-- docs/SCALING.md, "Shards"). Every pgkb database has these, so any of them can
-- be a shard: a namespace lives wholly on one shard, and a retrieval over
-- several shards' namespaces runs here in three parts, each with the
-- statistics of the whole sharded corpus that the coordinator summed or pooled:
--   1. kb.shard_corpus: this database's BM25 sizes and document frequencies;
--   2. kb.shard_stage_candidates: every stage's legs (kb_node.gather_stage)
--      with the coordinator's inputs, and the facts of their candidates;
--   3. kb.shard_passages: the rows of the coordinator's ranked hits that are its own.
-- The three are doors as kb_retrieve is: the owner's rights over the caller's
-- scope, entered through kb.enter_pipeline, every input bounded as
-- kb_retrieve's own (00_shard_inputs.sql). They write no log row (a retrieval through a coordinator
-- is logged once, on the coordinator), so they are executable only by the
-- roles a coordinator connects as (kb.open_shard_doors, 04_door_access.sql):
-- on a database that is no shard, by no one but the owner. kb.upsert_document is the write a
-- coordinator routes by namespace.

CREATE OR REPLACE FUNCTION kb.shard_corpus(p_terms text[], p_model text)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    max_terms integer;
BEGIN
    PERFORM kb.enter_pipeline();
    max_terms := kb_node.max_call_terms(kb_pipeline.read_retrieval_settings());
    IF cardinality(p_terms) > max_terms THEN
        RAISE EXCEPTION 'kb.shard_corpus: % terms; a call''s stages have at most %', cardinality(p_terms), max_terms
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN (
        SELECT jsonb_build_object(
            'lexical', kb_node.lexical_corpus(p_terms, s.namespaces),
            'model_ready', kb_node.model_has_vectors(p_model, s.namespaces))
        FROM (SELECT kb.read_scope(NULL) AS namespaces) AS s
    );
END;
$$;
COMMENT ON FUNCTION kb.shard_corpus(text[], text) IS
'A shard''s part of a sharded corpus''s statistics: the BM25 sizes and df of the terms over every namespace the caller may see here (kb_node.lexical_corpus), and whether it holds vectors of the model.';

CREATE OR REPLACE FUNCTION kb_node.shard_gather(
    p_query text,
    p_k integer,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_inputs jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
-- STABLE: one snapshot for all stages, as kb_node.retrieve_core
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    request kb_pipeline.retrieval_request := kb_pipeline.validated_request(p_query, p_k, NULL, p_mode, p_filters,
        p_as_of, p_context, NULL, NULL);
    settings kb_pipeline.retrieval_settings := kb_pipeline.read_retrieval_settings();
    plan kb_pipeline.retrieval_plan;
    identifiers jsonb;
    stages jsonb := '[]';
    stage kb_pipeline.retrieval_stage;
BEGIN
    -- Every stage's legs over all namespaces the caller may see here, with
    -- the coordinator's inputs (p_inputs: model_ready, lexical_corpus, and per
    -- stage its lexical and dense inputs): each leg's best candidates here
    -- hold this shard's share of the best candidates of the whole corpus,
    -- which the coordinator merges and judges. Every stage runs (which one
    -- answers depends on all shards' evidence). Each candidate comes with
    -- its facts (kb_pipeline.candidate): what the coordinator ranks by.
    request.scope := kb.read_scope(NULL);
    plan := kb_pipeline.plan_retrieval(request, settings, (p_inputs ->> 'model_ready')::boolean);
    PERFORM kb_node.checked_shard_inputs(p_inputs, coalesce(cardinality(plan.stages), 0), settings);
    identifiers := coalesce((
        SELECT jsonb_agg(jsonb_build_object('chunk_id', i.chunk_id, 'matched', i.matched))
        FROM kb_node.identifier_candidates(plan.identifiers, request.as_of, request.scope, request.filters,
            plan.candidates) AS i
        WHERE cardinality(plan.identifiers) > 0 AND plan.mode <> 'dense'
    ), '[]');
    FOR stage_no IN 1 .. coalesce(cardinality(plan.stages), 0) LOOP
        stage := kb_node.gather_stage(request, plan, settings, stage_no,
            jsonb_populate_record(NULL::kb_pipeline.lexical_input, p_inputs -> 'stages' -> (stage_no - 1) -> 'lexical'),
            jsonb_populate_record(NULL::kb_pipeline.dense_input,
                nullif(p_inputs -> 'stages' -> (stage_no - 1) -> 'dense', 'null')),
            p_inputs -> 'lexical_corpus');
        stages := stages || jsonb_build_array(jsonb_build_object(
            'lexical', coalesce(to_jsonb(stage.lexical), '[]'), 'dense', coalesce(to_jsonb(stage.dense), '[]')));
    END LOOP;
    -- facts by chunk id: the coordinator looks up each hit's namespace (its shard)
    RETURN jsonb_build_object('identifiers', identifiers, 'stages', stages,
        'facts', coalesce((SELECT jsonb_object_agg(f.chunk_id::text, to_jsonb(f))
            FROM unnest(kb_node.candidate_facts(ARRAY(
                SELECT (h.value ->> 'chunk_id')::bigint
                FROM jsonb_array_elements(stages) AS s
                CROSS JOIN LATERAL jsonb_array_elements((s.value -> 'lexical') || (s.value -> 'dense')) AS h
                UNION
                SELECT (i.value ->> 'chunk_id')::bigint FROM jsonb_array_elements(identifiers) AS i
            ))) AS f), '{}'));
END;
$$;
COMMENT ON FUNCTION kb_node.shard_gather(text, integer, text, jsonb, timestamptz, text[], jsonb) IS
'A shard''s part of a sharded retrieval over all namespaces: every stage''s legs (kb_node.gather_stage with the coordinator''s inputs: the whole corpus''s BM25 statistics, query vectors, language moments, glossary expansions), the identifier hits, and the facts of every candidate (by chunk id); jsonb for the coordinator.';

CREATE OR REPLACE FUNCTION kb.shard_stage_candidates(
    p_query text,
    p_k integer,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_inputs jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.enter_pipeline();
    RETURN kb_node.shard_gather(p_query, p_k, p_mode, p_filters, p_as_of, p_context, p_inputs);
END;
$$;
COMMENT ON FUNCTION kb.shard_stage_candidates(text, integer, text, jsonb, timestamptz, text[], jsonb) IS
'The door to a shard''s part of a sharded retrieval (kb_node.shard_gather): every stage''s candidates over the namespaces the caller may read here, ranked with the whole corpus''s statistics the coordinator gives.';

CREATE OR REPLACE FUNCTION kb_node.shard_rows(p_ranked jsonb)
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    namespaces text[] := kb.read_scope(NULL);
BEGIN
    -- p_ranked: the coordinator's ranked hits (kb_pipeline.ranked_hit fields,
    -- this database's chunk ids); those of this shard's namespaces that the
    -- caller may read are its own. No more than a call returns (k <= 1000).
    IF jsonb_typeof(p_ranked) IS DISTINCT FROM 'array' OR jsonb_array_length(p_ranked) > 1000 THEN
        RAISE EXCEPTION 'kb.shard_passages: the ranked hits must be a JSON array of at most 1000 (got %)',
            coalesce(jsonb_array_length(CASE jsonb_typeof(p_ranked) WHEN 'array' THEN p_ranked END)::text,
                coalesce(jsonb_typeof(p_ranked), 'NULL'))
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN kb_node.passage_rows(ARRAY(
        SELECT h
        FROM jsonb_populate_recordset(NULL::kb_pipeline.ranked_hit, p_ranked) AS h
        INNER JOIN kb.chunks AS c ON c.id = h.chunk_id AND c.namespace = h.namespace
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE (namespaces IS NULL OR c.namespace = ANY(namespaces)) AND kb.may_read_document(d.reader_ids)
    ));
END;
$$;
COMMENT ON FUNCTION kb_node.shard_rows(jsonb) IS
'A shard''s part of a sharded retrieval: the rows (kb_node.passage_rows) of the coordinator''s ranked hits that are this shard''s (by chunk id and namespace) and that the caller may read.';

CREATE OR REPLACE FUNCTION kb.shard_passages(p_ranked jsonb)
RETURNS SETOF kb.retrieval_row
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.enter_pipeline();
    RETURN QUERY SELECT r.* FROM unnest(kb_node.shard_rows(p_ranked)) AS r;
END;
$$;
COMMENT ON FUNCTION kb.shard_passages(jsonb) IS
'The door to a shard''s rows of a sharded retrieval (kb_node.shard_rows): the coordinator''s ranked hits that are this shard''s and the caller''s to read.';

CREATE OR REPLACE FUNCTION kb.upsert_document(p_document jsonb)
RETURNS TABLE (id bigint, ingest_status text, ingest_error text)
LANGUAGE sql
VOLATILE PARALLEL UNSAFE
SECURITY INVOKER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- as the folder loader writes a document: a new (namespace, source) is
    -- inserted, a changed one updated (and re-indexed by the trigger), an
    -- unchanged one left alone (no row returned)
    INSERT INTO kb.documents AS d (namespace, source, title, body, doc_type, metadata, status, version,
        effective_from, effective_to, supersedes, origin, removed_at)
    SELECT r.namespace, r.source, r.title, r.body, r.doc_type, coalesce(r.metadata, '{}'), coalesce(r.status, 'active'),
        r.version, r.effective_from, r.effective_to, r.supersedes, r.origin, NULL
    FROM jsonb_populate_record(NULL::kb.documents, p_document) AS r
    ON CONFLICT (namespace, source) DO UPDATE SET
        title = excluded.title, body = excluded.body, doc_type = excluded.doc_type, metadata = excluded.metadata,
        status = excluded.status, version = excluded.version, effective_from = excluded.effective_from,
        effective_to = excluded.effective_to, supersedes = excluded.supersedes, origin = excluded.origin,
        removed_at = NULL
    WHERE (d.title, d.body, d.doc_type, d.metadata, d.status, d.version, d.effective_from, d.effective_to,
        d.supersedes, d.origin, d.removed_at)
        IS DISTINCT FROM
        (excluded.title, excluded.body, excluded.doc_type, excluded.metadata, excluded.status, excluded.version,
            excluded.effective_from, excluded.effective_to, excluded.supersedes, excluded.origin, NULL::timestamptz)
    RETURNING d.id, d.ingest_status, d.ingest_error
$$;
COMMENT ON FUNCTION kb.upsert_document(jsonb) IS
'Inserts or updates one document given as jsonb (the columns of kb.documents the folder loader writes), as the loader does: an unchanged document returns no row. The write a shard coordinator routes by namespace.';
