-- The steps only a shard coordinator runs (docs/SCALING.md, "Shards"): a
-- retrieval over all namespaces of a sharded corpus. It is the node's
-- pipeline with the gathering done on the shards (01_shard_doors.sql):
--   analyse   the plan, with every stage's terms and glossary expansion here
--   round 1   the BM25 statistics of those terms on every shard, summed
--             (kb.shard_corpus), and whether any shard has vectors
--   inputs    every stage's query vector and language moments, computed here
--             once from the copy of all shards' language statistics
--             (kb_shard.sync_statistics), so they pool as one node's do
--   round 2   every shard's legs with those inputs (kb.shard_stage_candidates),
--             merged into one node's legs (kb_pipeline.merged_stage)
--   judge, fuse, rank, explain: the node's own steps (sql/040_pipeline/)
--   round 3   the rows of the ranked hits from the shards holding them
--             (kb.shard_passages)
-- A chunk is known here by its id x 256 + its shard's number (chunk and
-- document ids are per shard). These functions call kb_shard's PL/Proxy
-- functions, which exist on a coordinator only (sql/shards/);
-- elsewhere they are never called. They run as the caller (each caller
-- reaches the shards as itself), so they are in kb_pipeline, which every role
-- may execute (kb_node holds the steps that read the corpus as the owner).

CREATE OR REPLACE FUNCTION kb_pipeline.stage_inputs_over_shards(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    plan OUT kb_pipeline.retrieval_plan,
    inputs OUT jsonb
)
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- the glossary's expansion does not depend on the mode (lexical and
    -- hybrid alike), so a plan before the shards said whether they have vectors will do
    provisional kb_pipeline.retrieval_plan := kb_pipeline.plan_retrieval(p_request, p_settings, true);
    lexical kb_pipeline.lexical_input[] := kb_pipeline.lexical_inputs(provisional, NULL, p_settings);
    dense kb_pipeline.dense_input;
    dense_by_stage kb_pipeline.dense_input[] := '{}';
    parts jsonb[];
BEGIN
    -- round 1: the BM25 statistics of every stage's terms and of the terms
    -- the glossary adds, summed over the shards
    parts := kb_shard.answers(ARRAY(SELECT c FROM kb_shard.corpus_on_shards(ARRAY(
        SELECT t.term FROM unnest(lexical) AS s
        CROSS JOIN LATERAL unnest(s.terms || ARRAY(
            SELECT jsonb_array_elements_text(coalesce(s.glossary -> 'added_terms', '[]'))
        )) AS t (term)
    ), (SELECT m.name FROM kb.models AS m WHERE m.active)) AS c), 'round 1');
    -- the plan, the query analysed once
    plan := kb_pipeline.plan_retrieval(p_request, p_settings,
        (SELECT bool_or((p ->> 'model_ready')::boolean) FROM unnest(parts) AS p), provisional.analysis);
    -- the query vectors and their language moments, here once for all shards:
    -- one per embedding key, as on one node (kb_node.gather_here)
    FOR stage_no IN 1 .. cardinality(lexical) LOOP
        IF lexical[stage_no].skipped THEN
            dense_by_stage := dense_by_stage || NULL::kb_pipeline.dense_input;
        ELSIF dense IS NULL OR dense.embedding_key IS DISTINCT FROM kb_pipeline.embedding_key(plan.stages[stage_no])
        THEN
            dense := kb_pipeline.dense_inputs(p_request, plan, p_settings, stage_no);
            dense_by_stage := dense_by_stage || dense;
        ELSE
            dense_by_stage := dense_by_stage || kb_pipeline.reused(dense);
        END IF;
    END LOOP;
    inputs := jsonb_build_object(
        'model_ready', plan.model_ready,
        'lexical_corpus', jsonb_build_object(
            'chunk_count', (SELECT sum((p -> 'lexical' ->> 'chunk_count')::numeric) FROM unnest(parts) AS p),
            'total_length', (SELECT sum((p -> 'lexical' ->> 'total_length')::numeric) FROM unnest(parts) AS p),
            'df', (SELECT coalesce(jsonb_object_agg(d.term, d.df), '{}') FROM (
                SELECT e.key AS term, sum(e.value::text::numeric) AS df
                FROM unnest(parts) AS p CROSS JOIN LATERAL jsonb_each(p -> 'lexical' -> 'df') AS e
                GROUP BY e.key) AS d)),
        -- JSON only here, for the PL/Proxy wire: the shards read it back as the types
        'stages', coalesce((
            SELECT jsonb_agg(jsonb_build_object('lexical', to_jsonb(lexical[n]),
                'dense', to_jsonb(dense_by_stage[n])) ORDER BY n)
            FROM generate_subscripts(lexical, 1) AS n
        ), '[]'));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.stage_inputs_over_shards(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings) IS
'The plan of a retrieval over all namespaces (the query analysed once) and what every shard is given for a retrieval over all namespaces: model_ready (any shard has vectors), lexical_corpus (the BM25 statistics summed over the shards: round 1), and each stage''s lexical and dense inputs (kb_pipeline.lexical_inputs, kb_pipeline.dense_inputs over the copy of all shards'' statistics).';

CREATE OR REPLACE FUNCTION kb_pipeline.rows_over_shards(p_ranked kb_pipeline.ranked_hit[])
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- round 3: each shard returns the rows of the ranked hits it holds (ids
    -- on their shard), here in rank order
    IF coalesce(cardinality(p_ranked), 0) = 0 THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(
        SELECT r FROM kb_shard.passages_on_shards((
            SELECT jsonb_agg(to_jsonb(h) || jsonb_build_object('chunk_id', h.chunk_id / 256,
                'document_id', h.document_id / 256))
            FROM unnest(p_ranked) AS h WHERE h.rank IS NOT NULL
        )) AS r
        ORDER BY r.rank
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.rows_over_shards(kb_pipeline.ranked_hit[]) IS
'Round 3 of a sharded retrieval: the rows of the ranked hits (rank NOT NULL), each from the shard that holds it (kb.shard_passages), in rank order.';

CREATE OR REPLACE FUNCTION kb_pipeline.retrieve_over_shards(p_request kb_pipeline.retrieval_request, p_explain boolean)
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    timings jsonb := jsonb_build_object('started', clock_timestamp());
    request kb_pipeline.retrieval_request := p_request;
    settings kb_pipeline.retrieval_settings := kb_pipeline.read_retrieval_settings();
    prepared record;
    inputs jsonb;
    plan kb_pipeline.retrieval_plan;
    parts jsonb[];
    facts kb_pipeline.candidate[];
    identifier_ids bigint[];
    stages kb_pipeline.retrieval_stage[];
    best kb_pipeline.retrieval_stage;
    ranked kb_pipeline.ranked_hit[];
    rows kb.retrieval_row[];
    result kb_pipeline.retrieval_result;
BEGIN
    IF kb_pipeline.assembly_merge_adjacent(request, settings) THEN
        RAISE EXCEPTION 'kb_shard.retrieve: merge_adjacent is not supported over all namespaces of a sharded corpus'
            USING HINT = 'pass merge_adjacent => false, or a namespace (its shard answers as kb_retrieve does)';
    END IF;
    -- analyse, round 1 and every stage's inputs
    prepared := kb_pipeline.stage_inputs_over_shards(request, settings);
    plan := prepared.plan;
    inputs := prepared.inputs;
    timings := timings || jsonb_build_object('analysis', kb_pipeline.ms_since(t), 'identifiers', 0);
    -- round 2: every shard's legs, merged as one node's; then judged
    t := clock_timestamp();
    parts := kb_shard.answers(ARRAY(SELECT c FROM kb_shard.stage_candidates_on_shards(request.query, request.k,
        request.mode_requested, request.filters, request.as_of, request.context, inputs) AS c), 'round 2');
    facts := kb_pipeline.shard_facts(parts);
    identifier_ids := ARRAY(
        SELECT x.gid
        FROM (
            SELECT kb_pipeline.global_id((i.value ->> 'chunk_id')::bigint,
                p -> 'facts' -> (i.value ->> 'chunk_id') ->> 'namespace') AS gid, (i.value ->> 'matched')::integer AS matched
            FROM unnest(parts) AS p
            CROSS JOIN LATERAL jsonb_array_elements(p -> 'identifiers') AS i
        ) AS x
        ORDER BY x.matched DESC, x.gid
        LIMIT plan.candidates
    );
    stages := ARRAY(
        SELECT kb_pipeline.merged_stage(parts, plan, settings, s.n::integer, s.value,
            cardinality(identifier_ids) > 0)
        FROM jsonb_array_elements(inputs -> 'stages') WITH ORDINALITY AS s (value, n)
        ORDER BY s.n
    );
    best := stages[kb_pipeline.best_stage(stages)];
    timings := timings || jsonb_build_object('shards_gather', kb_pipeline.ms_since(t));
    -- fuse and rank with every shard's candidates; round 3: the rows
    t := clock_timestamp();
    ranked := kb_pipeline.ranked(request, plan, settings, best, identifier_ids, facts);
    timings := timings || jsonb_build_object('fuse', kb_pipeline.ms_since(t));
    rows := kb_pipeline.rows_over_shards(ranked);
    -- the node's judge on the rows the shards returned, then the result,
    -- logged here: whoever calls this function, the call is logged once
    result := kb_pipeline.result_of(request, settings, plan, stages, best, identifier_ids, ranked, rows, timings,
        p_explain);
    PERFORM kb_shard.log_retrieval(result.explain, result.rows, request.k);
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.retrieve_over_shards(kb_pipeline.retrieval_request, boolean) IS
'The retrieval pipeline of a shard coordinator over all namespaces (kb_shard.retrieve, kb_shard.retrieve_explain): every stage''s inputs and the corpus statistics here (kb_pipeline.stage_inputs_over_shards), the legs on every shard (merged: kb_pipeline.merged_stage), then the node''s judge, fusion, ranking and result (kb_pipeline.best_stage, kb_pipeline.ranked, kb_pipeline.result_of), the rows from the shards holding them; logged on the coordinator (kb_shard.log_retrieval), once per call. Ranks like one node holding every shard''s documents. merge_adjacent is refused.';
