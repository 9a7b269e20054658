-- Schema version 5: each failed pass stores what kind of failure stopped it (the SQLite
-- warehouse's schema 10): config, network, auth, not_found, rate_limited, service, protocol,
-- warehouse or panic; NULL for a pass that did not fail and for passes recorded before.
ALTER TABLE sync_runs ADD COLUMN error_kind text;
