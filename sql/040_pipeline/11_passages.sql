-- The passages returned: kb.retrieval_row with its provenance
-- (kb_node.passage_rows), adjacent chunks as one passage
-- (kb_node.merged_passages), snippets and the answer in every row.

CREATE OR REPLACE FUNCTION kb_node.passage_rows(p_ranked kb_pipeline.ranked_hit[])
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
            kb_node.passage_provenance(d, c), NULL, NULL, NULL
        )::kb.retrieval_row
        FROM unnest(p_ranked) AS h
        INNER JOIN kb.chunks AS c ON c.id = h.chunk_id
        INNER JOIN kb.documents AS d ON d.id = c.document_id
        WHERE h.rank IS NOT NULL
        ORDER BY h.rank
    );
END;
$$;
COMMENT ON FUNCTION kb_node.passage_rows(kb_pipeline.ranked_hit[]) IS
'The ranked hits (rank NOT NULL) of this database as kb.retrieval_row, in rank order: the passage, its document, scores per leg, match type, provenance (the document''s file, parser and chunker versions, the chunk''s heading path, pages, offsets, content hash, ingest time; docs/RETRIEVAL.md). Snippet, answerability and evidence are set later.';

CREATE OR REPLACE FUNCTION kb_node.merged_passages(p_rows kb.retrieval_row[])
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
COMMENT ON FUNCTION kb_node.merged_passages(kb.retrieval_row[]) IS
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
CREATE OR REPLACE FUNCTION kb_pipeline.with_answer(p_rows kb.retrieval_row[], p_decision text, p_evidence double precision)
RETURNS kb.retrieval_row[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    RETURN kb_pipeline.rows_with(p_rows, array_fill(
        jsonb_build_object('answerability', p_decision,
            'evidence', round(greatest(coalesce(p_evidence, 0), 0)::numeric, 3)),
        ARRAY[coalesce(cardinality(p_rows), 0)]));
END;
$$;
COMMENT ON FUNCTION kb_pipeline.with_answer(kb.retrieval_row[], text, double precision) IS
'The rows with the call''s answerability decision (kb_pipeline.answerability) and evidence, its probability (rounded to 3 places), in every row. Pure.';
