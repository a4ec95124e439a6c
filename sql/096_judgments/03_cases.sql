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
    'judged-' || left(s.case_key, 12) AS case_id,
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
        'id', 'judged-' || left(s.case_key, 12),
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
