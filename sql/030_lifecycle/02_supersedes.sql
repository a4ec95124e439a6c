-- Who may retire a document through `supersedes`, and the refusal of cycles.
-- A link retires its target only when the role that wrote it could read the
-- target (kb.supersedes_link_holds, 01_visibility.sql): a writer cannot
-- change the lifecycle of a private document it may not read, and to that
-- writer the link names nothing.
-- A document may not supersede, through a chain of links that hold, a document
-- that supersedes it: checked at commit by an owner-run constraint trigger
-- that sees every document but names to the writer only those it may read;
-- see docs/LIFECYCLE.md.

CREATE OR REPLACE FUNCTION kb.trg_documents_supersedes_writer()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- Whoever writes supersedes owns the link, whatever the statement says
    -- of supersedes_writer_ids; rewriting other columns keeps it.
    IF TG_OP = 'INSERT' OR NEW.supersedes IS DISTINCT FROM OLD.supersedes
        OR NEW.supersedes_writer_ids IS DISTINCT FROM OLD.supersedes_writer_ids THEN
        NEW.supersedes_writer_ids := CASE WHEN NEW.supersedes IS NOT NULL THEN kb.session_reader_ids() END;
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_supersedes_writer() IS
'BEFORE INSERT/UPDATE OF supersedes, supersedes_writer_ids on kb.documents: records the role ids the session''s role reads as (kb.session_reader_ids) as the link''s writer, so a link retires a private document only when its writer could read it.';

DROP TRIGGER IF EXISTS documents_supersedes_writer ON kb.documents;
CREATE TRIGGER documents_supersedes_writer BEFORE INSERT OR UPDATE OF supersedes, supersedes_writer_ids
ON kb.documents
FOR EACH ROW EXECUTE FUNCTION kb.trg_documents_supersedes_writer();

CREATE OR REPLACE FUNCTION kb.trg_documents_supersedes_acyclic()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
-- Owner-run, so the check follows links through documents the writer may not
-- read; trigger functions cannot be called directly, so no role can make it
-- take the turn below outside a write of its own.
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    doc record;
    cycle text[];
BEGIN
    -- Deferred to commit, so a transaction may reorder a chain in any order of
    -- statements; the row is read again, as it is now.
    SELECT d.namespace, d.source, d.supersedes, d.supersedes_writer_ids, d.reader_ids
    INTO doc FROM kb.documents AS d WHERE d.id = NEW.id;
    IF NOT FOUND OR doc.supersedes IS NULL THEN
        RETURN NULL;
    END IF;
    -- Two transactions could each add one half of a cycle and see none: the
    -- checks of one namespace take turns on its row of kb.supersedes_turns
    -- (held from here to the commit). Under READ COMMITTED the next check then
    -- reads what the one before it committed; under REPEATABLE READ or
    -- SERIALIZABLE its snapshot cannot, so writing the row the other changed
    -- fails it, and the transaction is to be retried.
    BEGIN
        INSERT INTO kb.supersedes_turns AS t (namespace, checks) VALUES (doc.namespace, 1)
        ON CONFLICT (namespace) DO UPDATE SET checks = t.checks + 1;
    EXCEPTION WHEN serialization_failure THEN
        RAISE EXCEPTION 'pgkb: another transaction changed the supersedes chains of namespace "%" since this one began',
            doc.namespace
            USING ERRCODE = 'serialization_failure',
                HINT = 'retry the transaction: its cycle check must see what the other committed';
    END;
    -- Follow the links that hold from the document (each names at most one
    -- other); a cycle returns to it. A chain that loops elsewhere stops at its
    -- repeat. A link that does not hold retires nothing, so closes no cycle.
    WITH RECURSIVE chain (source, writer_ids, path) AS (
        SELECT doc.supersedes, doc.supersedes_writer_ids, ARRAY[doc.source, doc.supersedes]
        UNION ALL
        SELECT d.supersedes, d.supersedes_writer_ids, c.path || d.supersedes
        FROM chain AS c
        INNER JOIN kb.documents AS d ON d.namespace = doc.namespace AND d.source = c.source
        WHERE c.source <> doc.source AND d.supersedes IS NOT NULL
            AND kb.supersedes_link_holds(c.writer_ids, d.reader_ids)
            AND (d.supersedes = doc.source OR d.supersedes <> ALL(c.path))
    )
    SELECT c.path INTO cycle FROM chain AS c
    WHERE c.source = doc.source AND kb.supersedes_link_holds(c.writer_ids, doc.reader_ids)
    LIMIT 1;
    IF cycle IS NOT NULL THEN
        -- the writer is told the names of the documents it may read only
        RAISE EXCEPTION 'pgkb: supersedes cycle in namespace "%": %', doc.namespace,
            array_to_string(ARRAY(
                SELECT CASE WHEN EXISTS (
                        SELECT 1 FROM kb.documents AS d
                        WHERE d.namespace = doc.namespace AND d.source = p.source AND kb.may_read_document(d.reader_ids)
                    ) THEN p.source ELSE '(a document you may not read)' END
                FROM unnest(cycle) WITH ORDINALITY AS p (source, n)
                ORDER BY p.n
            ), ' -> ')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'documents_supersedes_acyclic',
                DETAIL = 'each document in it would hide the next, so none of them would ever be current',
                HINT = 'a document supersedes an older version of itself: clear supersedes on one of these documents';
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_supersedes_acyclic() IS
'Constraint trigger on kb.documents (deferred to commit, owner-run): takes the namespace''s turn in kb.supersedes_turns and refuses a chain of supersedes links that hold (kb.supersedes_link_holds) returning to where it started, naming to the writer only the documents it may read.';

DROP TRIGGER IF EXISTS documents_supersedes_acyclic ON kb.documents;
CREATE CONSTRAINT TRIGGER documents_supersedes_acyclic
AFTER INSERT OR UPDATE OF namespace, source, supersedes, reader_ids ON kb.documents
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (new.supersedes IS NOT NULL)
EXECUTE FUNCTION kb.trg_documents_supersedes_acyclic();
