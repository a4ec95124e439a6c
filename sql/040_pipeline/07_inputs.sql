-- What each stage's legs are given, built when the stage is reached: the
-- lexical leg's terms with the glossary's and the dictionary's expansions
-- (kb_pipeline.lexical_inputs), the dense leg's query vector and language
-- moments (kb_pipeline.dense_inputs, once per embedding key), and the stage
-- they describe before any leg ran (kb_pipeline.new_stage).

CREATE OR REPLACE FUNCTION kb_pipeline.merged_expansions(p_glossary jsonb, p_dictionary jsonb)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- one expansion for the lexical leg: the glossary's matches, then the
    -- dictionary's; a term both add is the glossary's (a team's word first)
    SELECT CASE WHEN p_glossary IS NOT NULL OR p_dictionary IS NOT NULL THEN jsonb_build_object(
        'matches', coalesce(p_glossary -> 'matches', '[]') || coalesce(p_dictionary -> 'matches', '[]'),
        'added_terms', coalesce(p_glossary -> 'added_terms', '[]') || coalesce((
            SELECT jsonb_agg(t.term ORDER BY t.n)
            FROM jsonb_array_elements_text(p_dictionary -> 'added_terms') WITH ORDINALITY AS t (term, n)
            WHERE NOT coalesce(p_glossary -> 'added_terms', '[]') ? t.term
        ), '[]'),
        'dropped_terms', coalesce((p_glossary ->> 'dropped_terms')::bigint, 0)
            + coalesce((p_dictionary ->> 'dropped_terms')::bigint, 0)) END
$$;
COMMENT ON FUNCTION kb_pipeline.merged_expansions(jsonb, jsonb) IS
'The glossary''s and the dictionary''s expansions of a stage''s terms as one (matches of both, added terms once, dropped terms summed); NULL when both are NULL (off). Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.lexical_inputs(
    p_plan kb_pipeline.retrieval_plan, p_scope text[], p_settings kb_pipeline.retrieval_settings
)
RETURNS kb_pipeline.lexical_input[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    inputs kb_pipeline.lexical_input[] := '{}';
    terms jsonb;
    skipped boolean;
    expansion jsonb;
BEGIN
    -- per stage: its BM25 terms (from the query analysis), whether it is
    -- skipped (a later stage with the same terms as the one before it, the
    -- question form having dropped only stop words, would find the same
    -- evidence again) and the glossary equivalents and dictionary translations
    -- of its terms (docs/GLOSSARY.md, docs/RETRIEVAL.md; none in dense mode)
    FOR stage_no IN 1 .. coalesce(cardinality(p_plan.stages), 0) LOOP
        terms := coalesce(p_plan.analysis -> 'stage_terms' -> (stage_no - 1), '[]');
        -- in dense mode a stage whose text has the embedding key of the one
        -- before would search with the same query vector (kb_node.gather_here)
        skipped := stage_no > 1 AND CASE WHEN p_plan.mode = 'dense'
            THEN kb_pipeline.embedding_key(p_plan.stages[stage_no])
                = kb_pipeline.embedding_key(p_plan.stages[stage_no - 1])
            ELSE terms = p_plan.analysis -> 'stage_terms' -> (stage_no - 2) END;
        -- a skipped stage has the terms of the one before, so its expansion too
        IF NOT skipped THEN
            expansion := CASE WHEN p_plan.mode IN ('lexical', 'hybrid') THEN kb_pipeline.merged_expansions(
                CASE WHEN p_settings.glossary_expansion
                    THEN (kb.glossary_expansion_of_terms(ARRAY(SELECT jsonb_array_elements_text(terms)), p_scope,
                        p_settings.glossary_max_terms)).explain END,
                CASE WHEN p_settings.dictionary_expansion
                    THEN kb.dictionary_expansion_of_terms(ARRAY(SELECT jsonb_array_elements_text(terms)),
                        p_settings.dictionary_max_terms) END) END;
        END IF;
        inputs := inputs || ROW(ARRAY(SELECT jsonb_array_elements_text(terms)), skipped,
            expansion)::kb_pipeline.lexical_input;
    END LOOP;
    RETURN inputs;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.lexical_inputs(kb_pipeline.retrieval_plan, text[], kb_pipeline.retrieval_settings) IS
'What the lexical leg of each stage is given (kb_pipeline.lexical_input, one per stage): terms (the analysis''s stage_terms), skipped (same terms as the stage before) and glossary: the expansion of its terms by the glossary (kb.glossary_expansion_of_terms over the namespaces of p_scope) and the bilingual dictionary (kb.dictionary_expansion_of_terms), merged (kb_pipeline.merged_expansions); NULL when both are off and in dense mode.';

CREATE OR REPLACE FUNCTION kb_pipeline.embedding_key(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- ASCII and CJK punctuation (the full-width forms, the CJK symbols block,
    -- dashes, quotes and ellipses) and white space
    SELECT regexp_replace(p_text,
        '[[:punct:][:space:]\u3000-\u303F\uFF00-\uFF0F\uFF1A-\uFF20\uFF3B-\uFF40\uFF5B-\uFF65\u2010-\u2027]+', '', 'g')
$$;
COMMENT ON FUNCTION kb_pipeline.embedding_key(text) IS
'What a stage''s query vector depends on: its text without punctuation and white space. Stages with the same key share one embedding (the question and its form without the question mark rank alike; the core terms do not: docs/RETRIEVAL.md, "Stages and the query vector"). Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.reused(p_input kb_pipeline.dense_input)
RETURNS kb_pipeline.dense_input
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    reused kb_pipeline.dense_input := p_input;
BEGIN
    -- a later stage's dense leg with the same embedding key: its moments and the
    -- stage embedded, no vector to search with (the hits are reused), no time
    reused.query_vector := NULL;
    reused.note := NULL;
    reused.embed_ms := 0;
    RETURN reused;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.reused(kb_pipeline.dense_input) IS
'A stage''s dense input when an earlier stage''s vector is reused (the same kb_pipeline.embedding_key): its language moments and query_stage, no vector, no note, no time. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.dense_inputs(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_stage_no integer
)
RETURNS kb_pipeline.dense_input
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    query text := p_plan.stages[p_stage_no];
    input kb_pipeline.dense_input := ROW(NULL, '{}', NULL, 0, kb_pipeline.embedding_key(query),
        p_stage_no)::kb_pipeline.dense_input;
BEGIN
    -- the query vector of a stage and its language moments (over the
    -- namespaces of the request's scope); an embedding that fails skips the
    -- dense leg with a note, unless dense mode was asked for
    IF p_plan.mode NOT IN ('dense', 'hybrid') THEN
        RETURN input;
    END IF;
    BEGIN
        input.query_vector := kb.embed_query(query, (p_plan.model).name);
    EXCEPTION WHEN OTHERS THEN
        IF p_request.mode_requested = 'dense' THEN
            RAISE;
        END IF;
        input.note := 'query embedding failed, dense leg skipped: ' || SQLERRM;
        input.embed_ms := kb_pipeline.ms_since(t);
        RETURN input;
    END;
    IF p_plan.language_correction THEN
        input.language_moments := kb.language_moments((p_plan.model).name, input.query_vector, p_request.scope,
            p_settings.language_min_vectors, query);
    END IF;
    input.embed_ms := kb_pipeline.ms_since(t);
    RETURN input;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.dense_inputs(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, integer
) IS
'What the dense leg of a stage is given (kb_pipeline.dense_input): the query vector of the stage''s text (kb.embed_query), its language moments (kb.language_moments over the request''s scope, when the correction applies), a note when the embedding failed (outside dense mode), embed_ms, the embedding key and the stage. No vector outside dense and hybrid mode.';

CREATE OR REPLACE FUNCTION kb_pipeline.new_stage(
    p_plan kb_pipeline.retrieval_plan, p_stage_no integer, p_lexical kb_pipeline.lexical_input,
    p_dense kb_pipeline.dense_input
)
RETURNS kb_pipeline.retrieval_stage
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- what the inputs say (terms, skipped, glossary; the embedding's note, time and
    -- language moments), before any leg ran: no hits, no evidence yet
    RETURN ROW(p_stage_no, p_plan.stages[p_stage_no], coalesce(p_lexical.terms, '{}'),
        coalesce(p_lexical.skipped, false), '{}', '{}', NULL, NULL, 0,
        ARRAY(SELECT p_dense.note WHERE p_dense.note IS NOT NULL), coalesce(p_dense.embed_ms, 0),
        0, 0, NULL, NULL, NULL, coalesce(p_dense.language_moments, '{}'), 0, 0,
        nullif(p_lexical.glossary, 'null'), NULL, NULL, NULL, p_dense.query_stage)::kb_pipeline.retrieval_stage;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.new_stage(
    kb_pipeline.retrieval_plan, integer, kb_pipeline.lexical_input, kb_pipeline.dense_input
) IS
'A stage as its inputs describe it (kb_pipeline.lexical_inputs and kb_pipeline.dense_inputs, or a coordinator''s), before any leg ran: one node''s kb_node.gather_stage and a coordinator''s kb_pipeline.merged_stage start from it. Pure.';
