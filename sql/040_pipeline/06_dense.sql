-- The dense leg: HNSW over the active model's vectors among the documents a
-- retrieval may see, each language group searched with its own corrected
-- vector when the language correction applies (kb.language_moments).

CREATE OR REPLACE FUNCTION kb_pipeline.noise_z(p_vectors bigint)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    -- about the largest of n standard normal scores: what the best of n
    -- passages that have nothing to do with the question reaches by chance,
    -- so that the dense thresholds mean the same in a corpus of 50 passages
    -- (2.8) and of a million (5.3). Called once per dense candidate: no SET
    -- clause, so that the planner inlines it (callers pin search_path)
    SELECT sqrt(2 * ln(greatest(p_vectors, 2)::float8))
$$;
COMMENT ON FUNCTION kb_pipeline.noise_z(bigint) IS
'sqrt(2 ln n): about the best z-score n unrelated passages reach by chance; the dense leg''s evidence thresholds are offsets from it. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb_node.dense_candidates(
    p_query_vector text, p_model text, p_dimensions integer,
    p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_limit integer,
    p_moments kb.language_moment[], p_ef_search integer DEFAULT NULL
)
RETURNS TABLE (
    chunk_id bigint, similarity double precision, score double precision, language text, noise_z double precision
)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'  -- noqa: PRS
SET hnsw.ef_search = '100'
AS $$
DECLARE
    moment kb.language_moment;
BEGIN
    -- The model's partial HNSW index is used because the query repeats its
    -- expression and predicate literally. The visibility condition runs inside
    -- the index scan, row by row in distance order, and iterative scans keep
    -- fetching until p_limit rows pass it. EXECUTE plans with the bound values,
    -- so the CASE over filters_restrict is decided before the scan.
    -- ef_search below the number of rows wanted makes the iterative scan start
    -- a second pass (about doubling the time); 1.5 x p_limit leaves room for
    -- the rows the visibility condition removes
    -- (p_ef_search: the call's setting; NULL: read it)
    PERFORM set_config('hnsw.ef_search', least(1000, greatest(
        coalesce(p_ef_search, (kb.setting('hnsw_ef_search') #>> '{}')::integer), p_limit * 3 / 2))::text, true);
    IF cardinality(p_moments) = 0 THEN
        -- no language correction: the raw cosine similarity is the score
        RETURN QUERY EXECUTE format(
            'SELECT h.chunk_id, h.similarity, h.similarity, NULL::text, NULL::float8
             FROM (
                 SELECT e.chunk_id, (1 - (e.embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 AS similarity
                 FROM kb.embeddings AS e
                 INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
                 CROSS JOIN LATERAL kb.visible_candidate(c.document_id, $2, $3, $4, $6) AS v
                 WHERE e.model = %2$L
                     AND ($3::text[] IS NULL OR c.namespace = ANY($3))
                 ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                 LIMIT $5
             ) AS h',
            p_dimensions, p_model
        ) USING p_query_vector, p_as_of, p_namespaces, p_filters, p_limit, kb.filters_restrict(p_filters);
        RETURN;
    END IF;
    -- One scan per language group, each of the model's partial HNSW index of
    -- that group (kb.ensure_hnsw_indexes; the predicate is literal so the
    -- planner matches it), with the vector the group is searched with (the
    -- query, or in a group of another language the query without its
    -- language's mean): the order inside a group is the order of that
    -- similarity, so each scan is the index's own. A hit's score is its
    -- similarity z-scored within its group; the caller merges the groups by
    -- score. A passage of the zh or en group is placed between the two groups'
    -- moments (for the group's vector) by its share of Chinese (a bilingual
    -- passage's vector carries some of both languages), when both groups have
    -- moments of their own.
    FOREACH moment IN ARRAY p_moments LOOP
        RETURN QUERY EXECUTE format(
            'SELECT h.chunk_id, h.similarity,
                 CASE WHEN $7 IS NOT NULL AND $9 IS NOT NULL AND h.han_share IS NOT NULL AND %3$L IN (''zh'', ''en'')
                     THEN (h.similarity - (h.han_share * $7 + (1 - h.han_share) * $9))
                         / (h.han_share * $8 + (1 - h.han_share) * $10)
                     ELSE (h.similarity - $11) / $12 END,
                 %3$L::text, kb_pipeline.noise_z($13)
             FROM (
                 SELECT e.chunk_id, c.han_share,
                     (1 - (e.embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 AS similarity
                 FROM kb.embeddings AS e
                 INNER JOIN kb.chunks AS c ON c.id = e.chunk_id
                 CROSS JOIN LATERAL kb.visible_candidate(c.document_id, $2, $3, $4, $6) AS v
                 WHERE e.model = %2$L AND e.language = %3$L
                     AND ($3::text[] IS NULL OR c.namespace = ANY($3))
                 ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                 LIMIT $5
             ) AS h',
            p_dimensions, p_model, moment.language
        ) USING coalesce(moment.query_vector, p_query_vector), p_as_of, p_namespaces, p_filters, p_limit,
            kb.filters_restrict(p_filters), moment.zh_offset, moment.zh_scale, moment.en_offset, moment.en_scale,
            moment."offset", moment.scale, moment.vectors;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION kb_node.dense_candidates(text, text, integer, timestamptz, text[], jsonb, integer, kb.language_moment[], integer) IS
'Dense leg: HNSW cosine search over the named model''s vectors with the visibility condition inside the scan (iterative scan); with language moments, one scan per language group with the group''s query vector, the similarity z-scored within its group as the score, and the group''s noise level (kb_pipeline.noise_z).';

CREATE OR REPLACE FUNCTION kb_pipeline.dense_margins(
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage
)
RETURNS TABLE (chunk_id bigint, rank integer, own boolean, z_margin double precision, cosine double precision)
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- z_margin: how far a dense hit stands above its language group's noise
    -- level (kb_pipeline.noise_z); without the language correction (a corpus
    -- too small for it) the raw cosine mapped onto the same scale through the
    -- provider's thresholds (min_similarity is min_dense_z, strong_similarity is
    -- strong_dense_z). cosine: the raw cosine in the question's own language, 0
    -- at the provider's min_similarity and 1 at its strong_similarity (NULL for
    -- a hit of another language: a corrected leg's hit of another language
    -- carries the cosine of the centred query). own: the hit is in the
    -- question's language (or either is neither zh nor en).
    WITH q AS (
        SELECT p_plan.analysis ->> 'language' AS language,
            nullif(p_plan.strong_similarity - p_plan.min_similarity, 0) AS cosine_span,
            cardinality(p_best.language_moments) > 0 AS corrected
    )
    SELECT h.chunk_id, h.rank, h.own,
        CASE WHEN h.corrected THEN h.score - kb_pipeline.noise_z(m.vectors)
            ELSE p_settings.min_dense_z + (h.similarity - p_plan.min_similarity) / h.cosine_span
                * (p_settings.strong_dense_z - p_settings.min_dense_z) END,
        CASE WHEN NOT h.corrected OR h.own THEN (h.similarity - p_plan.min_similarity) / h.cosine_span END
    FROM (
        SELECT d.chunk_id, d.rank, d.score, d.similarity, d.language, q.corrected, q.cosine_span,
            NOT (q.language IN ('zh', 'en') AND d.language IN ('zh', 'en') AND d.language <> q.language) AS own
        FROM q CROSS JOIN unnest(p_best.dense) AS d
    ) AS h
    LEFT JOIN unnest(p_best.language_moments) AS m ON m.language = h.language
$$;
COMMENT ON FUNCTION kb_pipeline.dense_margins(
    kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings, kb_pipeline.retrieval_stage
) IS
'Each dense hit of a stage on the scales the decision and the passage relevance read: its z above its language group''s noise level (or its cosine mapped onto that scale when the leg is not corrected), its cosine between the provider''s thresholds when it is in the question''s language, and whether it is. Pure.';
