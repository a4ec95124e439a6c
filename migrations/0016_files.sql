-- Files as documents (issue 13): a document may carry the bytes of a PDF, DOCX,
-- HTML, Markdown or text file; the BEFORE trigger of sql/022_files.sql parses
-- them into body (the text the chunker reads) and records how. The bytes stay
-- stored, so a failed or outdated parse can be repeated (kb.reparse_files).
--
-- file            the file's bytes (NULL for a document inserted as text)
-- file_name       the file's name as given (source holds its NFC form)
-- content_type    the detected media type (application/pdf, ...)
-- byte_size       octet_length(file)
-- file_sha256     hex SHA-256 of file (an unchanged file is not parsed again)
-- parser          the library that parsed it and its version ("pypdfium2 5.15.2 ...")
-- parser_version  pgkb's conversion of that format, "<format>/<version>"
-- parse_error     "<kind>: <message>" when the file could not be parsed (body then
--                 holds a stand-in that is never chunked)
-- page_starts     PDF: offset in body where each page starts (page n at [n])
-- parsed_at       when the bytes were last parsed
-- chunker_version the chunking rules the document's chunks were built with
ALTER TABLE kb.documents
ADD COLUMN file bytea,
ADD COLUMN file_name text,
ADD COLUMN content_type text,
ADD COLUMN byte_size bigint,
ADD COLUMN file_sha256 text,
ADD COLUMN parser text,
ADD COLUMN parser_version text,
ADD COLUMN parse_error text,
ADD COLUMN page_starts integer[],
ADD COLUMN parsed_at timestamptz,
ADD COLUMN chunker_version text;

-- PDF, DOCX and most images are compressed already: do not try again
ALTER TABLE kb.documents ALTER COLUMN file SET STORAGE EXTERNAL;

CREATE INDEX documents_parse_failed ON kb.documents (namespace) WHERE parse_error IS NOT NULL;

-- the pages a chunk's text comes from (PDF; NULL otherwise), 1-based, inclusive
ALTER TABLE kb.chunks
ADD COLUMN page_start integer,
ADD COLUMN page_end integer;
