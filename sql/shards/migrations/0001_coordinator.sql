-- The coordinator's tables (docs/SCALING.md, "Shards"), run once by `pgkb shards init` and
-- recorded in kb_shard.schema_migrations. IF NOT EXISTS: a coordinator installed before its
-- migrations were recorded already has them. The drops are of functions whose signature or
-- return type changed: sql/shards/ re-creates them.

CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE SCHEMA IF NOT EXISTS kb_shard;
COMMENT ON SCHEMA kb_shard IS
'A pgkb shard coordinator: the shards, the namespace map and the PL/Proxy functions that fan retrievals and writes out to them.';

CREATE TABLE IF NOT EXISTS kb_shard.shards (
    shard_no integer PRIMARY KEY CHECK (shard_no >= 0 AND shard_no < 256),
    name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    connect_string text NOT NULL UNIQUE
);
COMMENT ON TABLE kb_shard.shards IS
'The shard databases: number (its PL/Proxy partition), name and libpq connect string (without user: the user mapping of the server pgkb_shards gives it). kb_shard.configure turns them into the server.';

CREATE TABLE IF NOT EXISTS kb_shard.namespaces (
    namespace text PRIMARY KEY CHECK (namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
    shard_no integer NOT NULL REFERENCES kb_shard.shards (shard_no)
);
COMMENT ON TABLE kb_shard.namespaces IS
'Which shard holds each namespace: a namespace lives wholly on one shard, so its statistics do too. Writes are routed by it; a namespace found on a shard without a row here fails a retrieval.';

DROP FUNCTION IF EXISTS kb_shard.stage_candidates_on_shards(text, integer, text, jsonb, timestamptz, text[], jsonb);
DROP FUNCTION IF EXISTS kb_shard.passages_on_shards(
    jsonb, text, double precision, double precision, integer, double precision, integer
);
DROP FUNCTION IF EXISTS kb_shard.global_chunk_id(jsonb, bigint);
DROP FUNCTION IF EXISTS kb_shard.retrieve_over_shards(text, integer, text, text, jsonb, timestamptz, text[], integer, boolean);
