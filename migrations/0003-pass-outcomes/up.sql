-- callsync warehouse, schema version 3.
-- sync_runs records how each pass ended as a value (not read back from the error text), how
-- far behind the service's clock it ended, and what slowed it down, so `callsync status` can
-- say that a schedule is falling behind, and why. Columns are only added; rows of earlier
-- passes get their outcome from what they recorded.

ALTER TABLE sync_runs ADD COLUMN outcome TEXT;                 -- completed | behind | interrupted | failed; NULL while running (or if the process died)
ALTER TABLE sync_runs ADD COLUMN horizon TIMESTAMP;            -- the service's clock when the pass began: it read what had changed by then
ALTER TABLE sync_runs ADD COLUMN lag_secs REAL;                -- the service's clock at the end minus the checkpoint, in seconds (negative: a checkpoint ahead of it)
ALTER TABLE sync_runs ADD COLUMN detail_requests INTEGER NOT NULL DEFAULT 0;  -- GET /outbound_calls/{uid} requests
ALTER TABLE sync_runs ADD COLUMN rate_limited INTEGER NOT NULL DEFAULT 0;     -- 429 responses
ALTER TABLE sync_runs ADD COLUMN throttled_secs REAL NOT NULL DEFAULT 0;      -- seconds spent waiting for the request rate limiter
ALTER TABLE sync_runs ADD COLUMN future_rows INTEGER NOT NULL DEFAULT 0;      -- calls stamped later than the service's own clock

UPDATE sync_runs SET outcome = CASE
    WHEN finished_at IS NULL THEN NULL
    WHEN error IS NULL THEN 'completed'
    WHEN error = 'interrupted by shutdown' THEN 'interrupted'
    ELSE 'failed'
END;
