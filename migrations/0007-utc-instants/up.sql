-- callsync warehouse, schema version 7: timestamps every BI tool reads as UTC instants.
--
-- Why. Until version 6 the time columns held SQLite's own form, 'YYYY-MM-DD HH:MM:SS[.fff[fff]]',
-- without a zone and with a fraction of 0, 3, 6 or 9 digits. Tried on a warehouse: pandas
-- (read_sql with parse_dates) returned naive datetimes, and NaT for every value whose fraction
-- differed from the first row's; the Grafana SQLite data source parses a text time column as
-- RFC 3339 (Go's time.RFC3339), so it read none; and a filter written in the form callsync
-- prints (`updated_at > '2026-11-25T00:00:00'`) compared ' ' with 'T' and matched nothing.
--
-- Now every time column holds RFC 3339 in UTC with exactly six fraction digits and a Z:
-- '2026-11-25T09:30:00.123456Z' (27 characters). Fixed width, so text order is time order;
-- a Z, so pandas gives datetime64[us, UTC], Grafana an instant, and SQLite's date functions
-- (date, datetime, strftime, julianday, unixepoch) read the same instant as before. A finer
-- fraction (nanoseconds) is truncated to the microsecond: the instant at or before.
--
-- What changes, keeping every row, and every column's name and place:
-- * each time column's values are rewritten in place (the old form recognised by its space;
--   a value already in the new form, or NULL, stays as it is);
-- * campaigns, schedules and upload_chunks declared their time columns TEXT: they are rebuilt
--   with TIMESTAMP, as README always said (SQLite cannot change a declared type in place);
--   the views reading schedules are dropped first and created again unchanged.

DROP VIEW call_results;
DROP VIEW attempt_results;
DROP VIEW outcome_results;

UPDATE calls SET
    cooldown_until = CASE WHEN cooldown_until LIKE '____-__-__ __:__:__%'
        THEN substr(cooldown_until, 1, 10) || 'T' || substr(cooldown_until, 12, 8) || '.' || substr(substr(cooldown_until, 21) || '000000', 1, 6) || 'Z'
        ELSE cooldown_until END,
    created_at = CASE WHEN created_at LIKE '____-__-__ __:__:__%'
        THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z'
        ELSE created_at END,
    updated_at = CASE WHEN updated_at LIKE '____-__-__ __:__:__%'
        THEN substr(updated_at, 1, 10) || 'T' || substr(updated_at, 12, 8) || '.' || substr(substr(updated_at, 21) || '000000', 1, 6) || 'Z'
        ELSE updated_at END,
    event_date_time = CASE WHEN event_date_time LIKE '____-__-__ __:__:__%'
        THEN substr(event_date_time, 1, 10) || 'T' || substr(event_date_time, 12, 8) || '.' || substr(substr(event_date_time, 21) || '000000', 1, 6) || 'Z'
        ELSE event_date_time END,
    last_attempt_started_at = CASE WHEN last_attempt_started_at LIKE '____-__-__ __:__:__%'
        THEN substr(last_attempt_started_at, 1, 10) || 'T' || substr(last_attempt_started_at, 12, 8) || '.' || substr(substr(last_attempt_started_at, 21) || '000000', 1, 6) || 'Z'
        ELSE last_attempt_started_at END,
    last_attempt_answered_at = CASE WHEN last_attempt_answered_at LIKE '____-__-__ __:__:__%'
        THEN substr(last_attempt_answered_at, 1, 10) || 'T' || substr(last_attempt_answered_at, 12, 8) || '.' || substr(substr(last_attempt_answered_at, 21) || '000000', 1, 6) || 'Z'
        ELSE last_attempt_answered_at END,
    last_attempt_ended_at = CASE WHEN last_attempt_ended_at LIKE '____-__-__ __:__:__%'
        THEN substr(last_attempt_ended_at, 1, 10) || 'T' || substr(last_attempt_ended_at, 12, 8) || '.' || substr(substr(last_attempt_ended_at, 21) || '000000', 1, 6) || 'Z'
        ELSE last_attempt_ended_at END,
    synced_at = CASE WHEN synced_at LIKE '____-__-__ __:__:__%'
        THEN substr(synced_at, 1, 10) || 'T' || substr(synced_at, 12, 8) || '.' || substr(substr(synced_at, 21) || '000000', 1, 6) || 'Z'
        ELSE synced_at END;

UPDATE call_attempts SET
    started_at = CASE WHEN started_at LIKE '____-__-__ __:__:__%'
        THEN substr(started_at, 1, 10) || 'T' || substr(started_at, 12, 8) || '.' || substr(substr(started_at, 21) || '000000', 1, 6) || 'Z'
        ELSE started_at END,
    answered_at = CASE WHEN answered_at LIKE '____-__-__ __:__:__%'
        THEN substr(answered_at, 1, 10) || 'T' || substr(answered_at, 12, 8) || '.' || substr(substr(answered_at, 21) || '000000', 1, 6) || 'Z'
        ELSE answered_at END,
    ended_at = CASE WHEN ended_at LIKE '____-__-__ __:__:__%'
        THEN substr(ended_at, 1, 10) || 'T' || substr(ended_at, 12, 8) || '.' || substr(substr(ended_at, 21) || '000000', 1, 6) || 'Z'
        ELSE ended_at END,
    created_at = CASE WHEN created_at LIKE '____-__-__ __:__:__%'
        THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z'
        ELSE created_at END,
    updated_at = CASE WHEN updated_at LIKE '____-__-__ __:__:__%'
        THEN substr(updated_at, 1, 10) || 'T' || substr(updated_at, 12, 8) || '.' || substr(substr(updated_at, 21) || '000000', 1, 6) || 'Z'
        ELSE updated_at END,
    transfer_started_at = CASE WHEN transfer_started_at LIKE '____-__-__ __:__:__%'
        THEN substr(transfer_started_at, 1, 10) || 'T' || substr(transfer_started_at, 12, 8) || '.' || substr(substr(transfer_started_at, 21) || '000000', 1, 6) || 'Z'
        ELSE transfer_started_at END,
    transfer_answered_at = CASE WHEN transfer_answered_at LIKE '____-__-__ __:__:__%'
        THEN substr(transfer_answered_at, 1, 10) || 'T' || substr(transfer_answered_at, 12, 8) || '.' || substr(substr(transfer_answered_at, 21) || '000000', 1, 6) || 'Z'
        ELSE transfer_answered_at END;

UPDATE attempt_outcomes SET
    created_at = CASE WHEN created_at LIKE '____-__-__ __:__:__%'
        THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z'
        ELSE created_at END;

UPDATE attempt_variables SET
    created_at = CASE WHEN created_at LIKE '____-__-__ __:__:__%'
        THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z'
        ELSE created_at END;

UPDATE call_notifications SET
    delivered_at = CASE WHEN delivered_at LIKE '____-__-__ __:__:__%'
        THEN substr(delivered_at, 1, 10) || 'T' || substr(delivered_at, 12, 8) || '.' || substr(substr(delivered_at, 21) || '000000', 1, 6) || 'Z'
        ELSE delivered_at END;

UPDATE sync_checkpoints SET
    cursor = CASE WHEN cursor LIKE '____-__-__ __:__:__%'
        THEN substr(cursor, 1, 10) || 'T' || substr(cursor, 12, 8) || '.' || substr(substr(cursor, 21) || '000000', 1, 6) || 'Z'
        ELSE cursor END,
    updated_at = CASE WHEN updated_at LIKE '____-__-__ __:__:__%'
        THEN substr(updated_at, 1, 10) || 'T' || substr(updated_at, 12, 8) || '.' || substr(substr(updated_at, 21) || '000000', 1, 6) || 'Z'
        ELSE updated_at END;

UPDATE sync_runs SET
    started_at = CASE WHEN started_at LIKE '____-__-__ __:__:__%'
        THEN substr(started_at, 1, 10) || 'T' || substr(started_at, 12, 8) || '.' || substr(substr(started_at, 21) || '000000', 1, 6) || 'Z'
        ELSE started_at END,
    finished_at = CASE WHEN finished_at LIKE '____-__-__ __:__:__%'
        THEN substr(finished_at, 1, 10) || 'T' || substr(finished_at, 12, 8) || '.' || substr(substr(finished_at, 21) || '000000', 1, 6) || 'Z'
        ELSE finished_at END,
    horizon = CASE WHEN horizon LIKE '____-__-__ __:__:__%'
        THEN substr(horizon, 1, 10) || 'T' || substr(horizon, 12, 8) || '.' || substr(substr(horizon, 21) || '000000', 1, 6) || 'Z'
        ELSE horizon END;


CREATE TABLE campaigns_v7 (
    uid         TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    type        TEXT NOT NULL,     -- `scheduled_call`
    direction   TEXT NOT NULL,     -- `outbound`
    is_enabled  INTEGER NOT NULL,  -- 0/1, as last answered
    created_at  TIMESTAMP NOT NULL, -- by the service
    updated_at  TIMESTAMP NOT NULL,
    recorded_at TIMESTAMP NOT NULL  -- when callsync last wrote this row
);
INSERT INTO campaigns_v7 (uid, name, type, direction, is_enabled, created_at, updated_at, recorded_at)
SELECT uid, name, type, direction, is_enabled,
       CASE WHEN created_at LIKE '____-__-__ __:__:__%' THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z' ELSE created_at END,
       CASE WHEN updated_at LIKE '____-__-__ __:__:__%' THEN substr(updated_at, 1, 10) || 'T' || substr(updated_at, 12, 8) || '.' || substr(substr(updated_at, 21) || '000000', 1, 6) || 'Z' ELSE updated_at END,
       CASE WHEN recorded_at LIKE '____-__-__ __:__:__%' THEN substr(recorded_at, 1, 10) || 'T' || substr(recorded_at, 12, 8) || '.' || substr(substr(recorded_at, 21) || '000000', 1, 6) || 'Z' ELSE recorded_at END
FROM campaigns;
DROP TABLE campaigns;
ALTER TABLE campaigns_v7 RENAME TO campaigns;

CREATE TABLE schedules_v7 (
    uid             TEXT PRIMARY KEY,
    campaign_uid    TEXT,              -- NULL when callsync did not create it
    name            TEXT,              -- the service's name, as last answered to a write command; NULL when none did
    starts_at       TIMESTAMP,
    ends_at         TIMESTAMP,
    retry_type      TEXT,
    retry_intervals TEXT,              -- JSON array of seconds (unit assumed); attempts = entries + 1
    is_enabled      INTEGER,           -- 0/1, as last set or answered
    created_at      TIMESTAMP,         -- by the service
    updated_at      TIMESTAMP,         -- by the service
    recorded_at     TIMESTAMP,         -- when a write command last recorded the service's answer
    config_name     TEXT,              -- the name `[[sync.schedule]]` gives it; NULL when the configuration gives none
    display_name    TEXT GENERATED ALWAYS AS (coalesce(config_name, name)) VIRTUAL  -- config_name when set, else name
);
INSERT INTO schedules_v7
    (uid, campaign_uid, name, starts_at, ends_at, retry_type, retry_intervals, is_enabled,
     created_at, updated_at, recorded_at, config_name)
SELECT uid, campaign_uid, name,
       CASE WHEN starts_at LIKE '____-__-__ __:__:__%' THEN substr(starts_at, 1, 10) || 'T' || substr(starts_at, 12, 8) || '.' || substr(substr(starts_at, 21) || '000000', 1, 6) || 'Z' ELSE starts_at END,
       CASE WHEN ends_at LIKE '____-__-__ __:__:__%' THEN substr(ends_at, 1, 10) || 'T' || substr(ends_at, 12, 8) || '.' || substr(substr(ends_at, 21) || '000000', 1, 6) || 'Z' ELSE ends_at END,
       retry_type, retry_intervals, is_enabled,
       CASE WHEN created_at LIKE '____-__-__ __:__:__%' THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z' ELSE created_at END,
       CASE WHEN updated_at LIKE '____-__-__ __:__:__%' THEN substr(updated_at, 1, 10) || 'T' || substr(updated_at, 12, 8) || '.' || substr(substr(updated_at, 21) || '000000', 1, 6) || 'Z' ELSE updated_at END,
       CASE WHEN recorded_at LIKE '____-__-__ __:__:__%' THEN substr(recorded_at, 1, 10) || 'T' || substr(recorded_at, 12, 8) || '.' || substr(substr(recorded_at, 21) || '000000', 1, 6) || 'Z' ELSE recorded_at END,
       config_name
FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_v7 RENAME TO schedules;

CREATE TABLE upload_chunks_v7 (
    schedule_uid TEXT NOT NULL,     -- the schedule the calls were sent to
    fingerprint  TEXT NOT NULL,     -- SHA-256 of the CSV file's bytes and the column mapping
    first_line   INTEGER NOT NULL,  -- CSV line of the chunk's first row (the header is line 1)
    last_line    INTEGER NOT NULL,  -- CSV line of its last row
    rows         INTEGER NOT NULL,  -- rows in the chunk
    -- 'sent': sent, and the service's answer not seen (yet); 'created': the service created
    -- the chunk's calls, whose uids are in call_uids
    state        TEXT NOT NULL CHECK (state IN ('sent', 'created')),
    call_uids    TEXT,              -- JSON array of the new calls' uids, in row order
    sent_at      TIMESTAMP NOT NULL,
    created_at   TIMESTAMP,         -- when the creation was confirmed
    PRIMARY KEY (schedule_uid, fingerprint, first_line)
) WITHOUT ROWID;
INSERT INTO upload_chunks_v7
SELECT schedule_uid, fingerprint, first_line, last_line, rows, state, call_uids,
       CASE WHEN sent_at LIKE '____-__-__ __:__:__%' THEN substr(sent_at, 1, 10) || 'T' || substr(sent_at, 12, 8) || '.' || substr(substr(sent_at, 21) || '000000', 1, 6) || 'Z' ELSE sent_at END,
       CASE WHEN created_at LIKE '____-__-__ __:__:__%' THEN substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || substr(substr(created_at, 21) || '000000', 1, 6) || 'Z' ELSE created_at END
FROM upload_chunks;
DROP TABLE upload_chunks;
ALTER TABLE upload_chunks_v7 RENAME TO upload_chunks;

-- Absent is NULL everywhere: the service sends '' for a phonetic name it has not got, and
-- callsync stored it as sent, while every other absent value is NULL. (A '' in the other
-- contact columns is kept: an empty name is what the service was told, and `external_id` is
-- matched as given.)
UPDATE calls SET phonetic_full_name = NULL WHERE phonetic_full_name = '';
UPDATE calls SET phonetic_first_name = NULL WHERE phonetic_first_name = '';
UPDATE calls SET phonetic_last_name = NULL WHERE phonetic_last_name = '';

-- Days in the analyst's time zone. SQLite has no time-zone database, so callsync keeps the
-- UTC offsets of `warehouse.timezone` (an IANA name) here: each row holds from its starts_at
-- (a UTC instant, this table's form of every timestamp) until the next row's. callsync
-- rewrites the table from the time-zone database (1970 to 2100) whenever the configured zone
-- differs from the one recorded; until then it says UTC. A day in that zone:
--   date(t, (SELECT utc_offset_secs FROM timezone_offsets
--            WHERE starts_at <= t ORDER BY starts_at DESC LIMIT 1) || ' seconds')
CREATE TABLE timezone_offsets (
    starts_at       TIMESTAMP PRIMARY KEY NOT NULL,  -- from this UTC instant on …
    utc_offset_secs INTEGER NOT NULL,                -- … local time is UTC plus this (seconds)
    zone            TEXT NOT NULL                    -- the IANA name the offsets are of
) WITHOUT ROWID;
INSERT INTO timezone_offsets VALUES ('0000-01-01T00:00:00.000000Z', 0, 'UTC');

-- One row per call, for BI: plain columns only, so tools read their declared types.
-- Custom parameters: JOIN call_custom_parameters USING (call_id) (or USING (call_uid)).
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
    s.display_name AS schedule_name,                             -- NULL when callsync knows no name
    c.id AS call_id                                              -- since schema 6: calls.id
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per attempt with its call's schedule, for answer rates and durations.
CREATE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid,
    c.uid AS call_uid,                                           -- = a.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at,
    a.duration,                                                  -- seconds (assumed)
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination,
    c.is_test_call,                                              -- the call's, 0/1
    a.attempt_number,                                            -- position + 1
    s.display_name AS schedule_name,
    a.id AS attempt_id,                                          -- since schema 6: call_attempts.id
    a.call_id                                                    -- since schema 6: calls.id
FROM call_attempts AS a
JOIN calls AS c ON c.id = a.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per outcome with its call's schedule, for "top outcomes".
CREATE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid,
    c.uid AS call_uid,                                           -- = o.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, o.name, o.created_at,
    s.display_name AS schedule_name,
    o.attempt_id,                                                -- since schema 6: call_attempts.id
    o.call_id                                                    -- since schema 6: calls.id
FROM attempt_outcomes AS o
JOIN calls AS c ON c.id = o.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per variable an attempt collected, with its call's schedule.
CREATE VIEW variable_results AS
SELECT
    v.uid AS variable_uid, v.attempt_uid,
    c.uid AS call_uid,                                           -- = v.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, v.name, v.value, v.status, v.created_at,
    c.is_test_call,                                              -- the call's, 0/1
    s.display_name AS schedule_name,
    v.attempt_id,                                                -- call_attempts.id
    v.call_id                                                    -- calls.id
FROM attempt_variables AS v
JOIN calls AS c ON c.id = v.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per notification of a call, with its call's schedule.
CREATE VIEW notification_results AS
SELECT
    n.uid AS notification_uid,
    c.uid AS call_uid,                                           -- = n.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, n.status, n.message_count, n.delivered_at,
    c.is_test_call,                                              -- the call's, 0/1
    s.display_name AS schedule_name,
    n.call_id                                                    -- calls.id
FROM call_notifications AS n
JOIN calls AS c ON c.id = n.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;
