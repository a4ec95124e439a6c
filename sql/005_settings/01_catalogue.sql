-- The settings catalogue: every key pgkb reads, with its type, default, range
-- and description, in this one list (kb.settings_shipped). It is code, so no
-- role but the owner can bend it: a value is checked against it when written
-- (the trigger of 02_accessors.sql) and again when read (kb.setting_in_force),
-- and a missing row reads as its default. A new key is added here (and read
-- through kb.setting); migrate inserts it with its default and never overwrites
-- a value an admin has set (nor re-inserts tenant_isolation once removed).

CREATE OR REPLACE FUNCTION kb.settings_shipped_ranges()
RETURNS TABLE (key text, min_value numeric, max_value numeric)
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The range of every numeric setting, inclusive: wide enough for any sensible
    -- tuning, narrow enough that no value (an admin's or a session's) makes every
    -- retrieval fail, return nothing or multiply what every tenant shares (a
    -- writer's SET pgkb.chunk_max_tokens = 1 would turn one body into thousands of
    -- chunks and vectors in the shared index).
    SELECT r.key, r.min_value, r.max_value
    FROM (VALUES
        ('bm25_b', 0, 1),
        ('bm25_k1', 0, 10),
        ('bm25_postings_per_term', 1, 10000000),
        ('boost_identifier', 0, 10),
        ('boost_title', 0, 10),
        ('candidates_per_leg', 10, 1000),
        ('chunk_max_tokens', 32, 4000),
        ('chunk_overlap_tokens', 0, 1000),
        ('concept_term_weight', 1, 10),
        ('dictionary_max_terms', 0, 256),
        ('embed_batch_size', 1, 512),
        ('embed_max_attempts', 1, 20),
        ('file_max_bytes', 1024, 1073741823),
        ('file_max_expansion_ratio', 10, 100000),
        ('file_max_pages', 1, 100000),
        ('file_parse_timeout_s', 1, 3600),
        ('freshness_margin', 0, 0.5),
        ('glossary_max_terms', 0, 256),
        ('glossary_weight', 0, 2),
        ('hnsw_ef_construction', 16, 1000),
        ('hnsw_ef_search', 10, 1000),
        ('hnsw_m', 4, 100),
        ('language_min_vectors', 2, 1000000),
        ('language_statistics_drift', 0.01, 1),
        ('language_statistics_sample', 100, 1000000),
        ('lexical_terms_version', 1, 1000),
        ('max_per_document', 0, 1000),
        ('min_dense_z', -10, 10),
        ('answer_probability', 0.01, 1),
        ('no_evidence_probability', 0, 0.99),
        ('min_lexical_coverage', 0, 1),
        ('ocr_max_pages', 0, 10000),
        ('ocr_page_timeout_s', 0, 600),
        ('rrf_k', 1, 1000),
        ('same_language_z_margin', 0, 10),
        ('strong_dense_z', -10, 10),
        ('strong_lexical_coverage', 0, 1),
        ('weight_dense', 0, 1),
        ('weight_lexical', 0, 1)
    ) AS r (key, min_value, max_value)
$$;
COMMENT ON FUNCTION kb.settings_shipped_ranges() IS
'The range (inclusive) of every numeric setting, as this release ships it; kb.settings_shipped joins it to the catalogue.';

CREATE OR REPLACE FUNCTION kb.settings_shipped()
RETURNS SETOF kb.settings
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- value is the default: the row migrate inserts for a key kb.settings lacks
    SELECT c.key, c.default_value AS value, c.description, c.value_type, c.default_value, c.choices,
        c.session_override, r.min_value, r.max_value
    FROM (VALUES
        -- ingest
        ('embed_mode', 'text', '"sync"'::jsonb, '["sync", "deferred"]'::jsonb, true,
            'sync: embed inside the ingest trigger; deferred: the trigger only chunks, kb.embed_pending embeds'),
        ('chunk_max_tokens', 'integer', '380', NULL, true,
            'upper bound of a chunk in estimated tokens (plpython/pgkb_plpy/chunker.py)'),
        ('chunk_overlap_tokens', 'integer', '48', NULL, true,
            'overlap between the pieces of one unit that had to be split'),
        ('embed_batch_size', 'integer', '16', NULL, true, 'texts per provider call'),
        ('embed_max_attempts', 'integer', '5', NULL, true,
            'after this many failed attempts a chunk is no longer retried automatically by kb.embed_pending'),
        ('concept_term_weight', 'integer', '3', NULL, true,
            'how many times a term of a document''s concept_keys, or inside a backticked span of its text, counts in a chunk''s BM25 term frequency (1: like any other term); applies to documents indexed after a change (docs/INGEST.md)'),
        -- file limits (docs/INGEST.md): an admin's, never a session's (a writer must not lift them)
        ('file_max_bytes', 'integer', '67108864', NULL, false,
            'largest file (bytes) parsed; a larger one is stored, marked failed (too_large) and not parsed'),
        ('file_max_pages', 'integer', '3000', NULL, false,
            'most pages of a PDF parsed; a longer one is stored and marked failed (too_many_pages)'),
        ('file_parse_timeout_s', 'integer', '120', NULL, false,
            'wall-clock seconds one file''s parse may take (its child process); an OCR run gets ocr_page_timeout_s more for each page it reads'),
        ('file_max_expansion_ratio', 'integer', '100', NULL, false,
            'largest expansion of a file (beyond it the file fails as zip_bomb): of one zip member over 1 MiB in a DOCX, XLSX or PPTX (zip bombs reach thousands), and of the text any file yields, in characters per byte of the file, repeated text counted at each repetition (an XLSX shared string at every cell using it; honest workbooks measured up to 30)'),
        ('ocr_max_pages', 'integer', '20', NULL, false,
            'most image-only pages of one PDF read by OCR (pgkb worker); later ones get an ocr_limit warning; 0: no OCR. Raising it makes kb.reparse_files read the pages it skipped'),
        ('ocr_page_timeout_s', 'integer', '10', NULL, false,
            'seconds added to file_parse_timeout_s for each page an OCR run reads (at most ocr_max_pages): the run''s time limit grows with its pages (one page takes about 2.5 s of CPU, docs/INGEST.md)'),
        -- where the in-database Python is: a session must not point PL/Python at other code
        ('python_path', 'text', 'null', NULL, false,
            'site-packages of the server-side venv that holds pgkb_plpy; written by pgkb migrate'),
        -- the term rules the stored postings were built with; code with other rules must re-index first
        ('lexical_terms_version', 'integer', '2', NULL, false,
            'version of the BM25 term rules (pgkb_plpy.lexical.TERMS_VERSION) the stored postings were built with'),
        -- BM25 leg
        ('bm25_k1', 'number', '1.2', NULL, true, 'BM25 term-frequency saturation'),
        ('bm25_b', 'number', '0.4', NULL, true, 'BM25 length normalisation'),
        ('bm25_postings_per_term', 'integer', '1000', NULL, true,
            'BM25 reads at most this many postings of each query term, the highest-impact ones (retrievals without filters; with filters every posting is read)'),
        -- glossary (docs/GLOSSARY.md): query expansion in the lexical leg
        ('glossary_expansion', 'boolean', 'true', NULL, true,
            'true: the lexical leg adds the BM25 terms of the glossary equivalents of the terms a query contains (kb.glossary; empty unless a team fills it)'),
        ('glossary_max_terms', 'integer', '64', NULL, true,
            'at most this many BM25 terms the glossary adds to one query (the rest are counted as dropped_terms in the explain output)'),
        ('glossary_weight', 'number', '1', NULL, true,
            'weight of a term the glossary or the dictionary adds in the BM25 score (its idf is multiplied by it; the terms one match adds weigh together at most what its own terms weigh)'),
        -- bilingual dictionary (docs/RETRIEVAL.md, "Across languages"): query translation in the lexical leg
        ('dictionary_expansion', 'boolean', 'true', NULL, true,
            'true: the lexical leg adds the BM25 terms of the translations (kb.dictionary, CC-CEDICT) of the English words and Chinese words a query contains'),
        ('dictionary_max_terms', 'integer', '32', NULL, true,
            'at most this many BM25 terms the dictionary adds to one query, main senses first (the rest are counted as dropped_terms in the explain output)'),
        -- dense leg
        ('hnsw_m', 'integer', '16', NULL, false,
            'HNSW graph degree (pgvector m, 2..100) of the indexes built from now on; higher: better recall, larger index, slower build. Existing indexes keep theirs until rebuilt (pgkb reindex-hnsw)'),
        ('hnsw_ef_construction', 'integer', '64', NULL, false,
            'HNSW build candidate list (pgvector ef_construction, 4..1000, at least 2 x hnsw_m) of the indexes built from now on; higher: better recall, slower build (pgkb reindex-hnsw rebuilds existing ones)'),
        ('hnsw_ef_search', 'integer', '100', NULL, true,
            'HNSW candidate list size of the dense leg (pgvector hnsw.ef_search); raised to 1.5 x the candidates wanted, at most 1000'),
        ('language_correction', 'boolean', 'true', NULL, true,
            'true: the dense leg scores a passage by its similarity z-scored within its language group (kb.language_statistics), so that a question finds answers in the other language'),
        ('language_min_vectors', 'integer', '30', NULL, true,
            'a language group with fewer vectors than this uses the statistics of all groups together; with fewer in all, no correction'),
        ('language_statistics_sample', 'integer', '2000', NULL, false,
            'vectors per language group the covariance is estimated from (a deterministic sample)'),
        ('language_statistics_drift', 'number', '0.1', NULL, false,
            'a language group''s statistics are recomputed when its number of vectors has changed by this share'),
        -- fusion and answerability
        ('candidates_per_leg', 'integer', '100', NULL, true,
            'candidates each leg hands to fusion (at least 5 x k)'),
        ('fusion', 'text', '"linear"', '["linear", "rrf"]', true,
            'linear: min-max normalised scores, weighted; rrf: reciprocal rank fusion'),
        ('weight_dense', 'number', '0.45', NULL, true,
            'weight of the dense leg in fusion (linear: times each hit''s own evidence)'),
        ('weight_lexical', 'number', '0.55', NULL, true,
            'weight of the lexical leg in fusion (linear: times each hit''s own evidence)'),
        ('rrf_k', 'number', '60', NULL, true, 'the k of reciprocal rank fusion: 1 / (k + rank)'),
        ('boost_identifier', 'number', '0.5', NULL, true,
            'added to a passage that contains an identifier of the query verbatim'),
        ('boost_title', 'number', '0.1', NULL, true,
            'added to a passage whose document title contains the query''s core terms'),
        ('min_lexical_coverage', 'number', '0.2', NULL, true,
            'top BM25 idf coverage at or below which the lexical leg gives no evidence'),
        ('strong_lexical_coverage', 'number', '0.6', NULL, true,
            'top BM25 idf coverage at or above which the lexical leg gives strong evidence (no later stage is tried)'),
        ('min_dense_z', 'number', '-0.8', NULL, true,
            'the dense leg gives no evidence at or below this z-score above its language group''s noise level (kb_pipeline.noise_z: about the best z of as many unrelated passages); language correction applied'),
        ('same_language_z_margin', 'number', '0.5', NULL, true,
            'added to min_dense_z in hybrid mode for a dense hit in the question''s own language, which the lexical leg could have vouched for and did not'),
        ('strong_dense_z', 'number', '2.0', NULL, true,
            'the dense leg gives strong evidence at or above this z-score above its language group''s noise level'),
        ('no_evidence_cutoff', 'boolean', 'true', NULL, true,
            'true: a retrieval whose answerability probability is below no_evidence_probability returns no rows'),
        -- the decision (docs/RETRIEVAL.md, "The decision"): evidence is the calibrated
        -- probability that the top 3 passages answer the question
        ('answer_probability', 'number', '0.5', NULL, true,
            'probability at or above which a retrieval is labelled "answer": the top 3 passages more likely than not hold the answer'),
        ('no_evidence_probability', 'number', '0.08', NULL, true,
            'probability below which a retrieval is "no evidence" and returns no rows (about 1 in 100 answerable questions of the sets the default model was validated on falls below 0.08); 0: never'),
        ('freshness_margin', 'number', '0.02', NULL, true,
            'largest share of its fused score a passage gains for being of the most recently effective document among the candidates (newer of near-equals first)'),
        ('snippets', 'boolean', 'true', NULL, true, 'true: kb_retrieve computes query-aware snippets'),
        -- passage assembly (docs/RETRIEVAL.md): defaults of kb_retrieve's max_per_document and merge_adjacent
        ('max_per_document', 'integer', '2', NULL, true,
            'at most this many of the k chunks kb_retrieve returns come from one document while other documents have candidates (their next best chunks take the places); 0 = no cap'),
        ('merge_adjacent', 'boolean', 'false', NULL, true,
            'true: chunks of one document that follow each other and are both among the k returned become one passage (the document''s text from the first to the last, so their overlap appears once)'),
        -- observability: a reader must not be able to keep its queries out of the log
        ('retrieval_log', 'boolean', 'false', NULL, false,
            'true: every kb_retrieve call appends a row to kb.retrieval_log (query hash, mode, timings, results); a missing row or null means true (the log fails closed)'),
        -- lifecycle: the calendar must not follow the client's TimeZone, or the same
        -- instant would be in force for one session and not for another
        ('calendar_time_zone', 'text', '"UTC"', NULL, false,
            'time zone of the knowledge base''s calendar: the day of as_of that effective_from/effective_to are compared with (a name of pg_timezone_names, e.g. "Asia/Shanghai")'),
        -- security: row-level security must not depend on what a session sets, or
        -- any reader could switch it off with SET pgkb.tenant_isolation = false
        ('tenant_isolation', 'boolean', 'false', NULL, false,
            'true: roles that do not own the kb tables see only the namespaces kb.namespace_grants gives them; only false turns it off (a missing row or null means on; kb.tenant_isolation_changes records every change)')
    ) AS c (key, value_type, default_value, choices, session_override, description)
    LEFT JOIN kb.settings_shipped_ranges() AS r ON r.key = c.key
$$;
COMMENT ON FUNCTION kb.settings_shipped() IS
'The settings catalogue as this release ships it, one kb.settings row per key (value = the default): what kb.settings'' catalogue columns are written from, what a stored value is checked against when written and when read, and the default of a key whose row is missing. Code, so that no role but the owner can widen a range or remove a key.';

CREATE OR REPLACE FUNCTION kb.settings_shipped_array()
RETURNS kb.settings[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Immutable without arguments: the planner folds it into a constant of the
    -- caller's cached plan (replaced with the catalogue on migrate), so the
    -- readers of every call (kb.setting, kb_pipeline.read_retrieval_settings)
    -- do not build the list again each time
    SELECT array_agg(c ORDER BY c.key) FROM kb.settings_shipped() AS c
$$;
COMMENT ON FUNCTION kb.settings_shipped_array() IS
'kb.settings_shipped as one array, for the readers that run on every call (a constant of their cached plans: unnest(kb.settings_shipped_array())).';

INSERT INTO kb.settings AS s (
    key, value, value_type, default_value, choices, session_override, description, min_value, max_value
)
SELECT c.key, c.value, c.value_type, c.default_value, c.choices, c.session_override, c.description, c.min_value,
    c.max_value
FROM kb.settings_shipped() AS c
-- tenant_isolation is inserted on a fresh install only: once its history has a
-- change, a missing row is an admin's removal (isolation on), never to be
-- turned back into false by a migrate
WHERE c.key <> 'tenant_isolation'
    OR EXISTS (SELECT 1 FROM kb.settings AS t WHERE t.key = 'tenant_isolation')
    OR NOT EXISTS (SELECT 1 FROM kb.tenant_isolation_changes)
-- a stored value outside its range is left as it is (an admin's, to correct):
-- it is not in force (kb.setting_in_force reads the default) and kb.health names it
ON CONFLICT (key) DO UPDATE SET
    value_type = excluded.value_type,
    default_value = excluded.default_value,
    choices = excluded.choices,
    session_override = excluded.session_override,
    description = excluded.description,
    min_value = excluded.min_value,
    max_value = excluded.max_value
WHERE (s.value_type, s.default_value, s.choices, s.session_override, s.description, s.min_value, s.max_value)
IS DISTINCT FROM (excluded.value_type, excluded.default_value, excluded.choices, excluded.session_override,
    excluded.description, excluded.min_value, excluded.max_value);
