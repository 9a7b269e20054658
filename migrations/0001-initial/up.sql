-- callsync warehouse, schema version 1.
-- Table and column names are a contract with BI tools: see README.md, "The warehouse".
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS[.fraction]' (declared TIMESTAMP): text order is
-- time order and SQLite's datetime() compares with them correctly.

CREATE TABLE calls (
    uid                      TEXT PRIMARY KEY NOT NULL,
    schedule_uid             TEXT NOT NULL,
    external_id              TEXT,
    status                   TEXT NOT NULL,
    progress                 TEXT,
    is_test_call             INTEGER,            -- 0/1
    cooldown_until           TIMESTAMP,
    delay                    TEXT,               -- JSON of the service's value (type not shown)
    priority                 TEXT,               -- JSON of the service's value (type not shown)
    attempts_remaining       INTEGER,
    retry_intervals          TEXT,               -- JSON array of integers
    created_at               TIMESTAMP NOT NULL,
    updated_at               TIMESTAMP NOT NULL,
    phone_number             TEXT,               -- as the service returns it (digits)
    phone_e164               TEXT,               -- '+' and the digits
    full_name                TEXT,
    first_name               TEXT,
    last_name                TEXT,
    phonetic_full_name       TEXT,
    phonetic_first_name      TEXT,
    phonetic_last_name       TEXT,
    email                    TEXT,
    event_date_time          TIMESTAMP,
    extra                    TEXT,               -- JSON of fields callsync does not know, or NULL
    -- Per-call summary, derived from the child tables at write time (plain typed columns
    -- so BI tools read their types).
    attempt_count            INTEGER NOT NULL DEFAULT 0,
    last_attempt_uid         TEXT,
    last_attempt_status      TEXT,
    last_attempt_started_at  TIMESTAMP,
    last_attempt_answered_at TIMESTAMP,
    last_attempt_ended_at    TIMESTAMP,
    last_attempt_duration    INTEGER,
    outcome_names            TEXT,               -- distinct outcome names, ', '-separated, in attempt order
    answered                 INTEGER NOT NULL DEFAULT 0,  -- 1 when any attempt was answered
    transferred              INTEGER NOT NULL DEFAULT 0,  -- 1 when any attempt was transferred
    notification_count       INTEGER NOT NULL DEFAULT 0,
    content_hash             INTEGER NOT NULL,   -- fingerprint of the service's JSON: unchanged calls are not rewritten
    synced_at                TIMESTAMP NOT NULL
);
CREATE INDEX calls_by_schedule_updated ON calls (schedule_uid, updated_at);
CREATE INDEX calls_by_schedule_status ON calls (schedule_uid, status, progress);
CREATE INDEX calls_by_updated ON calls (updated_at);
CREATE INDEX calls_by_external_id ON calls (external_id);

CREATE TABLE call_custom_parameters (
    call_uid TEXT NOT NULL REFERENCES calls (uid) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    value    TEXT,                               -- strings as is; other JSON values as JSON text
    PRIMARY KEY (call_uid, name)
) WITHOUT ROWID;
CREATE INDEX call_custom_parameters_by_name ON call_custom_parameters (name, value);

CREATE TABLE call_attempts (
    uid                  TEXT PRIMARY KEY NOT NULL,
    call_uid             TEXT NOT NULL REFERENCES calls (uid) ON DELETE CASCADE,
    position             INTEGER NOT NULL,       -- index in the service's array
    status               TEXT NOT NULL,
    started_at           TIMESTAMP,
    answered_at          TIMESTAMP,
    ended_at             TIMESTAMP,
    duration             INTEGER,
    created_at           TIMESTAMP,
    updated_at           TIMESTAMP,
    error_details        TEXT,                   -- JSON, or NULL when no error
    transfer_started_at  TIMESTAMP,
    transfer_answered_at TIMESTAMP,
    transfer_destination TEXT,
    extra                TEXT
);
CREATE INDEX call_attempts_by_call ON call_attempts (call_uid, position);
CREATE INDEX call_attempts_by_status ON call_attempts (status);

CREATE TABLE attempt_outcomes (
    uid         TEXT PRIMARY KEY NOT NULL,
    attempt_uid TEXT NOT NULL REFERENCES call_attempts (uid) ON DELETE CASCADE,
    call_uid    TEXT NOT NULL REFERENCES calls (uid) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    created_at  TIMESTAMP,
    extra       TEXT
);
CREATE INDEX attempt_outcomes_by_attempt ON attempt_outcomes (attempt_uid);
CREATE INDEX attempt_outcomes_by_call ON attempt_outcomes (call_uid);
CREATE INDEX attempt_outcomes_by_name ON attempt_outcomes (name);

CREATE TABLE attempt_variables (
    uid         TEXT PRIMARY KEY NOT NULL,
    attempt_uid TEXT NOT NULL REFERENCES call_attempts (uid) ON DELETE CASCADE,
    call_uid    TEXT NOT NULL REFERENCES calls (uid) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    value       TEXT,                            -- strings as is; other JSON values as JSON text
    status      TEXT,
    created_at  TIMESTAMP,
    extra       TEXT
);
CREATE INDEX attempt_variables_by_attempt ON attempt_variables (attempt_uid);
CREATE INDEX attempt_variables_by_call ON attempt_variables (call_uid);
CREATE INDEX attempt_variables_by_name ON attempt_variables (name);

CREATE TABLE call_notifications (
    uid           TEXT PRIMARY KEY NOT NULL,
    call_uid      TEXT NOT NULL REFERENCES calls (uid) ON DELETE CASCADE,
    status        TEXT,
    message_count INTEGER,
    delivered_at  TIMESTAMP,
    extra         TEXT
);
CREATE INDEX call_notifications_by_call ON call_notifications (call_uid);

CREATE TABLE sync_checkpoints (
    schedule_uid TEXT PRIMARY KEY NOT NULL,
    cursor       TIMESTAMP NOT NULL,             -- the next pass reads from here (minus the lookback)
    updated_at   TIMESTAMP NOT NULL
);

CREATE TABLE sync_runs (
    id            INTEGER PRIMARY KEY,
    schedule_uid  TEXT NOT NULL,
    kind          TEXT NOT NULL,                 -- incremental | backfill | reconcile
    started_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,                     -- NULL while running (or if the process died)
    pages         INTEGER NOT NULL DEFAULT 0,
    calls_seen    INTEGER NOT NULL DEFAULT 0,
    calls_written INTEGER NOT NULL DEFAULT 0,
    requests      INTEGER NOT NULL DEFAULT 0,
    retries       INTEGER NOT NULL DEFAULT 0,
    error         TEXT                           -- NULL on success
);
CREATE INDEX sync_runs_by_schedule ON sync_runs (schedule_uid, id);

-- One row per call, for BI: plain columns only, so tools read their declared types.
-- Custom parameters: JOIN call_custom_parameters USING (call_uid).
CREATE VIEW call_results AS
SELECT
    uid AS call_uid, schedule_uid, external_id, status, progress, is_test_call,
    phone_number, phone_e164, full_name, first_name, last_name, email,
    attempt_count, attempts_remaining, last_attempt_status, last_attempt_started_at,
    last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
    outcome_names, answered, transferred, notification_count, cooldown_until,
    created_at, updated_at
FROM calls;

-- One row per attempt with its call's schedule, for answer rates and durations.
CREATE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid, a.call_uid, c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at, a.duration,
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination
FROM call_attempts AS a
JOIN calls AS c ON c.uid = a.call_uid;

-- One row per outcome with its call's schedule, for "top outcomes".
CREATE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid, o.call_uid, c.schedule_uid, o.name, o.created_at
FROM attempt_outcomes AS o
JOIN calls AS c ON c.uid = o.call_uid;
