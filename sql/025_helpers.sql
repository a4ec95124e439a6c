-- Small pure helpers of the retrieval legs and filters: literal matching of
-- user text in LIKE and regular expressions, JSON string lists.

CREATE OR REPLACE FUNCTION kb.escape_like(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_')
$$;
COMMENT ON FUNCTION kb.escape_like(text) IS 'Escapes \, % and _ so user text matches literally in LIKE/ILIKE.';

CREATE OR REPLACE FUNCTION kb.escape_regex(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT regexp_replace(p_text, '([][\\.^$*+?(){}|/-])', '\\\1', 'g')
$$;
COMMENT ON FUNCTION kb.escape_regex(text) IS 'Escapes regular expression metacharacters so user text matches literally in ~ and ~*.';

CREATE OR REPLACE FUNCTION kb.json_text_list(p_value jsonb)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT CASE jsonb_typeof(p_value)
        WHEN 'array' THEN ARRAY(SELECT jsonb_array_elements_text(p_value))
        WHEN 'string' THEN ARRAY[p_value #>> '{}']
    END
$$;
COMMENT ON FUNCTION kb.json_text_list(jsonb) IS 'A JSON string or array of strings as text[] (NULL otherwise).';
