-- What a shard answers a coordinator (sql/shards/coordinator.sql; docs/SCALING.md,
-- "Shards"). Every pgkb database has these, so any of them can be a shard: a
-- namespace lives wholly on one shard, and a retrieval over several shards'
-- namespaces runs here in three parts, each with the statistics of the whole
-- sharded corpus that the coordinator summed or pooled:
--   1. kb.shard_corpus: this database's BM25 sizes and document frequencies;
--   2. kb.shard_stage_candidates: every stage's legs, ranked with the sums;
--   3. kb.shard_passages: the passages of the hits the coordinator fused.
-- kb.upsert_document is the write a coordinator routes by namespace.

CREATE OR REPLACE FUNCTION kb.shard_corpus(p_terms text[], p_model text)
RETURNS jsonb
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- a gateway, as kb_retrieve: the owner's rights over the caller's scope
    SELECT jsonb_build_object(
        'lexical', kb.lexical_corpus(p_terms, s.namespaces),
        'model_ready', kb.model_has_vectors(p_model, s.namespaces))
    FROM (SELECT kb.read_scope(NULL) AS namespaces) AS s
$$;
COMMENT ON FUNCTION kb.shard_corpus(text[], text) IS
'A shard''s part of a sharded corpus''s statistics: the BM25 sizes and df of the terms over every namespace the caller may see here (kb.lexical_corpus), and whether it holds vectors of the model.';

CREATE OR REPLACE FUNCTION kb.shard_stage_candidates(
    p_query text,
    p_k integer,
    p_mode text,
    p_filters jsonb,
    p_as_of timestamptz,
    p_context text[],
    p_corpus jsonb
)
RETURNS jsonb
LANGUAGE plpgsql
-- STABLE: one snapshot for all stages, as kb.retrieve_core
STABLE PARALLEL UNSAFE
-- a gateway, as kb_retrieve: the owner's rights over the caller's scope
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET jit = 'off'  -- noqa: PRS
AS $$
DECLARE
    request kb.retrieval_request := kb.validated_request(p_query, p_k, NULL, p_mode, p_filters, p_as_of, p_context,
        NULL, NULL);
    settings kb.retrieval_settings := kb.read_retrieval_settings();
    plan kb.retrieval_plan;
    stage kb.retrieval_stage;
    stages kb.retrieval_stage[] := '{}';
    identifiers jsonb;
BEGIN
    -- Every stage's legs, over all namespaces the caller may see here, ranked
    -- with the whole corpus's statistics (p_corpus, the request's corpus):
    -- each leg's best candidates here hold this shard's share of the best
    -- candidates of the whole corpus, which the coordinator merges. Every
    -- stage runs (which one is used depends on all shards' evidence), and the
    -- evidence computed here is the coordinator's to recompute. Each chunk
    -- named comes with what the coordinator's merge needs: its namespace (the
    -- shard it is on), its language (the dense evidence) and its document's
    -- dates (the freshness rank among all candidates).
    request.corpus := p_corpus;
    request.scope := kb.read_scope(NULL);
    plan := kb.plan_retrieval(request, settings);
    identifiers := coalesce((
        SELECT jsonb_agg(jsonb_build_object('chunk_id', i.chunk_id, 'matched', i.matched))
        FROM kb.identifier_candidates(plan.identifiers, request.as_of, request.scope, request.filters, plan.candidates) AS i
        WHERE cardinality(plan.identifiers) > 0 AND plan.mode <> 'dense'
    ), '[]');
    FOR stage_no IN 1 .. coalesce(cardinality(plan.stages), 0) LOOP
        stage := kb.run_stage(request, plan, settings, stage_no, plan.stages[stage_no],
            (stages[cardinality(stages)]).terms, false);
        stages := stages || stage;
    END LOOP;
    RETURN jsonb_build_object(
        'mode', plan.mode,
        'identifiers', identifiers,
        'stages', coalesce((
            SELECT jsonb_agg(jsonb_build_object('stage_no', s.stage_no, 'skipped', s.skipped, 'terms', s.terms,
                'lexical', coalesce(to_jsonb(s.lexical), '[]'), 'dense', coalesce(to_jsonb(s.dense), '[]'),
                'notes', to_jsonb(s.notes)) ORDER BY s.stage_no)
            FROM unnest(stages) AS s
        ), '[]'),
        'chunks', coalesce((
            SELECT jsonb_object_agg(c.id::text, jsonb_build_object('chunk_id', c.id, 'namespace', c.namespace,
                'language', c.language, 'document_id', c.document_id, 'effective_from', d.effective_from,
                'created_at', d.created_at))
            FROM kb.chunks AS c
            INNER JOIN kb.documents AS d ON c.document_id = d.id
            WHERE c.id IN (
                SELECT h.chunk_id FROM unnest(stages) AS s CROSS JOIN LATERAL unnest(s.lexical) AS h
                UNION
                SELECT h.chunk_id FROM unnest(stages) AS s CROSS JOIN LATERAL unnest(s.dense) AS h
                UNION
                SELECT (i.value ->> 'chunk_id')::bigint FROM jsonb_array_elements(identifiers) AS i
            )
        ), '{}'));
END;
$$;
COMMENT ON FUNCTION kb.shard_stage_candidates(text, integer, text, jsonb, timestamptz, text[], jsonb) IS
'A shard''s part of a sharded retrieval over all namespaces: every stage''s lexical and dense candidates and the identifier hits, ranked with the whole corpus''s statistics given in p_corpus (BM25 sums, language moments and query vector per stage, glossary expansion), with each chunk''s namespace, language and document dates (chunks, by chunk id); jsonb for the coordinator.';

CREATE OR REPLACE FUNCTION kb.shard_passages(
    p_hits jsonb,
    p_core_terms text,
    p_boost_identifier double precision,
    p_boost_title double precision,
    p_k integer,
    p_freshness_margin double precision,
    p_max_per_document integer
)
RETURNS SETOF kb.retrieval_row
LANGUAGE sql
STABLE PARALLEL SAFE
-- a gateway, as kb_retrieve: the owner's rights, and only hits of the caller's scope
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- p_hits: the coordinator's fused hits of every shard (kb.fused_hit fields
    -- with this database's chunk ids, plus namespace and freshness, the rank
    -- among all candidates' documents); those of this shard's namespaces are
    -- its own. kb.passages ranks them as a single node would, capping per
    -- document (a document lives on one shard); the coordinator merges the
    -- shards' top k.
    WITH mine AS MATERIALIZED (
        SELECT h.value AS hit
        FROM jsonb_array_elements(p_hits) AS h
        INNER JOIN kb.chunks AS c ON c.id = (h.value ->> 'chunk_id')::bigint AND c.namespace = h.value ->> 'namespace'
        CROSS JOIN (SELECT kb.read_scope(NULL) AS namespaces) AS s
        WHERE s.namespaces IS NULL OR c.namespace = ANY(s.namespaces)
    )
    SELECT p.*
    FROM kb.passages(
        ARRAY(SELECT jsonb_populate_record(NULL::kb.fused_hit, m.hit) FROM mine AS m),
        p_core_terms, p_boost_identifier, p_boost_title, p_k, p_freshness_margin, p_max_per_document, false,
        coalesce((SELECT jsonb_object_agg(m.hit ->> 'chunk_id', m.hit -> 'freshness') FROM mine AS m), '{}')
    ) AS p
$$;
COMMENT ON FUNCTION kb.shard_passages(jsonb, text, double precision, double precision, integer, double precision, integer) IS
'A shard''s part of a sharded retrieval: kb.passages over the coordinator''s fused hits that are this shard''s (by chunk id and namespace), with the freshness ranks computed over all shards'' candidates.';

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
