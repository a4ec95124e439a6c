-- One door per role: kb_retrieve and kb_retrieve_explain run with the
-- owner's rights and work out the namespaces the session's role may read
-- themselves; every leg then applies that set (the request's scope) where
-- its indexes serve it, instead of row-level security judging each row.
--
-- scope (NULL: every namespace): the namespaces this call may read, i.e.
-- the request's namespace if the role may read it, else the role's allowed
-- namespaces (kb.read_scope).
ALTER TYPE kb.retrieval_request ADD ATTRIBUTE scope text[];

-- objects sql/ re-creates with another signature (a set of namespaces instead of one)
DROP FUNCTION IF EXISTS kb.lexical_corpus(text[], text);
DROP FUNCTION IF EXISTS kb.lexical_candidates(text[], timestamptz, text, jsonb, integer, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb.trigram_candidates(text, timestamptz, text, jsonb, integer);
DROP FUNCTION IF EXISTS kb.identifier_candidates(text[], timestamptz, text, jsonb, integer);
DROP FUNCTION IF EXISTS kb.dense_candidates(
    text, text, integer, timestamptz, text, jsonb, integer, kb.language_moment[]
);
DROP FUNCTION IF EXISTS kb.visible_candidate(bigint, timestamptz, text, jsonb, boolean);
DROP FUNCTION IF EXISTS kb.visible_documents(timestamptz, text, jsonb);
DROP FUNCTION IF EXISTS kb.language_moments(text, text, text, integer, text);
DROP FUNCTION IF EXISTS kb.py_language_moments(text, text, text, integer, text);
DROP FUNCTION IF EXISTS kb.glossary_expansion_of_terms(text[], text, integer);
