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
