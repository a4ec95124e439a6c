-- A language-neutral dense leg. A multilingual encoder puts a language
-- component into every vector, so that a Chinese question is nearer to any
-- Chinese passage than to the English passage that answers it. The dense leg
-- now scores a passage by its similarity z-scored against the passages of its
-- own language group: (q.p - q.mean) / sqrt(q' cov q), from per-model,
-- per-namespace, per-language statistics of the stored vectors
-- (sql/032_language_statistics.sql keeps them).

-- The chunk's share of Chinese (Han characters against Han characters plus
-- Latin words of embed_text, pgkb_plpy.query_analysis.han_share; NULL with
-- neither) and its language group (zh from one half, else en; other without
-- either script): written by ingest; NULL for chunks stored before this
-- migration until the next statistics recount classifies them.
ALTER TABLE kb.chunks
ADD COLUMN language text,
ADD COLUMN han_share real CHECK (han_share BETWEEN 0 AND 1);

-- A vector's language group, copied from its chunk (a trigger keeps it): the
-- dense leg scans one partial HNSW index per model and group, since a scan of
-- the model's whole index filtered to a minority language reads thousands of
-- the majority's vectors first.
ALTER TABLE kb.embeddings ADD COLUMN language text;
UPDATE kb.embeddings AS e SET language = c.language FROM kb.chunks AS c WHERE c.id = e.chunk_id;

-- Per model, namespace and language group: the mean of the vectors, their
-- covariance (float32, row-major, dimensions x dimensions) estimated from a
-- deterministic sample, and the number of vectors when they were computed.
-- Per namespace, under the row-level security of kb.chunks, for the reason
-- the BM25 statistics are (migration 0013).
CREATE TABLE kb.language_statistics (
    model text NOT NULL REFERENCES kb.models (name) ON DELETE CASCADE,
    namespace text NOT NULL,
    language text NOT NULL,
    vectors bigint NOT NULL CHECK (vectors > 0),
    sampled integer NOT NULL CHECK (sampled > 0 AND sampled <= vectors),
    mean vector NOT NULL,
    covariance bytea NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, namespace, language),
    CONSTRAINT language_statistics_covariance_size
    CHECK (length(covariance) = 4 * vector_dims(mean) * vector_dims(mean))
);

-- A query's offset and scale in one language group, pooled over the
-- namespaces searched: the dense leg's score of a passage of the group is
-- (similarity - "offset") / scale.
CREATE TYPE kb.language_moment AS (
    language text,
    vectors bigint,
    "offset" double precision,
    scale double precision,
    pooled boolean  -- the group had too few vectors: the moments of all groups together
);

-- Settings the retrieval reads once per call: the language correction, the
-- dense evidence in z units, the one knob of abstention and the freshness
-- preference; the short-query weight override gives way to fusion
-- that weighs every hit by its own evidence.
ALTER TYPE kb.retrieval_settings
DROP ATTRIBUTE exact_weight_dense,
DROP ATTRIBUTE exact_weight_lexical,
ADD ATTRIBUTE language_correction boolean,
ADD ATTRIBUTE language_min_vectors integer,
ADD ATTRIBUTE min_dense_z double precision,
ADD ATTRIBUTE same_language_z_margin double precision,
ADD ATTRIBUTE strong_dense_z double precision,
ADD ATTRIBUTE min_evidence double precision,
ADD ATTRIBUTE freshness_margin double precision;

DELETE FROM kb.settings WHERE key IN ('exact_weight_dense', 'exact_weight_lexical');

ALTER TYPE kb.retrieval_stage
ADD ATTRIBUTE dense_evidence_z double precision,
ADD ATTRIBUTE dense_evidence_language text,
ADD ATTRIBUTE dense_min_z double precision,
ADD ATTRIBUTE language_moments kb.language_moment[],
ADD ATTRIBUTE lexical_evidence double precision,
ADD ATTRIBUTE dense_evidence double precision,
ADD ATTRIBUTE glossary jsonb;  -- the glossary expansion of the stage's terms (kb.glossary_expansion_of_terms)

-- Whether a provider's vectors carry a language component to correct: the
-- multilingual encoders do; the hash provider (tests) has none, and its
-- similarities keep their thresholds.
ALTER TABLE kb.embedding_providers
ADD COLUMN language_correction boolean NOT NULL DEFAULT true;
UPDATE kb.embedding_providers SET language_correction = false WHERE provider = 'hash';

-- the plan says whether the correction applies to the active model
ALTER TYPE kb.retrieval_plan ADD ATTRIBUTE language_correction boolean;

-- a dense hit's raw cosine similarity beside its score (the z-score when the
-- correction applies, else the similarity itself), and every hit's own
-- evidence in [0, 1], by which fusion weighs it
ALTER TYPE kb.leg_hit
ADD ATTRIBUTE similarity double precision,
ADD ATTRIBUTE evidence double precision;

-- re-created by sql/042_retrieval_legs.sql with the query's language moments
DROP FUNCTION IF EXISTS kb.dense_candidates(text, text, integer, timestamptz, text, jsonb, integer);
-- re-created by sql/043_fusion.sql with the freshness margin
DROP FUNCTION IF EXISTS kb.passages(kb.fused_hit[], text, double precision, double precision, integer);

-- re-created by sql/042_retrieval_legs.sql with the glossary expansion
DROP FUNCTION IF EXISTS kb.lexical_candidates(text[], timestamptz, text, jsonb, integer);
