-- Fusion and answerability: how the legs' candidates become one ranking
-- (kb.fuse, pure), how much evidence a leg's best hit gives (kb.calibrate),
-- and the passages returned (kb.passages: boosts, duplicates, top k, rows).

CREATE OR REPLACE FUNCTION kb.calibrate(p_value double precision, p_low double precision, p_high double precision)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- NaN (PostgreSQL sorts it above every number) and infinities are no evidence
    SELECT CASE WHEN p_value IS NULL OR p_value IN ('NaN', 'Infinity', '-Infinity') THEN 0
        ELSE least(greatest((p_value - p_low) / nullif(p_high - p_low, 0), 0), 1) END
$$;
COMMENT ON FUNCTION kb.calibrate(double precision, double precision, double precision) IS
'Maps a leg''s top score to evidence in [0, 1]: 0 at or below the "no evidence" level, 1 at or above the "strong" level.';

CREATE OR REPLACE FUNCTION kb.fuse(
    p_lexical kb.leg_hit[],
    p_dense kb.leg_hit[],
    p_identifier_chunks bigint[],
    p_method text,
    p_weight_lexical double precision,
    p_weight_dense double precision,
    p_rrf_k double precision
)
RETURNS SETOF kb.fused_hit
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Every chunk of either leg or of the identifier hits, once.
    -- linear: each leg's scores min-max normalised to [0, 1] over its own
    --   candidates (a leg with one distinct score gives 1), times the hit's
    --   own evidence (kb.leg_hit.evidence, 1 when not given, as kb.run_stage
    --   does when the dense leg is not language-corrected: how much of the
    --   query a lexical hit covers, how far above its language a dense hit
    --   stands), weighted; a trigram hit of the lexical leg counts 0.5 / its
    --   rank instead. So a hit that only one leg ranks high on weak evidence
    --   (a same-language passage sharing a few names with a cross-lingual
    --   question) does not outrank the other leg's convincing one. A hit
    --   without evidence keeps 5 % of its weight, so that the order inside a
    --   leg survives among the hits below the evidence thresholds.
    -- rrf: sum of weight / (rrf_k + rank), scaled so that rank 1 in both legs is 1.
    -- A chunk missing from a leg gets 0 from it.
    -- A hit whose score is not a finite number (NaN or infinity, e.g. the
    -- cosine of a vector with no norm) is no evidence: it gets 0 from its leg
    -- in both methods, its score reads NULL and stays out of the leg's range,
    -- because NaN sorts above every number and would otherwise make every
    -- normalised score NaN. The fused score is never NaN (NaN weights give 0).
    WITH
    lexical AS (
        SELECT h.chunk_id, h.rank, h.trigram, CASE WHEN abs(h.score) < 'Infinity'::float8 THEN h.score END AS score,
            coalesce(h.evidence, 1) AS evidence
        FROM unnest(p_lexical) AS h
    ),
    dense AS (
        SELECT h.chunk_id, h.rank, CASE WHEN abs(h.score) < 'Infinity'::float8 THEN h.score END AS score,
            coalesce(h.evidence, 1) AS evidence
        FROM unnest(p_dense) AS h
    ),
    identified AS (SELECT DISTINCT i.chunk_id FROM unnest(p_identifier_chunks) AS i (chunk_id)),
    lexical_range AS (SELECT min(l.score) AS lo, max(l.score) AS hi FROM lexical AS l WHERE NOT l.trigram),
    dense_range AS (SELECT min(d.score) AS lo, max(d.score) AS hi FROM dense AS d),
    fused AS (
        SELECT
            coalesce(l.chunk_id, d.chunk_id, i.chunk_id) AS chunk_id,
            l.rank AS lexical_rank,
            CASE WHEN l.trigram THEN NULL ELSE l.score END AS lexical_score,
            l.trigram,
            d.rank AS dense_rank,
            d.score AS dense_score,
            i.chunk_id IS NOT NULL AS identifier_hit,
            CASE p_method
                WHEN 'rrf' THEN
                    (
                        CASE WHEN l.score IS NULL THEN 0 ELSE p_weight_lexical / (p_rrf_k + l.rank) END
                        + CASE WHEN d.score IS NULL THEN 0 ELSE p_weight_dense / (p_rrf_k + d.rank) END
                    )
                    / ((p_weight_lexical + p_weight_dense) / (p_rrf_k + 1))
                ELSE
                    p_weight_lexical * CASE
                        WHEN l.score IS NULL THEN 0
                        WHEN l.trigram THEN 0.5 * (1.0 / l.rank)
                        ELSE coalesce((l.score - lr.lo) / nullif(lr.hi - lr.lo, 0), 1) * (0.05 + 0.95 * l.evidence)
                    END
                    + p_weight_dense * CASE
                        WHEN d.score IS NULL THEN 0
                        ELSE coalesce((d.score - dr.lo) / nullif(dr.hi - dr.lo, 0), 1) * (0.05 + 0.95 * d.evidence)
                    END
            END AS fused_score
        FROM lexical AS l
        FULL JOIN dense AS d ON d.chunk_id = l.chunk_id
        FULL JOIN identified AS i ON i.chunk_id = coalesce(l.chunk_id, d.chunk_id)
        CROSS JOIN lexical_range AS lr
        CROSS JOIN dense_range AS dr
    )
    SELECT
        f.chunk_id,
        f.lexical_rank,
        f.lexical_score,
        f.trigram,
        f.dense_rank,
        f.dense_score,
        f.identifier_hit,
        CASE WHEN f.fused_score = 'NaN'::float8 THEN 0 ELSE coalesce(f.fused_score, 0) END
    FROM fused AS f
$$;
COMMENT ON FUNCTION kb.fuse(kb.leg_hit[], kb.leg_hit[], bigint[], text, double precision, double precision, double precision) IS
'Fuses the lexical and dense legs'' candidates (linear: min-max normalised scores times each hit''s evidence, weighted; rrf: reciprocal ranks, weighted) and marks identifier hits; a NaN or infinite leg score counts as no evidence, and no fused score is NaN. Pure: testable on hand-made hits.';

CREATE OR REPLACE FUNCTION kb.passages(
    p_fused kb.fused_hit[],
    p_core_terms text,
    p_boost_identifier double precision,
    p_boost_title double precision,
    p_k integer,
    p_freshness_margin double precision DEFAULT 0
)
RETURNS SETOF kb.retrieval_row
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Boosts: a chunk holding an identifier of the query verbatim, and a chunk
    -- whose document title contains the query's core terms (two characters or
    -- more). Freshness: a small preference for the newer of near-equal
    -- passages, a share of the fused score up to p_freshness_margin by the
    -- rank of the document's effective date (then creation) among the
    -- candidates' documents, so that
    -- of two current versions of a policy that answer alike the newer comes
    -- first, while a clearly better older passage keeps its place. Chunks of
    -- identical text (content hash) count once, at their best. Ties break by
    -- chunk id. snippet is left NULL (kb.with_snippets fills it).
    WITH
    boosted AS (
        SELECT
            f.*,
            c.content_hash,
            f.fused_score
            + CASE WHEN f.identifier_hit THEN p_boost_identifier ELSE 0 END
            + CASE WHEN length(p_core_terms) >= 2 AND d.title ILIKE '%' || kb.escape_like(p_core_terms) || '%'
                THEN p_boost_title ELSE 0 END
            + f.fused_score * p_freshness_margin * CASE WHEN count(*) OVER () > 1
                THEN percent_rank() OVER (ORDER BY d.effective_from NULLS FIRST, d.created_at) ELSE 0 END
            AS final_score
        FROM unnest(p_fused) AS f
        INNER JOIN kb.chunks AS c ON c.id = f.chunk_id
        INNER JOIN kb.documents AS d ON d.id = c.document_id
    ),
    deduplicated AS (
        SELECT DISTINCT ON (b.content_hash) b.*
        FROM boosted AS b
        ORDER BY b.content_hash, b.final_score DESC, b.chunk_id
    ),
    top AS (
        SELECT x.*, row_number() OVER (ORDER BY x.final_score DESC, x.chunk_id)::integer AS rank
        FROM deduplicated AS x
        ORDER BY x.final_score DESC, x.chunk_id
        LIMIT p_k
    )
    SELECT ROW(
        top.rank,
        top.chunk_id,
        c.document_id,
        d.namespace,
        d.source,
        d.title,
        array_to_string(c.section_path, ' > '),
        c.content,
        NULL,
        round(top.final_score::numeric, 6)::float8,
        top.dense_rank,
        top.lexical_rank,
        round(top.dense_score::numeric, 6)::float8,
        round(top.lexical_score::numeric, 6)::float8,
        CASE
            WHEN top.identifier_hit THEN 'identifier'
            WHEN top.trigram AND top.dense_rank IS NOT NULL THEN 'trigram+dense'
            WHEN top.trigram THEN 'trigram'
            WHEN top.lexical_rank IS NOT NULL AND top.dense_rank IS NOT NULL THEN 'hybrid'
            WHEN top.lexical_rank IS NOT NULL THEN 'lexical'
            ELSE 'dense' END,
        d.doc_type,
        d.status,
        d.version,
        d.effective_from,
        d.effective_to
    )::kb.retrieval_row
    FROM top
    INNER JOIN kb.chunks AS c ON c.id = top.chunk_id
    INNER JOIN kb.documents AS d ON d.id = c.document_id
    ORDER BY top.rank
$$;
COMMENT ON FUNCTION kb.passages(kb.fused_hit[], text, double precision, double precision, integer, double precision) IS
'The top k passages of fused hits as kb.retrieval_row: identifier and title boosts, a freshness preference among near-equals, one chunk per distinct text, ranks from 1, match type.';

CREATE OR REPLACE FUNCTION kb.with_snippets(p_rows kb.retrieval_row[], p_query text)
RETURNS kb.retrieval_row[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- one PL/Python call for all rows (MATERIALIZED: evaluated once, not once per row)
    WITH snippets AS MATERIALIZED (
        SELECT kb.snippets(ARRAY(SELECT (p_rows[o]).content FROM generate_subscripts(p_rows, 1) AS o ORDER BY o),
            p_query, 200) AS texts
    )
    SELECT coalesce(array_agg(
        jsonb_populate_record(p_rows[o], jsonb_build_object('snippet', s.texts[o])) ORDER BY o
    ), '{}')
    FROM generate_subscripts(p_rows, 1) AS o, snippets AS s
$$;
COMMENT ON FUNCTION kb.with_snippets(kb.retrieval_row[], text) IS
'The rows with their query-aware snippets (200 characters), computed in one call.';
