-- Small pure helpers of the retrieval legs and filters: literal matching of
-- user text in LIKE and regular expressions, JSON string lists, and the one
-- definition of blank text (bodies and queries).

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

CREATE OR REPLACE FUNCTION kb.blank_class()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Unicode 14.0 Cc, Cf, Zs, Zl and Zp without the prepended concatenation marks;
    -- the same class as pgkb_plpy.vocabulary.BLANK (NUL cannot occur in text)
    SELECT '\u0001-\u0020\u007f-\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f'
        || '\u205f-\u2064\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U00013430-\U00013438'
        || '\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f'
$$;
COMMENT ON FUNCTION kb.blank_class() IS
'The characters that show nothing by themselves (controls, format characters, spaces and separators), as the inside of a regular expression bracket; pgkb_plpy.vocabulary.BLANK is the same class, and tests compare them.';

CREATE OR REPLACE FUNCTION kb.is_blank(p_text text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- a search for one character outside the class: linear, and stops at the first one
    SELECT p_text !~ ('[^' || kb.blank_class() || ']')
$$;
COMMENT ON FUNCTION kb.is_blank(text) IS
'True when the text has no character outside kb.blank_class(): the CHECK documents_body_not_blank and kb_retrieve''s "query is empty" both use it.';

CREATE OR REPLACE FUNCTION kb.strip_blank(p_text text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT regexp_replace(p_text, '^[' || kb.blank_class() || ']+|[' || kb.blank_class() || ']+$', '', 'g')
$$;
COMMENT ON FUNCTION kb.strip_blank(text) IS
'The text without kb.blank_class() characters at either end (pgkb_plpy.vocabulary.strip_blank in SQL).';
