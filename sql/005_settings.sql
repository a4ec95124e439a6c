-- Settings lookup shared by ingest and retrieval.

CREATE OR REPLACE FUNCTION kb.setting(p_key text, p_default jsonb)
RETURNS jsonb
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- a session GUC pgkb.<key> overrides kb.settings (handy for evaluation runs)
    SELECT coalesce(
        to_jsonb(nullif(current_setting('pgkb.' || p_key, true), '')),
        (SELECT s.value FROM kb.settings AS s WHERE s.key = p_key AND s.value <> 'null'),
        p_default
    )
$$;
COMMENT ON FUNCTION kb.setting(text, jsonb) IS
'A retrieval setting: the session GUC pgkb.<key> if set, else kb.settings, else the default.';
