-- Passages as the reader gets them (issue 13): each result row carries its
-- provenance, and kb_retrieve can cap the chunks one document contributes and
-- merge adjacent chunks of one document into one passage.
--
-- provenance is one jsonb rather than a dozen typed attributes: the row stays
-- narrow for SELECT *, a parser or chunker that records more adds keys without
-- a type change (and without dropping every function that returns the row),
-- and SQL reads a key as easily as a column (provenance ->> 'parser').
ALTER TYPE kb.retrieval_row ADD ATTRIBUTE provenance jsonb;

-- the assembly arguments of a call, as given (NULL: the setting applies)
ALTER TYPE kb.retrieval_request
ADD ATTRIBUTE max_per_document integer,
ADD ATTRIBUTE merge_adjacent boolean;

-- objects sql/ re-creates with another signature (the assembly arguments)
DROP FUNCTION IF EXISTS public.kb_retrieve(text, integer, text, text, jsonb, timestamptz, text[]);
DROP FUNCTION IF EXISTS public.kb_retrieve_explain(text, integer, text, text, jsonb, timestamptz, text[]);
DROP FUNCTION IF EXISTS kb.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[]);
DROP FUNCTION IF EXISTS kb.validated_request(text, integer, text, text, jsonb, timestamptz, text[]);
DROP FUNCTION IF EXISTS kb.passages(kb.fused_hit[], text, double precision, double precision, integer, double precision);
