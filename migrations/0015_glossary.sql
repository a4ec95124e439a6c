-- A team glossary: terms that name the same concept, often in two languages
-- (Session / 会话, on-call / 值班). The lexical leg may expand a query that
-- contains one term of a concept with the BM25 terms of the others
-- (kb.glossary_expansion, sql/035_glossary.sql). Empty on a fresh install:
-- nothing ships by default.
--
-- namespace NULL is the global glossary, applied to every namespace and
-- visible to every reader; a namespace's rows are under the row-level
-- security of its documents. NULL rather than a sentinel: '*' already means
-- "every namespace" in kb.namespace_grants, and no document namespace can be
-- NULL, so a global row can never be mistaken for a tenant's.
-- The terms of one (namespace, concept) are equivalents; a namespace's
-- concept also joins the global concept of the same name (a team extends a
-- global concept by reusing its name).
CREATE TABLE kb.glossary (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text CONSTRAINT glossary_namespace_valid CHECK (
        namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
    ),
    concept text NOT NULL CONSTRAINT glossary_concept_valid CHECK (
        concept = btrim(concept) AND concept <> '' AND length(concept) <= 200
    ),
    term text NOT NULL CONSTRAINT glossary_term_valid CHECK (
        term = btrim(term) AND term <> '' AND length(term) <= 200
    ),
    lang text CONSTRAINT glossary_lang_valid CHECK (lang ~ '^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$'),
    -- the BM25 terms of term (kb.query_terms), written by the trigger of
    -- sql/035_glossary.sql whatever a writer supplies
    terms text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT glossary_term_unique UNIQUE NULLS NOT DISTINCT (namespace, concept, term)
);

-- matching: the glossary rows whose BM25 terms overlap the query's
CREATE INDEX glossary_terms ON kb.glossary USING gin (terms);
-- equivalents: the other rows of a concept
CREATE INDEX glossary_concept ON kb.glossary (concept, namespace);

COMMENT ON TABLE kb.glossary IS
'Team glossary: terms naming the same concept (per namespace, or global when namespace is NULL); the lexical leg expands a query with the equivalents of the terms it contains (kb.glossary_expansion).';
COMMENT ON COLUMN kb.glossary.namespace IS 'The namespace whose retrievals the row applies to; NULL: every namespace (global).';
COMMENT ON COLUMN kb.glossary.concept IS 'The group: rows of one namespace and concept (plus the global rows of that concept) are equivalents.';
COMMENT ON COLUMN kb.glossary.terms IS 'BM25 terms of term (kb.query_terms), kept by a trigger; matching compares these with the query''s.';
