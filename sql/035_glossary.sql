-- The team glossary (table kb.glossary, migration 0015): the BM25 terms of
-- each glossary term, who may read and write which rows, and the expansion
-- of a query by the equivalents of the glossary terms it contains
-- (kb.glossary_expansion), which the lexical leg appends to the query's
-- terms. docs/GLOSSARY.md describes the rules and the file formats of
-- `pgkb glossary load`.
--
-- This file runs before 041_reader_gateways.sql (kb.query_terms) and
-- 090_grants/ (roles, kb.allowed_namespaces), so its functions are
-- plpgsql: their bodies are resolved when first called, not when created.

CREATE OR REPLACE FUNCTION kb.trg_glossary_terms()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- whatever a writer supplies: matching must see the terms the query side computes
    NEW.terms := kb.query_terms(NEW.term);
    IF coalesce(cardinality(NEW.terms), 0) = 0 THEN
        RAISE EXCEPTION 'pgkb: glossary term "%" has no BM25 terms (only stop words, punctuation or symbols), so no query could match it', NEW.term
            USING ERRCODE = 'check_violation',
                HINT = 'use a more specific term; SELECT kb.query_terms(''...'') shows the BM25 terms of a text';
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_glossary_terms() IS
'BEFORE INSERT/UPDATE on kb.glossary: sets terms to kb.query_terms(term) and refuses a term without BM25 terms. After a change of the term rules (lexical_terms_version), UPDATE kb.glossary SET terms = ''{}'' recomputes them.';

DROP TRIGGER IF EXISTS glossary_terms ON kb.glossary;
CREATE TRIGGER glossary_terms BEFORE INSERT OR UPDATE ON kb.glossary
FOR EACH ROW EXECUTE FUNCTION kb.trg_glossary_terms();

-- Privileges and row-level security. Readers read the global rows and the
-- rows of the namespaces they may see (the documents' rule, through
-- kb.allowed_namespaces); writers and admins write the rows of the namespaces
-- they may see; only admins write global rows, which change every tenant's
-- retrieval (the roles: sql/001_roles.sql).

CREATE OR REPLACE FUNCTION kb.glossary_namespaces()
RETURNS text[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- kb.allowed_namespaces is created by 090_grants/02_tenants.sql, after this file;
    -- SECURITY INVOKER, so current_user is the role the policy is checked for
    RETURN kb.allowed_namespaces(current_user);
END;
$$;
COMMENT ON FUNCTION kb.glossary_namespaces() IS
'The namespaces whose glossary rows the current role may see and write (kb.allowed_namespaces(current_user); NULL: all), for the policies of kb.glossary.';

REVOKE ALL ON kb.glossary FROM public;
GRANT SELECT ON kb.glossary TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT INSERT, UPDATE, DELETE ON kb.glossary TO pgkb_writer, pgkb_admin;
ALTER TABLE kb.glossary ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS glossary_read ON kb.glossary;
CREATE POLICY glossary_read ON kb.glossary FOR SELECT
USING (
    glossary.namespace IS NULL
    OR (SELECT kb.glossary_namespaces()) IS NULL
    OR glossary.namespace = any((SELECT kb.glossary_namespaces())::text[])
);
DROP POLICY IF EXISTS glossary_write_namespace ON kb.glossary;
CREATE POLICY glossary_write_namespace ON kb.glossary TO pgkb_writer, pgkb_admin
USING (
    glossary.namespace IS NOT NULL
    AND ((SELECT kb.glossary_namespaces()) IS NULL
        OR glossary.namespace = any((SELECT kb.glossary_namespaces())::text[]))
)
WITH CHECK (
    glossary.namespace IS NOT NULL
    AND ((SELECT kb.glossary_namespaces()) IS NULL
        OR glossary.namespace = any((SELECT kb.glossary_namespaces())::text[]))
);
DROP POLICY IF EXISTS glossary_write_global ON kb.glossary;
CREATE POLICY glossary_write_global ON kb.glossary TO pgkb_admin
USING (glossary.namespace IS NULL)
WITH CHECK (glossary.namespace IS NULL);

CREATE OR REPLACE FUNCTION kb.glossary_expansion_of_terms(
    p_terms text[],
    p_namespaces text[],
    p_max_terms integer DEFAULT 64,
    OUT explain jsonb,
    OUT added_terms text[]
)
RETURNS record
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    query_terms text[] := coalesce(p_terms, '{}');
    dropped integer;
BEGIN
    explain := jsonb_build_object('matches', '[]'::jsonb, 'added_terms', '[]'::jsonb, 'dropped_terms', 0);
    added_terms := '{}';
    -- SECURITY INVOKER: the caller's row-level security decides which rows
    -- exist here (global ones, and those of the namespaces it may see); with
    -- p_namespaces (the call's scope), only the global rows and those
    -- namespaces' apply. A role
    -- that may not read the glossary retrieves without it.
    IF cardinality(query_terms) = 0 OR NOT has_table_privilege('kb.glossary', 'SELECT') THEN
        RETURN;
    END IF;
    -- most queries contain no glossary term: one index probe decides
    IF NOT EXISTS (
        SELECT 1 FROM kb.glossary AS g
        WHERE g.terms && query_terms AND (p_namespaces IS NULL OR g.namespace IS NULL OR g.namespace = ANY(p_namespaces))
    ) THEN
        RETURN;
    END IF;
    WITH
    query AS (
        SELECT t.term, t.pos FROM unnest(query_terms) WITH ORDINALITY AS t (term, pos)
    ),
    -- a glossary term matches when every one of its BM25 terms is a term of
    -- the query (&& finds the candidates through the GIN index, <@ decides)
    hits AS MATERIALIZED (
        SELECT g.id, g.namespace, g.concept, g.term, g.terms,
            (SELECT min(q.pos) FROM query AS q WHERE q.term = any(g.terms)) AS pos
        FROM kb.glossary AS g
        WHERE g.terms && query_terms AND g.terms <@ query_terms
            AND (p_namespaces IS NULL OR g.namespace IS NULL OR g.namespace = ANY(p_namespaces))
    ),
    -- the other terms of its concept: same namespace, or global ones (a
    -- namespace extends a global concept of the same name)
    equivalents AS MATERIALIZED (
        SELECT h.id AS hit_id, e.id, e.term, e.terms
        FROM hits AS h
        INNER JOIN kb.glossary AS e
            ON e.concept = h.concept AND e.id <> h.id AND e.term <> h.term
            AND (e.namespace IS NULL OR h.namespace IS NULL OR e.namespace = h.namespace)
            AND (p_namespaces IS NULL OR e.namespace IS NULL OR e.namespace = ANY(p_namespaces))
    ),
    -- their BM25 terms that the query lacks, per matched row
    contributions AS MATERIALIZED (
        SELECT h.id AS hit_id, h.pos, e.id AS equivalent_id, t.term, t.ord
        FROM hits AS h
        INNER JOIN equivalents AS e ON h.id = e.hit_id
        CROSS JOIN LATERAL unnest(e.terms) WITH ORDINALITY AS t (term, ord)
        WHERE t.term <> all(query_terms)
    ),
    -- each once, in the order of the matched term's place in the query, then
    -- of the glossary rows
    fresh AS (
        SELECT DISTINCT ON (c.term) c.term, c.pos, c.hit_id, c.equivalent_id, c.ord
        FROM contributions AS c
        ORDER BY c.term, c.pos, c.hit_id, c.equivalent_id, c.ord
    ),
    ordered AS (
        SELECT f.term, row_number() OVER (ORDER BY f.pos, f.hit_id, f.equivalent_id, f.ord) AS n
        FROM fresh AS f
    ),
    kept AS (
        SELECT o.* FROM ordered AS o WHERE o.n <= greatest(p_max_terms, 0)
    )
    SELECT
        coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'term', h.term, 'concept', h.concept, 'namespace', h.namespace, 'terms', to_jsonb(h.terms),
                'equivalents', coalesce((
                    SELECT jsonb_agg(d.term ORDER BY d.first_id)
                    FROM (
                        SELECT e.term, min(e.id) AS first_id FROM equivalents AS e WHERE e.hit_id = h.id GROUP BY e.term
                    ) AS d
                ), '[]'::jsonb),
                -- every added term this match contributes (the lexical leg credits a
                -- chunk containing one with the coverage of this match's terms)
                'added_terms', coalesce((
                    SELECT jsonb_agg(k.term ORDER BY k.n) FROM kept AS k
                    WHERE EXISTS (SELECT 1 FROM contributions AS c WHERE c.hit_id = h.id AND c.term = k.term)
                ), '[]'::jsonb)
            ) ORDER BY h.pos, h.id)
            FROM hits AS h
        ), '[]'::jsonb),
        coalesce((SELECT array_agg(k.term ORDER BY k.n) FROM kept AS k), '{}'),
        (SELECT count(*) FROM ordered) - (SELECT count(*) FROM kept)
    INTO explain, added_terms, dropped;
    explain := jsonb_build_object('matches', explain, 'added_terms', to_jsonb(added_terms), 'dropped_terms', dropped);
END;
$$;
COMMENT ON FUNCTION kb.glossary_expansion_of_terms(text[], text[], integer) IS
'Glossary expansion of a query given as its BM25 terms (kb.query_terms): the glossary terms whose BM25 terms all occur among them, their equivalents, and the equivalents'' BM25 terms that the query lacks (added_terms, at most p_max_terms); see kb.glossary_expansion.';

CREATE OR REPLACE FUNCTION kb.glossary_expansion(
    p_query text,
    p_namespace text,
    p_max_terms integer DEFAULT 64,
    OUT explain jsonb,
    OUT added_terms text[]
)
RETURNS record
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    explain := jsonb_build_object('matches', '[]'::jsonb, 'added_terms', '[]'::jsonb, 'dropped_terms', 0);
    added_terms := '{}';
    -- a role that may not read the glossary retrieves without it (a statement
    -- of its own: privileges are checked before a query runs); an empty
    -- glossary (the default) costs one probe and no call into Python
    IF NOT has_table_privilege('kb.glossary', 'SELECT') THEN
        RETURN;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM kb.glossary AS g WHERE p_namespace IS NULL OR g.namespace IS NULL OR g.namespace = p_namespace
    ) THEN
        RETURN;
    END IF;
    SELECT e.explain, e.added_terms INTO explain, added_terms
    FROM kb.glossary_expansion_of_terms(kb.query_terms(p_query), CASE WHEN p_namespace IS NOT NULL THEN ARRAY[p_namespace] END, p_max_terms) AS e;
END;
$$;
COMMENT ON FUNCTION kb.glossary_expansion(text, text, integer) IS
'Glossary expansion of a query: the glossary terms whose BM25 terms all occur among the query''s (global rows and, with p_namespace, that namespace''s; else every namespace the caller may see), their equivalents, and the BM25 terms of those equivalents that the query lacks (added_terms, at most p_max_terms; explain: matches, added_terms, dropped_terms).';
