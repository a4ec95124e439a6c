-- Who may read and write the namespace descriptions (table
-- kb.namespace_descriptions, migration 0029): the documents' namespace
-- security. A role reads the descriptions of the namespaces it may read
-- (kb.allowed_namespaces, sql/090_grants/02_tenants.sql, which this file follows);
-- admins write those of the namespaces they may read. The table's owner and
-- roles that bypass row-level security see every row.

REVOKE ALL ON kb.namespace_descriptions FROM public;
GRANT SELECT ON kb.namespace_descriptions TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT INSERT, UPDATE, DELETE ON kb.namespace_descriptions TO pgkb_admin;
ALTER TABLE kb.namespace_descriptions ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS tenant_namespace ON kb.namespace_descriptions;
CREATE POLICY tenant_namespace ON kb.namespace_descriptions FOR SELECT
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR namespace_descriptions.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);
DROP POLICY IF EXISTS admin_namespace ON kb.namespace_descriptions;
CREATE POLICY admin_namespace ON kb.namespace_descriptions TO pgkb_admin
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR namespace_descriptions.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
)
WITH CHECK (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR namespace_descriptions.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);

-- the whole documents of sql/047_documents_for_readers.sql: a security_invoker view, so
-- the policies of kb.documents apply
GRANT SELECT ON kb.current_documents TO pgkb_reader, pgkb_writer, pgkb_admin;
