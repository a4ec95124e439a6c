-- kb.page_of(integer[], integer) is no longer defined by sql/: nothing called
-- it (a chunk's pages are computed when it is stored: pgkb_plpy.ingest.page_span).
DROP FUNCTION IF EXISTS kb.page_of(integer[], integer);
