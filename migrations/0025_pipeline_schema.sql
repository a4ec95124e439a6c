-- The retrieval pipeline moves to kb_pipeline, a schema that every migrate
-- drops and re-creates with its types (sql/040_pipeline_schema.sql): its
-- types change with the code, without ALTER TYPE. Here: the door whose lock
-- keeps readers and that re-creation apart, and the drop of the pipeline's
-- objects in kb (the types with every function that takes or returns them,
-- then the moved functions that take none).

-- Empty: readers take ACCESS SHARE on it at the start of a retrieval (held to
-- the end of their transaction), a migrate ACCESS EXCLUSIVE before it drops
-- kb_pipeline, so no reader runs a function whose schema is being replaced.
CREATE TABLE kb.pipeline_door ();
COMMENT ON TABLE kb.pipeline_door IS
'Empty: its lock is the door to kb_pipeline. A retrieval takes ACCESS SHARE on it first, a migrate ACCESS EXCLUSIVE before re-creating kb_pipeline.';

-- the shard doors whose arguments change (sql/045_shard_parts.sql)
DROP FUNCTION IF EXISTS kb.shard_stage_candidates(text, integer, text, jsonb, timestamptz, text[], jsonb);
DROP FUNCTION IF EXISTS kb.shard_passages(jsonb, text, double precision, double precision, integer, double precision, integer);

DROP TYPE IF EXISTS kb.retrieval_result, kb.retrieval_stage, kb.retrieval_plan, kb.retrieval_settings,
kb.retrieval_request, kb.fused_hit, kb.leg_hit CASCADE;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'kb'::regnamespace AND p.proname = ANY(ARRAY[
            'max_filters_bytes', 'max_filters_depth', 'filter_value_error', 'check_filters', 'retrieval_modes',
            'max_query_chars', 'max_namespace_chars', 'namespace_pattern', 'max_context_turns',
            'model_has_vectors', 'bm25_weight', 'lexical_corpus', 'glossary_match_terms', 'lexical_term_weights',
            'lexical_scores', 'lexical_candidates', 'trigram_candidates', 'identifier_candidates', 'noise_z',
            'dense_candidates', 'calibrate', 'passage_provenance', 'passages', 'merged_passages', 'rows_with',
            'with_snippets', 'ms_since', 'with_answer', 'explain_assembly', 'retrieve_core',
            'read_retrieval_settings'])
    LOOP
        EXECUTE format('DROP FUNCTION %s CASCADE', f);
    END LOOP;
END;
$$;
