-- Tenants: who may see which namespace (kb.namespace_grants, kb.allowed_namespaces),
-- who may read a private document (its readers' oids), whether isolation is on,
-- and the audit of its changes.

CREATE OR REPLACE FUNCTION kb.trg_namespace_grants_role()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF NEW.role_name = 'public' THEN
        NEW.role_id := 0;
    ELSE
        NEW.role_id := (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = NEW.role_name);
        IF NEW.role_id IS NULL THEN
            RAISE EXCEPTION 'pgkb: cannot grant namespace % to role "%": no such role', NEW.namespace, NEW.role_name
                USING ERRCODE = 'undefined_object',
                    HINT = 'create the role first; ''public'' grants the namespace to every role';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_namespace_grants_role() IS
'BEFORE INSERT/UPDATE on kb.namespace_grants: binds the grant to the role''s oid (0 = PUBLIC) and refuses a role that does not exist, so that dropping a role can never break other tenants'' retrieval.';

DROP TRIGGER IF EXISTS namespace_grants_role ON kb.namespace_grants;
CREATE TRIGGER namespace_grants_role BEFORE INSERT OR UPDATE ON kb.namespace_grants
FOR EACH ROW EXECUTE FUNCTION kb.trg_namespace_grants_role();

-- Document readers, bound the same way: a name becomes the role's oid when
-- the list is written ('public': 0), and an unknown role is refused.
CREATE OR REPLACE FUNCTION kb.trg_documents_readers()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    unknown text;
BEGIN
    IF NEW.readers IS NULL THEN
        NEW.reader_ids := NULL;
        RETURN NEW;
    END IF;
    SELECT r.name INTO unknown
    FROM unnest(NEW.readers) AS r (name)
    WHERE r.name IS NULL OR r.name <> 'public' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS x WHERE x.rolname = r.name)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgkb: document %/% names reader "%": no such role', NEW.namespace, NEW.source, unknown
            USING ERRCODE = 'undefined_object', COLUMN = 'readers',
                HINT = 'readers lists role names (''public'': every role that may read the namespace); NULL: no restriction';
    END IF;
    NEW.reader_ids := ARRAY(
        SELECT DISTINCT CASE WHEN r.name = 'public' THEN 0::oid ELSE (SELECT x.oid FROM pg_catalog.pg_roles AS x WHERE x.rolname = r.name) END
        FROM unnest(NEW.readers) AS r (name)
        ORDER BY 1
    );
    RETURN NEW;
END;
$$;
COMMENT ON FUNCTION kb.trg_documents_readers() IS
'BEFORE INSERT/UPDATE OF readers on kb.documents: binds the readers'' names to role oids (reader_ids; ''public'' is 0) and refuses a name that is no role, so that a dropped role matches nobody and a new role of the same name inherits nothing.';

DROP TRIGGER IF EXISTS documents_readers ON kb.documents;
CREATE TRIGGER documents_readers BEFORE INSERT OR UPDATE OF readers, reader_ids ON kb.documents
FOR EACH ROW EXECUTE FUNCTION kb.trg_documents_readers();

CREATE OR REPLACE FUNCTION kb.member_role_ids(p_role name)
RETURNS oid[]
LANGUAGE sql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- from the membership catalogue, not pg_has_role: a role dropped meanwhile
    -- is simply absent instead of an error
    WITH RECURSIVE member_of (id) AS (
        SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role
        UNION
        SELECT m.roleid FROM pg_catalog.pg_auth_members AS m INNER JOIN member_of AS o ON m.member = o.id
    )
    SELECT ARRAY(SELECT o.id FROM member_of AS o) || '{0}'::oid[]
$$;
COMMENT ON FUNCTION kb.member_role_ids(name) IS
'Oids of p_role and every role it is a member of, directly or not, and 0 (PUBLIC): the roles whose namespace grants apply to p_role.';

CREATE OR REPLACE FUNCTION kb.tenant_isolation_on()
RETURNS boolean
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- Fails closed: only a row saying false turns isolation off. A missing
    -- row or a null value means on (the tables' owner and roles that bypass
    -- row-level security still see everything: kb.allowed_namespaces).
    SELECT NOT coalesce((SELECT s.value = 'false'::jsonb FROM kb.settings AS s WHERE s.key = 'tenant_isolation'), false)
$$;
COMMENT ON FUNCTION kb.tenant_isolation_on() IS
'Whether tenant isolation is on: off only while kb.settings holds tenant_isolation = false (a fresh install''s default); a missing row or a null value means on. Every change is recorded in kb.tenant_isolation_changes. SECURITY DEFINER so that policies work for roles that may not read kb.settings.';

-- Readers see their own grants (those kb.allowed_namespaces needs), admins all.
ALTER TABLE kb.namespace_grants ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON kb.namespace_grants TO public;
DROP POLICY IF EXISTS own_grants ON kb.namespace_grants;
CREATE POLICY own_grants ON kb.namespace_grants FOR SELECT
USING (namespace_grants.role_id = any((SELECT kb.member_role_ids(current_user))::oid[]));
DROP POLICY IF EXISTS admin_grants ON kb.namespace_grants;
CREATE POLICY admin_grants ON kb.namespace_grants TO pgkb_admin USING (true) WITH CHECK (true);

CREATE OR REPLACE FUNCTION kb.trg_settings_tenant_isolation_audit()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- with the owner's rights: an admin who may change settings may not write the record of it
    IF TG_OP = 'DELETE' AND OLD.key = 'tenant_isolation'
        OR TG_OP = 'INSERT' AND NEW.key = 'tenant_isolation'
        OR TG_OP = 'UPDATE' AND NEW.key = 'tenant_isolation' AND NEW.value IS DISTINCT FROM OLD.value THEN
        INSERT INTO kb.tenant_isolation_changes (role_name, login, operation, old_value, new_value)
        VALUES (kb.session_role(), session_user, TG_OP, CASE WHEN TG_OP <> 'INSERT' THEN OLD.value END,
            CASE WHEN TG_OP <> 'DELETE' THEN NEW.value END);
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION kb.trg_settings_tenant_isolation_audit() IS
'Records every change of the setting tenant_isolation (insert, a changed value, delete) in kb.tenant_isolation_changes, with the owner''s rights.';

CREATE OR REPLACE TRIGGER settings_tenant_isolation_audit
AFTER INSERT OR UPDATE OR DELETE ON kb.settings
FOR EACH ROW EXECUTE FUNCTION kb.trg_settings_tenant_isolation_audit();

CREATE OR REPLACE FUNCTION kb.allowed_namespaces(p_role name)
RETURNS text[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- SECURITY INVOKER: the caller reads only the grants of its own roles
    -- (the policy of kb.namespace_grants), and may ask only about itself or a
    -- role it belongs to, so no one learns what other tenants were granted.
    -- (the owner of kb.documents, e.g. inside the retrieval gateways, may ask about any role)
    IF p_role IS DISTINCT FROM current_user AND NOT pg_has_role(current_user, p_role, 'MEMBER')
        AND NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class AS c
            WHERE c.oid = 'kb.documents'::regclass), 'USAGE') THEN
        RAISE EXCEPTION 'pgkb: kb.allowed_namespaces(%) may be asked only about the current role or a role it is a member of', p_role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- NULL = no restriction: isolation off, or a role the policies do not
    -- apply to (superuser, BYPASSRLS, the tables' owner), such as a worker
    -- run by the owner
    IF NOT kb.tenant_isolation_on()
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role AND (r.rolsuper OR r.rolbypassrls))
        OR pg_has_role(p_role, (SELECT c.relowner FROM pg_catalog.pg_class AS c WHERE c.oid = 'kb.documents'::regclass),
            'USAGE') THEN
        RETURN NULL;
    END IF;
    -- the grants ('*' grants every namespace)
    RETURN (
        SELECT CASE WHEN bool_or(g.namespace = '*') THEN NULL ELSE coalesce(array_agg(DISTINCT g.namespace), '{}') END
        FROM kb.namespace_grants AS g
        WHERE g.role_id = ANY(kb.member_role_ids(p_role))
    );
END;
$$;
COMMENT ON FUNCTION kb.allowed_namespaces(name) IS
'Namespaces p_role (the current role or one it belongs to) may see when tenant_isolation is on (NULL: all); used by the row-level security policies, which pass current_user, and by kb.read_scope.';
