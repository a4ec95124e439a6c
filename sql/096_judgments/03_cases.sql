-- The golden cases judgments make (kb.judged_cases) and the suggestions
-- waiting for review. A case is a namespace, a question, its earlier
-- questions and its as_of; it reads the live, accepted judgments only:
--   expected     the sources accepted as relevant
--   forbidden    the sources accepted as forbidden
--   no evidence  only from an accepted "no answer" judgment of the namespace
--                (sources judged not relevant say nothing about the rest)
-- and its state says whether it may be used:
--   ready        something relevant, or no answer, and no disagreement
--   disputed     accepted judgments disagree on a source, or "no answer"
--                stands beside a relevant source: an admin decides
--   incomplete   only not relevant or forbidden judgments: no case yet

CREATE OR REPLACE VIEW kb.judged_cases WITH (security_invoker = true) AS
WITH accepted AS (
    SELECT j.*
    FROM kb.judgments AS j
    WHERE j.retired_at IS NULL AND j.status = 'accepted'
),

per_source AS (
    -- one row per case and source (or the case's no-answer stand): what the accepted raters say of it
    SELECT
        a.namespace,
        a.case_key,
        a.source,
        min(a.judgment) AS judgment,
        count(DISTINCT a.judgment) > 1 AS disputed,
        max(a.judged_at) AS judged_at
    FROM accepted AS a
    GROUP BY a.namespace, a.case_key, a.source
),

questions AS (
    SELECT DISTINCT ON (a.namespace, a.case_key)
        a.namespace,
        a.case_key,
        a.query,
        a.context,
        a.as_of
    FROM accepted AS a
    ORDER BY a.namespace ASC, a.case_key ASC, a.id ASC
),

cases AS (
    SELECT
        p.namespace,
        p.case_key,
        coalesce(array_agg(p.source ORDER BY p.judged_at, p.source) FILTER (
            WHERE p.judgment = 'relevant' AND NOT p.disputed
        ), '{}') AS expected,
        coalesce(array_agg(p.source ORDER BY p.judged_at, p.source) FILTER (
            WHERE p.judgment = 'forbidden' AND NOT p.disputed
        ), '{}') AS forbidden,
        coalesce(array_agg(p.source ORDER BY p.judged_at, p.source) FILTER (
            WHERE p.judgment = 'not relevant' AND NOT p.disputed
        ), '{}') AS not_relevant,
        coalesce(array_agg(coalesce(p.source, '(no answer)') ORDER BY p.source) FILTER (WHERE p.disputed), '{}')
            AS disputed,
        bool_or(p.judgment = 'no answer' AND NOT p.disputed) AS no_answer,
        bool_or(p.judgment = 'relevant' AND NOT p.disputed) AS answered,
        max(p.judged_at) AS last_judged_at
    FROM per_source AS p
    GROUP BY p.namespace, p.case_key
),

stated AS (
    SELECT
        c.*,
        CASE
            WHEN cardinality(c.disputed) > 0 OR (c.no_answer AND c.answered) THEN 'disputed'
            WHEN c.answered OR c.no_answer THEN 'ready'
            ELSE 'incomplete'
        END AS state
    FROM cases AS c
)

SELECT
    kb.judged_case_id(s.case_key) AS case_id,
    s.namespace,
    q.query,
    q.context,
    q.as_of,
    s.state,
    s.expected,
    s.forbidden,
    s.not_relevant,
    s.disputed,
    (
        SELECT array_agg(DISTINCT j.judged_by ORDER BY j.judged_by) FROM kb.judgments AS j
        WHERE
            j.namespace = s.namespace AND j.case_key = s.case_key
            AND j.retired_at IS NULL AND j.status = 'accepted'
    ) AS judged_by,
    s.last_judged_at,
    (
        SELECT count(*) FROM kb.judgments AS j
        WHERE
            j.namespace = s.namespace AND j.case_key = s.case_key
            AND j.retired_at IS NULL AND j.status = 'suggested'
    ) AS suggestions,
    jsonb_strip_nulls(jsonb_build_object(
        'id', kb.judged_case_id(s.case_key),
        'category', CASE WHEN s.answered THEN 'judged' ELSE 'judged-no-answer' END,
        'query', q.query,
        'namespace', s.namespace,
        'context', nullif(q.context, '{}'),
        'as_of', q.as_of,
        'expected', to_jsonb(s.expected),
        'forbidden', to_jsonb(s.forbidden)
    )) AS golden_case
FROM stated AS s
INNER JOIN questions AS q ON s.namespace = q.namespace AND s.case_key = q.case_key;
COMMENT ON VIEW kb.judged_cases IS
'The golden cases the live, accepted judgments make, one per namespace, question, earlier questions and as_of, in the format of examples/eval/cases.json (golden_case): expected = sources accepted as relevant, forbidden = accepted as forbidden; no evidence is expected only after an accepted no answer judgment. state: ready (usable), disputed (accepted judgments disagree: an admin decides), incomplete (only not relevant or forbidden). suggestions: live judgments waiting for an admin. Rows the role may read only.';
GRANT SELECT ON kb.judged_cases TO pgkb_reader, pgkb_writer, pgkb_admin;

-- The questions waiting for the calling role's judgment, most useful first.
-- The retrieval log keeps a hash of each question, never its text, so it can
-- rank questions whose text pgkb already holds (evaluation cases), not add
-- new ones. The parts a role may not read (evaluation results, the log) are
-- left out of the statement rather than refused.
CREATE OR REPLACE FUNCTION kb.judging_queue(p_limit integer DEFAULT 50)
RETURNS TABLE (namespace text, query text, context text[], as_of date, reason text, times_logged bigint)
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    parts text[];
    logged text := '0::bigint';
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'kb.judging_queue: p_limit must be between 1 and 1000 (got %)', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- open cases: anyone adds to a case with nothing relevant; an admin settles disputes and suggestions
    parts := ARRAY[$q$
        SELECT c.namespace, c.query, c.context, c.as_of,
            CASE
                WHEN c.state = 'disputed' THEN 'disputed: accepted judgments disagree'
                WHEN c.state = 'incomplete' THEN 'incomplete: nothing judged relevant and no "no answer"'
                ELSE format('%s suggested judgments wait for review', c.suggestions)
            END AS reason,
            CASE WHEN c.state = 'disputed' THEN 1 WHEN c.state = 'incomplete' THEN 3 ELSE 2 END AS priority
        FROM kb.judged_cases AS c
        WHERE c.state = 'incomplete' OR (kb.judges_as_admin() AND (c.state = 'disputed' OR c.suggestions > 0))
        UNION ALL
        SELECT DISTINCT ON (j.namespace, j.case_key) j.namespace, j.query, j.context, j.as_of,
            'suggested judgments wait for review', 2
        FROM kb.judgments AS j
        WHERE kb.judges_as_admin() AND j.retired_at IS NULL AND j.status = 'suggested'
            AND NOT EXISTS (
                SELECT 1 FROM kb.judgments AS a
                WHERE a.namespace = j.namespace AND a.case_key = j.case_key
                    AND a.retired_at IS NULL AND a.status = 'accepted'
            )
    $q$];
    IF has_table_privilege('kb.eval_results', 'SELECT') THEN
        -- evaluation questions no live judgment covers
        parts := parts || ARRAY[$q$
            SELECT e.namespace, e.query, e.context, e.as_of, 'asked in an evaluation run, never judged', 4
            FROM (
                SELECT DISTINCT r.namespace, r.query, coalesce(r.context, '{}') AS context,
                    CASE WHEN r.as_of ~ '^\d{4}-\d{2}-\d{2}' THEN left(r.as_of, 10)::date END AS as_of
                FROM kb.eval_results AS r
                WHERE r.namespace IS NOT NULL AND r.error IS NULL
            ) AS e
            WHERE NOT EXISTS (
                SELECT 1 FROM kb.judgments AS j
                WHERE j.namespace = e.namespace AND j.retired_at IS NULL
                    AND j.case_key = kb.judgment_case_key(e.namespace, e.query, e.context, e.as_of)
            )
        $q$];
    END IF;
    IF has_column_privilege('kb.retrieval_log', 'query_hash', 'SELECT') THEN
        logged := $q$(SELECT count(*) FROM kb.retrieval_log AS l
            WHERE l.query_hash = encode(sha256(convert_to(w.query, 'UTF8')), 'hex'))$q$;
    END IF;
    -- one row a question (its most urgent reason), then the most urgent and most asked first
    RETURN QUERY EXECUTE format($q$
        SELECT v.namespace, v.query, v.context, v.as_of, v.reason, v.times_logged
        FROM (
            SELECT DISTINCT ON (w.namespace, w.query, w.context, w.as_of) w.*, %s AS times_logged
            FROM (%s) AS w
            ORDER BY w.namespace, w.query, w.context, w.as_of, w.priority
        ) AS v
        ORDER BY v.priority, v.times_logged DESC, v.namespace, v.query
        LIMIT $1
    $q$, logged, array_to_string(parts, ' UNION ALL '))
    USING p_limit;
END
$$;
COMMENT ON FUNCTION kb.judging_queue(integer) IS
'The questions waiting for the calling role''s judgment, most useful first: disputed cases and suggestions waiting for review (admins), incomplete cases, then questions of evaluation runs no live judgment covers (roles that read kb.eval_results), those the retrieval log saw most often first (times_logged: log rows with the question''s hash, 0 when the role cannot read the log). Rows the role may read only; at most p_limit (1 to 1000).';
GRANT EXECUTE ON FUNCTION kb.judging_queue(integer) TO pgkb_reader, pgkb_writer, pgkb_admin;
