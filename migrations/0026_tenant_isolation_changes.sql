-- Every change of the setting tenant_isolation, written by a trigger on
-- kb.settings (sql/090_grants.sql) with the owner's rights: who turned
-- isolation on or off, or removed the row (which now means on), and when.
-- Only the owner writes it; pgkb_admin reads it.
CREATE TABLE kb.tenant_isolation_changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at timestamptz NOT NULL DEFAULT now(),
    role_name name NOT NULL,
    login name NOT NULL,
    operation text NOT NULL CHECK (operation IN ('INSERT', 'UPDATE', 'DELETE')),
    old_value jsonb,
    new_value jsonb
);
COMMENT ON TABLE kb.tenant_isolation_changes IS
'Every change of the setting tenant_isolation (insert, update of its value, delete): when, by which role (SET ROLE''s, else the login) and login, the value before and after. Written by a trigger with the owner''s rights; no role inserts into it.';
