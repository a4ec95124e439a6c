-- Which documents a retrieval may see: the lifecycle rule of docs/LIFECYCLE.md
-- ("current at as_of"), namespace, filters and the document's readers.
-- kb.in_force is the rule's one spelling; kb.visible_documents applies it to a
-- whole scope, kb.document_is_current to one document, and
-- kb.visible_candidate is the one condition every retrieval leg puts on its
-- candidates; kb.may_read_document is the readers' part of all three.

-- kb.in_force, kb.may_read_document, kb.supersedes_link_holds and
-- kb.visible_candidate carry no SET search_path: a SET clause stops
-- PostgreSQL from inlining a SQL function, and these must become part of the
-- query that calls them (a per-row call costs tens of microseconds, and the
-- legs must keep their plans). Every name in them is
-- schema-qualified; pg_catalog is searched first.

CREATE OR REPLACE FUNCTION kb.install_lifecycle_calendar(p_time_zone text)
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- The calendar's zone is written into kb.in_force as a literal: the rule
    -- is inlined into every leg's query and evaluated per candidate, where
    -- reading kb.settings would cost a query per row; a literal costs nothing,
    -- and replacing the function invalidates the plans that inlined it.
    IF p_time_zone IS NULL OR NOT EXISTS (SELECT 1 FROM pg_timezone_names AS z WHERE z.name = p_time_zone) THEN
        RAISE EXCEPTION 'pgkb: calendar_time_zone "%" is not a time zone name of this server', p_time_zone
            USING ERRCODE = 'invalid_parameter_value',
            HINT = 'a name from pg_timezone_names, e.g. "UTC" or "Asia/Shanghai" (an abbreviation such as CST is ambiguous)';
    END IF;
    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION kb.in_force(
    p_status text, p_effective_from date, p_effective_to date, p_removed_at timestamptz, p_as_of timestamptz
)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
AS $rule$
    -- not a draft, inside its effective window (effective_to inclusive; a
    -- deprecated document needs an end date), not removed from its folder by
    -- then; the day of as_of is its date in the knowledge base's calendar
    -- (the setting calendar_time_zone), whatever the session's TimeZone
    SELECT p_status <> 'draft'
        AND (p_effective_from IS NULL OR p_effective_from <= (p_as_of AT TIME ZONE %1$L)::date)
        AND (p_effective_to IS NULL OR (p_as_of AT TIME ZONE %1$L)::date <= p_effective_to)
        AND (p_status <> 'deprecated' OR p_effective_to IS NOT NULL)
        AND (p_removed_at IS NULL OR p_removed_at > p_as_of)
$rule$
$fn$, p_time_zone);
END;
$$;
COMMENT ON FUNCTION kb.install_lifecycle_calendar(text) IS
'(Re)creates kb.in_force with the calendar''s time zone written into it; run by migrate and whenever the setting calendar_time_zone changes. Refuses a name the server does not know.';
REVOKE EXECUTE ON FUNCTION kb.install_lifecycle_calendar(text) FROM public;

SELECT kb.install_lifecycle_calendar(kb.setting('calendar_time_zone') #>> '{}');
COMMENT ON FUNCTION kb.in_force(text, date, date, timestamptz, timestamptz) IS
'The lifecycle rule''s first half (docs/LIFECYCLE.md): whether a document with these attributes is in force at as_of, the day read in the knowledge base''s calendar. Inlined into its callers; written by kb.install_lifecycle_calendar.';

CREATE OR REPLACE FUNCTION kb.trg_settings_calendar()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
-- an admin may change settings but does not own kb.in_force
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    PERFORM kb.install_lifecycle_calendar(NEW.value #>> '{}');
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_calendar() IS
'AFTER INSERT/UPDATE of the setting calendar_time_zone: applies the new calendar to the lifecycle rule (kb.install_lifecycle_calendar), or refuses the change.';

CREATE OR REPLACE TRIGGER settings_calendar AFTER INSERT OR UPDATE OF value ON kb.settings
FOR EACH ROW WHEN (new.key = 'calendar_time_zone')
EXECUTE FUNCTION kb.trg_settings_calendar();

CREATE OR REPLACE FUNCTION kb.session_reader_ids()
RETURNS oid[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    who name := kb.session_role();
BEGIN
    -- NULL: the session's role reads every document, as row-level security
    -- lets it (superuser, BYPASSRLS, the tables' owner: workers, migrations)
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = who AND (r.rolsuper OR r.rolbypassrls))
        OR pg_has_role(who, (SELECT c.relowner FROM pg_catalog.pg_class AS c WHERE c.oid = 'kb.documents'::regclass),
            'USAGE') THEN
        RETURN NULL;
    END IF;
    RETURN kb.member_role_ids(who);
END;
$$;
COMMENT ON FUNCTION kb.session_reader_ids() IS
'The role ids a document''s readers must name for the session''s role (kb.session_role) to read it: that role, the roles it belongs to and 0 (PUBLIC); NULL when the role reads every document (superuser, BYPASSRLS, the owner).';

CREATE OR REPLACE FUNCTION kb.may_read_document(p_reader_ids oid[])
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
AS $$
    -- A document without readers is read by whoever may read its namespace;
    -- one with readers only by them. The session's ids are an InitPlan of
    -- the calling query, computed once and only when a private document is met.
    SELECT p_reader_ids IS NULL
        OR (SELECT kb.session_reader_ids()) IS NULL
        OR p_reader_ids && (SELECT kb.session_reader_ids())
$$;
COMMENT ON FUNCTION kb.may_read_document(oid[]) IS
'Whether the session''s role may read a document with these reader ids (kb.documents.reader_ids; NULL: everyone who reads its namespace). Part of every retrieval''s visibility: a document the role may not read is, to it, a document that does not exist. Inlined into its callers.';

CREATE OR REPLACE FUNCTION kb.supersedes_link_holds(p_writer_ids oid[], p_target_reader_ids oid[])
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
AS $$
    -- A shared target (no readers) is retired by any link; a private one only
    -- by a link whose writer was one of its readers, or read every document.
    SELECT p_target_reader_ids IS NULL OR p_writer_ids IS NULL OR p_writer_ids && p_target_reader_ids
$$;
COMMENT ON FUNCTION kb.supersedes_link_holds(oid[], oid[]) IS
'Whether a supersedes link retires its target: the target names no readers, or the link''s writer (kb.documents.supersedes_writer_ids; NULL: a writer that read every document) was one of them. Pure. Inlined into the lifecycle rule.';

CREATE OR REPLACE FUNCTION kb.visible_documents(
    p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_shared_only boolean DEFAULT false
)
RETURNS SETOF bigint
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Current at as_of (docs/LIFECYCLE.md): in force, and not replaced: no
    -- document that took effect by as_of names it in `supersedes`, directly
    -- or through a chain (v3 -> v2 -> v1 hides v1 and v2). A replacement took
    -- effect when it was in force on some day up to as_of: in force at as_of
    -- with its end date set aside, and, if removed, removed no earlier than
    -- its first day. A status filter or include_history lifts the rule.
    -- shared_only: as if documents naming readers did not exist, whoever
    -- asks (the set the corpus statistics count, kb.recount_statistics_documents).
    WITH RECURSIVE
    opts AS (
        SELECT
            coalesce((p_filters ->> 'include_history')::boolean, false) OR p_filters ? 'status' AS history,
            kb.json_text_list(p_filters -> 'doc_type') AS doc_types,
            kb.json_text_list(p_filters -> 'status') AS statuses,
            kb.json_text_list(p_filters -> 'tags') AS tags,
            p_filters -> 'metadata' AS meta,
            p_filters ->> 'source_prefix' AS source_prefix
    ),
    scoped AS (
        SELECT d.id, d.namespace, d.source, d.supersedes, d.status, d.effective_from, d.effective_to, d.removed_at,
            d.reader_ids
        FROM kb.documents AS d, opts AS o
        WHERE (p_namespaces IS NULL OR d.namespace = ANY(p_namespaces))
            AND (CASE WHEN p_shared_only THEN d.reader_ids IS NULL ELSE kb.may_read_document(d.reader_ids) END)
            AND (o.doc_types IS NULL OR d.doc_type = ANY(o.doc_types))
            AND (o.statuses IS NULL OR d.status = ANY(o.statuses))
            AND (o.meta IS NULL OR d.metadata @> o.meta)
            AND (o.tags IS NULL OR d.metadata -> 'tags' ?| o.tags)
            AND (o.source_prefix IS NULL OR starts_with(d.source, o.source_prefix))
    ),
    in_force AS (
        SELECT s.* FROM scoped AS s
        WHERE kb.in_force(s.status, s.effective_from, s.effective_to, s.removed_at, p_as_of)
    ),
    replacements AS (
        -- any document (of any scope) that took effect replaces one in the same
        -- namespace; the same test as in kb.document_is_current. One the
        -- session's role may not read replaces nothing for it.
        SELECT d.namespace, d.supersedes AS source, d.source AS origin, d.supersedes_writer_ids AS writer_ids
        FROM kb.documents AS d
        WHERE d.supersedes IS NOT NULL
            AND (CASE WHEN p_shared_only THEN d.reader_ids IS NULL ELSE kb.may_read_document(d.reader_ids) END)
            AND (p_namespaces IS NULL OR d.namespace = ANY(p_namespaces))
            AND kb.in_force(d.status, d.effective_from, CASE WHEN d.effective_to IS NOT NULL THEN 'infinity'::date END,
                NULL, p_as_of)
            AND (d.removed_at IS NULL OR kb.in_force('active', d.effective_from, NULL, NULL, d.removed_at))
    ),
    replaced (namespace, source, origin, writer_ids) AS (
        -- a link whose writer could not read its target retires nothing
        -- (kb.supersedes_link_holds), nor what lies behind that target
        SELECT r.namespace, r.source, r.origin, r.writer_ids FROM replacements AS r
        UNION
        SELECT d.namespace, d.supersedes, x.origin, d.supersedes_writer_ids
        FROM replaced AS x
        INNER JOIN kb.documents AS d ON d.namespace = x.namespace AND d.source = x.source
        WHERE d.supersedes IS NOT NULL AND (CASE WHEN p_shared_only THEN d.reader_ids IS NULL ELSE kb.may_read_document(d.reader_ids) END)
            AND kb.supersedes_link_holds(x.writer_ids, d.reader_ids)
    )
    SELECT s.id FROM scoped AS s, opts AS o WHERE o.history
    UNION ALL
    SELECT f.id FROM in_force AS f, opts AS o
    WHERE NOT o.history
        -- an anti-join over the (small) replaced set, linear in documents
        -- (a cycle, which writes are refused but a database may already hold, does not hide its origin)
        AND NOT EXISTS (
            SELECT 1 FROM replaced AS x
            WHERE x.namespace = f.namespace AND x.source = f.source AND x.source <> x.origin
                AND kb.supersedes_link_holds(x.writer_ids, f.reader_ids)
        )
$$;
COMMENT ON FUNCTION kb.visible_documents(timestamptz, text[], jsonb, boolean) IS
'Ids of the documents a retrieval may use: readable by the session''s role (kb.may_read_document; with shared_only, the documents naming no readers, as if the others did not exist) and current at as_of (docs/LIFECYCLE.md) within the namespaces (NULL: all) and filters; a status filter or include_history returns history too.';

CREATE OR REPLACE FUNCTION kb.filters_restrict(p_filters jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT coalesce((p_filters ->> 'include_history')::boolean, false)
        OR coalesce(p_filters ?| ARRAY['status', 'doc_type', 'metadata', 'tags', 'source_prefix'], false)
$$;
COMMENT ON FUNCTION kb.filters_restrict(jsonb) IS
'True when filters (or include_history) decide visibility, so kb.visible_candidate uses kb.visible_documents instead of kb.document_is_current.';

CREATE OR REPLACE FUNCTION kb.document_is_current(p_document_id bigint, p_as_of timestamptz)
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The per-document form of kb.visible_documents' rule, for retrievals
    -- without filters: a few index probes, not a pass over the documents.
    -- The document must be in force, and none of its successors (every
    -- document naming it in `supersedes`, directly or through others) may
    -- have taken effect by as_of (the same test as in kb.visible_documents).
    -- The successors are read lazily, nearest first, and the first one that
    -- took effect ends the walk: a version behind a long chain of newer ones
    -- costs one probe, not the chain. A successor the session's role may not
    -- read does not exist for it; one whose link's writer could not read the
    -- document it names retires nothing (kb.supersedes_link_holds).
    WITH RECURSIVE successors (id, namespace, source, status, effective_from, effective_to, removed_at, reader_ids) AS (
        SELECT d.id, d.namespace, d.source, d.status, d.effective_from, d.effective_to, d.removed_at, d.reader_ids
        FROM kb.documents AS d
        WHERE d.id = p_document_id
        UNION
        SELECT d.id, d.namespace, d.source, d.status, d.effective_from, d.effective_to, d.removed_at, d.reader_ids
        FROM successors AS c
        INNER JOIN kb.documents AS d ON d.namespace = c.namespace AND d.supersedes = c.source
        WHERE kb.may_read_document(d.reader_ids) AND kb.supersedes_link_holds(d.supersedes_writer_ids, c.reader_ids)
    )
    SELECT coalesce((
        SELECT kb.in_force(d.status, d.effective_from, d.effective_to, d.removed_at, p_as_of)
        FROM kb.documents AS d WHERE d.id = p_document_id
    ), false)
    AND NOT EXISTS (
        SELECT 1 FROM successors AS s
        WHERE s.id <> p_document_id
            AND kb.in_force(s.status, s.effective_from, CASE WHEN s.effective_to IS NOT NULL THEN 'infinity'::date END,
                NULL, p_as_of)
            AND (s.removed_at IS NULL OR kb.in_force('active', s.effective_from, NULL, NULL, s.removed_at))
    )
$$;
COMMENT ON FUNCTION kb.document_is_current(bigint, timestamptz) IS
'Whether one document is current at as_of (docs/LIFECYCLE.md: in force and not replaced by a document that took effect, through chains); the same rule as kb.visible_documents.';

CREATE OR REPLACE FUNCTION kb.visible_candidate(
    p_document_id bigint, p_as_of timestamptz, p_namespaces text[], p_filters jsonb, p_filters_restrict boolean
)
RETURNS SETOF bigint
LANGUAGE sql
STABLE PARALLEL SAFE
ROWS 1
AS $$
    -- The document's id when a retrieval with these arguments may use it, no
    -- row otherwise. Used as CROSS JOIN LATERAL by every leg; inlined, so the
    -- filtered branch stays one hashed subplan of the leg's query (computed
    -- once, not per candidate). Without filters, a document that no document
    -- names in `supersedes` is current exactly when it is in force, judged on
    -- its own row (two index probes); only one that has successors is judged
    -- by kb.document_is_current.
    SELECT d.id
    FROM kb.documents AS d
    WHERE d.id = p_document_id
        AND kb.may_read_document(d.reader_ids)
        AND CASE WHEN p_filters_restrict
            THEN d.id IN (SELECT kb.visible_documents(p_as_of, p_namespaces, p_filters))
            ELSE kb.in_force(d.status, d.effective_from, d.effective_to, d.removed_at, p_as_of) AND (
                NOT EXISTS (
                    SELECT 1 FROM kb.documents AS s
                    WHERE s.namespace = d.namespace AND s.supersedes = d.source AND kb.may_read_document(s.reader_ids)
                        AND kb.supersedes_link_holds(s.supersedes_writer_ids, d.reader_ids)
                )
                OR kb.document_is_current(d.id, p_as_of)
            ) END
$$;
COMMENT ON FUNCTION kb.visible_candidate(bigint, timestamptz, text[], jsonb, boolean) IS
'The visibility condition of every retrieval leg: the document id when the document may be used (readable by the session''s role, kb.may_read_document, and current at as_of, or matching filters that lift the lifecycle rule), else no row. Inlined into its callers.';
