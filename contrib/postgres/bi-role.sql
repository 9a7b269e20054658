-- The read-only role for BI tools on a PostgreSQL callsync warehouse (docs/postgres.md,
-- "Create the role and the database"). callsync's first migration does this itself when the role it connects as
-- may create roles; otherwise run it once as a superuser, connected to the warehouse's
-- database (psql -d callsync -f bi-role.sql). Then give each tool a login of its own:
--   CREATE ROLE metabase LOGIN PASSWORD '…' IN ROLE callsync_reader;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        CREATE ROLE callsync_reader NOLOGIN;
    END IF;
END
$$;
GRANT CONNECT ON DATABASE callsync TO callsync_reader;  -- the warehouse's database name
GRANT USAGE ON SCHEMA public TO callsync_reader;        -- the schema callsync's tables are in
GRANT SELECT ON ALL TABLES IN SCHEMA public TO callsync_reader;
-- Tables and views later migrations create, when they run as the role that owns the warehouse:
ALTER DEFAULT PRIVILEGES FOR ROLE callsync IN SCHEMA public GRANT SELECT ON TABLES TO callsync_reader;
