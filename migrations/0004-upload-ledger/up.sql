-- The upload ledger: each chunk (at most 1,000 rows) of a contact list sent by
-- `callsync upload`, and what the service made of it. A re-run of the same upload reads it to
-- continue where a failed or killed run stopped, creating nothing twice.
CREATE TABLE upload_chunks (
    schedule_uid TEXT NOT NULL,     -- the schedule the calls were sent to
    fingerprint  TEXT NOT NULL,     -- SHA-256 of the CSV file's bytes and the column mapping
    first_line   INTEGER NOT NULL,  -- CSV line of the chunk's first row (the header is line 1)
    last_line    INTEGER NOT NULL,  -- CSV line of its last row
    rows         INTEGER NOT NULL,  -- rows in the chunk
    -- 'sent': sent, and the service's answer not seen (yet); 'created': the service created
    -- the chunk's calls, whose uids are in call_uids
    state        TEXT NOT NULL CHECK (state IN ('sent', 'created')),
    call_uids    TEXT,              -- JSON array of the new calls' uids, in row order
    sent_at      TEXT NOT NULL,     -- UTC, 'YYYY-MM-DD HH:MM:SS.ffffff'
    created_at   TEXT,              -- when the creation was confirmed
    PRIMARY KEY (schedule_uid, fingerprint, first_line)
) WITHOUT ROWID;

-- What callsync created or changed through the service's write endpoints, as the service last
-- answered, so BI tools can show names next to uids.
CREATE TABLE campaigns (
    uid         TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    type        TEXT NOT NULL,     -- `scheduled_call`
    direction   TEXT NOT NULL,     -- `outbound`
    is_enabled  INTEGER NOT NULL,  -- 0/1, as last answered
    created_at  TEXT NOT NULL,     -- UTC, by the service
    updated_at  TEXT NOT NULL,
    recorded_at TEXT NOT NULL      -- UTC, when callsync last wrote this row
);

CREATE TABLE schedules (
    uid             TEXT PRIMARY KEY,
    campaign_uid    TEXT,              -- NULL when callsync did not create it
    name            TEXT NOT NULL,
    starts_at       TEXT NOT NULL,
    ends_at         TEXT NOT NULL,
    retry_type      TEXT NOT NULL,
    retry_intervals TEXT NOT NULL,     -- JSON array of seconds; attempts = entries + 1
    is_enabled      INTEGER NOT NULL,  -- 0/1, as last set or answered
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    recorded_at     TEXT NOT NULL
);
