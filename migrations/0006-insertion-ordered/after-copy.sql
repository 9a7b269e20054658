-- callsync warehouse, schema version 6, second part: run by callsync in the migration's
-- transaction once the rows of the `*_v5` tables are copied (see up.sql).
--
-- The `*_v5` tables go, children first: a table no foreign key references is dropped without
-- the row-by-row delete SQLite otherwise does with foreign keys on.

DROP TABLE attempt_outcomes_v5;
DROP TABLE attempt_variables_v5;
DROP TABLE call_notifications_v5;
DROP TABLE call_custom_parameters_v5;
DROP TABLE call_attempts_v5;
DROP TABLE calls_v5;

-- Indexes. Each costs a B-tree insert per row written; each is here for a query that needs it.
-- The child tables need none for "the children of one call": their primary key starts with
-- call_id (a call's children are read, replaced and deleted as one range).

-- The writer's upsert (ON CONFLICT (uid)) and its one lookup of a page's stored calls; and
-- any analyst's lookup of a call by uid. The one random-key index the writer must have.
CREATE UNIQUE INDEX calls_by_uid ON calls (uid);
-- `callsync status` counts a schedule's calls and, through call_id, its children
-- (queries.rs, schedule_status); analysts filter call_results by schedule and time; the
-- writer appends to it (a schedule's calls are read in updated_at order).
CREATE INDEX calls_by_schedule_updated ON calls (schedule_uid, updated_at);
-- Analysts look a contact up by the external id they uploaded it with (README, "Try it").
CREATE INDEX calls_by_external_id ON calls (external_id);

-- The writer's upsert of an attempt (ON CONFLICT (call_id, uid)) keeps its id, so outcomes
-- and variables of an attempt whose lists the service did not send stay attached; also one
-- call's attempts, in order of call_id (status counts, summaries). Appended to.
CREATE UNIQUE INDEX call_attempts_by_call ON call_attempts (call_id, uid);

-- The canned query calls_per_custom_parameter_value and README's "gold-plan customers"
-- (WHERE name = ?): without it both scan every parameter. (name) alone, not (name, value):
-- entries then go at the end of their name's range (call_id order), not at random places.
CREATE INDEX call_custom_parameters_by_name ON call_custom_parameters (name);

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
