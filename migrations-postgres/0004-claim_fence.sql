-- Schema version 4: each schedule's fencing token (postgres/claim.rs). A process that claims a
-- schedule (its advisory lock) bumps `generation` and keeps the number it got; every page it
-- writes begins its transaction with `SELECT generation … FOR SHARE` and rolls back unless the
-- number is still its own. So a process whose lock the server freed without it hearing (a
-- connection cut by a partition, a NAT's timeout, a failover) cannot commit a page once
-- another process has claimed the schedule. `claimed_at`: when the latest claim was taken.
CREATE TABLE schedule_claims (
    schedule_uid uuid PRIMARY KEY,
    generation   bigint NOT NULL,
    claimed_at   timestamptz NOT NULL
);
