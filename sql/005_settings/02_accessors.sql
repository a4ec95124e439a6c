-- Reading settings: the range check (kb.setting_range_error, and the trigger
-- that refuses a stored value out of range), a session's override
-- (kb.setting_in_force), the one accessor kb.setting and the catalogue view.

CREATE OR REPLACE FUNCTION kb.setting_range_error(p_entry kb.settings, p_value jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- NULL when the value is in the setting's range (or the setting has none)
    SELECT CASE WHEN p_entry.value_type IN ('integer', 'number') AND jsonb_typeof(p_value) = 'number'
        AND ((p_value #>> '{}')::numeric < p_entry.min_value OR (p_value #>> '{}')::numeric > p_entry.max_value)
        THEN format('%s is outside its range %s to %s', p_value #>> '{}', p_entry.min_value, p_entry.max_value) END
$$;
COMMENT ON FUNCTION kb.setting_range_error(kb.settings, jsonb) IS
'What is wrong with a value of a numeric setting ("5 is outside its range 0 to 1"), NULL when it is in range: the one range check of kb.settings'' trigger and of session overrides (kb.setting).';

CREATE OR REPLACE FUNCTION kb.trg_settings_value_in_range()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    problem text := kb.setting_range_error(NEW, NEW.value);
BEGIN
    -- only a value being written is checked: a migrate that gives a setting
    -- its range never fails on a value written before
    IF problem IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.value IS DISTINCT FROM OLD.value) THEN
        RAISE EXCEPTION 'pgkb: setting % = %', NEW.key, problem
            USING ERRCODE = 'check_violation', HINT = 'SELECT key, min_value, max_value FROM kb.settings_catalogue';
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_value_in_range() IS
'BEFORE INSERT/UPDATE on kb.settings: refuses a numeric value outside the setting''s range (kb.setting_range_error), naming the setting and its range.';

CREATE OR REPLACE TRIGGER settings_value_in_range
BEFORE INSERT OR UPDATE ON kb.settings
FOR EACH ROW EXECUTE FUNCTION kb.trg_settings_value_in_range();

CREATE OR REPLACE FUNCTION kb.setting_in_force(p_entry kb.settings)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    session_value text;
    value jsonb;
BEGIN
    IF p_entry.session_override THEN
        session_value := nullif(current_setting('pgkb.' || p_entry.key, true), '');
    END IF;
    IF session_value IS NULL THEN
        RETURN p_entry.value;
    END IF;
    -- GUCs are text: a boolean or number must be spelled as JSON spells it
    IF (CASE p_entry.value_type
        WHEN 'boolean' THEN session_value !~ '^(true|false)$'
        WHEN 'integer' THEN session_value !~ '^-?[0-9]+$'
        WHEN 'number' THEN session_value !~ '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'
        ELSE false END) THEN
        RAISE EXCEPTION 'pgkb: session setting pgkb.% = "%" is not a valid %',
            p_entry.key, session_value, p_entry.value_type
            USING HINT = format('RESET pgkb.%s, or SET it to a valid value', p_entry.key);
    END IF;
    value := CASE p_entry.value_type WHEN 'text' THEN to_jsonb(session_value) ELSE session_value::jsonb END;
    IF p_entry.choices IS NOT NULL AND NOT p_entry.choices @> jsonb_build_array(value) THEN
        RAISE EXCEPTION 'pgkb: session setting pgkb.% = "%" is not one of %',
            p_entry.key, session_value, p_entry.choices
            USING HINT = format('RESET pgkb.%s, or SET it to a valid value', p_entry.key);
    END IF;
    IF kb.setting_range_error(p_entry, value) IS NOT NULL THEN
        RAISE EXCEPTION 'pgkb: session setting pgkb.% = %', p_entry.key, kb.setting_range_error(p_entry, value)
            USING HINT = format('RESET pgkb.%s, or SET it within its range', p_entry.key);
    END IF;
    RETURN value;
END;
$$;
COMMENT ON FUNCTION kb.setting_in_force(kb.settings) IS
'The value of a setting given its row of kb.settings: the session GUC pgkb.<key> where the catalogue allows session overrides (checked against the setting''s type, choices and range), else the stored value. kb.setting reads one; kb_pipeline.read_retrieval_settings all of a retrieval''s in one statement.';

CREATE OR REPLACE FUNCTION kb.setting(p_key text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    entry kb.settings;
BEGIN
    SELECT * INTO entry FROM kb.settings AS s WHERE s.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgkb: unknown setting "%"', p_key
            USING HINT = 'the settings and their descriptions: SELECT * FROM kb.settings_catalogue';
    END IF;
    RETURN kb.setting_in_force(entry);
END;
$$;
COMMENT ON FUNCTION kb.setting(text) IS
'The value of a setting: the session GUC pgkb.<key> where the catalogue allows session overrides, else kb.settings (kb.setting_in_force); an unknown key is an error.';

CREATE OR REPLACE VIEW kb.settings_catalogue WITH (security_invoker = true) AS
SELECT
    s.key,
    kb.setting(s.key) AS value,
    CASE WHEN s.session_override AND nullif(current_setting('pgkb.' || s.key, true), '') IS NOT NULL
        THEN 'session'
        WHEN s.value = s.default_value THEN 'default'
        ELSE 'kb.settings' END AS source,
    s.value_type,
    s.default_value,
    s.choices,
    s.session_override,
    s.description,
    s.min_value,
    s.max_value
FROM kb.settings AS s;
COMMENT ON VIEW kb.settings_catalogue IS
'Every setting with the value in force for this session, where it comes from (session, kb.settings or default), its type, description and range (numeric settings).';
