-- A database from before the setting lexical_terms_version (0.1.0) holds
-- postings built with the term rules of version 1; without this row, migrate
-- would record the shipped default (the installed rules' version) over them.
-- Recorded as 1, so `pgkb migrate` rebuilds them (kb.rebuild_lexical_terms).
INSERT INTO kb.settings (key, value, description, value_type, default_value)
SELECT
    'lexical_terms_version' AS key,
    '1' AS value,
    'version of the BM25 term rules the stored postings were built with' AS description,
    'integer' AS value_type,
    '1' AS default_value
WHERE EXISTS (SELECT 1 FROM kb.lexical_postings)
ON CONFLICT (key) DO NOTHING;
