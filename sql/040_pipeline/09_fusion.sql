-- Fusion: how the legs' candidates become one ranking (kb_pipeline.fuse, pure,
-- one function per method): every hit weighed by its own evidence when both
-- legs are calibrated on the corpus, a hit in another language than the
-- question's not held back by the lexical leg.

CREATE OR REPLACE FUNCTION kb_pipeline.own_language_first_rank()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 3 $$;
COMMENT ON FUNCTION kb_pipeline.own_language_first_rank() IS
'The lowest dense rank the passage nearest to the question in its own language can take when the language correction applies (kb_pipeline.own_language_first_kept): the places a reader of the result looks at first.';

CREATE OR REPLACE FUNCTION kb_pipeline.own_language_first_kept(p_dense kb_pipeline.leg_hit[], p_language text)
RETURNS kb_pipeline.leg_hit[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    guard_rank integer := kb_pipeline.own_language_first_rank();
    nearest kb_pipeline.leg_hit;
    bar kb_pipeline.leg_hit;
BEGIN
    -- The language correction ranks passages by how far each stands above its
    -- own language group. With few vectors in a group, or a bilingual document
    -- pulling a group's moments, that estimate is noisy, and it can bury the
    -- passage that raw cosine ranks first among those written in the question's
    -- own language, the one an uncorrected search would have returned first.
    -- That passage is kept at dense rank guard_rank at worst: its score and
    -- evidence are raised to those of the hit at that rank, so fusion weighs it
    -- as that hit. Only ranking sees the raised values; the stage's evidence is
    -- judged before (kb_pipeline.stage_evidence), so abstention is unchanged.
    -- Hits carry their language only when the correction applied.
    IF coalesce(p_language, '') NOT IN ('zh', 'en') OR coalesce(cardinality(p_dense), 0) <= guard_rank THEN
        RETURN p_dense;
    END IF;
    SELECT h.* INTO nearest FROM unnest(p_dense) AS h
    WHERE h.language = p_language ORDER BY h.similarity DESC NULLS LAST, h.rank LIMIT 1;
    IF nearest.chunk_id IS NULL OR nearest.rank <= guard_rank THEN
        RETURN p_dense;
    END IF;
    SELECT h.* INTO bar FROM unnest(p_dense) AS h WHERE h.rank = guard_rank;
    nearest.score := greatest(nearest.score, bar.score);
    nearest.evidence := greatest(nearest.evidence, bar.evidence);
    -- it takes the place of the hit at guard_rank; that hit and those below
    -- it (down to its old place) move down one
    RETURN ARRAY(
        SELECT m.hit
        FROM (
            SELECT jsonb_populate_record(h, CASE
                WHEN h.chunk_id = nearest.chunk_id THEN jsonb_build_object('rank', guard_rank,
                    'score', nearest.score, 'evidence', nearest.evidence)
                WHEN h.rank >= guard_rank AND h.rank < nearest.rank THEN jsonb_build_object('rank', h.rank + 1)
                ELSE '{}' END) AS hit
            FROM unnest(p_dense) AS h
        ) AS m
        ORDER BY (m.hit).rank
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.own_language_first_kept(kb_pipeline.leg_hit[], text) IS
'The dense leg''s hits with the one raw cosine ranks first among those in the question''s language (zh or en) kept at rank kb_pipeline.own_language_first_rank() at worst: its score and evidence raised to those of the hit at that rank, the hits between moved down one. Unchanged when the hits carry no language (no correction), the question is mixed or that hit already ranks there. Pure; ranking only, after the stage''s evidence was judged.';

CREATE OR REPLACE FUNCTION kb_pipeline.weighs_hits_by_evidence(p_moments kb.language_moment[])
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Per-hit evidence lets fusion tell a same-language passage that shares a
    -- few names with a cross-lingual question from the other leg's convincing
    -- answer in the other language. A scope of one language has no such
    -- passage to tell apart, and there the weighting only squashes the dense
    -- leg's lower hits: on the whole SciFact corpus it cost hybrid nDCG@10
    -- (docs/EVALUATION.md, "Whole corpora").
    SELECT count(DISTINCT m.language) = 2
    FROM unnest(p_moments) AS m
    WHERE m.language IN ('zh', 'en')
$$;
COMMENT ON FUNCTION kb_pipeline.weighs_hits_by_evidence(kb.language_moment[]) IS
'Whether fusion weighs each hit by its own evidence (kb_pipeline.fuse): only when the dense leg is language-corrected over a scope that holds passages in both Chinese and English (language moments of both groups). Otherwise the legs are fused by their plain weighted scores. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.fused_linear(
    p_lexical_part double precision,
    p_dense_part double precision,
    p_other_language boolean,
    p_lexical_left_open double precision,
    p_weight_lexical double precision,
    p_weight_dense double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- A dense hit in another language than the question's is one the lexical
    -- leg could not read, beyond the names and numbers both languages share:
    -- its silence is no vote against it. So its lexical part is the larger of
    -- what the lexical leg found in it and its dense part scaled by what the
    -- lexical leg left open (1 minus the best evidence it found anywhere). A
    -- lexical leg that found the question convincingly answered in its own
    -- language keeps its say; one that found little leaves the ranking to the
    -- dense leg. Otherwise every passage in the question's language would
    -- start a leg ahead of an answer written in the other.
    SELECT p_weight_lexical * CASE WHEN p_other_language
            THEN greatest(p_lexical_part, p_dense_part * p_lexical_left_open) ELSE p_lexical_part END
        + p_weight_dense * p_dense_part
$$;
COMMENT ON FUNCTION kb_pipeline.fused_linear(double precision, double precision, boolean, double precision, double precision, double precision) IS
'The linear fusion of one hit: the weighted sum of its legs'' parts (kb_pipeline.fuse computes each part: the min-max normalised score times the hit''s evidence), a dense hit in another language than the question''s taking for the lexical part the larger of it and its dense part times what the lexical leg left open. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.fused_rrf(
    p_lexical_rank integer,
    p_dense_rank integer,
    p_weight_lexical double precision,
    p_weight_dense double precision,
    p_rrf_k double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT (coalesce(p_weight_lexical / (p_rrf_k + p_lexical_rank), 0)
            + coalesce(p_weight_dense / (p_rrf_k + p_dense_rank), 0))
        / ((p_weight_lexical + p_weight_dense) / (p_rrf_k + 1))
$$;
COMMENT ON FUNCTION kb_pipeline.fused_rrf(integer, integer, double precision, double precision, double precision) IS
'The reciprocal rank fusion of one hit: the sum over the legs of weight / (rrf_k + rank), scaled so that rank 1 in both legs is 1; a leg that did not rank the hit (rank NULL) gives 0. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.unknown_fusion_method(p_method text)
RETURNS double precision
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'kb_pipeline.fuse: unknown fusion method "%"', p_method
        USING HINT = 'SELECT choices FROM kb.settings_catalogue WHERE key = ''fusion''';
END;
$$;
COMMENT ON FUNCTION kb_pipeline.unknown_fusion_method(text) IS
'Raises the error of a fusion method that kb_pipeline.fuse does not know, with the catalogue''s choices as the hint. Never returns.';

CREATE OR REPLACE FUNCTION kb_pipeline.fuse(
    p_lexical kb_pipeline.leg_hit[],
    p_dense kb_pipeline.leg_hit[],
    p_identifier_chunks bigint[],
    p_method text,
    p_weight_lexical double precision,
    p_weight_dense double precision,
    p_rrf_k double precision
)
RETURNS SETOF kb_pipeline.fused_hit
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- Every chunk of either leg or of the identifier hits, once, scored by
    -- the method's function: a method is one function of one hit and one
    -- branch of the CASE below (the choices of the setting fusion).
    -- A leg's part of a linear fusion: its scores min-max normalised to
    -- [0, 1] over its own candidates (a leg with one distinct score gives 1),
    -- times the hit's own evidence (kb.leg_hit.evidence, 1 when not given:
    -- how much of the query a lexical hit covers, how far above its language
    -- a dense hit stands); a trigram hit of the lexical leg counts 0.5 / its
    -- rank instead. So a hit that only one leg ranks high on weak evidence
    -- does not outrank the other leg's convincing one. A hit without evidence
    -- keeps 5 % of its weight, so that the order inside a leg survives among
    -- the hits below the evidence thresholds.
    -- A hit whose score is not a finite number (NaN or infinity, e.g. the
    -- cosine of a vector with no norm) is no evidence: it gets 0 from its leg
    -- in every method, its score reads NULL and stays out of the leg's range,
    -- because NaN sorts above every number and would otherwise make every
    -- normalised score NaN. The fused score is never NaN (NaN weights give 0).
BEGIN
    RETURN QUERY
    WITH
    lexical AS (
        SELECT h.chunk_id, h.rank, h.trigram, CASE WHEN abs(h.score) < 'Infinity'::float8 THEN h.score END AS score,
            coalesce(h.evidence, 1) AS evidence
        FROM unnest(p_lexical) AS h
    ),
    dense AS (
        SELECT h.chunk_id, h.rank, CASE WHEN abs(h.score) < 'Infinity'::float8 THEN h.score END AS score,
            coalesce(h.evidence, 1) AS evidence, coalesce(h.other_language, false) AS other_language
        FROM unnest(p_dense) AS h
    ),
    identified AS (SELECT DISTINCT i.chunk_id FROM unnest(p_identifier_chunks) AS i (chunk_id)),
    lexical_range AS (
        SELECT min(l.score) AS lo, max(l.score) AS hi, coalesce(max(l.evidence), 0) AS evidence
        FROM lexical AS l WHERE NOT l.trigram
    ),
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
                WHEN 'linear' THEN kb_pipeline.fused_linear(part.lexical, part.dense, d.other_language,
                    1 - lr.evidence, p_weight_lexical, p_weight_dense)
                WHEN 'rrf' THEN kb_pipeline.fused_rrf(CASE WHEN l.score IS NOT NULL THEN l.rank END,
                    CASE WHEN d.score IS NOT NULL THEN d.rank END, p_weight_lexical, p_weight_dense, p_rrf_k)
                ELSE kb_pipeline.unknown_fusion_method(p_method)
            END AS fused_score
        FROM lexical AS l
        FULL JOIN dense AS d ON d.chunk_id = l.chunk_id
        FULL JOIN identified AS i ON i.chunk_id = coalesce(l.chunk_id, d.chunk_id)
        CROSS JOIN lexical_range AS lr
        CROSS JOIN dense_range AS dr
        -- each leg's part of a linear fusion, before the weights
        CROSS JOIN LATERAL (
            SELECT
                CASE
                    WHEN l.score IS NULL THEN 0
                    WHEN l.trigram THEN 0.5 * (1.0 / l.rank)
                    ELSE coalesce((l.score - lr.lo) / nullif(lr.hi - lr.lo, 0), 1) * (0.05 + 0.95 * l.evidence)
                END AS lexical,
                CASE
                    WHEN d.score IS NULL THEN 0
                    ELSE coalesce((d.score - dr.lo) / nullif(dr.hi - dr.lo, 0), 1) * (0.05 + 0.95 * d.evidence)
                END AS dense
        ) AS part
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
    FROM fused AS f;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.fuse(kb_pipeline.leg_hit[], kb_pipeline.leg_hit[], bigint[], text, double precision, double precision, double precision) IS
'Fuses the lexical and dense legs'' candidates by the method''s function of one hit (kb_pipeline.fused_linear over min-max normalised scores times each hit''s evidence, kb_pipeline.fused_rrf over ranks) and marks identifier hits; a NaN or infinite leg score counts as no evidence, and no fused score is NaN. An unknown method raises kb_pipeline.unknown_fusion_method. Pure: testable on hand-made hits.';
