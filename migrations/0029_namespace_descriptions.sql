-- What each namespace holds, in words an assistant can choose a tool by:
-- `pgkb mcp` with PGKB_MCP_NAMESPACE_TOOLS=1 offers one retrieval tool per
-- described namespace (one query tool per system: customer channels,
-- fulfilment, gateway), with this text as the tool's description. The admin
-- maintains the rows in SQL; empty on a fresh install.
--
-- A row is under the row-level security of its namespace's documents
-- (sql/095_namespace_descriptions.sql): a role reads the descriptions of the
-- namespaces it may read and no others, so a tool list never names another
-- tenant's namespace.
CREATE TABLE kb.namespace_descriptions (
    namespace text PRIMARY KEY CONSTRAINT namespace_descriptions_namespace_valid CHECK (
        namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
    ),
    description text NOT NULL CONSTRAINT namespace_descriptions_description_valid CHECK (
        description = btrim(description) AND description <> '' AND length(description) <= 1000
    )
);

COMMENT ON TABLE kb.namespace_descriptions IS
'What each namespace holds, maintained by the admin: the description of the namespace''s own retrieval tool in `pgkb mcp` (PGKB_MCP_NAMESPACE_TOOLS=1). Readers see the rows of the namespaces they may read.';
COMMENT ON COLUMN kb.namespace_descriptions.namespace IS
'A namespace of kb.documents (the same rule for its name); it need not hold documents yet.';
COMMENT ON COLUMN kb.namespace_descriptions.description IS
'What the namespace holds and which questions it answers (at most 1,000 characters), written for an assistant choosing among tools.';
