-- Schema version 6: the SQLite warehouse's schema 12 (migrations/0012-local-days): each view's
-- local day as a column, and the outcomes of each schedule as columns. Days come from
-- local_day(t) (version 3), the same days SQLite's local_days table gives. The views keep
-- their columns and gain the new ones at the end (CREATE OR REPLACE VIEW may only append).

CREATE OR REPLACE VIEW call_results AS
SELECT
    c.uid AS call_uid, c.schedule_uid, c.external_id, c.status, c.progress, c.is_test_call,
    c.phone_number, c.phone_e164, c.full_name, c.first_name, c.last_name, c.email,
    c.attempt_count, c.attempts_remaining, c.last_attempt_status, c.last_attempt_started_at,
    c.last_attempt_answered_at, c.last_attempt_ended_at, c.last_attempt_duration,
    c.outcome_names, c.answered, c.transferred, c.notification_count, c.cooldown_until,
    c.created_at, c.updated_at,
    c.phonetic_full_name, c.phonetic_first_name, c.phonetic_last_name, c.event_date_time,
    s.display_name AS schedule_name,
    c.id AS call_id,
    local_day(c.created_at) AS created_day
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

CREATE OR REPLACE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid, c.uid AS call_uid, c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at, a.duration,
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination,
    c.is_test_call, a.attempt_number,
    s.display_name AS schedule_name,
    a.id AS attempt_id, a.call_id,
    local_day(a.started_at) AS started_day
FROM call_attempts AS a
JOIN calls AS c ON c.id = a.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

CREATE OR REPLACE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid, c.uid AS call_uid, c.schedule_uid, o.name, o.created_at,
    s.display_name AS schedule_name,
    o.attempt_id, o.call_id,
    c.is_test_call,
    local_day(a.started_at) AS started_day
FROM attempt_outcomes AS o
JOIN calls AS c ON c.id = o.call_id
LEFT JOIN call_attempts AS a ON a.id = o.attempt_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- The warehouse's five most frequent outcomes (ties by name) as columns, per schedule (test
-- calls left out): migrations/0012-local-days says why five and not one per name.
CREATE VIEW schedule_outcomes AS
WITH counted AS (
    SELECT c.schedule_uid, o.name, count(*) AS n
    FROM attempt_outcomes AS o
    JOIN calls AS c ON c.id = o.call_id
    WHERE c.is_test_call IS NOT TRUE
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
    WHERE c.is_test_call IS NOT TRUE
    GROUP BY c.schedule_uid
)
SELECT
    x.schedule_uid,
    s.display_name AS schedule_name,
    w.calls AS calls_with_outcomes,
    sum(x.n)::bigint AS outcomes,
    (SELECT name FROM ranked WHERE k = 1) AS outcome_1,
    sum(CASE WHEN r.k = 1 THEN x.n ELSE 0 END)::bigint AS outcome_1_count,
    (SELECT name FROM ranked WHERE k = 2) AS outcome_2,
    sum(CASE WHEN r.k = 2 THEN x.n ELSE 0 END)::bigint AS outcome_2_count,
    (SELECT name FROM ranked WHERE k = 3) AS outcome_3,
    sum(CASE WHEN r.k = 3 THEN x.n ELSE 0 END)::bigint AS outcome_3_count,
    (SELECT name FROM ranked WHERE k = 4) AS outcome_4,
    sum(CASE WHEN r.k = 4 THEN x.n ELSE 0 END)::bigint AS outcome_4_count,
    (SELECT name FROM ranked WHERE k = 5) AS outcome_5,
    sum(CASE WHEN r.k = 5 THEN x.n ELSE 0 END)::bigint AS outcome_5_count,
    sum(CASE WHEN r.k > 5 THEN x.n ELSE 0 END)::bigint AS other_outcomes
FROM counted AS x
JOIN ranked AS r ON r.name = x.name
JOIN calls_with AS w ON w.schedule_uid = x.schedule_uid
LEFT JOIN schedules AS s ON s.uid = x.schedule_uid
GROUP BY x.schedule_uid, s.display_name, w.calls;

-- The read-only role reads the new view too (as in version 1, when the role exists).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO callsync_reader', current_schema());
    END IF;
END
$$;
