-- callsync warehouse, schema version 6: the insertion-ordered layout.
--
-- Why. Until version 5 every child row was keyed and indexed by 36-character random uids: a
-- call with 2 attempts, 4 outcomes, 6 variables, 4 custom parameters and a notification cost
-- about 40 random-key B-tree inserts, each dirtying a page somewhere in the file. Now:
-- * calls and call_attempts have an INTEGER PRIMARY KEY `id`, assigned in insertion order
--   (appended at the end of their B-tree);
-- * every child row carries its call's `call_id` (and outcomes and variables their
--   attempt's `attempt_id`), and the other child tables are WITHOUT ROWID, clustered on
--   (call_id, ...): a call's children are stored together, and a new call's are appended;
-- * every uid stays a plain column with its name, type and meaning (`uid`, `call_uid`,
--   `attempt_uid`), so what BI tools see keeps its meaning; joins by uid still work, joins
--   by id are the fast ones (README, "The warehouse");
-- * a random-key index only where a query needs one: calls(uid) for the writer's upsert and
--   calls(external_id) for analysts looking a contact up. Every other index is justified
--   below by the query that uses it.
-- New columns are appended after the existing ones.
--
-- How. In the one transaction of the migration: the views are dropped, the version 5 tables
-- renamed `*_v5`, the version 6 tables created here; then callsync copies the rows call by
-- call, in insertion order (ids are the version 5 rowids), showing progress, drops the `*_v5`
-- tables, and creates the indexes and views (`after-copy.sql`). A kill at any instant leaves
-- the version 5 file as it was; the next run migrates again.

DROP VIEW call_results;
DROP VIEW attempt_results;
DROP VIEW outcome_results;

ALTER TABLE attempt_outcomes RENAME TO attempt_outcomes_v5;
ALTER TABLE attempt_variables RENAME TO attempt_variables_v5;
ALTER TABLE call_notifications RENAME TO call_notifications_v5;
ALTER TABLE call_custom_parameters RENAME TO call_custom_parameters_v5;
ALTER TABLE call_attempts RENAME TO call_attempts_v5;
ALTER TABLE calls RENAME TO calls_v5;

CREATE TABLE calls (
    uid                      TEXT NOT NULL,      -- unique: calls_by_uid
    schedule_uid             TEXT NOT NULL,
    external_id              TEXT,
    status                   TEXT NOT NULL,
    progress                 TEXT,
    is_test_call             INTEGER,            -- 0/1
    cooldown_until           TIMESTAMP,
    delay                    TEXT,               -- JSON of the service's value (type not shown)
    priority                 TEXT,               -- JSON of the service's value (type not shown)
    attempts_remaining       INTEGER,
    retry_intervals          TEXT,               -- JSON array of integers (seconds, assumed)
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
    -- Per-call summary, derived from the child tables at write time.
    attempt_count            INTEGER NOT NULL DEFAULT 0,
    last_attempt_uid         TEXT,
    last_attempt_status      TEXT,
    last_attempt_started_at  TIMESTAMP,
    last_attempt_answered_at TIMESTAMP,
    last_attempt_ended_at    TIMESTAMP,
    last_attempt_duration    INTEGER,            -- seconds (assumed)
    outcome_names            TEXT,               -- distinct outcome names, ', '-separated, in attempt order
    answered                 INTEGER NOT NULL DEFAULT 0,  -- 1 when any attempt was answered
    transferred              INTEGER NOT NULL DEFAULT 0,  -- 1 when any attempt was transferred
    notification_count       INTEGER NOT NULL DEFAULT 0,
    content_hash             INTEGER NOT NULL,   -- fingerprint of the service's JSON: unchanged calls are not rewritten
    synced_at                TIMESTAMP NOT NULL,
    id                       INTEGER PRIMARY KEY -- in insertion order; the children's call_id
);

CREATE TABLE call_custom_parameters (
    call_uid TEXT NOT NULL,
    name     TEXT NOT NULL,
    value    TEXT,                               -- strings as is; other JSON values as JSON text
    call_id  INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, name)
) WITHOUT ROWID;

CREATE TABLE call_attempts (
    uid                  TEXT NOT NULL,
    call_uid             TEXT NOT NULL,
    position             INTEGER NOT NULL,       -- index in the service's array
    status               TEXT NOT NULL,
    started_at           TIMESTAMP,
    answered_at          TIMESTAMP,
    ended_at             TIMESTAMP,
    duration             INTEGER,                -- seconds (assumed)
    created_at           TIMESTAMP,
    updated_at           TIMESTAMP,
    error_details        TEXT,                   -- JSON, or NULL when no error
    transfer_started_at  TIMESTAMP,
    transfer_answered_at TIMESTAMP,
    transfer_destination TEXT,
    extra                TEXT,
    -- 1 for the first attempt in the service's array. (A comment between a generated column's
    -- type and GENERATED would become part of its declared type.)
    attempt_number       INTEGER GENERATED ALWAYS AS (position + 1) VIRTUAL,
    id                   INTEGER PRIMARY KEY,    -- in insertion order; outcomes' and variables' attempt_id
    call_id              INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE
);

-- Outcomes and variables reference their attempt by attempt_id without a foreign key clause:
-- a clause would make every attempt delete look its outcomes up by attempt_id alone, and the
-- writer deletes them itself, by call_id, when it deletes their attempt.
CREATE TABLE attempt_outcomes (
    uid         TEXT NOT NULL,
    attempt_uid TEXT NOT NULL,
    call_uid    TEXT NOT NULL,
    name        TEXT NOT NULL,
    created_at  TIMESTAMP,
    extra       TEXT,
    attempt_id  INTEGER NOT NULL,                -- call_attempts.id
    call_id     INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, attempt_id, uid)
) WITHOUT ROWID;

CREATE TABLE attempt_variables (
    uid         TEXT NOT NULL,
    attempt_uid TEXT NOT NULL,
    call_uid    TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT,                            -- strings as is; other JSON values as JSON text
    status      TEXT,
    created_at  TIMESTAMP,
    extra       TEXT,
    attempt_id  INTEGER NOT NULL,                -- call_attempts.id
    call_id     INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, attempt_id, uid)
) WITHOUT ROWID;

CREATE TABLE call_notifications (
    uid           TEXT NOT NULL,
    call_uid      TEXT NOT NULL,
    status        TEXT,
    message_count INTEGER,
    delivered_at  TIMESTAMP,
    extra         TEXT,
    call_id       INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, uid)
) WITHOUT ROWID;
