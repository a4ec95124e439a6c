-- The doors judgments are made and reviewed through, as their caller (row-level
-- security of sql/096_judgments/01_rules.sql applies): kb.record_judgment
-- (the lab's buttons, a chat product's thumbs-up), kb.review_judgment (an
-- admin accepts or rejects a suggestion), kb.retire_judgment (delete: the row
-- stays as history) and kb.restore_judgment.

CREATE OR REPLACE FUNCTION kb.record_judgment(
    p_namespace text,
    p_query text,
    p_source text,
    p_judgment text,
    p_context text[] DEFAULT NULL,
    p_as_of date DEFAULT NULL,
    p_origin text DEFAULT 'sql',
    p_note text DEFAULT NULL,
    p_asked_in text DEFAULT NULL,
    p_shown text[] DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shown text[];
    live kb.judgments;
    judgment_id bigint;
BEGIN
    -- every bound before any row is read: sizes first, then values
    IF p_namespace IS NULL OR length(p_namespace) > 63 OR p_namespace !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'kb.record_judgment: namespace must be a namespace name (at most 63 characters)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM kb.bounded_text('kb.record_judgment', 'query', p_query);
    IF p_query IS NULL OR btrim(p_query) = '' THEN
        RAISE EXCEPTION 'kb.record_judgment: query must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_judgment IS NULL OR p_judgment NOT IN ('relevant', 'not relevant', 'forbidden', 'no answer') THEN
        RAISE EXCEPTION 'kb.record_judgment: judgment must be relevant, not relevant, forbidden or no answer (got %)',
            left(p_judgment, 40) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_judgment = 'no answer' THEN
        IF p_source IS NOT NULL THEN
            RAISE EXCEPTION 'kb.record_judgment: a no answer judgment names no source (it says nothing in namespace % answers)',
                p_namespace USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_asked_in IS DISTINCT FROM p_namespace THEN
            RAISE EXCEPTION 'kb.record_judgment: no answer is judged of the namespace the question was asked in (asked_in must be %)',
                p_namespace USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF p_source IS NULL OR p_source = '' OR length(p_source) > 1000 THEN
        RAISE EXCEPTION 'kb.record_judgment: source must be a document''s source (1 to 1,000 characters)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_asked_in IS NOT NULL AND p_asked_in !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'kb.record_judgment: asked_in must be a namespace name or NULL (every namespace you read)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_context) > 20 THEN
        RAISE EXCEPTION 'kb.record_judgment: context may hold at most 20 earlier questions (got %)',
            cardinality(p_context) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM kb.bounded_text('kb.record_judgment', 'context', c) FROM unnest(p_context) AS c;
    IF cardinality(p_shown) > 1000 THEN
        RAISE EXCEPTION 'kb.record_judgment: shown may name at most 1,000 passages (got %)',
            cardinality(p_shown) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF p_origin IS NULL OR p_origin = '' OR length(p_origin) > 100 THEN
        RAISE EXCEPTION 'kb.record_judgment: origin must be 1 to 100 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(p_note) > 2000 THEN
        RAISE EXCEPTION 'kb.record_judgment: note must be at most 2,000 characters' USING ERRCODE = 'program_limit_exceeded';
    END IF;
    -- a named refusal, alike for a document that is not there and one the caller may not read
    IF NOT kb.judgment_readable(p_namespace, p_source, '{}') THEN
        RAISE EXCEPTION 'kb.record_judgment: namespace % holds no document % that you may read', p_namespace,
            coalesce(p_source, '(none)') USING ERRCODE = 'insufficient_privilege',
            HINT = 'check the source''s spelling: it is the document''s source as kb_retrieve returns it';
    END IF;
    shown := ARRAY(SELECT DISTINCT s FROM unnest(coalesce(p_shown, '{}')
        || CASE WHEN p_source IS NULL THEN '{}'::text[] ELSE ARRAY[p_namespace || '/' || p_source] END) AS s ORDER BY s);
    IF NOT kb.visible_sources(shown) THEN
        RAISE EXCEPTION 'kb.record_judgment: shown names a passage you may not read (each entry is namespace/source)'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- the role's live judgment of this case and source (the key of judgments_one_live_per_role)
    SELECT j.* INTO live FROM kb.judgments AS j
    WHERE j.namespace = p_namespace AND j.judged_by = current_user AND j.retired_at IS NULL
        AND j.case_key = kb.judgment_case_key(p_namespace, btrim(p_query), coalesce(p_context, '{}'), p_as_of)
        AND j.source IS NOT DISTINCT FROM p_source;
    IF live.id IS NOT NULL AND live.judgment = p_judgment AND live.note IS NOT DISTINCT FROM p_note
        AND live.shown @> shown THEN
        RETURN live.id;  -- judged again alike: nothing new for the history
    END IF;
    IF live.id IS NOT NULL THEN
        UPDATE kb.judgments SET retired_at = now() WHERE id = live.id;
    END IF;
    INSERT INTO kb.judgments AS j (namespace, query, context, as_of, source, judgment, origin, note, asked_in, shown)
    VALUES (p_namespace, btrim(p_query), coalesce(p_context, '{}'), p_as_of, p_source, p_judgment, p_origin, p_note,
        p_asked_in, shown)
    RETURNING j.id INTO judgment_id;
    RETURN judgment_id;
END;
$$;
COMMENT ON FUNCTION kb.record_judgment(text, text, text, text, text[], date, text, text, text, text[]) IS
'Records, as the calling role, that a source answers a question (relevant), does not (not relevant), must never be shown for it (forbidden), or that nothing in the namespace answers it (no answer: p_source NULL, p_asked_in the namespace). p_asked_in: the namespace the question was asked in (NULL: all the role reads); p_shown: namespace/source of every passage shown with the question (the question is readable only by roles that may read all of them). An admin''s judgment is accepted, another role''s suggested. Judging the same question (with its context and as_of) and source again retires the role''s earlier judgment, which stays as history. A source the caller may not read, or that does not exist, is refused alike by name. Bounded: a query of at most kb_pipeline.max_query_chars, at most 20 earlier questions, 1,000 shown passages. Returns the live judgment''s id.';

CREATE OR REPLACE FUNCTION kb.review_judgment(p_id bigint, p_status text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('accepted', 'rejected', 'suggested') THEN
        RAISE EXCEPTION 'kb.review_judgment: status must be accepted, rejected or suggested (got %)', left(p_status, 40)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT kb.judges_as_admin() THEN
        RAISE EXCEPTION 'kb.review_judgment: only an admin (a member of pgkb_admin) accepts or rejects a judgment'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE kb.judgments SET status = p_status WHERE id = p_id AND retired_at IS NULL;
    IF NOT found THEN
        RAISE EXCEPTION 'kb.review_judgment: no live judgment % that you may read', p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN p_id;
END;
$$;
COMMENT ON FUNCTION kb.review_judgment(bigint, text) IS
'An admin accepts (the judgment decides cases), rejects, or returns to suggested a live judgment it may read, stamping itself as reviewer. Returns the id.';

CREATE OR REPLACE FUNCTION kb.retire_judgment(p_id bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    UPDATE kb.judgments SET retired_at = now() WHERE id = p_id AND retired_at IS NULL;
    IF NOT found THEN
        RAISE EXCEPTION 'kb.retire_judgment: no live judgment % that you may change (your own, or any you read as an admin)',
            p_id USING ERRCODE = 'no_data_found';
    END IF;
    RETURN p_id;
END;
$$;
COMMENT ON FUNCTION kb.retire_judgment(bigint) IS
'Deletes a judgment from the cases: it is retired (kept, with who retired it and when) and kb.restore_judgment brings it back. The caller''s own judgments, or any it reads as an admin. Returns the id.';

CREATE OR REPLACE FUNCTION kb.restore_judgment(p_id bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    old kb.judgments;
BEGIN
    SELECT j.* INTO old FROM kb.judgments AS j WHERE j.id = p_id AND j.retired_at IS NOT NULL;
    IF old.id IS NULL OR NOT (old.judged_by = current_user OR kb.judges_as_admin()) THEN
        RAISE EXCEPTION 'kb.restore_judgment: no retired judgment % that you may change', p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    -- the rater's live judgment of the same case and source gives way to it
    UPDATE kb.judgments AS j SET retired_at = now()
    WHERE j.namespace = old.namespace AND j.judged_by = old.judged_by AND j.case_key = old.case_key
        AND j.source IS NOT DISTINCT FROM old.source AND j.retired_at IS NULL;
    UPDATE kb.judgments SET retired_at = NULL WHERE id = p_id;
    RETURN p_id;
END;
$$;
COMMENT ON FUNCTION kb.restore_judgment(bigint) IS
'Makes a retired judgment live again, retiring the same rater''s live judgment of the same case and source. The caller''s own judgments, or any it reads as an admin. Returns the id.';

CREATE OR REPLACE FUNCTION kb.retire_case(p_namespace text, p_case_id text)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    retired integer;
BEGIN
    -- row-level security limits the update to the judgments the caller may change
    UPDATE kb.judgments AS j SET retired_at = now()
    WHERE j.namespace = p_namespace AND kb.judged_case_id(j.case_key) = p_case_id AND j.retired_at IS NULL;
    GET DIAGNOSTICS retired = ROW_COUNT;
    IF retired = 0 THEN
        RAISE EXCEPTION 'kb.retire_case: case % of namespace % has no live judgment that you may change', p_case_id,
            p_namespace USING ERRCODE = 'no_data_found';
    END IF;
    RETURN retired;
END;
$$;
COMMENT ON FUNCTION kb.retire_case(text, text) IS
'Deletes a case (kb.judged_cases.case_id) from the golden set: every live judgment of it the caller may change (its own, or all as an admin) is retired, kept as history; kb.restore_judgment brings each back. Returns how many were retired.';
