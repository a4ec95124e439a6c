-- Judgments (kb.judgments, migrations/0031): who may read and write them,
-- the door applications record feedback through, and the golden cases they
-- become. A judgment is under the row-level security of the document it
-- judges: its namespace first, then the document itself (a private
-- document's judgments are its readers'). A role writes only its own
-- judgments, of documents it may read; the unique key starts with the
-- namespace and the judging role, so a write never meets another tenant's
-- row.

ALTER TABLE kb.judgments ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS judged_documents ON kb.judgments;
CREATE POLICY judged_documents ON kb.judgments FOR SELECT
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR judgments.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.namespace = judgments.namespace AND d.source = judgments.source)
);
DROP POLICY IF EXISTS own_judgments_insert ON kb.judgments;
CREATE POLICY own_judgments_insert ON kb.judgments FOR INSERT
WITH CHECK (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR judgments.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND judgments.judged_by = current_user
    AND EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.namespace = judgments.namespace AND d.source = judgments.source)
);
DROP POLICY IF EXISTS own_judgments_update ON kb.judgments;
CREATE POLICY own_judgments_update ON kb.judgments FOR UPDATE
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR judgments.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND judgments.judged_by = current_user
)
WITH CHECK (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR judgments.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND judgments.judged_by = current_user
    AND EXISTS (SELECT 1 FROM kb.documents AS d WHERE d.namespace = judgments.namespace AND d.source = judgments.source)
);
DROP POLICY IF EXISTS own_judgments_delete ON kb.judgments;
CREATE POLICY own_judgments_delete ON kb.judgments FOR DELETE
USING (
    (
        (SELECT kb.allowed_namespaces(current_user)) IS NULL
        OR judgments.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
    )
    AND judgments.judged_by = current_user
);

REVOKE ALL ON kb.judgments FROM public;
GRANT SELECT, INSERT, DELETE ON kb.judgments TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT UPDATE (context, as_of, judgment, judged_at, origin, note) ON kb.judgments TO pgkb_reader, pgkb_writer, pgkb_admin;

CREATE OR REPLACE FUNCTION kb.record_judgment(
    p_namespace text,
    p_query text,
    p_source text,
    p_judgment text,
    p_context text[] DEFAULT NULL,
    p_as_of date DEFAULT NULL,
    p_origin text DEFAULT 'sql',
    p_note text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
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
    IF p_source IS NULL OR p_source = '' OR length(p_source) > 1000 THEN
        RAISE EXCEPTION 'kb.record_judgment: source must be a document''s source (1 to 1,000 characters)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_judgment IS NULL OR p_judgment NOT IN ('relevant', 'not relevant', 'forbidden') THEN
        RAISE EXCEPTION 'kb.record_judgment: judgment must be relevant, not relevant or forbidden (got %)',
            left(p_judgment, 40) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_context) > 20 THEN
        RAISE EXCEPTION 'kb.record_judgment: context may hold at most 20 earlier questions (got %)',
            cardinality(p_context) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM kb.bounded_text('kb.record_judgment', 'context', c) FROM unnest(p_context) AS c;
    IF p_origin IS NULL OR p_origin = '' OR length(p_origin) > 100 THEN
        RAISE EXCEPTION 'kb.record_judgment: origin must be 1 to 100 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(p_note) > 2000 THEN
        RAISE EXCEPTION 'kb.record_judgment: note must be at most 2,000 characters' USING ERRCODE = 'program_limit_exceeded';
    END IF;
    INSERT INTO kb.judgments AS j (namespace, query, context, as_of, source, judgment, origin, note)
    VALUES (p_namespace, btrim(p_query), coalesce(p_context, '{}'), p_as_of, p_source, p_judgment, p_origin, p_note)
    ON CONFLICT (namespace, judged_by, md5(query), source) DO UPDATE
    SET judgment = excluded.judgment, context = excluded.context, as_of = excluded.as_of,
        judged_at = now(), origin = excluded.origin, note = excluded.note
    RETURNING j.id INTO judgment_id;
    RETURN judgment_id;
END;
$$;
COMMENT ON FUNCTION kb.record_judgment(text, text, text, text, text[], date, text, text) IS
'Records that a source answers a question (relevant), does not (not relevant) or must never be shown for it (forbidden), as the calling role: a chat product''s thumbs-up or a person in the lab. Judging the same question and source again replaces the role''s judgment. Runs as its caller: row-level security accepts only a document the caller may read (else insufficient_privilege). Bounded: a query of at most kb_pipeline.max_query_chars, at most 20 earlier questions, a source of at most 1,000 characters. Returns the judgment''s id.';

CREATE OR REPLACE VIEW kb.judged_cases WITH (security_invoker = true) AS
WITH newest AS (
    -- the newest judgment of each source for a question, whoever gave it
    SELECT DISTINCT ON (j.namespace, j.query, j.source)
        j.namespace, j.query, j.source, j.judgment, j.context, j.as_of, j.judged_by, j.judged_at, j.id
    FROM kb.judgments AS j
    ORDER BY j.namespace ASC, j.query ASC, j.source ASC, j.judged_at DESC, j.id DESC
),

latest AS (
    -- a question's context and as_of: those of its newest judgment
    SELECT
        n.*,
        first_value(n.context) OVER w AS case_context,
        first_value(n.as_of) OVER w AS case_as_of
    FROM newest AS n
    WINDOW w AS (PARTITION BY n.namespace, n.query ORDER BY n.judged_at DESC, n.id DESC)
)

SELECT
    'judged-' || left(md5(l.namespace || '|' || l.query), 10) AS case_id,
    l.namespace,
    l.query,
    l.case_context AS context,
    l.case_as_of AS as_of,
    coalesce(array_agg(l.source ORDER BY l.judged_at) FILTER (WHERE l.judgment = 'relevant'), '{}') AS expected,
    coalesce(array_agg(l.source ORDER BY l.judged_at) FILTER (WHERE l.judgment = 'forbidden'), '{}') AS forbidden,
    coalesce(array_agg(l.source ORDER BY l.judged_at) FILTER (WHERE l.judgment = 'not relevant'), '{}') AS not_relevant,
    array_agg(DISTINCT l.judged_by) AS judged_by,
    max(l.judged_at) AS last_judged_at,
    jsonb_strip_nulls(jsonb_build_object(
        'id', 'judged-' || left(md5(l.namespace || '|' || l.query), 10),
        'category', CASE WHEN bool_or(l.judgment = 'relevant') THEN 'judged' ELSE 'judged-no-answer' END,
        'query', l.query,
        'namespace', l.namespace,
        'context', nullif(l.case_context, '{}'),
        'as_of', l.case_as_of,
        'expected', coalesce(to_jsonb(array_agg(l.source ORDER BY l.judged_at) FILTER (WHERE l.judgment = 'relevant')),
            '[]'),
        'forbidden', coalesce(
            to_jsonb(array_agg(l.source ORDER BY l.judged_at) FILTER (WHERE l.judgment = 'forbidden')), '[]'
        )
    )) AS golden_case
FROM latest AS l
GROUP BY l.namespace, l.query, l.case_context, l.case_as_of;
COMMENT ON VIEW kb.judged_cases IS
'The judgments of each question as a golden case in the format of examples/eval/cases.json (golden_case; `pgkb eval` reads a JSON list of them): expected = the sources judged relevant, forbidden = those judged forbidden, the newest judgment of a source deciding. A question judged only not relevant or forbidden has expected [] (the honest answer may be "no evidence": category judged-no-answer, to review). Rows the role may read only.';
GRANT SELECT ON kb.judged_cases TO pgkb_reader, pgkb_writer, pgkb_admin;

-- evaluations run from the lab run as its role: pgkb_admin stores them
GRANT INSERT ON kb.eval_runs, kb.eval_results TO pgkb_admin;
