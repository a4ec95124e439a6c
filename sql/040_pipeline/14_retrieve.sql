-- kb_retrieve and kb_retrieve_explain: the orchestration of the named parts.
-- request -> scope and plan -> stages of the legs -> fusion and ranking ->
-- passages -> judge -> snippets, explain object and log.
--
-- The reader's door: the two gateways run with the owner's rights (SECURITY
-- DEFINER). They never take the caller's namespaces from an argument:
-- kb.read_scope works them out from the session's role (kb.session_role) and
-- every leg applies them inside its index scans, where row-level security
-- could not use the indexes (pg_trgm's operators are not leakproof) and
-- re-checked its policy per row. The internals are not executable by
-- readers (090_grants/01_privileges.sql); the tables' policies stay as the second wall for
-- every other way in (docs/RELIABILITY.md, "One door").

CREATE OR REPLACE FUNCTION kb_pipeline.result_of(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    p_plan kb_pipeline.retrieval_plan,
    p_stages kb_pipeline.retrieval_stage[],
    p_best kb_pipeline.retrieval_stage,
    p_identifier_chunks bigint[],
    p_ranked kb_pipeline.ranked_hit[],
    p_rows kb.retrieval_row[],
    p_timings jsonb,
    p_explain boolean
)
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    merge_adjacent boolean := kb_pipeline.assembly_merge_adjacent(p_request, p_settings);
    -- judge: the probability that the top passages answer, from the signals
    best kb_pipeline.retrieval_stage := kb_pipeline.judged(p_plan, p_settings, p_best, p_ranked, p_rows,
        cardinality(p_identifier_chunks) > 0);
    abstains boolean := kb_pipeline.abstains(best.probability, p_settings);
    ranked kb_pipeline.ranked_hit[] := CASE WHEN abstains THEN '{}' ELSE p_ranked END;
    relevance jsonb := kb_pipeline.passage_relevance(p_plan, p_settings, best, ranked, best.probability);
    ranked_rows kb.retrieval_row[] := CASE WHEN abstains THEN '{}' ELSE coalesce(p_rows, '{}') END;
    rows kb.retrieval_row[] := ranked_rows;
    decision text := kb_pipeline.answerability(best.probability, p_settings);
    answer_check_ms numeric := kb_pipeline.ms_since(t);
    timings jsonb;
BEGIN
    -- the end every orchestrator shares: the judge (no rows when it abstains),
    -- adjacent chunks merged (when asked), snippets, the answerability and each
    -- passage's relevance on every row, and the explain object (or, without p_explain, only what the
    -- retrieval log records)
    t := clock_timestamp();
    IF merge_adjacent AND cardinality(rows) > 0 THEN
        rows := kb_node.merged_passages(rows);
    END IF;
    IF p_settings.snippets AND cardinality(rows) > 0 THEN
        rows := kb_pipeline.with_snippets(rows, best.query);
    END IF;
    rows := kb_pipeline.with_relevance(kb_pipeline.with_answer(rows, decision, best.probability), relevance);
    timings := jsonb_build_object(
        'embed', (p_timings ->> 'analysis')::numeric + (SELECT coalesce(sum(s.embed_ms), 0) FROM unnest(p_stages) AS s),
        'lexical', (p_timings ->> 'identifiers')::numeric
            + (SELECT coalesce(sum(s.lexical_ms), 0) FROM unnest(p_stages) AS s),
        'dense', (SELECT coalesce(sum(s.dense_ms), 0) FROM unnest(p_stages) AS s),
        'fuse', (p_timings ->> 'fuse')::numeric, 'snippets', kb_pipeline.ms_since(t),
        'answer_check', answer_check_ms,
        'total', kb_pipeline.ms_since((p_timings ->> 'started')::timestamptz)) || (p_timings - 'analysis'
            - 'identifiers' - 'fuse' - 'started');
    IF NOT p_explain THEN
        -- what the retrieval log records (kb.log_retrieval), without the rest of the explain object
        RETURN ROW(rows, jsonb_build_object('query', p_request.query, 'mode_requested', p_request.mode_requested,
            'mode', p_plan.mode, 'low_confidence', decision <> 'answer', 'no_evidence', decision = 'no evidence',
            'timings_ms', timings));
    END IF;
    RETURN ROW(rows, kb_pipeline.explain_object(p_request, p_settings, p_plan, p_stages, best, p_identifier_chunks,
        cardinality(rows), timings)
        || jsonb_build_object('assembly', kb_pipeline.explain_assembly(
            kb_pipeline.assembly_max_per_document(p_request, p_settings), merge_adjacent,
            ARRAY(SELECT h.chunk_id FROM unnest(ranked) AS h WHERE h.rank IS NULL ORDER BY h.uncapped_rank),
            ranked_rows, rows),
            'relevance', jsonb_build_object(
                'coefficients', kb_pipeline.passage_relevance_model() -> 'coefficients' -> p_plan.mode,
                'passages', relevance)));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.result_of(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_plan,
    kb_pipeline.retrieval_stage[], kb_pipeline.retrieval_stage, bigint[], kb_pipeline.ranked_hit[], kb.retrieval_row[],
    jsonb, boolean
) IS
'The end of every retrieval, on one node or over shards: the judge on the ranked rows (kb_pipeline.judged; no rows when it abstains), adjacent chunks merged (when asked), snippets and the answerability decision on every row, and the explain object (p_explain; else what the retrieval log records). p_best: the stage used, not yet judged. p_timings: started (the call''s clock_timestamp), analysis, identifiers and fuse in ms, and any others to report.';

CREATE OR REPLACE FUNCTION kb_node.retrieve_core(p_request kb_pipeline.retrieval_request, p_explain boolean)
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
-- STABLE, and so is everything it calls that reads tables: a STABLE function
-- runs every statement on the snapshot of the query that called it, so one
-- kb_retrieve call sees one state of the documents even under READ COMMITTED
-- (a VOLATILE one takes a new snapshot per statement, and a document updated
-- meanwhile could be missing from one leg and present in the next). It
-- writes nothing: kb_node.retrieve logs.
STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
-- JIT compilation costs far more than these millisecond queries ever save
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    timings jsonb := jsonb_build_object('started', clock_timestamp());
    request kb_pipeline.retrieval_request := p_request;
    settings kb_pipeline.retrieval_settings := kb_pipeline.read_retrieval_settings();
    plan kb_pipeline.retrieval_plan;
    identifier_chunks bigint[];
    stages kb_pipeline.retrieval_stage[];
    best kb_pipeline.retrieval_stage;
    ranked kb_pipeline.ranked_hit[];
    rows kb.retrieval_row[];
BEGIN
    -- analyse: the namespaces this call may read, from the session's role
    -- (kb.read_scope: every step below applies them), and the plan
    request.scope := kb.read_scope(request.namespace);
    plan := kb_pipeline.plan_retrieval(request, settings);
    timings := timings || jsonb_build_object('analysis', kb_pipeline.ms_since(t));
    t := clock_timestamp();
    identifier_chunks := kb_node.identifier_chunks(request, plan);
    timings := timings || jsonb_build_object('identifiers', kb_pipeline.ms_since(t));
    -- gather and judge
    stages := kb_node.gather_here(request, plan, settings, cardinality(identifier_chunks) > 0);
    best := stages[kb_pipeline.best_stage(stages)];
    -- fuse and rank, then the passages
    t := clock_timestamp();
    ranked := kb_pipeline.ranked(request, plan, settings, best, identifier_chunks,
        kb_node.candidate_facts(kb_node.stage_candidates(best, identifier_chunks)));
    timings := timings || jsonb_build_object('fuse', kb_pipeline.ms_since(t));
    rows := kb_node.passage_rows(ranked);
    -- judge, then the rows and the explain object
    RETURN kb_pipeline.result_of(request, settings, plan, stages, best, identifier_chunks, ranked, rows, timings,
        p_explain);
END;
$$;
COMMENT ON FUNCTION kb_node.retrieve_core(kb_pipeline.retrieval_request, boolean) IS
'The retrieval pipeline of one database, behind kb_retrieve and kb_retrieve_explain, for the request their door checked (kb_pipeline.validated_request): analyse (scope, plan), gather and judge (kb_node.gather_here, kb_pipeline.best_stage), fuse and rank (kb_pipeline.ranked), passages (kb_node.passage_rows, kb_pipeline.result_of). Returns the rows and, with p_explain, the explain object (else what the retrieval log records).';

CREATE OR REPLACE FUNCTION kb_node.retrieve(p_request kb_pipeline.retrieval_request, p_explain boolean)
RETURNS kb_pipeline.retrieval_result
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    result kb_pipeline.retrieval_result;
BEGIN
    -- one statement, one snapshot: the whole retrieval (kb_node.retrieve_core
    -- is STABLE); the log row is written after it, by a statement of its own
    result := kb_node.retrieve_core(p_request, p_explain);
    PERFORM kb.log_retrieval(result.explain, result.rows, p_request.namespace, p_request.k);
    RETURN result;
END;
$$;
COMMENT ON FUNCTION kb_node.retrieve(kb_pipeline.retrieval_request, boolean) IS
'A retrieval and its log row: kb_node.retrieve_core on one snapshot, then kb.log_retrieval. What the doors kb_retrieve and kb_retrieve_explain call once they hold kb.pipeline_door.';

-- The doors keep no variable of a kb_pipeline type: one compiled before a
-- migrate re-created the schema would name a type that no longer exists.
CREATE OR REPLACE FUNCTION public.kb_retrieve(
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
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.enter_pipeline();
    RETURN QUERY SELECT r.*
        FROM kb_node.retrieve(kb_pipeline.validated_request(query, k, namespace, mode, filters, as_of,
            context, max_per_document, merge_adjacent), false) AS x
        CROSS JOIN LATERAL unnest(x.rows) AS r
        ORDER BY r.rank;
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'Ranked passages for a question from the documents current at as_of that the session''s role may read: hybrid BM25 + HNSW, per-leg ranks and scores, snippets, provenance, and the call''s answerability on every row. Modes: lexical, dense, hybrid, auto. max_per_document caps the chunks of one document among the k, merge_adjacent joins consecutive chunks of one document into one passage (NULL: the settings of the same names). Runs with the owner''s rights over the namespaces kb.read_scope gives the session''s role.';

CREATE OR REPLACE FUNCTION public.kb_retrieve_explain(
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
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.enter_pipeline();
    -- the explain object, the results as kb_retrieve returns them without the
    -- passage text, and whether the call was logged (not on a hot standby, nor
    -- in a read-only transaction)
    RETURN (
        SELECT x.explain || jsonb_build_object('results', coalesce((
            SELECT jsonb_agg(to_jsonb(r) - 'content' - 'snippet' ORDER BY r.rank) FROM unnest(x.rows) AS r
        ), '[]'), 'retrieval_log', kb.retrieval_log_state())
        FROM kb_node.retrieve(kb_pipeline.validated_request(query, k, namespace, mode, filters, as_of,
            context, max_per_document, merge_adjacent), true) AS x
    );
END;
$$;
COMMENT ON FUNCTION public.kb_retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'How kb_retrieve answered: query analysis, stages tried, candidates per leg, evidence and the answerability decision, model, timings per stage, passage assembly (cap, merges), and the results.';
