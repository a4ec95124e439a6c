-- Every stored vector has a norm pgvector's cosine distance can divide by:
-- between 1e-19 and 1e19 (MIN_VECTOR_NORM and MAX_VECTOR_NORM of
-- plpython/pgkb_plpy/embedders/validation.py, which refuses the same vectors
-- from providers). pgvector sums squares in single precision, so a zero vector
-- (or one whose squares underflow) makes every cosine distance to it NaN, and
-- NaN sorts above every number: one such vector, written by a provider that
-- answered zeros or by an UPDATE, ranked first for every query.
--
-- Vectors already stored outside the bounds are removed and their chunks queued
-- for embedding again, so that the constraint holds on every database.
INSERT INTO kb.embed_queue (chunk_id, model)
SELECT e.chunk_id, e.model
FROM kb.embeddings AS e
WHERE NOT vector_norm(e.embedding) BETWEEN 1e-19 AND 1e19
ON CONFLICT (chunk_id, model) DO NOTHING;

DELETE FROM kb.embeddings
WHERE NOT vector_norm(embedding) BETWEEN 1e-19 AND 1e19;

ALTER TABLE kb.embeddings ADD CONSTRAINT embeddings_norm_usable
CHECK (vector_norm(embedding) BETWEEN 1e-19 AND 1e19);
