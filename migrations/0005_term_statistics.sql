-- BM25 skips very common query terms (setting bm25_max_df_ratio), recognised
-- through the planner's most-common-values statistics of lexical_postings.term;
-- a larger statistics target lets ANALYZE list enough of them.
ALTER TABLE kb.lexical_postings ALTER COLUMN term SET STATISTICS 1000;

INSERT INTO kb.settings (key, value, description) VALUES
('bm25_max_df_ratio', '0.1',
 'corpora of 10,000+ chunks: query terms estimated (ANALYZE statistics) to occur in more than this share of chunks are skipped by BM25; 1.0 = none');
