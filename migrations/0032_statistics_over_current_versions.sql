-- Corpus statistics count the documents a question can see now: shared
-- (no readers named) and current today (docs/LIFECYCLE.md), as if private
-- documents did not exist. Drafts, superseded, expired and future versions
-- no longer dilute BM25's document frequencies, N and average length, nor
-- the language moments of the dense leg.
--
-- kb.statistics_documents is that set, kept by the recount functions of
-- sql/020_ingest.sql; kb.statistics_schedule says when it was computed and
-- when it next changes by the calendar alone (a document entering or leaving
-- force on a date, with no write).
CREATE TABLE kb.statistics_documents (
    document_id bigint PRIMARY KEY REFERENCES kb.documents (id) ON DELETE CASCADE,
    namespace text NOT NULL
);
CREATE INDEX statistics_documents_namespace ON kb.statistics_documents (namespace);
COMMENT ON TABLE kb.statistics_documents IS
'The documents the corpus statistics count (BM25 df, N, average length; language moments): shared and current now. Kept by kb.recount_statistics_documents.';

CREATE TABLE kb.statistics_schedule (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    refreshed_at timestamptz,
    next_change timestamptz
);
INSERT INTO kb.statistics_schedule (only_row) VALUES (true);
COMMENT ON TABLE kb.statistics_schedule IS
'When kb.statistics_documents was computed, and the next instant at which a document enters or leaves force by its dates alone (NULL: none pending).';

-- chunks that entered or left the counted set since the namespace's
-- document frequencies were recounted (recounted again past a tenth)
ALTER TABLE kb.lexical_stats ADD COLUMN changed_chunks bigint NOT NULL DEFAULT 0 CHECK (changed_chunks >= 0);

-- re-created by sql/030_lifecycle.sql with a fourth argument (shared_only)
DROP FUNCTION IF EXISTS kb.visible_documents(timestamptz, text[], jsonb);

-- its trigger function is re-created by sql/020_ingest.sql as kb.trg_documents_statistics
DROP TRIGGER IF EXISTS documents_deleted ON kb.documents;
DROP FUNCTION IF EXISTS kb.trg_documents_deleted();
