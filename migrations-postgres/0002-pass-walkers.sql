-- Schema version 2: who walked each pass (the SQLite warehouse's schema 8). Several daemons
-- share the schedules; each pass records its host, its `sync.instance` name and its process
-- id. NULL for passes recorded before.
ALTER TABLE sync_runs
    ADD COLUMN host     text,
    ADD COLUMN instance text,
    ADD COLUMN pid      bigint;
