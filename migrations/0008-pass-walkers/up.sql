-- callsync warehouse: which daemon walked each pass. Several `callsync run` daemons may share
-- one warehouse's schedules (each pass holds its schedule's claim); `sync_runs` says who
-- walked it, for `callsync status` and for anyone reading the table. Columns are only added;
-- passes recorded before this migration have NULL there.
-- (Numbered 0008: 0007 is another change's; migrations apply in the order of their names.)

ALTER TABLE sync_runs ADD COLUMN host TEXT;          -- the walking machine's host name
ALTER TABLE sync_runs ADD COLUMN instance TEXT;      -- its `[daemon] instance` (default: the host name)
ALTER TABLE sync_runs ADD COLUMN pid INTEGER;        -- its process id
