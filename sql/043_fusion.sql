-- Fusion and ranking: how the legs' candidates become one ranking
-- (kb_pipeline.fuse, pure), how much evidence a leg's best hit gives
-- (kb_pipeline.calibrate), the top k (kb_pipeline.rank, pure: boosts,
-- freshness, duplicates, the per-document cap) and the passages returned
-- (kb_pipeline.passage_rows, kb_pipeline.merged_passages, snippets).
--
-- The functions a retrieval calls once per call are plpgsql, here and in
-- 042/044: PL/pgSQL keeps a statement's plan for the session, while a SQL
-- function that is not inlined (a SET clause forbids it) is planned on every
-- call (the ranking step: 2.7 ms as SQL, 0.3 ms as plpgsql, at 10k chunks).

CREATE OR REPLACE FUNCTION kb_pipeline.calibrate(p_value double precision, p_low double precision, p_high double precision)
RETURNS double precision
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    -- NaN (PostgreSQL sorts it above every number) and infinities are no
    -- evidence. Called once per candidate of each leg: no SET clause, so that
    -- the planner inlines it into its callers (whose search_path is pinned)
    SELECT CASE WHEN p_value IS NULL OR p_value IN ('NaN', 'Infinity', '-Infinity') THEN 0
        ELSE least(greatest((p_value - p_low) / nullif(p_high - p_low, 0), 0), 1) END
$$;
COMMENT ON FUNCTION kb_pipeline.calibrate(double precision, double precision, double precision) IS
'Maps a leg''s top score to evidence in [0, 1]: 0 at or below the "no evidence" level, 1 at or above the "strong" level. Inlined into its callers.';

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
        SELECT ROW(m.chunk_id, m.rank, m.score, m.coverage, m.trigram, m.similarity, m.evidence,
            m.other_language, m.language, m.weighted_coverage)::kb_pipeline.leg_hit
        FROM (
            SELECT h.chunk_id,
                CASE WHEN h.chunk_id = nearest.chunk_id THEN guard_rank
                    WHEN h.rank >= guard_rank AND h.rank < nearest.rank THEN h.rank + 1
                    ELSE h.rank END AS rank,
                CASE WHEN h.chunk_id = nearest.chunk_id THEN nearest.score ELSE h.score END AS score,
                h.coverage, h.trigram, h.similarity,
                CASE WHEN h.chunk_id = nearest.chunk_id THEN nearest.evidence ELSE h.evidence END AS evidence,
                h.other_language, h.language, h.weighted_coverage
            FROM unnest(p_dense) AS h
        ) AS m
        ORDER BY m.rank
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
    -- Every chunk of either leg or of the identifier hits, once.
    -- linear: each leg's scores min-max normalised to [0, 1] over its own
    --   candidates (a leg with one distinct score gives 1), times the hit's
    --   own evidence (kb.leg_hit.evidence, 1 when not given, as kb_pipeline.run_stage
    --   does when the dense leg is not language-corrected: how much of the
    --   query a lexical hit covers, how far above its language a dense hit
    --   stands), weighted; a trigram hit of the lexical leg counts 0.5 / its
    --   rank instead. So a hit that only one leg ranks high on weak evidence
    --   (a same-language passage sharing a few names with a cross-lingual
    --   question) does not outrank the other leg's convincing one. A hit
    --   without evidence keeps 5 % of its weight, so that the order inside a
    --   leg survives among the hits below the evidence thresholds.
    --   A dense hit in another language than the question's
    --   (kb.leg_hit.other_language) is one the lexical leg could not read,
    --   beyond the names and numbers both languages share: its silence is no
    --   vote against it. So its lexical part is the larger of what the lexical
    --   leg found in it and its dense part, the latter scaled by what the
    --   lexical leg left open: 1 minus the best evidence the lexical leg found
    --   anywhere. A lexical leg that found the question convincingly answered
    --   in its own language keeps its say; one that found little leaves the
    --   ranking to the dense leg. Otherwise every passage in the question's
    --   language would start a leg ahead of an answer written in the other.
    -- rrf: sum of weight / (rrf_k + rank), scaled so that rank 1 in both legs is 1.
    -- A chunk missing from a leg gets 0 from it.
    -- A hit whose score is not a finite number (NaN or infinity, e.g. the
    -- cosine of a vector with no norm) is no evidence: it gets 0 from its leg
    -- in both methods, its score reads NULL and stays out of the leg's range,
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
                WHEN 'rrf' THEN
                    (
                        CASE WHEN l.score IS NULL THEN 0 ELSE p_weight_lexical / (p_rrf_k + l.rank) END
                        + CASE WHEN d.score IS NULL THEN 0 ELSE p_weight_dense / (p_rrf_k + d.rank) END
                    )
                    / ((p_weight_lexical + p_weight_dense) / (p_rrf_k + 1))
                ELSE
                    p_weight_lexical * CASE WHEN d.other_language
                        THEN greatest(part.lexical, part.dense * (1 - lr.evidence)) ELSE part.lexical END
                    + p_weight_dense * part.dense
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
'Fuses the lexical and dense legs'' candidates (linear: min-max normalised scores times each hit''s evidence, weighted, a dense hit in another language than the question''s taking for the lexical leg, which could not read it, the larger of its lexical part and its dense part times what the lexical leg left open; rrf: reciprocal ranks, weighted) and marks identifier hits; a NaN or infinite leg score counts as no evidence, and no fused score is NaN. Pure: testable on hand-made hits.';

CREATE OR REPLACE FUNCTION kb_pipeline.passage_provenance(d kb.documents, c kb.chunks)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- every key always present (NULL where it does not apply: no file, no pages)
    SELECT jsonb_build_object(
        'file_name', d.file_name,
        'content_type', d.content_type,
        'byte_size', d.byte_size,
        'file_sha256', d.file_sha256,
        'parser', d.parser,
        'parser_version', d.parser_version,
        'parsed_at', d.parsed_at,
        'chunker_version', d.chunker_version,
        'indexed_at', d.indexed_at,
        'heading_path', to_jsonb(c.section_path),
        'page_start', c.page_start,
        'page_end', c.page_end,
        'char_start', c.char_start,
        'char_end', c.char_end,
        'content_hash', c.content_hash,
        'ingested_at', c.created_at,
        'chunks', jsonb_build_array(jsonb_build_object(
            'chunk_id', c.id, 'ordinal', c.ordinal, 'content_hash', c.content_hash,
            'heading_path', to_jsonb(c.section_path), 'page_start', c.page_start, 'page_end', c.page_end,
            'char_start', c.char_start, 'char_end', c.char_end))
    )
$$;
COMMENT ON FUNCTION kb_pipeline.passage_provenance(kb.documents, kb.chunks) IS
'The provenance of one chunk as a passage carries it (docs/RETRIEVAL.md): the document''s file, parser and chunker versions and when it was indexed, the chunk''s heading path, pages, offsets, content hash and ingest time, and the list of its chunks (one here; kb_pipeline.merged_passages joins several).';

CREATE OR REPLACE FUNCTION kb_pipeline.candidate_facts(p_chunk_ids bigint[])
RETURNS kb_pipeline.candidate[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- one read of the chunks and their documents for every candidate of a call
    RETURN ARRAY(
        SELECT ROW(c.id, c.document_id, c.namespace, c.content_hash, d.title, d.effective_from,
            d.created_at)::kb_pipeline.candidate
        FROM kb.chunks AS c
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE c.id = ANY(p_chunk_ids)
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.candidate_facts(bigint[]) IS
'What ranking needs to know of the chunks besides their scores (kb_pipeline.candidate: document, namespace, content hash, title, dates), in one read. Reads the chunks given: the doors'' candidates only.';

CREATE OR REPLACE FUNCTION kb_pipeline.rank(
    p_fused kb_pipeline.fused_hit[],
    p_facts kb_pipeline.candidate[],
    p_core_terms text,
    p_settings kb_pipeline.retrieval_settings,
    p_k integer,
    p_max_per_document integer
)
RETURNS SETOF kb_pipeline.ranked_hit
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- Boosts: a chunk holding an identifier of the query verbatim, and a chunk
    -- whose document title contains the query's core terms (two characters or
    -- more). Freshness: a small preference for the newer of near-equal
    -- passages, a share of the fused score up to the setting freshness_margin
    -- by the rank of the document's effective date (then creation) among the
    -- candidates' documents, so that of two current versions of a policy that
    -- answer alike the newer comes first, while a clearly better older
    -- passage keeps its place. Chunks of identical text (content hash) count
    -- once, at their best. The cap: a document's chunks after its
    -- p_max_per_document best go after every other candidate, so the next
    -- best chunks of other documents take their places, and they fill the k
    -- places only when too few other candidates remain (a namespace of one
    -- document still gives k passages). A document's best chunk is never
    -- moved, so the order of the documents is that of the uncapped ranking.
    -- Returned: the top k (rank 1..k), then the chunks the cap moved out of
    -- the top k (rank NULL), in their uncapped order. A hit without facts
    -- (none given for it) is left out. Ties break by chunk id.
DECLARE
    -- depends on the query only: built once, not per candidate (NULL: no title boost)
    title_pattern text := CASE WHEN length(p_core_terms) >= 2 THEN '%' || kb.escape_like(p_core_terms) || '%' END;
BEGIN
    RETURN QUERY
    WITH
    boosted AS (
        SELECT
            f.*,
            c.document_id,
            c.namespace,
            c.content_hash,
            f.fused_score
            + CASE WHEN f.identifier_hit THEN p_settings.boost_identifier ELSE 0 END
            + CASE WHEN c.title ILIKE title_pattern THEN p_settings.boost_title ELSE 0 END
            + f.fused_score * p_settings.freshness_margin * CASE WHEN count(*) OVER () > 1
                THEN percent_rank() OVER (ORDER BY c.effective_from NULLS FIRST, c.created_at) ELSE 0 END
            AS final_score
        FROM unnest(p_fused) AS f
        INNER JOIN unnest(p_facts) AS c ON c.chunk_id = f.chunk_id
    ),
    deduplicated AS (
        SELECT DISTINCT ON (b.content_hash) b.*
        FROM boosted AS b
        ORDER BY b.content_hash, b.final_score DESC, b.chunk_id
    ),
    ranked AS (
        SELECT
            x.*,
            row_number() OVER (ORDER BY x.over_cap, x.final_score DESC, x.chunk_id) AS capped_rank,
            row_number() OVER (ORDER BY x.final_score DESC, x.chunk_id) AS uncapped_rank
        FROM (
            SELECT y.*, coalesce(row_number() OVER (PARTITION BY y.document_id
                ORDER BY y.final_score DESC, y.chunk_id) > p_max_per_document, false) AS over_cap
            FROM deduplicated AS y
        ) AS x
    )
    SELECT r.chunk_id, r.document_id, r.namespace, r.lexical_rank, r.lexical_score, r.trigram, r.dense_rank,
        r.dense_score, r.identifier_hit, r.final_score,
        CASE WHEN r.capped_rank <= p_k THEN r.capped_rank::integer END, r.uncapped_rank::integer
    FROM ranked AS r
    WHERE r.capped_rank <= p_k OR r.uncapped_rank <= p_k
    ORDER BY r.capped_rank <= p_k DESC, r.capped_rank, r.uncapped_rank;
END;
$$;
COMMENT ON FUNCTION kb_pipeline.rank(
    kb_pipeline.fused_hit[], kb_pipeline.candidate[], text, kb_pipeline.retrieval_settings, integer, integer
) IS
'The top k of fused hits (kb_pipeline.ranked_hit): identifier and title boosts, a freshness preference among near-equals, one chunk per distinct text, a document''s chunks after its p_max_per_document best only where no other candidate is left (NULL: no cap), ranks from 1, then the chunks the cap moved out of the top k (rank NULL). Pure: the facts of every candidate are given (kb_pipeline.candidate_facts, or a sharded corpus''s shards).';

CREATE OR REPLACE FUNCTION kb_pipeline.passage_rows(p_ranked kb_pipeline.ranked_hit[])
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- the ranked hits of this database (rank NOT NULL) as rows, in rank
    -- order; snippet, answerability and evidence are set later
    -- (kb_pipeline.with_snippets, kb_pipeline.with_answer)
    RETURN ARRAY(
        SELECT ROW(
            h.rank, h.chunk_id, c.document_id, d.namespace, d.source, d.title,
            array_to_string(c.section_path, ' > '), c.content, NULL,
            round(h.final_score::numeric, 6)::float8, h.dense_rank, h.lexical_rank,
            round(h.dense_score::numeric, 6)::float8, round(h.lexical_score::numeric, 6)::float8,
            CASE
                WHEN h.identifier_hit THEN 'identifier'
                WHEN h.trigram AND h.dense_rank IS NOT NULL THEN 'trigram+dense'
                WHEN h.trigram THEN 'trigram'
                WHEN h.lexical_rank IS NOT NULL AND h.dense_rank IS NOT NULL THEN 'hybrid'
                WHEN h.lexical_rank IS NOT NULL THEN 'lexical'
                ELSE 'dense' END,
            d.doc_type, d.status, d.version, d.effective_from, d.effective_to,
            kb_pipeline.passage_provenance(d, c), NULL, NULL
        )::kb.retrieval_row
        FROM unnest(p_ranked) AS h
        INNER JOIN kb.chunks AS c ON c.id = h.chunk_id
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE h.rank IS NOT NULL
        ORDER BY h.rank
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.passage_rows(kb_pipeline.ranked_hit[]) IS
'The ranked hits (rank NOT NULL) of this database as kb.retrieval_row, in rank order: the passage, its document, scores per leg, match type, provenance (the document''s file, parser and chunker versions, the chunk''s heading path, pages, offsets, content hash, ingest time; docs/RETRIEVAL.md). Snippet, answerability and evidence are set later.';

CREATE OR REPLACE FUNCTION kb_pipeline.merged_passages(p_rows kb.retrieval_row[])
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
    -- Chunks of one document with consecutive ordinals (n, n + 1, ...) among
    -- the rows form one passage. Its text is the document's own text from the
    -- first chunk's start to the last one's end (line ends as the chunker
    -- reads them), so the overlap of consecutive pieces appears once and a
    -- heading between them is kept; should the stored offsets not point at
    -- the first chunk's text, the chunks' texts are joined instead. The
    -- passage takes the place, rank and scores of its best chunk (and its
    -- chunk_id), the section path of its first; its provenance spans its
    -- chunks (pages, offsets, the latest ingested_at) and lists them in
    -- document order. Ranks are renumbered from 1. Reads only the documents
    -- and chunks of the rows (the gateways' rows: readers may not call it).
BEGIN
    RETURN (
    WITH
    given AS (
        SELECT r.*, r AS row_value, c.ordinal, c.char_start, c.char_end
        FROM unnest(p_rows) AS r
        INNER JOIN kb.chunks AS c ON c.id = r.chunk_id
    ),
    islands AS (
        SELECT g.*, g.ordinal - row_number() OVER (PARTITION BY g.document_id ORDER BY g.ordinal) AS island
        FROM given AS g
    ),
    grouped AS (
        SELECT
            i.document_id,
            i.island,
            min(i.rank) AS best_rank,
            count(*) AS members,
            min(i.char_start) AS span_start,
            max(i.char_end) AS span_end,
            (array_agg(i.content ORDER BY i.ordinal))[1] AS first_content,
            string_agg(i.content, E'\n\n' ORDER BY i.ordinal) AS joined_content,
            (array_agg(i.section_path ORDER BY i.ordinal))[1] AS first_section_path,
            (array_agg(i.provenance -> 'heading_path' ORDER BY i.ordinal))[1] AS first_heading_path,
            jsonb_agg(i.provenance -> 'chunks' -> 0 ORDER BY i.ordinal) AS chunks,
            min((i.provenance ->> 'page_start')::integer) AS page_start,
            max((i.provenance ->> 'page_end')::integer) AS page_end,
            max((i.provenance ->> 'ingested_at')::timestamptz) AS ingested_at
        FROM islands AS i
        GROUP BY i.document_id, i.island
    ),
    spans AS (
        SELECT g.*, regexp_replace(substr(d.body, g.span_start + 1, g.span_end - g.span_start), E'\r\n?', E'\n', 'g')
            AS span_text
        FROM grouped AS g
        INNER JOIN kb.documents AS d ON d.id = g.document_id
        WHERE g.members > 1
    ),
    merged AS (
        SELECT
            b.*,
            g.members,
            CASE WHEN g.members = 1 THEN b.content
                WHEN starts_with(s.span_text, left(g.first_content, 64)) AND NOT kb.is_blank(s.span_text)
                    THEN s.span_text
                ELSE g.joined_content END AS merged_content,
            g.first_section_path,
            CASE WHEN g.members = 1 THEN b.provenance ELSE b.provenance || jsonb_build_object(
                'heading_path', g.first_heading_path,
                'page_start', g.page_start,
                'page_end', g.page_end,
                'char_start', g.span_start,
                'char_end', g.span_end,
                'ingested_at', g.ingested_at,
                'chunks', g.chunks) END AS merged_provenance
        FROM grouped AS g
        INNER JOIN islands AS b ON b.document_id = g.document_id AND b.island = g.island AND b.rank = g.best_rank
        LEFT JOIN spans AS s ON s.document_id = g.document_id AND s.island = g.island
    )
    SELECT coalesce(array_agg(jsonb_populate_record(m.row_value, jsonb_build_object(
        'rank', m.new_rank, 'content', m.merged_content, 'section_path', m.first_section_path,
        'provenance', m.merged_provenance)) ORDER BY m.new_rank), '{}')
    FROM (
        SELECT
            x.row_value,
            row_number() OVER (ORDER BY x.rank) AS new_rank,
            x.merged_content,
            x.first_section_path,
            x.merged_provenance
        FROM merged AS x
    ) AS m
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.merged_passages(kb.retrieval_row[]) IS
'The rows with the chunks of one document that follow each other joined into one passage each: the document''s text from the first to the last (their overlap once), at the place and with the scores of its best chunk, the section path of its first, provenance over all of them (provenance.chunks in document order); ranks renumbered.';

CREATE OR REPLACE FUNCTION kb_pipeline.rows_with(p_rows kb.retrieval_row[], p_fields jsonb[])
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN (
        SELECT coalesce(array_agg(jsonb_populate_record(p_rows[o], coalesce(p_fields[o], '{}')) ORDER BY o), '{}')
        FROM generate_subscripts(p_rows, 1) AS o
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.rows_with(kb.retrieval_row[], jsonb[]) IS
'The rows, each with the fields of the object at its place in p_fields set (a row without one keeps its own): how snippets and the answer reach the rows. Pure.';

CREATE OR REPLACE FUNCTION kb_pipeline.with_snippets(p_rows kb.retrieval_row[], p_query text)
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    -- one PL/Python call for all rows; each passage is read up to its share
    -- of kb.max_snippet_chars (k = 8 passages: 25,000 characters each, longer
    -- than any chunk; k = 100: 2,000; k = 1000: the first 200)
    share integer := kb.max_snippet_chars() / greatest(cardinality(p_rows), 1);
    texts text[] := kb.snippets(
        ARRAY(SELECT left(u.content, share) FROM unnest(p_rows) WITH ORDINALITY AS u ORDER BY u.ordinality),
        p_query, 200);
BEGIN
    RETURN kb_pipeline.rows_with(p_rows, ARRAY(
        SELECT jsonb_build_object('snippet', t.text) FROM unnest(texts) WITH ORDINALITY AS t (text, n) ORDER BY t.n
    ));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.with_snippets(kb.retrieval_row[], text) IS
'The rows with their query-aware snippets (200 characters), computed in one call over each passage''s first kb.max_snippet_chars / (number of rows) characters.';
