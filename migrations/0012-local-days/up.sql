-- callsync warehouse, schema version 12: days in the warehouse's time zone as view columns, and
-- the outcomes of each schedule as columns.
--
-- Why. Every ad-hoc SQLite query that wanted a day in `[warehouse] timezone` repeated the
-- subquery date(t, (SELECT utc_offset_secs FROM timezone_offsets WHERE starts_at <= t ORDER
-- BY starts_at DESC LIMIT 1) || ' seconds'), and no reader but SQLite understands it: DuckDB
-- binds a view's SQL itself and cannot bind SQLite's date modifiers (a view using them falls
-- back to VARCHAR in every column). PostgreSQL has local_day(t).
--
-- local_days holds, for each UTC day from 1970 to 2100, the local days its instants fall on:
-- an instant of UTC day `utc_day` is on local day `day_before` until `switch_at` (the local
-- midnight within that UTC day, if any) and on `day_after` from it on. The views join it on
-- the instant's UTC day (an equality: SQLite looks one row up by its key, DuckDB hashes) and
-- choose with one comparison, SQL every reader binds: the day columns read as DATE in DuckDB.
-- callsync writes the rows from the same zone rules as timezone_offsets (warehouse/
-- local_days.rs) and rewrites them with it; a warehouse in UTC gets them here, any other at
-- callsync's next start. An instant outside 1970 to 2100 has no local day (NULL).

CREATE TABLE local_days (
    utc_day    DATE PRIMARY KEY NOT NULL,  -- the UTC day 'YYYY-MM-DD' of an instant …
    day_before DATE NOT NULL,              -- … is this local day before switch_at …
    switch_at  TIMESTAMPTZ NOT NULL,       -- … (the local midnight within utc_day; utc_day's start when none) …
    day_after  DATE NOT NULL               -- … and this local day from switch_at on
) WITHOUT ROWID;

INSERT INTO local_days (utc_day, day_before, switch_at, day_after)
WITH RECURSIVE days(day) AS (
    SELECT '1970-01-01'
    UNION ALL
    SELECT date(day, '+1 day') FROM days WHERE day < '2100-12-31'
)
SELECT day, day, day || 'T00:00:00.000000Z', day FROM days
WHERE (SELECT count(*) FROM timezone_offsets) = 1
  AND (SELECT utc_offset_secs FROM timezone_offsets) = 0;

DROP VIEW call_results;
DROP VIEW attempt_results;
DROP VIEW outcome_results;

-- The views of schema 11, each with its local day appended (`substr(CAST(t AS TEXT), 1, 10)`
-- is t's UTC day in SQLite, and in DuckDB, which reads t as TIMESTAMP).
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
    c.id AS call_id,                                             -- since schema 6: calls.id
    CASE WHEN c.created_at < d.switch_at THEN d.day_before ELSE d.day_after END AS created_day
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid
LEFT JOIN local_days AS d ON d.utc_day = substr(CAST(c.created_at AS TEXT), 1, 10);

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
    a.call_id,                                                   -- since schema 6: calls.id
    CASE WHEN a.started_at < d.switch_at THEN d.day_before ELSE d.day_after END AS started_day
FROM call_attempts AS a
JOIN calls AS c ON c.id = a.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid
LEFT JOIN local_days AS d ON d.utc_day = substr(CAST(a.started_at AS TEXT), 1, 10);

-- The day of an outcome is its attempt's (started_day): an attempt's outcomes count on the
-- day it was dialled, as the canned queries count them.
CREATE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid,
    c.uid AS call_uid,                                           -- = o.call_uid; a filter on it uses calls_by_uid
    c.schedule_uid, o.name, o.created_at,
    coalesce(s.config_name, s.name) AS schedule_name,           -- = schedules.display_name
    o.attempt_id,                                                -- since schema 6: call_attempts.id
    o.call_id,                                                   -- since schema 6: calls.id
    c.is_test_call,                                              -- the call's, 0/1
    CASE WHEN a.started_at < d.switch_at THEN d.day_before ELSE d.day_after END AS started_day
FROM attempt_outcomes AS o
JOIN calls AS c ON c.id = o.call_id
LEFT JOIN call_attempts AS a ON a.id = o.attempt_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid
LEFT JOIN local_days AS d ON d.utc_day = substr(CAST(a.started_at AS TEXT), 1, 10);

-- One row per schedule with outcomes (test calls left out), its outcomes counted in columns.
-- The service's outcome names are free text, so a view cannot name a column after each: the
-- columns are the warehouse's five most frequent outcomes (ties by name), the same on every
-- row, each named in outcome_N beside its count outcome_N_count; other_outcomes counts the
-- rest. For any other outcome, or a range of days, see the canned query outcomes_per_schedule.
CREATE VIEW schedule_outcomes AS
WITH counted AS (
    SELECT c.schedule_uid, o.name, count(*) AS n
    FROM attempt_outcomes AS o
    JOIN calls AS c ON c.id = o.call_id
    WHERE coalesce(c.is_test_call, 0) = 0
    GROUP BY c.schedule_uid, o.name
),
ranked AS (
    SELECT name, row_number() OVER (ORDER BY sum(n) DESC, name) AS k
    FROM counted
    GROUP BY name
),
calls_with AS (
    SELECT c.schedule_uid, count(DISTINCT o.call_id) AS calls
    FROM attempt_outcomes AS o
    JOIN calls AS c ON c.id = o.call_id
    WHERE coalesce(c.is_test_call, 0) = 0
    GROUP BY c.schedule_uid
)
SELECT
    x.schedule_uid,
    coalesce(s.config_name, s.name) AS schedule_name,
    w.calls AS calls_with_outcomes,
    sum(x.n) AS outcomes,
    (SELECT name FROM ranked WHERE k = 1) AS outcome_1,
    sum(CASE WHEN r.k = 1 THEN x.n ELSE 0 END) AS outcome_1_count,
    (SELECT name FROM ranked WHERE k = 2) AS outcome_2,
    sum(CASE WHEN r.k = 2 THEN x.n ELSE 0 END) AS outcome_2_count,
    (SELECT name FROM ranked WHERE k = 3) AS outcome_3,
    sum(CASE WHEN r.k = 3 THEN x.n ELSE 0 END) AS outcome_3_count,
    (SELECT name FROM ranked WHERE k = 4) AS outcome_4,
    sum(CASE WHEN r.k = 4 THEN x.n ELSE 0 END) AS outcome_4_count,
    (SELECT name FROM ranked WHERE k = 5) AS outcome_5,
    sum(CASE WHEN r.k = 5 THEN x.n ELSE 0 END) AS outcome_5_count,
    sum(CASE WHEN r.k > 5 THEN x.n ELSE 0 END) AS other_outcomes
FROM counted AS x
JOIN ranked AS r ON r.name = x.name
JOIN calls_with AS w ON w.schedule_uid = x.schedule_uid
LEFT JOIN schedules AS s ON s.uid = x.schedule_uid
GROUP BY x.schedule_uid, s.config_name, s.name, w.calls;
