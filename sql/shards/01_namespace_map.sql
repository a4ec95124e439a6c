-- A shard coordinator (docs/SCALING.md, "Shards"): a pgkb database that holds
-- no documents, only which namespace lives on which shard (each shard a normal
-- pgkb database), and answers retrievals over all of them with PL/Proxy.
-- Installed by `pgkb shards init` (re-running it changes nothing), not by
-- migrate: only a coordinator needs the plproxy extension. Its tables are
-- run-once migrations (sql/shards/migrations/); these files, re-created on
-- every init, are its code: the namespace map's security and the shards'
-- configuration here, the PL/Proxy functions in 02, retrieval in 03.
--
-- With a namespace, a retrieval goes to the one shard holding it, which has
-- all of that namespace's statistics: its answer is the single node's. Over
-- all namespaces (namespace NULL) one node's statistics are sums and pools over
-- namespaces that now live on different shards: kb_pipeline.retrieve_over_shards
-- (sql/045_shard/03_coordinator_steps.sql) gathers on every shard at once (RUN ON
-- ALL, the PL/Proxy functions of 02_proxy_functions.sql) and judges, fuses, ranks and explains
-- with the node's own steps. A shard that does not answer fails the call with
-- the shard's name: there is no partial answer.

-- Tenants use the coordinator as themselves (kb_shard.configure without a
-- user: each caller reaches the shards as its own role, whose row-level
-- security there decides what it sees). The map is read under the policy of
-- the documents, so a tenant sees only its own namespaces' rows: another
-- tenant's namespace is as unknown to it as one that does not exist. Connect
-- strings are readable by every caller (they name the shard that did not
-- answer in errors), so they must hold no secret: passwords go in the
-- coordinator server's .pgpass or pg_hba.
GRANT USAGE ON SCHEMA kb_shard TO pgkb_reader, pgkb_writer, pgkb_admin;
GRANT SELECT ON kb_shard.shards, kb_shard.namespaces TO pgkb_reader, pgkb_writer, pgkb_admin;
ALTER TABLE kb_shard.namespaces ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_namespace ON kb_shard.namespaces;
CREATE POLICY tenant_namespace ON kb_shard.namespaces
USING (
    (SELECT kb.allowed_namespaces(current_user)) IS NULL
    OR namespaces.namespace IN (SELECT unnest(kb.allowed_namespaces(current_user)))
);

CREATE OR REPLACE FUNCTION kb_shard.partitions(p_shards integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
    -- PL/Proxy maps a partition number with a bit mask, so it wants a power of two
    SELECT CASE WHEN p_shards <= 1 THEN 1 ELSE (2 ^ ceil(log(2, p_shards::numeric)))::integer END
$$;
COMMENT ON FUNCTION kb_shard.partitions(integer) IS
'PL/Proxy partitions for this many shards: the next power of two (PL/Proxy requires one); the partitions past the shards repeat shards'' connect strings.';

CREATE OR REPLACE FUNCTION kb_shard.configure(p_user text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shards integer := (SELECT count(*) FROM kb_shard.shards);
    partitions integer := kb_shard.partitions((SELECT count(*) FROM kb_shard.shards)::integer);
    options text;
BEGIN
    -- Partition i is shard i; partitions past the last shard repeat shard
    -- (i mod shards)'s connect string. PL/Proxy gives partitions with equal
    -- connect strings one connection, and RUN ON ALL runs once per connection,
    -- so every shard answers once; a namespace's partition is its shard's
    -- number, which the bit mask leaves alone.
    IF shards = 0 THEN
        RAISE EXCEPTION 'pgkb shards: no shards to configure'
            USING HINT = 'pgkb shards add NAME CONNECT-STRING first';
    END IF;
    IF (SELECT max(s.shard_no) FROM kb_shard.shards AS s) <> shards - 1 THEN
        RAISE EXCEPTION 'pgkb shards: shard numbers must be 0 to % without gaps', shards - 1;
    END IF;
    SELECT string_agg(format('p%s %L', p.n, s.connect_string), ', ' ORDER BY p.n)
    INTO options
    FROM generate_series(0, partitions - 1) AS p (n)
    INNER JOIN kb_shard.shards AS s ON s.shard_no = p.n % shards;
    DROP SERVER IF EXISTS pgkb_shards CASCADE;
    EXECUTE format('CREATE SERVER pgkb_shards FOREIGN DATA WRAPPER plproxy OPTIONS ('
        'connection_lifetime %L, disable_binary %L, %s)', '1800', '1', options);
    IF p_user IS NULL THEN
        CREATE USER MAPPING FOR PUBLIC SERVER pgkb_shards;
    ELSE
        EXECUTE format('CREATE USER MAPPING FOR PUBLIC SERVER pgkb_shards OPTIONS (user %L)', p_user);
    END IF;
    GRANT USAGE ON FOREIGN SERVER pgkb_shards TO PUBLIC;
    RETURN partitions;
END;
$$;
COMMENT ON FUNCTION kb_shard.configure(text) IS
'(Re)creates the PL/Proxy server pgkb_shards from kb_shard.shards (a power of two of partitions, repeating shards'' connect strings past the last) and its user mapping (p_user: the role the shards are reached as; NULL: each caller''s own). Returns the number of partitions.';
REVOKE EXECUTE ON FUNCTION kb_shard.configure(text) FROM public;

CREATE OR REPLACE FUNCTION kb_shard.partition_of(p_namespace text)
RETURNS integer
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    shard integer := (SELECT n.shard_no FROM kb_shard.namespaces AS n WHERE n.namespace = p_namespace);
BEGIN
    IF shard IS NULL THEN
        RAISE EXCEPTION 'pgkb shards: namespace "%" is not mapped to a shard', p_namespace
            USING HINT = 'pgkb shards map NAMESPACE SHARD (kb_shard.namespaces) before writing to or reading it';
    END IF;
    RETURN shard;
END;
$$;
COMMENT ON FUNCTION kb_shard.partition_of(text) IS
'The PL/Proxy partition (shard number) of a namespace; an error naming the namespace when it is not mapped.';
