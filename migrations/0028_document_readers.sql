-- Per-document access: a document may name the roles that may read it
-- (readers; NULL: every role that may read its namespace). reader_ids holds
-- those roles' oids, bound when the list is written (0 stands for PUBLIC), so
-- a dropped role matches nobody and a new role reusing its name inherits
-- nothing, as namespace grants do.
ALTER TABLE kb.documents
ADD COLUMN readers text[],
ADD COLUMN reader_ids oid[];
ALTER TABLE kb.documents ADD CONSTRAINT documents_readers_listed CHECK (
    readers IS NULL OR cardinality(readers) BETWEEN 1 AND 100
);
-- the private documents (few): what the statistics leave out and the policies look up
CREATE INDEX documents_private ON kb.documents (id) WHERE reader_ids IS NOT NULL;
