//! Reading the warehouse back on PostgreSQL: per-schedule status (`callsync status`) and the
//! first pass's instant; the same rules as the SQLite warehouse's `queries.rs`.

use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

use super::PgWarehouse;
use super::session::{PgContext, RowColumn, instant, wait};
use crate::service::Timestamp;
use crate::warehouse::destination::Destination;
use crate::warehouse::error::WarehouseError;
use crate::warehouse::records::RunId;
use crate::warehouse::status::{
    PassFigures, RECENT_PASSES, ScheduleStatus, StatusFacts, StoredRun,
};

impl PgWarehouse {
    pub(in crate::warehouse::postgres) fn schedule_status(
        &self,
        schedule: Uuid,
        now: Timestamp,
    ) -> Result<ScheduleStatus, WarehouseError> {
        let checkpoint = self.checkpoint(schedule)?;
        let cursor = checkpoint.as_ref().map(|c| c.cursor);
        let schedule_name: Option<String> = wait(self.client()?.query_opt(
            "SELECT display_name FROM schedules WHERE uid = $1",
            &[&schedule],
        ))
        .pg(&self.target, "reading a schedule's name")?
        .map(|r| r.try_get(0))
        .transpose()
        .pg(&self.target, "reading a schedule's name")?
        .flatten();
        let last_success_at: Option<OffsetDateTime> = wait(self.client()?.query_one(
            "SELECT max(finished_at) FROM sync_runs
             WHERE schedule_uid = $1 AND outcome IN ('completed', 'behind')",
            &[&schedule],
        ))
        .pg(&self.target, "reading the last successful pass")?
        .column(0, &self.target, "reading the last successful pass")?;
        Ok(ScheduleStatus::of(
            StatusFacts {
                schedule_uid: schedule,
                schedule_name,
                cursor,
                checkpoint_moved_at: checkpoint.map(|c| c.updated_at),
                recent_runs: self.recent_runs(schedule)?,
                last_success_at: self.instant(last_success_at, "sync_runs.finished_at")?,
                counts: self.row_counts(schedule)?,
            },
            now,
        ))
    }

    /// The schedule's latest passes as stored, newest first, at most [`RECENT_PASSES`].
    fn recent_runs(&self, schedule: Uuid) -> Result<Vec<StoredRun>, WarehouseError> {
        let runs = wait(self.client()?.query(
            "SELECT kind, started_at, finished_at, pages, calls_seen, calls_written, requests,
               retries, error, outcome, horizon, lag_secs, detail_requests, rate_limited,
               throttled_secs, future_rows, host, instance, pid, id, error_kind
             FROM sync_runs WHERE schedule_uid = $1 ORDER BY id DESC LIMIT $2",
            &[&schedule, &RECENT_PASSES],
        ))
        .pg(&self.target, "reading the last passes")?;
        runs.iter().map(|r| self.stored_run(r)).collect()
    }

    /// Rows of the schedule: calls, attempts, outcomes, variables, notifications.
    fn row_counts(&self, schedule: Uuid) -> Result<[i64; 6], WarehouseError> {
        let counts = wait(self.client()?.query_one(
            "WITH c AS (SELECT id FROM calls WHERE schedule_uid = $1)
             SELECT (SELECT count(*) FROM c),
               (SELECT count(*) FROM call_attempts WHERE call_id IN (SELECT id FROM c)),
               (SELECT count(*) FROM attempt_outcomes WHERE call_id IN (SELECT id FROM c)),
               (SELECT count(*) FROM attempt_variables WHERE call_id IN (SELECT id FROM c)),
               (SELECT count(*) FROM call_notifications WHERE call_id IN (SELECT id FROM c)),
               (SELECT count(*) FROM set_aside_calls WHERE schedule_uid = $1)",
            &[&schedule],
        ))
        .pg(&self.target, "counting rows")?;
        let count = |i: usize| -> Result<i64, WarehouseError> {
            counts.column(i, &self.target, "counting rows")
        };
        Ok([
            count(0)?,
            count(1)?,
            count(2)?,
            count(3)?,
            count(4)?,
            count(5)?,
        ])
    }

    /// A stored instant that may be missing.
    fn instant(
        &self,
        at: Option<OffsetDateTime>,
        what: &'static str,
    ) -> Result<Option<Timestamp>, WarehouseError> {
        at.map(|t| instant(&self.target, t, what)).transpose()
    }

    /// A `sync_runs` row as stored.
    fn stored_run(&self, r: &Row) -> Result<StoredRun, WarehouseError> {
        const STEP: &str = "reading the last passes";
        Ok(StoredRun {
            kind: r.column(0, &self.target, STEP)?,
            figures: PassFigures {
                started_at: instant(
                    &self.target,
                    r.column(1, &self.target, STEP)?,
                    "sync_runs.started_at",
                )?,
                finished_at: self
                    .instant(r.column(2, &self.target, STEP)?, "sync_runs.finished_at")?,
                pages: r.column(3, &self.target, STEP)?,
                calls_seen: r.column(4, &self.target, STEP)?,
                calls_written: r.column(5, &self.target, STEP)?,
                requests: r.column(6, &self.target, STEP)?,
                retries: r.column(7, &self.target, STEP)?,
                horizon: self.instant(r.column(10, &self.target, STEP)?, "sync_runs.horizon")?,
                lag_secs: r.column(11, &self.target, STEP)?,
                detail_requests: r.column(12, &self.target, STEP)?,
                rate_limited: r.column(13, &self.target, STEP)?,
                throttled_secs: r.column(14, &self.target, STEP)?,
                future_rows: r.column(15, &self.target, STEP)?,
                pid: r.column(18, &self.target, STEP)?,
                run_id: RunId(r.column(19, &self.target, STEP)?),
            },
            error: r.column(8, &self.target, STEP)?,
            outcome: r.column(9, &self.target, STEP)?,
            host: r.column(16, &self.target, STEP)?,
            instance: r.column(17, &self.target, STEP)?,
            error_kind: r.column(20, &self.target, STEP)?,
        })
    }
}
