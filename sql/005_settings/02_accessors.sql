-- Reading settings: the checks of a value (kb.setting_range_error,
-- kb.setting_value_error), the trigger that keeps kb.settings inside the
-- shipped catalogue (kb.settings_shipped), the value in force
-- (kb.setting_in_force: a session's override, else the stored value if it is
-- valid, else the default), the one accessor kb.setting and the catalogue view.

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

CREATE OR REPLACE FUNCTION kb.setting_value_error(p_entry kb.settings, p_value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- NULL when p_value may be in force; what is wrong otherwise, without the value
    -- itself (a value of 300 digits would hide the rest of a health report).
    -- PL/pgSQL, one expression, no call: it runs for every setting of every retrieval.
    RETURN CASE
        WHEN p_value IS NULL THEN 'missing from kb.settings'
        WHEN p_value = 'null' AND p_entry.default_value = 'null' THEN NULL
        WHEN p_value = 'null' THEN 'null'
        WHEN p_entry.value_type = 'boolean' AND jsonb_typeof(p_value) <> 'boolean' THEN 'not a boolean'
        WHEN p_entry.value_type = 'integer' AND (jsonb_typeof(p_value) <> 'number' OR p_value::text ~ '[.eE]')
            THEN 'not an integer'
        WHEN p_entry.value_type = 'number' AND jsonb_typeof(p_value) <> 'number' THEN 'not a number'
        WHEN p_entry.value_type = 'text' AND jsonb_typeof(p_value) <> 'string' THEN 'not a string'
        WHEN p_entry.choices IS NOT NULL AND NOT p_entry.choices @> jsonb_build_array(p_value)
            THEN 'not one of ' || p_entry.choices::text
        WHEN p_entry.value_type IN ('integer', 'number')
            AND ((p_value #>> '{}')::numeric < p_entry.min_value OR (p_value #>> '{}')::numeric > p_entry.max_value)
            THEN format('outside its range %s to %s', p_entry.min_value, p_entry.max_value)
    END;
END;
$$;
COMMENT ON FUNCTION kb.setting_value_error(kb.settings, jsonb) IS
'What is wrong with a stored value of the setting p_entry describes (missing, null, not of its type, not one of its choices, outside its range), NULL when it may be in force: the check kb.setting_in_force makes when a value is read.';

CREATE OR REPLACE FUNCTION kb.setting_fallback(p_entry kb.settings)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- The security settings fail closed: a removed or broken row must not turn
    -- tenant isolation or the retrieval log off (kb.tenant_isolation_on reads
    -- tenant_isolation the same way), nor make every retrieval fail
    SELECT CASE WHEN p_entry.key IN ('tenant_isolation', 'retrieval_log') THEN 'true'::jsonb
        ELSE p_entry.default_value END
$$;
COMMENT ON FUNCTION kb.setting_fallback(kb.settings) IS
'The value in force when a setting''s stored value is missing or bad (kb.setting_value_error): its default, except tenant_isolation and retrieval_log, which fail closed (true).';

CREATE OR REPLACE FUNCTION kb.trg_settings_value_in_range()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shipped kb.settings;
    problem text;
    -- the owner (pgkb migrate) writes the catalogue; pgkb_admin only values
    owner boolean := coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user), false)
        OR pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class AS c WHERE c.oid = TG_RELID), 'USAGE');
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- removing tenant_isolation is documented as turning isolation on (and is recorded)
        IF NOT owner AND OLD.key <> 'tenant_isolation' THEN
            RAISE EXCEPTION 'pgkb: only the owner of kb.settings may delete a setting (%)', OLD.key
                USING ERRCODE = 'insufficient_privilege',
                    HINT = format('to go back to the default: UPDATE kb.settings SET value = default_value WHERE key = %L',
                        OLD.key);
        END IF;
        RETURN OLD;
    END IF;
    SELECT c.* INTO shipped FROM unnest(kb.settings_shipped_array()) AS c WHERE c.key = NEW.key;
    IF NOT owner THEN
        IF shipped.key IS NULL THEN
            RAISE EXCEPTION 'pgkb: "%" is not a setting of the catalogue', left(NEW.key, 64)
                USING ERRCODE = 'insufficient_privilege', HINT = 'SELECT key FROM kb.settings_catalogue';
        END IF;
        IF TG_OP = 'UPDATE' AND (OLD.key, OLD.value_type, OLD.default_value, OLD.choices, OLD.session_override,
            OLD.min_value, OLD.max_value, OLD.description) IS DISTINCT FROM (NEW.key, NEW.value_type,
            NEW.default_value, NEW.choices, NEW.session_override, NEW.min_value, NEW.max_value, NEW.description) THEN
            RAISE EXCEPTION 'pgkb: only the owner of kb.settings may change a setting''s key, type, default, choices, range or description (%)',
                OLD.key
                USING ERRCODE = 'insufficient_privilege', HINT = 'an admin changes the value only';
        END IF;
        -- a row an admin adds back is the catalogue's, whatever else the INSERT says
        IF TG_OP = 'INSERT' THEN
            NEW := jsonb_populate_record(shipped, jsonb_build_object('value', NEW.value));
        END IF;
    END IF;
    -- only a value being written is checked, against the shipped range (not the
    -- row's): a value written before a range narrowed is reported by kb.health
    IF shipped.key IS NULL THEN
        shipped := NEW;
    END IF;
    problem := kb.setting_range_error(shipped, NEW.value);
    IF problem IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.value IS DISTINCT FROM OLD.value) THEN
        RAISE EXCEPTION 'pgkb: setting % = %', NEW.key, problem
            USING ERRCODE = 'check_violation', HINT = 'SELECT key, min_value, max_value FROM kb.settings_catalogue';
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_value_in_range() IS
'BEFORE INSERT/UPDATE/DELETE on kb.settings: refuses a value outside the shipped range (kb.settings_shipped), and for roles that do not own kb.settings (pgkb_admin) any change but a value: a key, type, default, choices or range, a key outside the catalogue, a deleted row (bar tenant_isolation, whose removal means on).';

CREATE OR REPLACE TRIGGER settings_value_in_range
BEFORE INSERT OR UPDATE OR DELETE ON kb.settings
FOR EACH ROW EXECUTE FUNCTION kb.trg_settings_value_in_range();

CREATE OR REPLACE FUNCTION kb.setting_in_force(p_entry kb.settings, p_stored jsonb)
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
        RETURN CASE WHEN kb.setting_value_error(p_entry, p_stored) IS NULL THEN p_stored
            ELSE kb.setting_fallback(p_entry) END;
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
COMMENT ON FUNCTION kb.setting_in_force(kb.settings, jsonb) IS
'The value of a setting given its catalogue entry (kb.settings_shipped) and its stored value (NULL: no row): the session GUC pgkb.<key> where the catalogue allows session overrides (checked against the setting''s type, choices and range, an error if bad), else the stored value if kb.setting_value_error finds nothing wrong with it, else kb.setting_fallback (the default; true for tenant_isolation and retrieval_log). kb.setting reads one; kb_pipeline.read_retrieval_settings all of a retrieval''s in one statement.';

CREATE OR REPLACE FUNCTION kb.setting_in_force(p_entry kb.settings)
RETURNS jsonb
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$ SELECT kb.setting_in_force(p_entry, p_entry.value) $$;
COMMENT ON FUNCTION kb.setting_in_force(kb.settings) IS
'kb.setting_in_force(p_entry, p_entry.value): the value in force of a row that carries its own stored value.';

CREATE OR REPLACE FUNCTION kb.setting(p_key text)
RETURNS jsonb
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    entry kb.settings;
BEGIN
    SELECT c.* INTO entry FROM unnest(kb.settings_shipped_array()) AS c WHERE c.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgkb: unknown setting "%"', p_key
            USING HINT = 'the settings and their descriptions: SELECT * FROM kb.settings_catalogue';
    END IF;
    -- NULL when the row is missing: kb.setting_in_force then reads the fallback
    RETURN kb.setting_in_force(entry, (SELECT s.value FROM kb.settings AS s WHERE s.key = p_key));
END;
$$;
COMMENT ON FUNCTION kb.setting(text) IS
'The value of a setting: the session GUC pgkb.<key> where the catalogue allows session overrides, else kb.settings if its value is valid, else the fallback (kb.setting_in_force); a key outside the catalogue (kb.settings_shipped) is an error.';

CREATE OR REPLACE VIEW kb.settings_catalogue WITH (security_invoker = true) AS
SELECT
    c.key,
    kb.setting(c.key) AS value,
    CASE WHEN c.session_override AND nullif(current_setting('pgkb.' || c.key, true), '') IS NOT NULL
        THEN 'session'
        WHEN kb.setting_value_error(c, s.value) IS NOT NULL AND kb.setting_fallback(c) <> c.default_value
            THEN 'fails closed'
        WHEN kb.setting_value_error(c, s.value) IS NOT NULL OR s.value = c.default_value THEN 'default'
        ELSE 'kb.settings' END AS source,
    c.value_type,
    c.default_value,
    c.choices,
    c.session_override,
    c.description,
    c.min_value,
    c.max_value,
    kb.setting_value_error(c, s.value) AS stored_problem
FROM kb.settings_shipped() AS c
LEFT JOIN kb.settings AS s ON s.key = c.key;
COMMENT ON VIEW kb.settings_catalogue IS
'Every setting of the catalogue (kb.settings_shipped) with the value in force for this session, where it comes from (session, kb.settings, or default: also when the stored value is missing or bad; fails closed: tenant_isolation or retrieval_log true for the same reason), its type, description, range (numeric settings) and what is wrong with its stored value (stored_problem, NULL when nothing).';
