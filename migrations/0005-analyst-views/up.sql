-- callsync warehouse, schema version 5: names next to uids, attempt numbers, units.
--
-- Units. Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS[.fraction]'. The service's spec gives
-- the unit of neither an attempt's `duration` ("duration of the connected call") nor a
-- schedule's or call's `retry_intervals` entries: callsync stores the numbers as the service
-- sends them and assumes SECONDS for both (its simulator reports seconds). Flags are 0/1.
-- Counts are plain numbers of things. callsync's own figures say their unit in their name
-- (`lag_secs`, `throttled_secs`: seconds).
--
-- What changes, keeping every row and every existing column's name, type and place:
-- * call_attempts gains attempt_number (1-based; position is the 0-based index in the
--   service's array). A generated (virtual) column computes it from position, so it is never
--   out of step and BI tools read its declared type INTEGER; readers need SQLite 3.31 (2020)
--   or newer.
-- * schedules may now hold a schedule known only from callsync's configuration
--   (`[[sync.schedule]]` with a name): every column the write commands fill is nullable, and
--   config_name holds the configuration's name. display_name is what BI shows: the
--   configuration's name when it gives one, else the service's. SQLite cannot relax NOT NULL
--   in place, so the table is rebuilt and its rows copied.
-- * call_results, attempt_results and outcome_results gain their schedule's display name as
--   schedule_name, appended after every existing column; attempt_results also gains the
--   call's is_test_call and attempt_number. A view cannot be altered in SQLite: each is
--   dropped and created again, in the same transaction as the version bump.

-- 1 for the first attempt in the service's array. (A comment between a generated column's type
-- and GENERATED would become part of its declared type.)
ALTER TABLE call_attempts ADD COLUMN attempt_number INTEGER GENERATED ALWAYS AS (position + 1) VIRTUAL;

CREATE TABLE schedules_v5 (
    uid             TEXT PRIMARY KEY,
    campaign_uid    TEXT,              -- NULL when callsync did not create it
    name            TEXT,              -- the service's name, as last answered to a write command; NULL when none did
    starts_at       TEXT,              -- UTC
    ends_at         TEXT,              -- UTC
    retry_type      TEXT,
    retry_intervals TEXT,              -- JSON array of seconds (unit assumed, see above); attempts = entries + 1
    is_enabled      INTEGER,           -- 0/1, as last set or answered
    created_at      TEXT,              -- UTC, by the service
    updated_at      TEXT,              -- UTC, by the service
    recorded_at     TEXT,              -- UTC, when a write command last recorded the service's answer
    config_name     TEXT,              -- the name `[[sync.schedule]]` gives it; NULL when the configuration gives none
    display_name    TEXT GENERATED ALWAYS AS (coalesce(config_name, name)) VIRTUAL  -- config_name when set, else name
);
INSERT INTO schedules_v5
    (uid, campaign_uid, name, starts_at, ends_at, retry_type, retry_intervals, is_enabled,
     created_at, updated_at, recorded_at)
SELECT uid, campaign_uid, name, starts_at, ends_at, retry_type, retry_intervals, is_enabled,
       created_at, updated_at, recorded_at
FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_v5 RENAME TO schedules;

DROP VIEW call_results;
DROP VIEW attempt_results;
DROP VIEW outcome_results;

-- One row per call, for BI: plain columns only, so tools read their declared types.
-- Custom parameters: JOIN call_custom_parameters USING (call_uid).
CREATE VIEW call_results AS
SELECT
    c.uid AS call_uid, c.schedule_uid, c.external_id, c.status, c.progress, c.is_test_call,
    c.phone_number, c.phone_e164, c.full_name, c.first_name, c.last_name, c.email,
    c.attempt_count, c.attempts_remaining, c.last_attempt_status, c.last_attempt_started_at,
    c.last_attempt_answered_at, c.last_attempt_ended_at,
    c.last_attempt_duration,                                     -- seconds (assumed)
    c.outcome_names, c.answered, c.transferred, c.notification_count, c.cooldown_until,
    c.created_at, c.updated_at,
    c.phonetic_full_name, c.phonetic_first_name, c.phonetic_last_name, c.event_date_time,
    s.display_name AS schedule_name                              -- NULL when callsync knows no name
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per attempt with its call's schedule, for answer rates and durations.
CREATE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid, a.call_uid, c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at,
    a.duration,                                                  -- seconds (assumed)
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination,
    c.is_test_call,                                              -- the call's, 0/1
    a.attempt_number,                                            -- position + 1
    s.display_name AS schedule_name
FROM call_attempts AS a
JOIN calls AS c ON c.uid = a.call_uid
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per outcome with its call's schedule, for "top outcomes".
CREATE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid, o.call_uid, c.schedule_uid, o.name, o.created_at,
    s.display_name AS schedule_name
FROM attempt_outcomes AS o
JOIN calls AS c ON c.uid = o.call_uid
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;
