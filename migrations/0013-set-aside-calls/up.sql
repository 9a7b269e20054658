-- callsync warehouse, schema version 13: calls set aside.
--
-- A call the service listed that callsync could not take as sent is kept here, never lost,
-- and never blocks its schedule: the rest of its page is written and the checkpoint moves.
--   kind 'malformed': its uid and updated_at read well but another field does not fit (a
--     string for a boolean, a float or an out-of-range number for an integer, a timestamp
--     that does not parse, a field it needs missing);
--   kind 'conflict': its uid is a call another schedule holds. The stored call stays with
--     its schedule (a call never moves between schedules), and the listing schedule's
--     checkpoint stays before it: the call the listing hid may be any of its neighbours.
-- A later read of the call that fits, under this schedule, writes it and deletes its row.

CREATE TABLE set_aside_calls (
    schedule_uid TEXT NOT NULL,           -- the schedule whose list showed the call
    call_uid     TEXT NOT NULL,
    kind         TEXT NOT NULL,           -- malformed | conflict
    updated_at   TIMESTAMPTZ NOT NULL,    -- the call's updated_at as listed
    reason       TEXT NOT NULL,           -- what did not fit, in callsync's words
    raw_json     TEXT NOT NULL,           -- the call as the service listed it
    first_seen   TIMESTAMPTZ NOT NULL,    -- this machine's clock
    last_seen    TIMESTAMPTZ NOT NULL,
    run_id       INTEGER,                 -- the pass (sync_runs.id) that last saw it
    PRIMARY KEY (schedule_uid, call_uid)
) WITHOUT ROWID;
