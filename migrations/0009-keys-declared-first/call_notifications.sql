-- callsync warehouse, schema 9: call_notifications, key columns first (see up.sql).

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
