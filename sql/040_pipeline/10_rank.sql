-- Ranking: the facts of the candidates (kb_node.candidate_facts), the top
-- k (kb_pipeline.rank, pure: boosts, freshness, duplicates, the per-document
-- cap) and the step that fuses and ranks a stage (kb_pipeline.ranked).

CREATE OR REPLACE FUNCTION kb_node.passage_provenance(d kb.documents, c kb.chunks)
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
COMMENT ON FUNCTION kb_node.passage_provenance(kb.documents, kb.chunks) IS
'The provenance of one chunk as a passage carries it (docs/RETRIEVAL.md): the document''s file, parser and chunker versions and when it was indexed, the chunk''s heading path, pages, offsets, content hash and ingest time, and the list of its chunks (one here; kb_node.merged_passages joins several).';

CREATE OR REPLACE FUNCTION kb_node.candidate_facts(p_chunk_ids bigint[])
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
COMMENT ON FUNCTION kb_node.candidate_facts(bigint[]) IS
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
'The top k of fused hits (kb_pipeline.ranked_hit): identifier and title boosts, a freshness preference among near-equals, one chunk per distinct text, a document''s chunks after its p_max_per_document best only where no other candidate is left (NULL: no cap), ranks from 1, then the chunks the cap moved out of the top k (rank NULL). Pure: the facts of every candidate are given (kb_node.candidate_facts, or a sharded corpus''s shards).';

CREATE OR REPLACE FUNCTION kb_pipeline.ranked(
    p_request kb_pipeline.retrieval_request,
    p_plan kb_pipeline.retrieval_plan,
    p_settings kb_pipeline.retrieval_settings,
    p_best kb_pipeline.retrieval_stage,
    p_identifier_chunks bigint[],
    p_facts kb_pipeline.candidate[]
)
RETURNS kb_pipeline.ranked_hit[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- always ranked: the judge decides on the ranked rows (kb_pipeline.judged)
    IF p_best IS NULL THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(
        SELECT r FROM kb_pipeline.rank(
            ARRAY(SELECT kb_pipeline.fuse(p_best.lexical,
                kb_pipeline.own_language_first_kept(p_best.dense, p_plan.analysis ->> 'language'),
                p_identifier_chunks, p_settings.fusion,
                p_plan.weight_lexical, p_plan.weight_dense, p_settings.rrf_k)),
            p_facts, p_plan.analysis ->> 'core_terms', p_settings, p_request.k,
            kb_pipeline.assembly_max_per_document(p_request, p_settings)) AS r
    );
END;
$$;
COMMENT ON FUNCTION kb_pipeline.ranked(
    kb_pipeline.retrieval_request, kb_pipeline.retrieval_plan, kb_pipeline.retrieval_settings,
    kb_pipeline.retrieval_stage, bigint[], kb_pipeline.candidate[]
) IS
'The best stage''s hits fused (kb_pipeline.fuse) and ranked (kb_pipeline.rank: the top k, then the chunks the cap displaced); none when every stage was skipped. Pure: the candidates'' facts are given.';

CREATE OR REPLACE FUNCTION kb_node.stage_candidates(p_stage kb_pipeline.retrieval_stage, p_identifier_chunks bigint[])
RETURNS bigint[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT ARRAY(
        SELECT h.chunk_id FROM unnest(p_stage.lexical) AS h
        UNION
        SELECT h.chunk_id FROM unnest(p_stage.dense) AS h
        UNION
        SELECT i.chunk_id FROM unnest(p_identifier_chunks) AS i (chunk_id)
    )
$$;
COMMENT ON FUNCTION kb_node.stage_candidates(kb_pipeline.retrieval_stage, bigint[]) IS
'Every chunk a stage''s legs or the identifier hits named, once: the candidates whose facts ranking needs. Pure.';
