-- callsync warehouse, schema version 11: every time column declared TIMESTAMPTZ, and views
-- every reader can type.
--
-- Why. The time columns hold RFC 3339 UTC text, '2026-11-25T09:30:00.123456Z' (schema 7), and
-- were declared TIMESTAMP. Python's sqlite3 with detect_types=PARSE_DECLTYPES runs its
-- built-in "timestamp" converter on every column so declared, and that converter wants
-- 'YYYY-MM-DD HH:MM:SS': it raised ValueError on every row. And DuckDB's SQLite reader binds a
-- view's own SQL against the tables: the views named the generated columns
-- schedules.display_name and call_attempts.attempt_number, which it does not see, so it read
-- every column of every view as VARCHAR.
--
-- Now every time column is declared TIMESTAMPTZ (a timestamp with a zone: the values end in
-- Z). The stored text does not change, nor its order, nor any index: TIMESTAMPTZ has the same
-- affinity as TIMESTAMP (NUMERIC), so only the declared name in the schema is rewritten, in
-- place, without copying a row (SQLite cannot alter a column's type; the tables' SQL is edited
-- under writable_schema, which is safe for a change that leaves the file's format as it is).
-- Python returns the text (register a converter for "TIMESTAMPTZ" for datetimes: README,
-- "Reading timestamps"); DuckDB reads TIMESTAMP; Grafana and pandas read RFC 3339 as before.
-- The views compute what they took from the generated columns (coalesce(config_name, name),
-- position + 1): same values, same names, same places. And timezone_offsets' first row starts
-- in year 1, not year 0, which Python's datetime cannot hold (callsync rewrites that table
-- with the same first row at its next start anyway).

UPDATE timezone_offsets SET starts_at = '0001-01-01T00:00:00.000000Z'
WHERE starts_at = '0000-01-01T00:00:00.000000Z';

DROP VIEW call_results;
DROP VIEW attempt_results;
DROP VIEW outcome_results;
DROP VIEW variable_results;
DROP VIEW notification_results;

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
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name; NULL when callsync knows no name
    c.id AS call_id                                              -- since schema 6: calls.id
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;
CREATE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid,
    c.uid AS call_uid,                                           -- = a.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at,
    a.duration,                                                  -- seconds (assumed)
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination,
    c.is_test_call,                                              -- the call's, 0/1
    a.position + 1 AS attempt_number,                            -- = call_attempts.attempt_number
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name
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
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name
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
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name
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
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name
    n.call_id                                                    -- calls.id
FROM call_notifications AS n
JOIN calls AS c ON c.id = n.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;


-- Last: the views above are created from the tables as they are; the declared names change
-- in the same transaction, so every connection reads the new schema once it commits.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, ' TIMESTAMP', ' TIMESTAMPTZ')
WHERE type = 'table' AND sql LIKE '% TIMESTAMP%' AND sql NOT LIKE '% TIMESTAMPTZ%';
PRAGMA writable_schema = RESET;
