-- A vector of more than about 500 dimensions makes a kb.embeddings row larger
-- than the 2 kB at which PostgreSQL moves wide values out of line (TOAST;
-- pgvector's storage is EXTERNAL). The dense leg reads the vector of every
-- candidate it returns (its similarity), so each candidate cost a second
-- lookup in the TOAST table. Rows up to a page stay inline now, i.e. vectors
-- of up to about 2,000 dimensions (pgvector's HNSW limit); larger ones are
-- still moved out. Rows written before keep their out-of-line vectors until
-- the table is rewritten (VACUUM FULL kb.embeddings, which also rebuilds its
-- indexes: docs/SCALING.md).
ALTER TABLE kb.embeddings SET (toast_tuple_target = 8160);
