-- kb.retrieve_core builds the explain object only when kb_retrieve_explain
-- asks for it (a new argument); sql/ re-creates it with that signature.
DROP FUNCTION IF EXISTS kb.retrieve_core(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean);
