-- callsync warehouse on PostgreSQL, schema version 1: the SQLite warehouse's schema 6 (same
-- tables, columns, meanings and views; README, "The warehouse"), natively typed:
-- * uids are `uuid`; instants are `timestamptz` (microseconds: a finer fraction the service
--   sends is truncated; the checkpoint is truncated downwards, so nothing is ever skipped);
-- * flags are `boolean`; counts and the service's numbers are `integer`/`bigint`;
-- * JSON of unknown shape (`delay`, `priority`, `retry_intervals`, `error_details`, `extra`:
--   fields callsync does not know) is `jsonb`; custom parameter and variable values stay
--   text (strings as is, other JSON values as JSON text), as in SQLite.
-- Ids (`calls.id`, `call_attempts.id`) are identities in insertion order, as in SQLite.
-- Applied by callsync in one transaction, under the migration advisory lock (two daemons
-- starting at once never both migrate).

CREATE TABLE calls (
    uid                      uuid NOT NULL,
    schedule_uid             uuid NOT NULL,
    external_id              text,
    status                   text NOT NULL,
    progress                 text,
    is_test_call             boolean,
    cooldown_until           timestamptz,
    delay                    jsonb,
    priority                 jsonb,
    attempts_remaining       bigint,
    retry_intervals          jsonb,               -- array of integers (seconds, assumed)
    created_at               timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL,
    phone_number             text,
    phone_e164               text,
    full_name                text,
    first_name               text,
    last_name                text,
    phonetic_full_name       text,
    phonetic_first_name      text,
    phonetic_last_name       text,
    email                    text,
    event_date_time          timestamptz,
    extra                    jsonb,               -- fields callsync does not know, or NULL
    attempt_count            integer NOT NULL DEFAULT 0,
    last_attempt_uid         uuid,
    last_attempt_status      text,
    last_attempt_started_at  timestamptz,
    last_attempt_answered_at timestamptz,
    last_attempt_ended_at    timestamptz,
    last_attempt_duration    bigint,              -- seconds (assumed)
    outcome_names            text,
    answered                 boolean NOT NULL DEFAULT false,
    transferred              boolean NOT NULL DEFAULT false,
    notification_count       integer NOT NULL DEFAULT 0,
    content_hash             bigint NOT NULL,
    synced_at                timestamptz NOT NULL,
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY
);
CREATE UNIQUE INDEX calls_by_uid ON calls (uid);
CREATE INDEX calls_by_schedule_updated ON calls (schedule_uid, updated_at);
CREATE INDEX calls_by_external_id ON calls (external_id);

CREATE TABLE call_custom_parameters (
    call_uid uuid NOT NULL,
    name     text NOT NULL,
    value    text,
    call_id  bigint NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, name)
);
CREATE INDEX call_custom_parameters_by_name ON call_custom_parameters (name);

CREATE TABLE call_attempts (
    uid                  uuid NOT NULL,
    call_uid             uuid NOT NULL,
    position             integer NOT NULL,
    status               text NOT NULL,
    started_at           timestamptz,
    answered_at          timestamptz,
    ended_at             timestamptz,
    duration             bigint,
    created_at           timestamptz,
    updated_at           timestamptz,
    error_details        jsonb,
    transfer_started_at  timestamptz,
    transfer_answered_at timestamptz,
    transfer_destination text,
    extra                jsonb,
    attempt_number       integer GENERATED ALWAYS AS (position + 1) STORED,
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id              bigint NOT NULL REFERENCES calls (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX call_attempts_by_call ON call_attempts (call_id, uid);

CREATE TABLE attempt_outcomes (
    uid         uuid NOT NULL,
    attempt_uid uuid NOT NULL,
    call_uid    uuid NOT NULL,
    name        text NOT NULL,
    created_at  timestamptz,
    extra       jsonb,
    attempt_id  bigint NOT NULL,
    call_id     bigint NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, attempt_id, uid)
);

CREATE TABLE attempt_variables (
    uid         uuid NOT NULL,
    attempt_uid uuid NOT NULL,
    call_uid    uuid NOT NULL,
    name        text NOT NULL,
    value       text,
    status      text,
    created_at  timestamptz,
    extra       jsonb,
    attempt_id  bigint NOT NULL,
    call_id     bigint NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, attempt_id, uid)
);

CREATE TABLE call_notifications (
    uid           uuid NOT NULL,
    call_uid      uuid NOT NULL,
    status        text,
    message_count bigint,
    delivered_at  timestamptz,
    extra         jsonb,
    call_id       bigint NOT NULL REFERENCES calls (id) ON DELETE CASCADE,
    PRIMARY KEY (call_id, uid)
);

CREATE TABLE sync_checkpoints (
    schedule_uid uuid PRIMARY KEY,
    cursor       timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

CREATE TABLE sync_runs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_uid    uuid NOT NULL,
    kind            text NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    pages           bigint NOT NULL DEFAULT 0,
    calls_seen      bigint NOT NULL DEFAULT 0,
    calls_written   bigint NOT NULL DEFAULT 0,
    requests        bigint NOT NULL DEFAULT 0,
    retries         bigint NOT NULL DEFAULT 0,
    error           text,
    outcome         text,
    horizon         timestamptz,
    lag_secs        double precision,
    detail_requests bigint NOT NULL DEFAULT 0,
    rate_limited    bigint NOT NULL DEFAULT 0,
    throttled_secs  double precision NOT NULL DEFAULT 0,
    future_rows     bigint NOT NULL DEFAULT 0
);
CREATE INDEX sync_runs_by_schedule ON sync_runs (schedule_uid, id);

CREATE TABLE upload_chunks (
    schedule_uid uuid NOT NULL,
    fingerprint  text NOT NULL,
    first_line   bigint NOT NULL,
    last_line    bigint NOT NULL,
    rows         bigint NOT NULL,
    state        text NOT NULL CHECK (state IN ('sent', 'created')),
    call_uids    jsonb,
    sent_at      timestamptz NOT NULL,
    created_at   timestamptz,
    PRIMARY KEY (schedule_uid, fingerprint, first_line)
);

CREATE TABLE campaigns (
    uid         uuid PRIMARY KEY,
    name        text NOT NULL,
    type        text NOT NULL,
    direction   text NOT NULL,
    is_enabled  boolean NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL
);

CREATE TABLE schedules (
    uid             uuid PRIMARY KEY,
    campaign_uid    uuid,
    name            text,
    starts_at       timestamptz,
    ends_at         timestamptz,
    retry_type      text,
    retry_intervals jsonb,
    is_enabled      boolean,
    created_at      timestamptz,
    updated_at      timestamptz,
    recorded_at     timestamptz,
    config_name     text,
    display_name    text GENERATED ALWAYS AS (coalesce(config_name, name)) STORED
);

CREATE VIEW call_results AS
SELECT
    c.uid AS call_uid, c.schedule_uid, c.external_id, c.status, c.progress, c.is_test_call,
    c.phone_number, c.phone_e164, c.full_name, c.first_name, c.last_name, c.email,
    c.attempt_count, c.attempts_remaining, c.last_attempt_status, c.last_attempt_started_at,
    c.last_attempt_answered_at, c.last_attempt_ended_at, c.last_attempt_duration,
    c.outcome_names, c.answered, c.transferred, c.notification_count, c.cooldown_until,
    c.created_at, c.updated_at,
    c.phonetic_full_name, c.phonetic_first_name, c.phonetic_last_name, c.event_date_time,
    s.display_name AS schedule_name,
    c.id AS call_id
FROM calls AS c
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

CREATE VIEW attempt_results AS
SELECT
    a.uid AS attempt_uid, c.uid AS call_uid, c.schedule_uid, a.position, a.status,
    a.started_at, a.answered_at, a.ended_at, a.duration,
    a.transfer_started_at, a.transfer_answered_at, a.transfer_destination,
    c.is_test_call, a.attempt_number,
    s.display_name AS schedule_name,
    a.id AS attempt_id, a.call_id
FROM call_attempts AS a
JOIN calls AS c ON c.id = a.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

CREATE VIEW outcome_results AS
SELECT
    o.uid AS outcome_uid, o.attempt_uid, c.uid AS call_uid, c.schedule_uid, o.name, o.created_at,
    s.display_name AS schedule_name,
    o.attempt_id, o.call_id
FROM attempt_outcomes AS o
JOIN calls AS c ON c.id = o.call_id
LEFT JOIN schedules AS s ON s.uid = c.schedule_uid;

-- The read-only role for BI tools (README, "When one file is not enough"): created when the
-- migrating role may create roles, else left to contrib/postgres/bi-role.sql; granted every
-- table and view when it exists. Log-in roles for Metabase or Grafana are made its members.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        BEGIN
            CREATE ROLE callsync_reader NOLOGIN;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
            RAISE NOTICE 'callsync_reader not created: %', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'callsync_reader') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO callsync_reader', current_schema());
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO callsync_reader', current_schema());
    END IF;
END
$$;
