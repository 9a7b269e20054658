-- callsync warehouse, schema version 2.
-- call_results also carries the phonetic names and event_date_time, appended after every
-- existing column (same names, same order), so queries and BI tools built on version 1 keep
-- working. A view cannot be altered in SQLite: it is dropped and created again, in the same
-- transaction as the version bump.

DROP VIEW call_results;

-- One row per call, for BI: plain columns only, so tools read their declared types.
-- Custom parameters: JOIN call_custom_parameters USING (call_uid).
CREATE VIEW call_results AS
SELECT
    uid AS call_uid, schedule_uid, external_id, status, progress, is_test_call,
    phone_number, phone_e164, full_name, first_name, last_name, email,
    attempt_count, attempts_remaining, last_attempt_status, last_attempt_started_at,
    last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
    outcome_names, answered, transferred, notification_count, cooldown_until,
    created_at, updated_at,
    phonetic_full_name, phonetic_first_name, phonetic_last_name, event_date_time
FROM calls;
