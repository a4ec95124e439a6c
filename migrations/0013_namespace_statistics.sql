-- BM25 corpus statistics per namespace. With tenant isolation on, statistics
-- counted over every tenant's chunks told a reader whether a word occurs in
-- another tenant's documents (its document frequency, and through it the
-- scores and coverage of kb_retrieve_explain). Each namespace now has its own
-- chunk count, total length, document-frequency watermark and term counts,
-- under the same row-level security as kb.chunks, so that a reader's sums run
-- over the namespaces it may see and nothing else.
--
-- The functions returning or recounting the old shapes are re-created by
-- sql/020_ingest.sql with their new signatures.
DROP FUNCTION IF EXISTS kb.refresh_lexical_stats();
DROP FUNCTION IF EXISTS kb.refresh_term_stats();

-- the global row's watermark and refresh time carry over; its term counts are
-- recounted per namespace below
ALTER TABLE kb.lexical_stats RENAME TO lexical_stats_global;
ALTER TABLE kb.lexical_stats_global RENAME CONSTRAINT lexical_stats_pkey TO lexical_stats_global_pkey;
DROP TABLE kb.lexical_terms;

-- One row per namespace: chunk_count and total_length as of refreshed_at;
-- lexical_terms counts the chunks of the namespace up to terms_max_chunk_id
-- (terms_chunk_count of them), the lexical leg the postings of newer ones.
CREATE TABLE kb.lexical_stats (
    namespace text PRIMARY KEY,
    chunk_count bigint NOT NULL CHECK (chunk_count >= 0),
    total_length bigint NOT NULL CHECK (total_length >= 0),
    terms_chunk_count bigint NOT NULL DEFAULT 0 CHECK (terms_chunk_count >= 0),
    terms_max_chunk_id bigint NOT NULL DEFAULT 0,
    refreshed_at timestamptz NOT NULL DEFAULT now()
);

-- Keyed (term, namespace): the lexical leg looks terms up, and sums a term's
-- rows over the namespaces row-level security lets it see.
CREATE TABLE kb.lexical_terms (
    term text NOT NULL,
    namespace text NOT NULL,
    df integer NOT NULL CHECK (df > 0),
    PRIMARY KEY (term, namespace)
);

-- The counts as they stand, each namespace with the old watermark, so that a
-- knowledge base of one namespace scores exactly as before.
INSERT INTO kb.lexical_stats (
    namespace, chunk_count, total_length, terms_chunk_count, terms_max_chunk_id, refreshed_at
)
SELECT
    c.namespace,
    count(*) AS chunk_count,
    sum(c.lexical_length) AS total_length,
    count(*) FILTER (WHERE c.id <= g.terms_max_chunk_id) AS terms_chunk_count,
    g.terms_max_chunk_id,
    g.refreshed_at
FROM kb.chunks AS c
CROSS JOIN kb.lexical_stats_global AS g
GROUP BY c.namespace, g.terms_max_chunk_id, g.terms_chunk_count, g.refreshed_at;

-- the default namespace has its row from the start, as the one global row did
INSERT INTO kb.lexical_stats (namespace, chunk_count, total_length)
VALUES ('default', 0, 0)
ON CONFLICT (namespace) DO NOTHING;

INSERT INTO kb.lexical_terms (term, namespace, df)
SELECT lp.term, lp.namespace, count(*) AS df
FROM kb.lexical_postings AS lp
INNER JOIN kb.lexical_stats AS s ON lp.namespace = s.namespace
WHERE lp.chunk_id <= s.terms_max_chunk_id
GROUP BY lp.term, lp.namespace;

DROP TABLE kb.lexical_stats_global;
