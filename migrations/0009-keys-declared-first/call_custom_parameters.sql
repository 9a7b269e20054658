-- callsync warehouse, schema 9: call_custom_parameters, key columns first (see up.sql).

CREATE TABLE call_custom_parameters (
    call_id  INTEGER NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    name     TEXT NOT NULL,
    call_uid TEXT NOT NULL,
    value    TEXT,                               -- strings as is; other JSON values as JSON text
    PRIMARY KEY (call_id, name)
) WITHOUT ROWID;
