-- The read-only role for BI tools on a PostgreSQL callsync warehouse (docs/postgres.md,
-- "Create the role and the database"). callsync's first migration creates the role itself
-- when the role it connects as may create roles; either way, run this once as a superuser
-- (or the database's owner), connected to the warehouse's database, naming the role callsync
-- logs in as (which owns the tables) and the database:
--   psql -d callsync -v owner=callsync -v db=callsync [-v schema=public] -f bi-role.sql
-- (`schema`: warehouse.schema, public unless set; another schema must exist first: run this
-- after callsync's first start or `callsync migrate`, which create it.) Then give each tool a
-- login of its own:
--   CREATE ROLE metabase LOGIN PASSWORD '…' IN ROLE callsync_reader;

\set ON_ERROR_STOP on
\if :{?owner}
\else
    \warn 'bi-role.sql: name the role callsync logs in as: psql -v owner=ROLE -v db=DATABASE -f bi-role.sql'
    SELECT 'bi-role.sql needs -v owner=ROLE'::int;
\endif
\if :{?db}
\else
    \warn 'bi-role.sql: name the warehouse''s database: psql -v owner=ROLE -v db=DATABASE -f bi-role.sql'
    SELECT 'bi-role.sql needs -v db=DATABASE'::int;
\endif
\if :{?schema}
\else
    \set schema public
\endif

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        CREATE ROLE callsync_reader NOLOGIN;
    END IF;
END
$$;
GRANT CONNECT ON DATABASE :"db" TO callsync_reader;
GRANT USAGE ON SCHEMA :"schema" TO callsync_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA :"schema" TO callsync_reader;
-- Tables and views later migrations create, when they run as the role that owns the warehouse:
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema" GRANT SELECT ON TABLES TO callsync_reader;
