-- Who may call the shard doors (01_shard_doors.sql): only the roles a
-- coordinator connects to this database as, recorded in kb.shard_door_roles
-- by kb.open_shard_doors (pgkb shards add). The doors write no log row and
-- read as the owner, so on a database that is no shard no role but the
-- owner may execute them.

CREATE OR REPLACE FUNCTION kb.shard_doors()
RETURNS regprocedure[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    SELECT ARRAY[
        'kb.shard_corpus(text[], text)'::regprocedure,
        'kb.shard_stage_candidates(text, integer, text, jsonb, timestamptz, text[], jsonb)'::regprocedure,
        'kb.shard_passages(jsonb)'::regprocedure
    ]
$$;
COMMENT ON FUNCTION kb.shard_doors() IS
'The doors a shard coordinator calls on a shard (kb.shard_corpus, kb.shard_stage_candidates, kb.shard_passages): executable only by the roles of kb.shard_door_roles (kb.grant_shard_doors).';

CREATE OR REPLACE FUNCTION kb.grant_shard_doors()
RETURNS void
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    door regprocedure;
    grantee text;
BEGIN
    -- from the table on every migrate: a role dropped meanwhile is skipped
    FOREACH door IN ARRAY kb.shard_doors() LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC, pgkb_reader, pgkb_writer, pgkb_admin', door);
        FOR grantee IN
            SELECT r.role_name FROM kb.shard_door_roles AS r
            WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS x WHERE x.rolname = r.role_name)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', door, grantee);
        END LOOP;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION kb.grant_shard_doors() IS
'Makes the shard doors (kb.shard_doors) executable by the roles of kb.shard_door_roles and by no other (the owner aside); run by every migrate and by kb.open_shard_doors.';
REVOKE EXECUTE ON FUNCTION kb.grant_shard_doors() FROM public;

CREATE OR REPLACE FUNCTION kb.open_shard_doors(p_role text)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    -- NULL: the coordinator reaches this shard as each caller's own role
    -- (kb_shard.configure without a user), so every role of pgkb's
    IF p_role IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS x WHERE x.rolname = p_role) THEN
        RAISE EXCEPTION 'pgkb shards: role "%" does not exist on this shard', p_role
            USING ERRCODE = 'undefined_object', HINT = 'create the role the coordinator connects as on the shard first';
    END IF;
    INSERT INTO kb.shard_door_roles (role_name)
    SELECT r.name
    FROM unnest(CASE WHEN p_role IS NULL THEN ARRAY['pgkb_reader', 'pgkb_writer', 'pgkb_admin'] ELSE ARRAY[p_role] END)
        AS r (name)
    ON CONFLICT (role_name) DO NOTHING;
    PERFORM kb.grant_shard_doors();
    RETURN ARRAY(SELECT r.role_name FROM kb.shard_door_roles AS r ORDER BY r.role_name);
END;
$$;
COMMENT ON FUNCTION kb.open_shard_doors(text) IS
'Makes this database a shard for a coordinator connecting as p_role (NULL: as each caller''s own role, so pgkb_reader, pgkb_writer and pgkb_admin): records the role in kb.shard_door_roles and grants it the shard doors. The owner''s (pgkb shards add runs it); returns the roles that may call the doors.';
REVOKE EXECUTE ON FUNCTION kb.open_shard_doors(text) FROM public;
