-- Files as they arrive (issue 30): per-page warnings, OCR of scanned pages
-- deferred to the worker, the limits a parse ran under.
--
-- parse_warnings  what the parser could not do on a page or sheet, a JSON list of
--                 {"page": n or null, "kind", "message"} (kinds: no_text, ocr_pending,
--                 ocr_unreadable, ocr_limit, ocr_off, ocr_unavailable, table_not_parsed,
--                 empty_sheet); NULL when there is nothing to say
-- ocr             OCR of a PDF's image-only pages: {"status", "engine", "pages":
--                 [{"page", "confidence", "chars"}], "pending_pages"}; NULL when no page
--                 needed it
-- ocr_status      pending (image-only pages wait for pgkb worker / kb.ocr_pending),
--                 done; NULL when no page needs OCR
-- parse_limits    the limits of kb.settings (file_max_bytes, file_max_pages,
--                 file_parse_timeout_s, file_max_expansion_ratio, ocr_max_pages) the
--                 last parse ran under: kb.reparse_files retries a failure that a limit
--                 caused only when the limits have changed since
ALTER TABLE kb.documents
ADD COLUMN parse_warnings jsonb,
ADD COLUMN ocr jsonb,
ADD COLUMN ocr_status text,
ADD COLUMN parse_limits jsonb;
ALTER TABLE kb.documents ADD CONSTRAINT documents_ocr_status_known CHECK (ocr_status IN ('pending', 'done'));

-- the worker's queue of scanned pages
CREATE INDEX documents_ocr_pending ON kb.documents (id) WHERE ocr_status = 'pending';

-- kb.py_parse_file takes the limits and the OCR mode now (sql/010_plpython.sql)
DROP FUNCTION IF EXISTS kb.py_parse_file(bytea, text, text);
