//! Reading the warehouse back: per-schedule status (`callsync status`) and the demo's overview.

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use super::runs::parse;
use crate::service::Timestamp;
use crate::warehouse::RunId;
use crate::warehouse::destination::Destination;
use crate::warehouse::status::{
    PassFigures, RECENT_PASSES, ScheduleStatus, StatusFacts, StoredRun,
};

impl Warehouse {
    /// Every schedule's status now.
    pub fn status(&self) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        self.status_at(Timestamp::now())
    }

    pub(super) fn schedule_status(
        &self,
        schedule: &str,
        now: Timestamp,
    ) -> Result<ScheduleStatus, WarehouseError> {
        let conn = &self.conn;
        let schedule_uid = schedule.parse().map_err(|_| WarehouseError::BadUid {
            path: self.path.clone(),
            what: "schedule_uid",
            value: schedule.to_owned(),
        })?;
        let (cursor, moved_at): (Option<String>, Option<String>) = conn
            .query_row(
                "SELECT cursor, updated_at FROM sync_checkpoints WHERE schedule_uid = ?1",
                [schedule],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .or_else(none_if_empty)
            .sql(&self.path, "reading a checkpoint")?;
        let schedule_name: Option<String> = conn
            .query_row(
                "SELECT display_name FROM schedules WHERE uid = ?1",
                [schedule],
                |r| r.get(0),
            )
            .or_else(none_if_empty)
            .sql(&self.path, "reading a schedule's name")?;
        let last_success_at: Option<String> = conn
            .query_row(
                "SELECT max(finished_at) FROM sync_runs
                 WHERE schedule_uid = ?1 AND outcome IN ('completed', 'behind')",
                [schedule],
                |r| r.get(0),
            )
            .sql(&self.path, "reading the last successful pass")?;
        Ok(ScheduleStatus::of(
            StatusFacts {
                schedule_uid,
                schedule_name,
                cursor: self.instant(cursor, "sync_checkpoints.cursor")?,
                checkpoint_moved_at: self.instant(moved_at, "sync_checkpoints.updated_at")?,
                recent_runs: self.recent_runs(schedule)?,
                last_success_at: self.instant(last_success_at, "sync_runs.finished_at")?,
                counts: self.row_counts(schedule)?,
            },
            now,
        ))
    }

    /// The schedule's latest passes as stored, newest first, at most [`RECENT_PASSES`].
    fn recent_runs(&self, schedule: &str) -> Result<Vec<StoredRun>, WarehouseError> {
        const STEP: &str = "reading the last passes";
        let mut runs = self
            .conn
            .prepare_cached(
                "SELECT kind, started_at, finished_at, pages, calls_seen, calls_written, requests,
                   retries, error, outcome, horizon, lag_secs, detail_requests, rate_limited,
                   throttled_secs, future_rows, host, instance, pid, id, error_kind
                 FROM sync_runs WHERE schedule_uid = ?1 ORDER BY id DESC LIMIT ?2",
            )
            .sql(&self.path, STEP)?;
        let runs = runs
            .query_map(rusqlite::params![schedule, RECENT_PASSES], |r| {
                self.stored_run(r)
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .sql(&self.path, STEP)?;
        runs.into_iter().collect()
    }

    /// A `sync_runs` row as stored: a row the driver cannot read is the outer error, an
    /// instant that is not one the inner (naming the file and the column).
    fn stored_run(
        &self,
        r: &rusqlite::Row<'_>,
    ) -> rusqlite::Result<Result<StoredRun, WarehouseError>> {
        let (started, finished, horizon): (String, _, _) = (r.get(1)?, r.get(2)?, r.get(10)?);
        let instants = parse(&self.path, &started, "sync_runs.started_at").and_then(|started| {
            let finished = self.instant(finished, "sync_runs.finished_at")?;
            Ok((
                started,
                finished,
                self.instant(horizon, "sync_runs.horizon")?,
            ))
        });
        let (started_at, finished_at, horizon) = match instants {
            Ok(instants) => instants,
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(StoredRun {
            kind: r.get(0)?,
            figures: PassFigures {
                started_at,
                finished_at,
                pages: r.get(3)?,
                calls_seen: r.get(4)?,
                calls_written: r.get(5)?,
                requests: r.get(6)?,
                retries: r.get(7)?,
                horizon,
                lag_secs: r.get(11)?,
                detail_requests: r.get(12)?,
                rate_limited: r.get(13)?,
                throttled_secs: r.get(14)?,
                future_rows: r.get(15)?,
                pid: r.get(18)?,
                run_id: RunId(r.get(19)?),
            },
            error: r.get(8)?,
            outcome: r.get(9)?,
            host: r.get(16)?,
            instance: r.get(17)?,
            error_kind: r.get(20)?,
        }))
    }

    /// Rows of the schedule: calls, attempts, outcomes, variables, notifications.
    fn row_counts(&self, schedule: &str) -> Result<[i64; 6], WarehouseError> {
        let count = |sql: &str| -> Result<i64, WarehouseError> {
            self.conn
                .query_row(sql, [schedule], |r| r.get(0))
                .sql(&self.path, "counting rows")
        };
        Ok([
            count("SELECT count(*) FROM calls WHERE schedule_uid = ?1")?,
            count(
                "SELECT count(*) FROM call_attempts WHERE call_id IN
                   (SELECT id FROM calls WHERE schedule_uid = ?1)",
            )?,
            count(
                "SELECT count(*) FROM attempt_outcomes WHERE call_id IN
                   (SELECT id FROM calls WHERE schedule_uid = ?1)",
            )?,
            count(
                "SELECT count(*) FROM attempt_variables WHERE call_id IN
                   (SELECT id FROM calls WHERE schedule_uid = ?1)",
            )?,
            count(
                "SELECT count(*) FROM call_notifications WHERE call_id IN
                   (SELECT id FROM calls WHERE schedule_uid = ?1)",
            )?,
            count("SELECT count(*) FROM set_aside_calls WHERE schedule_uid = ?1")?,
        ])
    }

    /// A stored instant that may be missing, read as the warehouse writes it.
    fn instant(
        &self,
        text: Option<String>,
        what: &'static str,
    ) -> Result<Option<Timestamp>, WarehouseError> {
        text.map(|t| parse(&self.path, &t, what)).transpose()
    }
}

fn none_if_empty<T: Default>(e: rusqlite::Error) -> rusqlite::Result<T> {
    match e {
        rusqlite::Error::QueryReturnedNoRows => Ok(T::default()),
        e => Err(e),
    }
}
