-- kb_pipeline and kb_node: the retrieval pipeline's types and internal
-- functions (this directory), dropped and re-created by every migrate, so that
-- they change with the code (a type gains a field by editing its definition here, never by
-- ALTER TYPE). What a table, constraint, policy or trigger uses stays in kb
-- (migrations/), and so do the doors readers and shards call by name
-- (kb_retrieve, kb_retrieve_explain, kb.shard_*) and their row type,
-- kb.retrieval_row.
--
-- A reader never runs a function of a kb_pipeline being replaced: every door
-- takes ACCESS SHARE on kb.pipeline_door before it calls into the schema
-- (kb.enter_pipeline), held to the end of its transaction, and this file
-- takes ACCESS EXCLUSIVE on it first. A migrate waits for the retrievals in
-- flight (at most lock_timeout, then it tries again: harness/migrate.py); a
-- retrieval that starts meanwhile waits for the migrate to commit, and its
-- first statement into kb_pipeline then resolves the new functions.

LOCK TABLE kb.pipeline_door IN ACCESS EXCLUSIVE MODE;
DROP SCHEMA IF EXISTS kb_node CASCADE;
DROP SCHEMA IF EXISTS kb_pipeline CASCADE;
CREATE SCHEMA kb_pipeline;
COMMENT ON SCHEMA kb_pipeline IS
'The retrieval pipeline: its types and the steps every caller may run (pure, or reading only what the caller may read: a shard coordinator runs them as its caller), re-created by every migrate (sql/040_pipeline/00_schema.sql).';
CREATE SCHEMA kb_node;
COMMENT ON SCHEMA kb_node IS
'The retrieval pipeline''s steps that read this database''s corpus as the owner (the legs, the candidates'' facts, the passages, one node''s orchestrator), re-created by every migrate: no role but the owner may execute them (090_grants/01_privileges.sql); readers reach them only through kb_retrieve, kb_retrieve_explain and the shard doors.';

-- A candidate of one retrieval leg, in the leg's order. score is the leg's
-- own score (BM25, the language-corrected z or the cosine similarity, or
-- pg_trgm word similarity when trigram); coverage is the share of the query's
-- idf mass a BM25 hit holds; similarity a dense hit's cosine; evidence the
-- hit's own evidence in [0, 1] (NULL: not calibrated); other_language a dense
-- hit in another language than the question's; language the chunk's (dense
-- hits: what the dense evidence is judged by).
CREATE TYPE kb_pipeline.leg_hit AS (
    chunk_id bigint,
    rank integer,
    score double precision,
    coverage double precision,
    trigram boolean,
    similarity double precision,
    evidence double precision,
    other_language boolean,
    language text,
    -- a BM25 hit's idf coverage with a dictionary's translations credited by
    -- their share of the word they translate (coverage credits them whole)
    weighted_coverage double precision
);

-- A chunk after fusion, before boosts: where it stood in each leg and its fused score.
CREATE TYPE kb_pipeline.fused_hit AS (
    chunk_id bigint,
    lexical_rank integer,
    lexical_score double precision,
    trigram boolean,
    dense_rank integer,
    dense_score double precision,
    identifier_hit boolean,
    fused_score double precision
);

-- A kb_retrieve call after its arguments were checked and normalised; scope:
-- the namespaces it may read (kb.read_scope; NULL: all).
CREATE TYPE kb_pipeline.retrieval_request AS (
    query text,
    k integer,
    namespace text,
    mode_requested text,
    filters jsonb,
    filters_restrict boolean,
    as_of timestamptz,
    context text[],  -- noqa: LT01
    notes text[],  -- noqa: LT01
    max_per_document integer,
    merge_adjacent boolean,
    scope text[]  -- noqa: LT01
);

-- The retrieval settings of kb.settings (or the session), typed, read once per call.
CREATE TYPE kb_pipeline.retrieval_settings AS (
    candidates_per_leg integer,
    fusion text,
    weight_dense double precision,
    weight_lexical double precision,
    rrf_k double precision,
    boost_identifier double precision,
    boost_title double precision,
    min_lexical_coverage double precision,
    strong_lexical_coverage double precision,
    no_evidence_cutoff boolean,
    snippets boolean,
    language_correction boolean,
    language_min_vectors integer,
    min_dense_z double precision,
    same_language_z_margin double precision,
    strong_dense_z double precision,
    answer_probability double precision,
    no_evidence_probability double precision,
    freshness_margin double precision,
    glossary_expansion boolean,
    glossary_max_terms integer,
    dictionary_expansion boolean,
    dictionary_max_terms integer,
    max_per_document integer,
    merge_adjacent boolean,
    -- the legs': BM25, the glossary's weight, HNSW
    bm25_k1 double precision,
    bm25_b double precision,
    bm25_postings_per_term integer,
    glossary_weight double precision,
    hnsw_ef_search integer,
    -- the answerability model in force (kb.answerability_model), checked when read
    answerability_model jsonb
);

-- What a call will do: the analysed query, the mode chosen, the model and the
-- weights and thresholds that apply to it.
CREATE TYPE kb_pipeline.retrieval_plan AS (
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
    notes text[],  -- noqa: LT01
    language_correction boolean
);

-- One stage of the staged fallback (the query as asked, then its normalised
-- forms): each leg's candidates, the evidence they give, and what it cost.
-- What a stage's lexical leg is given (kb_pipeline.lexical_inputs, or a
-- coordinator's for every shard): its BM25 terms, whether the stage is skipped,
-- the glossary's and the dictionary's expansion of its terms.
CREATE TYPE kb_pipeline.lexical_input AS (
    terms text[],  -- noqa: LT01
    skipped boolean,
    glossary jsonb
);

-- What a stage's dense leg is given (kb_pipeline.dense_inputs): the query
-- vector (NULL: no dense leg), its language moments, a note when the
-- embedding failed, the time it took (0 when reused), the embedding key and
-- the stage whose text it embeds.
CREATE TYPE kb_pipeline.dense_input AS (
    query_vector text,
    language_moments kb.language_moment[],  -- noqa: LT01
    note text,
    embed_ms numeric,
    embedding_key text,
    query_stage integer
);

CREATE TYPE kb_pipeline.retrieval_stage AS (
    stage_no integer,
    query text,
    terms text[],  -- noqa: LT01
    skipped boolean,
    lexical kb_pipeline.leg_hit[],  -- noqa: LT01
    dense kb_pipeline.leg_hit[],  -- noqa: LT01
    lexical_top_coverage double precision,
    dense_top_similarity double precision,
    evidence double precision,
    notes text[],  -- noqa: LT01
    embed_ms numeric,
    lexical_ms numeric,
    dense_ms numeric,
    dense_evidence_z double precision,
    dense_evidence_language text,
    dense_min_z double precision,
    language_moments kb.language_moment[],  -- noqa: LT01
    lexical_evidence double precision,
    dense_evidence double precision,
    glossary jsonb,
    -- the answer-type check of the judge (kb_pipeline.answer_checked): NULL when the
    -- question asks for no type of value or the stage was not checked
    answer_check jsonb,
    -- the call's answerability (kb_pipeline.judged): the signals the model reads and
    -- the probability that the top 3 passages answer the question; NULL before judging
    signals jsonb,
    probability double precision,
    -- the stage whose text the dense leg's query vector embeds (this one or an
    -- earlier one with the same kb_pipeline.embedding_key); NULL: no dense leg
    dense_query_stage integer
);

-- What ranking needs to know of a candidate chunk besides its scores (one
-- read of chunks and documents per call, or a shard's answer): its document,
-- text hash (duplicates), title (the title boost) and dates (freshness).
CREATE TYPE kb_pipeline.candidate AS (
    chunk_id bigint,
    document_id bigint,
    namespace text,
    content_hash text,
    title text,
    effective_from date,
    created_at timestamptz
);

-- A fused hit after boosts, duplicates and the per-document cap: its final
-- score, its place (rank NULL: the cap moved it out of the top k) and its
-- place without the cap.
CREATE TYPE kb_pipeline.ranked_hit AS (
    chunk_id bigint,
    document_id bigint,
    namespace text,
    lexical_rank integer,
    lexical_score double precision,
    trigram boolean,
    dense_rank integer,
    dense_score double precision,
    identifier_hit boolean,
    final_score double precision,
    rank integer,
    uncapped_rank integer
);

-- What kb_node.retrieve_core returns: the passages and the explain object.
CREATE TYPE kb_pipeline.retrieval_result AS (
    rows kb.retrieval_row[],  -- noqa: LT01
    explain jsonb
);
