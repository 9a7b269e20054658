-- Schema version 7: the SQLite warehouse's schema 13 (migrations/0013-set-aside-calls): the
-- calls the service listed that callsync could not take as sent, kept with their raw JSON
-- (kind 'malformed': a field that does not fit; 'conflict': a uid another schedule's call
-- has). A later read of the call that fits writes it and deletes its row.
CREATE TABLE set_aside_calls (
    schedule_uid uuid NOT NULL,
    call_uid     uuid NOT NULL,
    kind         text NOT NULL,
    updated_at   timestamptz NOT NULL,
    reason       text NOT NULL,
    raw_json     text NOT NULL,
    first_seen   timestamptz NOT NULL,
    last_seen    timestamptz NOT NULL,
    run_id       bigint,
    PRIMARY KEY (schedule_uid, call_uid)
);
