-- A body made only of characters that show nothing (NBSP, the em and
-- ideographic spaces, zero-width space and joiners, BOM, controls: the class of
-- kb.blank_class) is refused, as plain whitespace was by 0001; same constraint
-- name, so clients that handle documents_body_not_blank keep working.
--
-- The constraint calls kb.is_blank, which must exist before sql/ runs: it is
-- created here as it is at this point, and sql/025_helpers.sql, which owns its
-- definition, re-creates it on every migrate.

CREATE OR REPLACE FUNCTION kb.blank_class()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT '\u0001-\u0020\u007f-\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028-\u202f'
        || '\u205f-\u2064\u2066-\u206f\u3000\ufeff\ufff9-\ufffb\U00013430-\U00013438'
        || '\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f'
$$;

CREATE OR REPLACE FUNCTION kb.is_blank(p_text text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT p_text !~ ('[^' || kb.blank_class() || ']')
$$;

ALTER TABLE kb.documents DROP CONSTRAINT documents_body_not_blank;
ALTER TABLE kb.documents ADD CONSTRAINT documents_body_not_blank CHECK (NOT kb.is_blank(body)) NOT VALID;

-- Validated when every stored body passes. Otherwise new and changed rows are
-- checked from now on, and the stored blank bodies are named so that an admin
-- can fix or delete them (then VALIDATE CONSTRAINT).
DO $$
DECLARE
    blank_ids bigint[] := ARRAY(SELECT d.id FROM kb.documents AS d WHERE kb.is_blank(d.body) ORDER BY d.id);
BEGIN
    IF cardinality(blank_ids) = 0 THEN
        ALTER TABLE kb.documents VALIDATE CONSTRAINT documents_body_not_blank;
    ELSE
        RAISE WARNING 'kb.documents: % stored bodies are blank (ids %); documents_body_not_blank is left NOT VALID',
            cardinality(blank_ids), blank_ids[1:20]
            USING HINT = 'fix or delete them, then ALTER TABLE kb.documents VALIDATE CONSTRAINT documents_body_not_blank';
    END IF;
END;
$$;
