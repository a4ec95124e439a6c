-- Namespace grants for row-level security (enforced when the setting
-- tenant_isolation is true; see sql/090_grants.sql).
CREATE TABLE kb.namespace_grants (
    role_name name NOT NULL,
    namespace text NOT NULL,  -- '*' = every namespace
    PRIMARY KEY (role_name, namespace)
);

INSERT INTO kb.settings (key, value, description) VALUES
('tenant_isolation', 'false',
 'true: roles that do not own the kb tables see only the namespaces kb.namespace_grants gives them');
