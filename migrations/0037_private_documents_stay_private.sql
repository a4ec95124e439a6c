-- Who may retire a document through `supersedes`: the role ids the writer of a
-- document's `supersedes` reads as, taken when the link is written
-- (kb.trg_documents_supersedes_writer). A link retires its target only when
-- that writer could read it (kb.supersedes_link_holds), so a writer cannot
-- change the lifecycle of a private document it may not read. NULL: a writer
-- that reads every document (the owner, a superuser), as for every link
-- written before this column.
ALTER TABLE kb.documents ADD COLUMN supersedes_writer_ids oid[];
COMMENT ON COLUMN kb.documents.supersedes_writer_ids IS
'The role ids the writer of supersedes read as when it wrote it (kb.session_reader_ids; NULL: a writer that reads every document). Set by a trigger, never by the writer: a link retires a private document only when its writer could read it (kb.supersedes_link_holds).';

-- The supersedes check's turn is taken inside its owner-run trigger now: no
-- role but the owner executes a function that writes kb.supersedes_turns.
DROP FUNCTION IF EXISTS kb.take_supersedes_turn(text);

-- The retrieval log names a private document (one naming readers) only to the
-- roles that may read it: its source is kept apart with the readers it had
-- when it was returned, and kb.retrieval_log_sources shows each reader of the
-- log the names it may read, the others counted.
ALTER TABLE kb.retrieval_log ADD COLUMN private_sources jsonb NOT NULL DEFAULT '[]';
COMMENT ON COLUMN kb.retrieval_log.private_sources IS
'The private documents the call returned: [{"source": "namespace/source", "reader_ids": [...]}], readable only through kb.retrieval_log_sources, which names each to the roles that may read it.';
UPDATE kb.retrieval_log AS l
SET
    private_sources = (
        SELECT jsonb_agg(jsonb_build_object('source', s.source, 'reader_ids', to_jsonb(d.reader_ids)))
        FROM unnest(l.sources) AS s (source)
        INNER JOIN kb.documents AS d ON d.namespace || '/' || d.source = s.source AND d.reader_ids IS NOT NULL
    ),
    sources = array(
        SELECT s.source FROM unnest(l.sources) AS s (source)
        WHERE NOT EXISTS (
            SELECT 1 FROM kb.documents AS d
            WHERE d.namespace || '/' || d.source = s.source AND d.reader_ids IS NOT NULL
        )
    )
WHERE EXISTS (
    SELECT 1 FROM unnest(l.sources) AS s (source)
    INNER JOIN kb.documents AS d ON d.namespace || '/' || d.source = s.source AND d.reader_ids IS NOT NULL
);

-- The roles a shard coordinator reaches this database as: only they may
-- execute the shard doors (kb.shard_corpus, kb.shard_stage_candidates,
-- kb.shard_passages). No row: this database is no shard, and no reader can
-- rank candidates or read passages by chunk id through them.
CREATE TABLE kb.shard_door_roles (
    role_name text PRIMARY KEY,
    opened_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.shard_door_roles IS
'The roles a shard coordinator connects to this database as (kb.open_shard_doors); the shard doors are executable by them only. Empty: this database is no shard.';
