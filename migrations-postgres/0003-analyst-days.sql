-- Schema version 3: the rest of the SQLite warehouse's schema 7 (migrations/0007-utc-instants),
-- so both destinations hold the same logical tables and views (names, columns, meanings).
-- (Schema 7's other change, instants as RFC 3339 text, has no counterpart here: `timestamptz`
-- is an instant already, and every BI tool reads it as one.)

-- Absent is NULL everywhere: the service sends '' for a phonetic name it has not got; rows
-- written before callsync turned it into NULL are made so.
UPDATE calls SET phonetic_full_name = NULL WHERE phonetic_full_name = '';
UPDATE calls SET phonetic_first_name = NULL WHERE phonetic_first_name = '';
UPDATE calls SET phonetic_last_name = NULL WHERE phonetic_last_name = '';

-- Days in the analyst's time zone (`[warehouse] timezone`, an IANA name). PostgreSQL has a
-- time-zone database, so `(t AT TIME ZONE 'Europe/Berlin')::date` would do; callsync keeps
-- the SQLite warehouse's table anyway, written by the same code from the same rules
-- (chrono-tz, 1970 to 2100), and `local_day` below reads it. Why:
-- * the same days on both destinations: the server's time-zone database is of whatever
--   release its distribution ships, callsync's of its own; with one table a dashboard moved
--   from SQLite to PostgreSQL counts the same calls on the same day;
-- * the zone is configured once, in callsync, not repeated in every BI query, and changing it
--   rewrites rows (what the writer may do) instead of redefining a view (which needs the
--   table owner's privileges at every start);
-- * `zone` names the zone, for a query that prefers `AT TIME ZONE`.
-- Each row holds from its starts_at (a UTC instant) until the next row's; the first row's is
-- -infinity (SQLite's '0000-01-01T00:00:00.000000Z': PostgreSQL has no year 0). Until callsync
-- starts with a zone, it says UTC.
CREATE TABLE timezone_offsets (
    starts_at       timestamptz PRIMARY KEY,  -- from this UTC instant on …
    utc_offset_secs integer NOT NULL,         -- … local time is UTC plus this (seconds)
    zone            text NOT NULL             -- the IANA name the offsets are of
);
INSERT INTO timezone_offsets VALUES ('-infinity', 0, 'UTC');

-- The day of instant `t` in the configured zone: SQLite's
--   date(t, (SELECT utc_offset_secs FROM timezone_offsets
--            WHERE starts_at <= t ORDER BY starts_at DESC LIMIT 1) || ' seconds')
-- as one call: `SELECT local_day(started_at), count(*) FROM attempt_results GROUP BY 1`.
CREATE FUNCTION local_day(t timestamptz) RETURNS date
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT ((t AT TIME ZONE 'UTC')
            + make_interval(secs => (SELECT utc_offset_secs FROM timezone_offsets
                                     WHERE starts_at <= t ORDER BY starts_at DESC LIMIT 1)))::date
$$;

-- One row per variable an attempt collected, with its call's schedule.
CREATE VIEW variable_results AS
SELECT
    v.uid AS variable_uid, v.attempt_uid,
    c.uid AS call_uid,
    c.schedule_uid, v.name, v.value, v.status, v.created_at,
    c.is_test_call,
    s.display_name AS schedule_name,
    v.attempt_id,
    v.call_id
FROM attempt_variables AS v
JOIN calls AS c ON c.id = v.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- One row per notification of a call, with its call's schedule.
CREATE VIEW notification_results AS
SELECT
    n.uid AS notification_uid,
    c.uid AS call_uid,
    c.schedule_uid, n.status, n.message_count, n.delivered_at,
    c.is_test_call,
    s.display_name AS schedule_name,
    n.call_id
FROM call_notifications AS n
JOIN calls AS c ON c.id = n.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- The read-only role reads the new table and views too (granted as in version 1, when the
-- role exists).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO callsync_reader', current_schema());
    END IF;
END
$$;
