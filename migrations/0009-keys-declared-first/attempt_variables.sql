-- callsync warehouse, schema 9: attempt_variables, key columns first (see up.sql).

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
