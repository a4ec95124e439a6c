-- A kb_retrieve call's arguments checked and normalised (kb_pipeline.validated_request),
-- and the plan for it (kb_pipeline.plan_retrieval): query analysis, mode, model,
-- weights and evidence thresholds.

CREATE OR REPLACE FUNCTION kb_pipeline.validated_request(
    p_query text,
    p_k integer,
    p_namespace text,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_max_per_document integer,
    p_merge_adjacent boolean
)
RETURNS kb_pipeline.retrieval_request
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    query text;
    mode text;
    filters jsonb;
    context text[];
    notes text[] := '{}';
BEGIN
    -- blank by the one definition (kb.is_blank), whatever mix of spaces and invisible characters
    IF p_query IS NULL OR kb.is_blank(p_query) THEN
        RAISE EXCEPTION 'kb_retrieve: query is empty'
            USING HINT = 'pass the question as text: spaces and invisible characters alone are no query';
    END IF;
    IF p_k IS NULL OR p_k < 1 OR p_k > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: k must be between 1 and 1000 (got %)', coalesce(p_k::text, 'NULL')
            USING HINT = 'k is the number of passages returned';
    END IF;
    IF length(p_namespace) > kb_pipeline.max_namespace_chars() THEN
        RAISE EXCEPTION 'kb_retrieve: namespace must be at most % characters (got %)',
            kb_pipeline.max_namespace_chars(), length(p_namespace)
            USING HINT = 'pass the namespace of kb.documents, or NULL for every namespace you may read';
    END IF;
    IF p_namespace !~ kb_pipeline.namespace_pattern() THEN
        RAISE EXCEPTION 'kb_retrieve: namespace "%" is not a valid namespace name', p_namespace
            USING HINT = 'namespaces are letters, digits and _ . - (starting with a letter or digit); NULL for all';
    END IF;
    mode := lower(btrim(coalesce(left(p_mode, 64), 'auto')));
    IF NOT mode = ANY(kb_pipeline.retrieval_modes()) THEN
        RAISE EXCEPTION 'kb_retrieve: unknown mode "%"', left(p_mode, 64) || CASE WHEN length(p_mode) > 64 THEN '...' ELSE '' END
            USING HINT = 'modes: ' || array_to_string(kb_pipeline.retrieval_modes(), ', ');
    END IF;
    IF p_as_of IS NULL THEN
        RAISE EXCEPTION 'kb_retrieve: as_of must not be NULL'
            USING HINT = 'leave it out for now(), or pass the date the answer should hold for';
    END IF;
    IF p_max_per_document < 0 OR p_max_per_document > 1000 THEN
        RAISE EXCEPTION 'kb_retrieve: max_per_document must be between 0 (no cap) and 1000 (got %)', p_max_per_document
            USING HINT = 'the most chunks of one document among the k returned; NULL for the setting max_per_document';
    END IF;
    filters := kb_pipeline.check_filters(p_filters);
    IF cardinality(p_context) > kb_pipeline.max_context_turns() THEN
        RAISE EXCEPTION 'kb_retrieve: context has % turns; at most %', cardinality(p_context), kb_pipeline.max_context_turns()
            USING HINT = format('pass the last %s turns of the conversation (oldest first)', kb_pipeline.max_context_turns());
    END IF;
    IF array_ndims(p_context) > 1 THEN
        RAISE EXCEPTION 'kb_retrieve: context must be a one-dimensional array of turns (got % dimensions)',
            array_ndims(p_context)
            USING HINT = 'e.g. ARRAY[''first question'', ''second question'']';
    END IF;

    query := kb.strip_blank(p_query);
    IF length(query) > kb_pipeline.max_query_chars() THEN
        notes := notes || format('query truncated to its first %s of %s characters', kb_pipeline.max_query_chars(), length(query));
        query := left(query, kb_pipeline.max_query_chars());
    END IF;
    -- each turn is cut where the query is, before it reaches query analysis
    context := ARRAY(
        SELECT left(t.turn, kb_pipeline.max_query_chars()) FROM unnest(p_context) WITH ORDINALITY AS t (turn, n) ORDER BY t.n
    );
    notes := notes || ARRAY(
        SELECT format('context turn %s truncated to its first %s of %s characters', t.n, kb_pipeline.max_query_chars(),
            length(t.turn))
        FROM unnest(p_context) WITH ORDINALITY AS t (turn, n)
        WHERE length(t.turn) > kb_pipeline.max_query_chars()
        ORDER BY t.n
    );
    RETURN ROW(query, p_k, p_namespace, mode, filters, kb.filters_restrict(filters), p_as_of,
        CASE WHEN p_context IS NOT NULL THEN context END, notes, p_max_per_document, p_merge_adjacent,
        NULL::text[]);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.validated_request(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean) IS
'Checks kb_retrieve''s arguments before any work (each error names the argument, its hint the fix): a query not blank by kb.is_blank, k in 1..1000, a namespace that can exist, a known mode, as_of, filters of bounded size and depth with typed values, at most kb_pipeline.max_context_turns() turns, max_per_document in 0..1000 (0: no cap, as the setting) or NULL. Normalises them: query trimmed of blanks and cut to kb_pipeline.max_query_chars() (so is each turn, with a note), lower-case mode.';

CREATE OR REPLACE FUNCTION kb_pipeline.assembly_max_per_document(
    p_request kb_pipeline.retrieval_request, p_settings kb_pipeline.retrieval_settings
)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- 0 means no cap, as an argument and as the setting
    IF p_request.max_per_document IS NOT NULL THEN
        RETURN nullif(p_request.max_per_document, 0);
    END IF;
    -- the setting's range (0 to 1000) is checked where it is read (kb.setting)
    RETURN nullif(p_settings.max_per_document, 0);
END;
$$;
COMMENT ON FUNCTION kb_pipeline.assembly_max_per_document(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings) IS
'The per-document cap of a call: its max_per_document argument, else the setting max_per_document (0 in either: no cap); NULL for no cap. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.assembly_merge_adjacent(
    p_request kb_pipeline.retrieval_request, p_settings kb_pipeline.retrieval_settings
)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce(p_request.merge_adjacent, p_settings.merge_adjacent)
$$;
COMMENT ON FUNCTION kb_pipeline.assembly_merge_adjacent(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings) IS
'Whether a call merges adjacent chunks: its merge_adjacent argument, else the setting merge_adjacent. Pure.';

CREATE OR REPLACE FUNCTION kb_node.model_has_vectors(p_model text, p_namespaces text[])
RETURNS boolean
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- of documents the session's role may read (kb.may_read_document): a
    -- private document's vectors must not switch another role's mode
    IF p_namespaces IS NULL THEN
        RETURN EXISTS (
            SELECT 1 FROM kb.embeddings AS e
            INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
            INNER JOIN kb.documents AS d ON d.id = c.document_id
            WHERE e.model = p_model AND kb.may_read_document(d.reader_ids)
        );
    END IF;
    -- the namespaces' chunks first: another tenant's millions of vectors are not read
    RETURN EXISTS (
        SELECT 1 FROM kb.chunks AS c
        INNER JOIN kb.embeddings AS e ON e.chunk_id = c.id AND e.model = p_model
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE c.namespace = ANY(p_namespaces) AND kb.may_read_document(d.reader_ids)
    );
END;
$$;
COMMENT ON FUNCTION kb_node.model_has_vectors(text, text[]) IS
'Whether the model has vectors of chunks in the namespaces given (NULL: in any the caller may see), of documents the session''s role may read: the readiness that mode auto and a shard''s corpus statistics report.';

CREATE OR REPLACE FUNCTION kb_pipeline.plan_retrieval(
    p_request kb_pipeline.retrieval_request,
    p_settings kb_pipeline.retrieval_settings,
    p_model_ready boolean DEFAULT NULL,
    p_analysis jsonb DEFAULT NULL
)
RETURNS kb_pipeline.retrieval_plan
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    plan kb_pipeline.retrieval_plan;
    provider kb.embedding_providers;
BEGIN
    -- p_analysis: this request's analysis when a plan was made before (a coordinator plans
    -- twice: before and after the shards say whether they have vectors)
    plan.analysis := coalesce(p_analysis, kb.analyze_query(p_request.query, p_request.context));
    plan.stages := ARRAY(SELECT jsonb_array_elements_text(plan.analysis -> 'stages'));
    plan.identifiers := ARRAY(SELECT jsonb_array_elements_text(coalesce(plan.analysis -> 'identifiers', '[]')));
    -- the analysis's own notes (a follow-up cut to the query's bound)
    plan.notes := ARRAY(SELECT jsonb_array_elements_text(coalesce(plan.analysis -> 'notes', '[]')));
    plan.candidates := greatest(p_request.k * 5, p_settings.candidates_per_leg);
    plan.weight_dense := p_settings.weight_dense;
    plan.weight_lexical := p_settings.weight_lexical;
    SELECT m INTO plan.model FROM kb.models AS m WHERE m.active;
    -- ready when the model has vectors in any namespace the role may read (not
    -- only the one asked for: a namespace without documents answers with no
    -- rows, as under isolation off); p_model_ready: whether any database of
    -- a sharded corpus has them (its coordinator found out)
    -- (a statement of its own: a coordinator's caller may not run kb_node.model_has_vectors)
    plan.model_ready := (plan.model).name IS NOT NULL AND p_model_ready;
    IF (plan.model).name IS NOT NULL AND p_model_ready IS NULL THEN
        plan.model_ready := kb_node.model_has_vectors((plan.model).name,
            CASE WHEN p_request.scope IS NOT NULL THEN kb.allowed_namespaces(kb.session_role()) END);
    END IF;
    -- a model's options may override its provider's similarity thresholds
    SELECT p.* INTO provider FROM kb.embedding_providers AS p WHERE p.provider = (plan.model).provider;
    plan.min_similarity := coalesce(((plan.model).options ->> 'min_similarity')::float8, provider.min_similarity);
    plan.strong_similarity := coalesce(((plan.model).options ->> 'strong_similarity')::float8,
        provider.strong_similarity);
    plan.language_correction := p_settings.language_correction AND coalesce(provider.language_correction, false);
    plan.mode := p_request.mode_requested;
    IF plan.mode = 'auto' THEN
        plan.mode := CASE WHEN plan.model_ready THEN 'hybrid' ELSE 'lexical' END;
        IF NOT plan.model_ready THEN
            plan.notes := plan.notes || 'no vectors of an active model yet: lexical only'::text;
        END IF;
    ELSIF plan.mode IN ('dense', 'hybrid') AND NOT plan.model_ready THEN
        RAISE EXCEPTION 'kb_retrieve: mode % needs vectors of the active model, and there are none yet', plan.mode
            USING HINT = 'use mode auto or lexical, or run pgkb backfill';
    END IF;
    RETURN plan;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.plan_retrieval(kb_pipeline.retrieval_request, kb_pipeline.retrieval_settings, boolean, jsonb) IS
'What a kb_retrieve call will do: query analysis (its stages and each stage''s BM25 terms, one PL/Python call, or p_analysis when the request was analysed before), the mode (auto: hybrid when the active model has vectors the role may read, or, p_model_ready, on any database of a sharded corpus), the active model, base fusion weights and similarity thresholds (used when the language correction does not apply).';
CREATE OR REPLACE FUNCTION kb_pipeline.ms_since(p_start timestamptz)
RETURNS numeric
LANGUAGE sql
VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT round((extract(epoch FROM clock_timestamp() - p_start) * 1000)::numeric, 2) $$;
COMMENT ON FUNCTION kb_pipeline.ms_since(timestamptz) IS 'Milliseconds elapsed since a clock_timestamp(), for explain timings.';
