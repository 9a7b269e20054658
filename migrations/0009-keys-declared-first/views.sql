-- callsync warehouse, schema 9: the views reading the child tables, as schema 7 created them
-- (dropped while their tables are rebuilt, then created again with this SQL).

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
