-- A kb_retrieve call's arguments checked and normalised (kb.validated_request),
-- and the plan for it (kb.plan_retrieval): query analysis, mode, model,
-- weights and evidence thresholds.

CREATE OR REPLACE FUNCTION kb.check_filters(p_filters jsonb)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    key text;
BEGIN
    IF p_filters IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    IF jsonb_typeof(p_filters) <> 'object' THEN
        RAISE EXCEPTION 'kb_retrieve: filters must be a JSON object, got %', jsonb_typeof(p_filters);
    END IF;
    FOR key IN SELECT jsonb_object_keys(p_filters) LOOP
        IF key NOT IN ('doc_type', 'status', 'include_history', 'metadata', 'tags', 'source_prefix') THEN
            RAISE EXCEPTION 'kb_retrieve: unknown filter key "%"', key
                USING HINT = 'known keys: doc_type, status, include_history, metadata, tags, source_prefix';
        END IF;
    END LOOP;
    IF p_filters ? 'metadata' AND jsonb_typeof(p_filters -> 'metadata') <> 'object' THEN
        RAISE EXCEPTION 'kb_retrieve: filters.metadata must be an object (matched by containment)';
    END IF;
    IF p_filters ? 'include_history' AND jsonb_typeof(p_filters -> 'include_history') <> 'boolean' THEN
        RAISE EXCEPTION 'kb_retrieve: filters.include_history must be true or false';
    END IF;
    RETURN p_filters;
END;
$$;
COMMENT ON FUNCTION kb.check_filters(jsonb) IS 'Validates kb_retrieve filters; unknown keys are errors that name the key.';

CREATE OR REPLACE FUNCTION kb.retrieval_modes()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT ARRAY['lexical', 'dense', 'hybrid', 'auto'] $$;
COMMENT ON FUNCTION kb.retrieval_modes() IS
'The modes of kb_retrieve: lexical (BM25 + trigram), dense (HNSW), hybrid (both, fused), auto (hybrid when the active model has vectors).';

CREATE OR REPLACE FUNCTION kb.max_query_chars()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 2000 $$;
COMMENT ON FUNCTION kb.max_query_chars() IS
'Characters of a query kb_retrieve uses; a longer query is cut there, with a note in the explain output.';

CREATE OR REPLACE FUNCTION kb.validated_request(
    p_query text, p_k integer, p_namespace text, p_mode text, p_filters jsonb, p_as_of timestamptz, p_context text[]
)
RETURNS kb.retrieval_request
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- blanks include tabs, newlines and the ideographic space
    query text := btrim(p_query, E' \t\r\n\f\v\u00a0\u3000');
    mode text := lower(btrim(coalesce(p_mode, 'auto')));
    filters jsonb;
    notes text[] := '{}';
BEGIN
    IF query IS NULL OR query = '' THEN
        RAISE EXCEPTION 'kb_retrieve: query is empty';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: k must be between 1 and 1000 (got %)', coalesce(p_k::text, 'NULL');
    END IF;
    IF NOT mode = ANY(kb.retrieval_modes()) THEN
        RAISE EXCEPTION 'kb_retrieve: unknown mode "%"', p_mode
            USING HINT = 'modes: ' || array_to_string(kb.retrieval_modes(), ', ');
    END IF;
    IF p_as_of IS NULL THEN
        RAISE EXCEPTION 'kb_retrieve: as_of must not be NULL';
    END IF;
    filters := kb.check_filters(p_filters);
    IF length(query) > kb.max_query_chars() THEN
        notes := notes || format('query truncated to its first %s of %s characters', kb.max_query_chars(), length(query));
        query := left(query, kb.max_query_chars());
    END IF;
    RETURN ROW(query, p_k, p_namespace, mode, filters, kb.filters_restrict(filters), p_as_of, p_context, notes);
END;
$$;
COMMENT ON FUNCTION kb.validated_request(text, integer, text, text, jsonb, timestamptz, text[]) IS
'Checks kb_retrieve''s arguments (each error names the argument) and normalises them: trimmed query cut to kb.max_query_chars(), lower-case mode, checked filters.';

CREATE OR REPLACE FUNCTION kb.plan_retrieval(p_request kb.retrieval_request, p_settings kb.retrieval_settings)
RETURNS kb.retrieval_plan
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    plan kb.retrieval_plan;
    provider kb.embedding_providers;
BEGIN
    IF NOT p_settings.fusion = ANY(ARRAY['linear', 'rrf']) THEN
        RAISE EXCEPTION 'kb_retrieve: unknown fusion "%" (setting fusion: linear or rrf)', p_settings.fusion;
    END IF;
    plan.analysis := kb.analyze_query(p_request.query, p_request.context);
    plan.stages := ARRAY(SELECT jsonb_array_elements_text(plan.analysis -> 'stages'));
    plan.identifiers := ARRAY(SELECT jsonb_array_elements_text(coalesce(plan.analysis -> 'identifiers', '[]')));
    plan.notes := '{}';
    plan.candidates := greatest(p_request.k * 5, p_settings.candidates_per_leg);
    plan.weight_dense := p_settings.weight_dense;
    plan.weight_lexical := p_settings.weight_lexical;
    SELECT m INTO plan.model FROM kb.models AS m WHERE m.active;
    plan.model_ready := (plan.model).name IS NOT NULL
        AND EXISTS (SELECT 1 FROM kb.embeddings AS e WHERE e.model = (plan.model).name);
    -- a model's options may override its provider's similarity thresholds
    SELECT p.* INTO provider FROM kb.embedding_providers AS p WHERE p.provider = (plan.model).provider;
    plan.min_similarity := coalesce(((plan.model).options ->> 'min_similarity')::float8, provider.min_similarity);
    plan.strong_similarity := coalesce(((plan.model).options ->> 'strong_similarity')::float8,
        provider.strong_similarity);
    plan.mode := p_request.mode_requested;
    IF plan.mode = 'auto' THEN
        plan.mode := CASE WHEN plan.model_ready THEN 'hybrid' ELSE 'lexical' END;
        IF NOT plan.model_ready THEN
            plan.notes := plan.notes || 'no vectors of an active model yet: lexical only'::text;
        ELSIF (plan.analysis ->> 'looks_exact')::boolean THEN
            plan.weight_dense := p_settings.exact_weight_dense;
            plan.weight_lexical := p_settings.exact_weight_lexical;
        END IF;
    ELSIF plan.mode IN ('dense', 'hybrid') AND NOT plan.model_ready THEN
        RAISE EXCEPTION 'kb_retrieve: mode % needs vectors of the active model, and there are none yet', plan.mode
            USING HINT = 'use mode auto or lexical, or run pgkb backfill';
    END IF;
    RETURN plan;
END;
$$;
COMMENT ON FUNCTION kb.plan_retrieval(kb.retrieval_request, kb.retrieval_settings) IS
'What a kb_retrieve call will do: query analysis and its stages, the mode (auto: hybrid when the active model has vectors; short exact-looking queries lean lexical), the active model, fusion weights and similarity thresholds.';
