-- BM25 without scoring every posting of a common term.
--
-- impact: a posting's BM25 term-frequency saturation with the default k1 1.2,
-- b 0.4 and a reference chunk length of 128 terms. It only orders a term's
-- postings, so the lexical leg can read the best bm25_postings_per_term of
-- each term from the index and stop; scores are computed from tf and
-- chunk_length with the live settings and statistics.
ALTER TABLE kb.lexical_postings
ADD COLUMN impact real GENERATED ALWAYS AS ((tf::float8 / (tf + 1.2 * (0.6 + 0.4 * chunk_length::float8 / 128)))::real) STORED;

ALTER TABLE kb.lexical_postings DROP CONSTRAINT lexical_postings_pkey;
-- tf and length in the key make the shortlist's (term, chunk_id) probes index-only
ALTER TABLE kb.lexical_postings ADD PRIMARY KEY (term, chunk_id) INCLUDE (tf, chunk_length);
CREATE INDEX lexical_postings_impact ON kb.lexical_postings (term, impact DESC)
INCLUDE (chunk_id, document_id, namespace, tf, chunk_length);

-- Document frequencies as of the last kb.refresh_term_stats: chunks up to
-- terms_max_chunk_id are counted here, the lexical leg counts the postings of
-- newer chunks (ids grow) itself, so added documents are never missed; only
-- deletions and updates since then drift until the next refresh.
CREATE TABLE kb.lexical_terms (
    term text PRIMARY KEY,
    df integer NOT NULL
);
ALTER TABLE kb.lexical_stats
ADD COLUMN terms_chunk_count bigint NOT NULL DEFAULT 0,
ADD COLUMN terms_max_chunk_id bigint NOT NULL DEFAULT 0;

-- the MCV-based common-term skipping of migration 0005 is replaced by the above
ALTER TABLE kb.lexical_postings ALTER COLUMN term SET STATISTICS -1;  -- noqa: PRS
DELETE FROM kb.settings WHERE key = 'bm25_max_df_ratio';

INSERT INTO kb.settings (key, value, description) VALUES
('bm25_postings_per_term', '1000',
 'BM25 reads at most this many postings of each query term, the highest-impact ones (retrievals without filters; with filters every posting is read)'),
('hnsw_ef_search', '100',
 'HNSW candidate list size of the dense leg (pgvector hnsw.ef_search); raised to 1.5 x the candidates wanted, at most 1000');

-- kb.visibility, its only reader, is gone: the retrieval legs judge each
-- candidate with kb.document_is_current instead of listing hidden documents
DROP INDEX kb.documents_lifecycle;
