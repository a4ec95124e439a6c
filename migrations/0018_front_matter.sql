-- Front matter keys that govern retrieval (issue 13): a document whose
-- metadata (or body front matter) says rag_include: false stays stored but
-- gets no chunks, postings or vectors; its ingest_status says so.
ALTER TABLE kb.documents DROP CONSTRAINT documents_ingest_status_check;
ALTER TABLE kb.documents ADD CONSTRAINT documents_ingest_status_check CHECK (
    ingest_status IN ('pending', 'indexed', 'failed', 'excluded')
);
