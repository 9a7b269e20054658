-- callsync warehouse, schema version 10: each failed pass stores what kind of failure stopped
-- it, so scripts and alerts match kinds, never the words of an error (which change).
--
-- error_kind is one of: config, network, auth, not_found, rate_limited, service, protocol,
-- warehouse, panic (README, "Scripting"; `sync --json` and logs spell them the same). NULL for
-- a pass that did not fail (completed, behind, interrupted — whose `error` says it was
-- interrupted), for one still running, and for passes recorded before this version.
-- (Another change may add its own migration; they apply in the order of their names.)

ALTER TABLE sync_runs ADD COLUMN error_kind TEXT;
