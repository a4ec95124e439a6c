-- Tenant hardening: provider secrets kept apart from the model options every
-- reader can read, namespace grants bound to the granted role's oid (a grant
-- to a dropped role then matches nobody, and a new role that reuses the name
-- inherits nothing), and the login role recorded beside the tenant role in
-- the retrieval log.

-- Secrets of a model's provider (an Ollama api_key, credentials in a URL):
-- readers and writers read kb.models, so these live here, admin-only, and are
-- merged into the provider's options only inside the SECURITY DEFINER ingest
-- and query paths. Deferred, so that the trigger on kb.models can store the
-- secret of a model in the same statement that inserts it.
CREATE TABLE kb.model_secrets (
    model text PRIMARY KEY REFERENCES kb.models (name)
    ON UPDATE CASCADE ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    secrets jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(secrets) = 'object'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON kb.model_secrets FROM public;

-- Existing secrets move out of kb.models.options. The rule is the one
-- kb.is_secret_option (sql/020_ingest.sql) applies at the time of this change.
INSERT INTO kb.model_secrets (model, secrets)
SELECT
    m.name AS model,
    jsonb_object_agg(o.key, o.value) AS secrets
FROM kb.models AS m
CROSS JOIN LATERAL jsonb_each(m.options) AS o
WHERE
    o.key ~* '(^|_)(key|secret|token|password|headers|authorization)$'
    OR (jsonb_typeof(o.value) = 'string' AND o.value #>> '{}' ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@')
GROUP BY m.name;

UPDATE kb.models AS m
SET options = m.options - keys.secret_keys
FROM (
    SELECT
        ms.model,
        array_agg(k.key) AS secret_keys
    FROM kb.model_secrets AS ms
    CROSS JOIN LATERAL jsonb_object_keys(ms.secrets) AS k (key)
    GROUP BY ms.model
) AS keys
WHERE keys.model = m.name;

-- Namespace grants name a role; role_id is that role's oid when the grant
-- was made (0 = PUBLIC, every role), filled by the trigger of
-- sql/090_grants.sql. Grants whose role no longer exists grant nothing and
-- made every retrieval fail ("role ... does not exist"): they go.
ALTER TABLE kb.namespace_grants ADD COLUMN role_id oid;
UPDATE kb.namespace_grants AS g
SET role_id = CASE
    WHEN g.role_name = 'public' THEN 0
    ELSE (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = g.role_name)
END;
DELETE FROM kb.namespace_grants WHERE role_id IS NULL;
ALTER TABLE kb.namespace_grants ALTER COLUMN role_id SET NOT NULL;
CREATE INDEX namespace_grants_role ON kb.namespace_grants (role_id);

-- role_name is the role a retrieval ran as (the tenant role under SET ROLE),
-- session_role the login behind it; rows logged so far recorded the login.
ALTER TABLE kb.retrieval_log ADD COLUMN session_role text NOT NULL DEFAULT session_user;
UPDATE kb.retrieval_log SET session_role = role_name;
