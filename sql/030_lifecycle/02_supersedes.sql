-- The refusal of supersedes cycles: a document may not supersede, through a
-- chain, a document that supersedes it. Checked at commit by a constraint trigger;
-- the checks of one namespace take turns (kb.take_supersedes_turn), so two
-- concurrent writes cannot close a cycle between them; see docs/LIFECYCLE.md.

CREATE OR REPLACE FUNCTION kb.take_supersedes_turn(p_namespace text)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    allowed text[] := kb.allowed_namespaces(kb.session_role());
BEGIN
    -- only a namespace the session's role may see: no one waits on, or
    -- disturbs, another tenant's checks
    IF allowed IS NOT NULL AND NOT p_namespace = ANY(allowed) THEN
        RETURN;
    END IF;
    INSERT INTO kb.supersedes_turns AS t (namespace, checks) VALUES (p_namespace, 1)
    ON CONFLICT (namespace) DO UPDATE SET checks = t.checks + 1;
EXCEPTION WHEN serialization_failure THEN
    RAISE EXCEPTION 'pgkb: another transaction changed the supersedes chains of namespace "%" since this one began',
        p_namespace
        USING ERRCODE = 'serialization_failure',
            HINT = 'retry the transaction: its cycle check must see what the other committed';
END;
$$;
COMMENT ON FUNCTION kb.take_supersedes_turn(text) IS
'The supersedes check''s turn in a namespace: writes the namespace''s row of kb.supersedes_turns (held to the commit), so checks take turns; under REPEATABLE READ or SERIALIZABLE a check whose snapshot misses another''s committed change fails with a serialization failure naming the namespace. Only for namespaces the session''s role may see.';

CREATE OR REPLACE FUNCTION kb.trg_documents_supersedes_acyclic()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    doc record;
    cycle text[];
BEGIN
    -- Deferred to commit, so a transaction may reorder a chain in any order of
    -- statements; the row is read again, as it is now.
    SELECT d.namespace, d.source, d.supersedes INTO doc FROM kb.documents AS d WHERE d.id = NEW.id;
    IF NOT FOUND OR doc.supersedes IS NULL THEN
        RETURN NULL;
    END IF;
    -- Two transactions could each add one half of a cycle and see none: the
    -- checks of one namespace take turns on its row of kb.supersedes_turns
    -- (held from here to the commit). Under READ COMMITTED the next check then
    -- reads what the one before it committed; under REPEATABLE READ or
    -- SERIALIZABLE its snapshot cannot, so writing the row the other changed
    -- fails it, and the transaction is to be retried.
    PERFORM kb.take_supersedes_turn(doc.namespace);
    -- Follow `supersedes` from the document (each names at most one other);
    -- a cycle returns to it. A chain that loops elsewhere stops at its repeat.
    WITH RECURSIVE chain (source, path) AS (
        SELECT doc.supersedes, ARRAY[doc.source, doc.supersedes]
        UNION ALL
        SELECT d.supersedes, c.path || d.supersedes
        FROM chain AS c
        INNER JOIN kb.documents AS d ON d.namespace = doc.namespace AND d.source = c.source
        WHERE c.source <> doc.source AND d.supersedes IS NOT NULL
            AND (d.supersedes = doc.source OR d.supersedes <> ALL(c.path))
    )
    SELECT c.path INTO cycle FROM chain AS c WHERE c.source = doc.source LIMIT 1;
    IF cycle IS NOT NULL THEN
        RAISE EXCEPTION 'pgkb: supersedes cycle in namespace "%": %', doc.namespace, array_to_string(cycle, ' -> ')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'documents_supersedes_acyclic',
            DETAIL = 'each document in it would hide the next, so none of them would ever be current',
            HINT = 'a document supersedes an older version of itself: clear supersedes on one of these documents';
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_supersedes_acyclic() IS
'Constraint trigger on kb.documents (deferred to commit): refuses a supersedes chain that returns to where it started (a document superseding itself included).';

DROP TRIGGER IF EXISTS documents_supersedes_acyclic ON kb.documents;
CREATE CONSTRAINT TRIGGER documents_supersedes_acyclic
AFTER INSERT OR UPDATE OF namespace, source, supersedes ON kb.documents
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (new.supersedes IS NOT NULL)
EXECUTE FUNCTION kb.trg_documents_supersedes_acyclic();
