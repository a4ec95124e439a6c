-- Judgments (kb.judgments, migrations/0031 and 0039): who may read and write
-- them, and what a judgment records of who made it. A judgment is under the
-- row-level security of what it judges: its namespace first, then the judged
-- document, then every passage shown with the question (a private
-- document's readers' questions stay theirs). A judgment is never updated in
-- place or deleted: judging again or deleting retires the live one, so the
-- retired rows are its history. An admin's judgment is accepted when made;
-- any other role's is a suggestion until an admin accepts or rejects it.

CREATE OR REPLACE FUNCTION kb.judges_as_admin()
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT pg_has_role(current_user, 'pgkb_admin', 'MEMBER')
        OR pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class AS c
            WHERE c.oid = 'kb.documents'::regclass), 'USAGE')
$$;
COMMENT ON FUNCTION kb.judges_as_admin() IS
'Whether the current role judges as an admin (a member of pgkb_admin, or the owner): its judgments are accepted when made and it may accept or reject others''.';

CREATE OR REPLACE FUNCTION kb.judgment_readable(p_namespace text, p_source text, p_shown text[])
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- SECURITY INVOKER: row-level security of kb.documents decides
    SELECT ((SELECT kb.allowed_namespaces(current_user)) IS NULL
            OR p_namespace IN (SELECT unnest(kb.allowed_namespaces(current_user))))
        AND (p_source IS NULL
            OR EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.namespace = p_namespace AND d.source = p_source))
        AND kb.visible_sources(p_shown)
$$;
COMMENT ON FUNCTION kb.judgment_readable(text, text, text[]) IS
'Whether the current role may read a judgment: its namespace, the judged document (none for a no-answer judgment) and every passage shown with the question (namespace/source) are all the role''s to read.';

CREATE OR REPLACE FUNCTION kb.judgment_case_key(p_namespace text, p_query text, p_context text[], p_as_of date)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT left(md5(
        p_namespace || chr(31) || p_query || chr(31) || array_to_string(p_context, chr(30)) || chr(31)
        || coalesce((p_as_of - date '2000-01-01')::text, '')
    ), 16)
$$;
COMMENT ON FUNCTION kb.judgment_case_key(text, text, text[], date) IS
'The case a judgment belongs to (kb.judgments.case_key): its namespace, question, earlier questions and as_of; the same question at two dates is two cases.';

CREATE OR REPLACE FUNCTION kb.judged_case_id(p_case_key text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT 'judged-' || left(p_case_key, 12) $$;
COMMENT ON FUNCTION kb.judged_case_id(text) IS
'The id a case of judgments goes by (kb.judged_cases.case_id, its golden case''s id, kb.retire_case''s argument), from its kb.judgments.case_key.';

CREATE OR REPLACE FUNCTION kb.trg_judgments_provenance()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF tg_op = 'INSERT' THEN
        -- who judged, and what that makes the judgment, is never the writer's to say
        NEW.judged_by := current_user;
        NEW.case_key := kb.judgment_case_key(NEW.namespace, NEW.query, NEW.context, NEW.as_of);
        NEW.judged_at := now();
        NEW.rater_kind := CASE WHEN kb.judges_as_admin() THEN 'admin' ELSE 'reader' END;
        NEW.status := CASE WHEN NEW.rater_kind = 'admin' THEN 'accepted' ELSE 'suggested' END;
        NEW.reviewed_by := NULL;
        NEW.reviewed_at := NULL;
        NEW.retired_at := NULL;
        NEW.retired_by := NULL;
        RETURN NEW;
    END IF;
    -- what was judged stays as it was judged: only review and retirement change
    NEW.case_key := OLD.case_key;
    IF NEW.status IS DISTINCT FROM OLD.status OR NEW.reviewed_by IS DISTINCT FROM OLD.reviewed_by
        OR NEW.reviewed_at IS DISTINCT FROM OLD.reviewed_at THEN
        IF NOT kb.judges_as_admin() THEN
            RAISE EXCEPTION 'kb.judgments: only an admin accepts or rejects a judgment (judgment %)', OLD.id
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        NEW.reviewed_by := current_user;
        NEW.reviewed_at := now();
    END IF;
    IF NEW.retired_at IS DISTINCT FROM OLD.retired_at OR NEW.retired_by IS DISTINCT FROM OLD.retired_by THEN
        NEW.retired_at := CASE WHEN NEW.retired_at IS NOT NULL THEN now() END;
        NEW.retired_by := CASE WHEN NEW.retired_at IS NOT NULL THEN current_user END;
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_judgments_provenance() IS
'Stamps a new judgment with its rater (judged_by, rater_kind, judged_at) and status (accepted for an admin, else suggested); lets only an admin change a status, stamping the reviewer; stamps who retired or restored a judgment.';

CREATE OR REPLACE TRIGGER judgments_provenance
BEFORE INSERT OR UPDATE ON kb.judgments
FOR EACH ROW EXECUTE FUNCTION kb.trg_judgments_provenance();

ALTER TABLE kb.judgments ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS judged_documents ON kb.judgments;
CREATE POLICY judged_documents ON kb.judgments FOR SELECT
USING (kb.judgment_readable(judgments.namespace, judgments.source, judgments.shown));

DROP POLICY IF EXISTS own_judgments_insert ON kb.judgments;
CREATE POLICY own_judgments_insert ON kb.judgments FOR INSERT
WITH CHECK (
    judgments.judged_by = current_user
    AND kb.judgment_readable(judgments.namespace, judgments.source, judgments.shown)
);

-- a rater retires and restores its own judgments; an admin also reviews,
-- retires and restores those of others it may read
DROP POLICY IF EXISTS own_judgments_update ON kb.judgments;
CREATE POLICY own_judgments_update ON kb.judgments FOR UPDATE
USING (
    (judgments.judged_by = current_user OR kb.judges_as_admin())
    AND kb.judgment_readable(judgments.namespace, judgments.source, judgments.shown)
)
WITH CHECK (
    (judgments.judged_by = current_user OR kb.judges_as_admin())
    AND kb.judgment_readable(judgments.namespace, judgments.source, judgments.shown)
);
DROP POLICY IF EXISTS own_judgments_delete ON kb.judgments;

REVOKE ALL ON kb.judgments FROM public, pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb.judgments TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT INSERT (namespace, query, context, as_of, source, judgment, origin, note, asked_in, shown)
ON kb.judgments TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT UPDATE (status, reviewed_by, reviewed_at, retired_at, retired_by)
ON kb.judgments TO pgkb_reader, pgkb_writer, pgkb_admin;
