-- Roles, first of all files, since later ones grant to them: pgkb_reader
-- retrieves, pgkb_writer also writes documents (the ingest trigger, SECURITY
-- DEFINER, then writes chunks, postings, vectors and the statistics),
-- pgkb_admin also changes settings, models and namespace grants. Grant them to
-- login roles. The privileges are in 090_grants/.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_reader') THEN
        CREATE ROLE pgkb_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_writer') THEN
        CREATE ROLE pgkb_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgkb_admin') THEN
        CREATE ROLE pgkb_admin NOLOGIN;
    END IF;
END;
$$;
