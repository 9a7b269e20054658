-- callsync warehouse, schema version 9: the child tables declare their key columns first.
--
-- Why. The four WITHOUT ROWID child tables of schema 6 declared their key (call_id,
-- attempt_id, uid) after the other columns. SQLite stores a WITHOUT ROWID row key first, so a
-- column's declared place differed from its stored place. SQLite 3.40.0 and 3.40.1 (Debian 12's
-- sqlite3 and its Python) read such a table's NOT NULL columns at the wrong place in
-- `PRAGMA integrity_check` and `quick_check`: on a sound warehouse they printed "NULL value in
-- attempt_variables.attempt_uid" for every row of attempt_outcomes, attempt_variables,
-- call_custom_parameters and call_notifications (3.39 and earlier, 3.41.0 and later, and the SQLite callsync
-- bundles, say "ok"; every query reads the values right on all of them). An operator checking a
-- backup or an off-host copy with the system's sqlite3 was told it was corrupt.
--
-- Now the key columns come first, in key order, then the others in their old order: each
-- column's declared place is its stored place, which every SQLite's check reads right. The
-- rows, their key order, every name, type and constraint stay; only `SELECT *`'s column order
-- changes in these four tables (the writer names its columns). Each table is copied in key
-- order, so the new table is written in order, and the old one dropped; the views reading three
-- of them are dropped first and created again unchanged.

DROP VIEW outcome_results;
DROP VIEW variable_results;
DROP VIEW notification_results;

ALTER TABLE call_custom_parameters RENAME TO call_custom_parameters_v8;
CREATE TABLE call_custom_parameters (
    call_id  INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    call_uid TEXT NOT NULL,
    value    TEXT,                               -- strings as is; other JSON values as JSON text
    PRIMARY KEY (call_id, name)
) WITHOUT ROWID;
INSERT INTO call_custom_parameters (call_id, name, call_uid, value)
SELECT call_id, name, call_uid, value FROM call_custom_parameters_v8 ORDER BY call_id, name;
DROP TABLE call_custom_parameters_v8;
CREATE INDEX call_custom_parameters_by_name ON call_custom_parameters (name);

-- Outcomes and variables reference their attempt by attempt_id without a foreign key clause
-- (see schema 6: the writer deletes them itself, by call_id, with their attempt).
ALTER TABLE attempt_outcomes RENAME TO attempt_outcomes_v8;
CREATE TABLE attempt_outcomes (
    call_id     INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    attempt_id  INTEGER NOT NULL,                -- call_attempts.id
    uid         TEXT NOT NULL,
    attempt_uid TEXT NOT NULL,
    call_uid    TEXT NOT NULL,
    name        TEXT NOT NULL,
    created_at  TIMESTAMP,
    extra       TEXT,
    PRIMARY KEY (call_id, attempt_id, uid)
) WITHOUT ROWID;
INSERT INTO attempt_outcomes (call_id, attempt_id, uid, attempt_uid, call_uid, name, created_at,
    extra)
SELECT call_id, attempt_id, uid, attempt_uid, call_uid, name, created_at, extra
FROM attempt_outcomes_v8 ORDER BY call_id, attempt_id, uid;
DROP TABLE attempt_outcomes_v8;

ALTER TABLE attempt_variables RENAME TO attempt_variables_v8;
CREATE TABLE attempt_variables (
    call_id     INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    attempt_id  INTEGER NOT NULL,                -- call_attempts.id
    uid         TEXT NOT NULL,
    attempt_uid TEXT NOT NULL,
    call_uid    TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT,                            -- strings as is; other JSON values as JSON text
    status      TEXT,
    created_at  TIMESTAMP,
    extra       TEXT,
    PRIMARY KEY (call_id, attempt_id, uid)
) WITHOUT ROWID;
INSERT INTO attempt_variables (call_id, attempt_id, uid, attempt_uid, call_uid, name, value,
    status, created_at, extra)
SELECT call_id, attempt_id, uid, attempt_uid, call_uid, name, value, status, created_at, extra
FROM attempt_variables_v8 ORDER BY call_id, attempt_id, uid;
DROP TABLE attempt_variables_v8;

ALTER TABLE call_notifications RENAME TO call_notifications_v8;
CREATE TABLE call_notifications (
    call_id       INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    uid           TEXT NOT NULL,
    call_uid      TEXT NOT NULL,
    status        TEXT,
    message_count INTEGER,
    delivered_at  TIMESTAMP,
    extra         TEXT,
    PRIMARY KEY (call_id, uid)
) WITHOUT ROWID;
INSERT INTO call_notifications (call_id, uid, call_uid, status, message_count, delivered_at,
    extra)
SELECT call_id, uid, call_uid, status, message_count, delivered_at, extra
FROM call_notifications_v8 ORDER BY call_id, uid;
DROP TABLE call_notifications_v8;

-- The views, as schema 7 created them.

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
