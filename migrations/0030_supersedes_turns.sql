-- One row per namespace that every supersedes check writes before it reads
-- the chains: two checks of one namespace take turns on the row, and under
-- REPEATABLE READ or SERIALIZABLE the second fails with a serialization
-- failure instead of reading a snapshot that misses the first's half of a
-- cycle. Written by the check (as the owner) only.
CREATE TABLE kb.supersedes_turns (
    namespace text PRIMARY KEY,
    checks bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE kb.supersedes_turns IS
'One row per namespace whose supersedes chains were checked (kb.trg_documents_supersedes_acyclic writes it first): what makes concurrent checks of a namespace take turns, at every isolation level.';
REVOKE ALL ON kb.supersedes_turns FROM public;
