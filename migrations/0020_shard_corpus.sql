-- Shards (PL/Proxy, sql/shards/): a retrieval over namespaces that live on
-- several databases ranks with the corpus statistics of all of them. A shard
-- is told those statistics explicitly, in the request, rather than through a
-- setting: they belong to one call, and a value left over from another call
-- could never be told apart from the shard's own.
--
-- corpus (NULL: this database's own statistics, as on a single node):
--   lexical      BM25 sizes and document frequencies (kb.lexical_corpus)
--   model_ready  whether any database holds vectors of the active model
--   stages       per stage: the query vector, its language moments and its
--                glossary expansion, computed once by the coordinator
ALTER TYPE kb.retrieval_request ADD ATTRIBUTE corpus jsonb;

-- objects sql/ re-creates with another signature (the corpus and the
-- freshness ranks a coordinator gives)
DROP FUNCTION IF EXISTS kb.lexical_candidates(text[], timestamptz, text, jsonb, integer, jsonb);
DROP FUNCTION IF EXISTS kb.passages(
    kb.fused_hit[], text, double precision, double precision, integer, double precision, integer, boolean
);
