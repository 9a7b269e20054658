//! Reading the warehouse back: per-schedule status (`callsync status`) and the demo's overview.

use rusqlite::types::Value;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use super::runs::parse;
use crate::service::Timestamp;
use crate::untrusted::untrusted_text;
use crate::warehouse::records::{RunOutcome, WALKER_CHARS};
use crate::warehouse::status::{
    Overview, RunSummary, STORED_ERROR_CHARS, ScheduleStatus, StatusFacts, in_a_row,
};

impl Warehouse {
    pub fn overview(&self) -> Result<Overview, WarehouseError> {
        let query = |sql: &str| -> Result<Vec<(String, Value, i64)>, WarehouseError> {
            let mut stmt = self
                .conn
                .prepare(sql)
                .sql(&self.path, "reading the overview")?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(Iterator::collect)
                .sql(&self.path, "reading the overview")
        };
        let text = |v: Value| match v {
            Value::Text(t) => t,
            Value::Integer(i) => i.to_string(),
            _ => String::new(),
        };
        Ok(Overview {
            by_status: query(
                "SELECT status, coalesce(progress, ''), count(*) FROM call_results
                 GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2",
            )?
            .into_iter()
            .map(|(a, b, n)| (a, text(b), n))
            .collect(),
            top_outcomes: query(
                "SELECT name, '', count(*) FROM outcome_results GROUP BY name ORDER BY 3 DESC, 1 LIMIT 10",
            )?
            .into_iter()
            .map(|(a, _, n)| (a, n))
            .collect(),
            answer_rates: query(
                "SELECT coalesce(schedule_name, schedule_uid), count(*), sum(answered)
                 FROM call_results
                 WHERE attempt_count > 0 AND is_test_call = 0
                 GROUP BY schedule_uid ORDER BY 1",
            )?
            .into_iter()
            .map(|(a, dialled, answered)| (a, match dialled { Value::Integer(i) => i, _ => 0 }, answered))
            .collect(),
        })
    }

    /// Every schedule's status now.
    pub fn status(&self) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        self.status_at(Timestamp::now())
    }

    /// Every schedule's status, with lags measured at `now`.
    pub fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT schedule_uid FROM sync_checkpoints
                 UNION SELECT schedule_uid FROM sync_runs
                 UNION SELECT DISTINCT schedule_uid FROM calls
                 ORDER BY 1",
            )
            .sql(&self.path, "listing schedules")?;
        let schedules: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .and_then(Iterator::collect)
            .sql(&self.path, "listing schedules")?;
        schedules
            .iter()
            .map(|s| self.schedule_status(s, now))
            .collect()
    }

    /// When the oldest pass the warehouse remembers began (retention forgets older ones).
    pub fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        let first: Option<String> = self
            .conn
            .query_row("SELECT min(started_at) FROM sync_runs", [], |r| r.get(0))
            .sql(&self.path, "reading the first pass")?;
        first
            .map(|t| parse(&self.path, &t, "sync_runs.started_at"))
            .transpose()
    }

    fn schedule_status(
        &self,
        schedule: &str,
        now: Timestamp,
    ) -> Result<ScheduleStatus, WarehouseError> {
        let conn = &self.conn;
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
        let mut runs = conn
            .prepare_cached(
                "SELECT kind, started_at, finished_at, pages, calls_seen, calls_written, requests,
                   retries, error, outcome, horizon, lag_secs, detail_requests, rate_limited,
                   throttled_secs, future_rows, host, instance, pid, id, error_kind
                 FROM sync_runs WHERE schedule_uid = ?1 ORDER BY id DESC LIMIT 100",
            )
            .sql(&self.path, "reading the last passes")?;
        let mut recent = runs
            .query_map([schedule], run_summary)
            .sql(&self.path, "reading the last passes")?;
        let last_run = recent
            .next()
            .transpose()
            .sql(&self.path, "reading the last pass")?;
        let earlier: Vec<RunSummary> = recent
            .collect::<Result<_, _>>()
            .sql(&self.path, "reading the last passes")?;
        let (behind_passes, failed_passes) =
            in_a_row(last_run.iter().chain(&earlier).map(|r| r.outcome));
        let last_success_at: Option<String> = conn
            .query_row(
                "SELECT max(finished_at) FROM sync_runs
                 WHERE schedule_uid = ?1 AND outcome IN ('completed', 'behind')",
                [schedule],
                |r| r.get(0),
            )
            .sql(&self.path, "reading the last successful pass")?;
        // Instants are shown in the warehouse's own form (RFC 3339, six fraction digits), so
        // a value copied from `status` compares as text with the columns it came from.
        let rfc3339 = |text: Option<String>, what| -> Result<Option<String>, WarehouseError> {
            text.map(|t| parse(&self.path, &t, what).map(|t| t.to_sqlite()))
                .transpose()
        };
        let cursor = cursor
            .map(|c| parse(&self.path, &c, "sync_checkpoints.cursor"))
            .transpose()?;
        let last_run = last_run
            .map(
                |mut run: RunSummary| -> Result<RunSummary, WarehouseError> {
                    run.started_at =
                        parse(&self.path, &run.started_at, "sync_runs.started_at")?.to_sqlite();
                    run.finished_at = rfc3339(run.finished_at, "sync_runs.finished_at")?;
                    run.horizon = rfc3339(run.horizon, "sync_runs.horizon")?;
                    Ok(run)
                },
            )
            .transpose()?;
        let last_success_at = last_success_at
            .map(|t| parse(&self.path, &t, "sync_runs.finished_at"))
            .transpose()?;
        let count = |sql: &str| -> Result<i64, WarehouseError> {
            conn.query_row(sql, [schedule], |r| r.get(0))
                .sql(&self.path, "counting rows")
        };
        let counts = [
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
        ];
        Ok(ScheduleStatus::of(
            StatusFacts {
                schedule_uid: schedule.to_owned(),
                schedule_name,
                cursor,
                checkpoint_moved_at: moved_at.and_then(|t| Timestamp::parse_sqlite(&t).ok()),
                last_run,
                behind_passes,
                failed_passes,
                last_success_at,
                counts,
            },
            now,
        ))
    }
}

fn run_summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    let finished_at: Option<String> = r.get(2)?;
    let outcome = RunOutcome::of_stored_run(
        finished_at.is_some(),
        r.get::<_, Option<String>>(9)?.as_deref(),
    );
    Ok(RunSummary {
        kind: r.get(0)?,
        started_at: r.get(1)?,
        finished_at,
        pages: r.get(3)?,
        calls_seen: r.get(4)?,
        calls_written: r.get(5)?,
        requests: r.get(6)?,
        retries: r.get(7)?,
        // Text from a file (an older callsync stored the service's words unescaped): shown
        // only once made safe.
        error: r
            .get::<_, Option<String>>(8)?
            .map(|e| untrusted_text(&e, STORED_ERROR_CHARS)),
        horizon: r.get(10)?,
        lag_secs: r.get(11)?,
        detail_requests: r.get(12)?,
        rate_limited: r.get(13)?,
        throttled_secs: r.get(14)?,
        future_rows: r.get(15)?,
        host: r
            .get::<_, Option<String>>(16)?
            .map(|h| untrusted_text(&h, WALKER_CHARS)),
        instance: r
            .get::<_, Option<String>>(17)?
            .map(|i| untrusted_text(&i, WALKER_CHARS)),
        pid: r.get(18)?,
        run_id: r.get(19)?,
        error_kind: r
            .get::<_, Option<String>>(20)?
            .map(|k| untrusted_text(&k, WALKER_CHARS)),
        outcome,
    })
}

fn none_if_empty<T: Default>(e: rusqlite::Error) -> rusqlite::Result<T> {
    match e {
        rusqlite::Error::QueryReturnedNoRows => Ok(T::default()),
        e => Err(e),
    }
}
