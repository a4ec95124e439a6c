-- How a coordinator merges the shards' answers into one node's: a chunk's id
-- over all shards (kb_pipeline.global_id), the facts of the candidates
-- (kb_pipeline.shard_facts) and each stage's legs (kb_pipeline.merged_leg,
-- kb_pipeline.merged_stage), judged by the node's rule.

CREATE OR REPLACE FUNCTION kb_pipeline.global_id(p_id bigint, p_namespace text)
RETURNS bigint
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- plpgsql: kb_shard exists on a coordinator only, and a SQL body is checked when created
    RETURN p_id * 256 + kb_shard.partition_of(p_namespace);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.global_id(bigint, text) IS
'A shard''s chunk or document id as a coordinator knows it: id x 256 + the shard number of its namespace, unique over all shards (the id on its shard: the quotient by 256).';

CREATE OR REPLACE FUNCTION kb_pipeline.shard_facts(p_parts jsonb[])
RETURNS kb_pipeline.candidate[]
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT ARRAY(
        SELECT ROW(kb_pipeline.global_id(f.chunk_id, f.namespace), kb_pipeline.global_id(f.document_id, f.namespace),
            f.namespace, f.content_hash, f.title, f.effective_from, f.created_at)::kb_pipeline.candidate
        FROM unnest(p_parts) AS p
        CROSS JOIN LATERAL jsonb_each(p -> 'facts') AS e
        CROSS JOIN LATERAL jsonb_populate_record(NULL::kb_pipeline.candidate, e.value) AS f
    )
$$;
COMMENT ON FUNCTION kb_pipeline.shard_facts(jsonb[]) IS
'The facts of every candidate of the shards'' answers (kb_node.shard_gather), with chunk and document ids as the coordinator knows them (kb_pipeline.global_id).';

CREATE OR REPLACE FUNCTION kb_pipeline.merged_leg(
    p_parts jsonb[], p_stage_no integer, p_leg text, p_limit integer, p_by_language boolean
)
RETURNS kb_pipeline.leg_hit[]
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- One leg of one stage over all shards, as one node's leg would have
    -- found it: the best p_limit hits by score (the lexical leg: its trigram
    -- hits only when BM25 found nothing on any shard); the dense leg with the
    -- language correction (p_by_language): the p_limit nearest of each
    -- language group (the order of its HNSW scan), then by score.
    WITH hits AS (
        SELECT h.*, kb_pipeline.global_id(h.chunk_id, p -> 'facts' -> h.chunk_id::text ->> 'namespace') AS gid
        FROM unnest(p_parts) AS p
        CROSS JOIN LATERAL jsonb_populate_recordset(NULL::kb_pipeline.leg_hit, p -> 'stages' -> (p_stage_no - 1) -> p_leg)
            AS h
    ),
    kept AS (
        SELECT x.*
        FROM (
            SELECT h.*, row_number() OVER (
                PARTITION BY CASE WHEN p_by_language THEN h.language ELSE '' END
                ORDER BY CASE WHEN p_by_language THEN h.similarity ELSE h.score END DESC, h.gid) AS nth
            FROM hits AS h
            WHERE h.trigram = (p_leg = 'lexical' AND NOT EXISTS (SELECT 1 FROM hits AS b WHERE NOT b.trigram))
        ) AS x
        WHERE x.nth <= p_limit
    )
    SELECT ARRAY(
        SELECT jsonb_populate_record(NULL::kb_pipeline.leg_hit, to_jsonb(k) || jsonb_build_object('chunk_id', k.gid,
            'rank', row_number() OVER (ORDER BY k.score DESC, k.gid)))
        FROM kept AS k
        ORDER BY k.score DESC, k.gid
    )
$$;
COMMENT ON FUNCTION kb_pipeline.merged_leg(jsonb[], integer, text, integer, boolean) IS
'One leg (lexical or dense) of one stage merged over the shards'' answers, as one node''s leg would have found it over all their documents: the best p_limit by score (trigram hits only when no shard has a BM25 hit), or with p_by_language the p_limit nearest of each language group; chunk ids as the coordinator knows them.';

CREATE OR REPLACE FUNCTION kb_pipeline.merged_stage(
    p_parts jsonb[],
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_stage_no integer,
    p_inputs jsonb,
    p_identifier_found boolean
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    stage kb_pipeline.retrieval_stage;
BEGIN
    -- the stage as one node would have gathered it (kb_node.gather_stage's
    -- shape), judged by the node's rule (kb_pipeline.stage_evidence)
    stage := kb_pipeline.new_stage(p_plan, p_stage_no,
        jsonb_populate_record(NULL::kb_pipeline.lexical_input, p_inputs -> 'lexical'),
        jsonb_populate_record(NULL::kb_pipeline.dense_input, nullif(p_inputs -> 'dense', 'null')));
    IF stage.skipped THEN
        RETURN stage;
    END IF;
    stage.lexical := kb_pipeline.merged_leg(p_parts, p_stage_no, 'lexical', p_plan.candidates, false);
    stage.dense := kb_pipeline.merged_leg(p_parts, p_stage_no, 'dense', p_plan.candidates,
        cardinality(stage.language_moments) > 0);
    RETURN kb_pipeline.stage_evidence(stage, p_plan, p_settings, p_identifier_found);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.merged_stage(
    jsonb[], kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, integer, jsonb,
    boolean
) IS
'One stage of a sharded retrieval: its legs merged over the shards'' answers (kb_pipeline.merged_leg) and judged by the node''s rule (kb_pipeline.stage_evidence).';
