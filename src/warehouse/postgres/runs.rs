//! Checkpoints and `sync_runs` on PostgreSQL: where each schedule's next pass starts, and what
//! passes did; the same rules as the SQLite warehouse's `runs.rs`.

use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

use super::PgWarehouse;
use super::session::{PgContext, RowColumn, instant, micros, micros_from, wait};
use crate::warehouse::destination::{PassOpened, PassStart};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::records::{
    Checkpoint, PROCESS_ENDED, ProcessIdentity, RunId, RunRecord, WALKER_CHARS,
};

pub(super) const READ_CHECKPOINT: &str =
    "SELECT cursor, updated_at FROM sync_checkpoints WHERE schedule_uid = $1";

/// The openings of a group of passes (`PgWarehouse::open_passes`), each of a different
/// schedule, as arrays: one statement for all. For each, in order: `since`, the instant since
/// which another's pass means this one is not started, is NULL when any is; rounded up to
/// the microsecond, as `started_at` is stored to it. With none walked since, the row's `id`
/// and the checkpoint; else no `id`, and who walked it. The rows are matched to the passes
/// by schedule, which is why each schedule is in a group once.
const OPEN_PASSES: &str = "WITH asked AS (
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[], $5::text[],
                            $6::int8[], $7::timestamptz[])
         WITH ORDINALITY AS a (schedule_uid, kind, started_at, host, instance, pid, since, n)
     ), walked AS (
       SELECT a.n, l.host, l.instance, l.pid
       FROM asked AS a
       CROSS JOIN LATERAL (
         SELECT started_at, finished_at IS NOT NULL AND error IS DISTINCT FROM $8 AS finished,
                host, instance, pid
         FROM sync_runs
         WHERE a.since IS NOT NULL AND schedule_uid = a.schedule_uid AND kind = a.kind
         ORDER BY id DESC LIMIT 1
       ) AS l
       WHERE l.finished AND l.started_at >= a.since
     ), run AS (
       INSERT INTO sync_runs (schedule_uid, kind, started_at, host, instance, pid)
       SELECT schedule_uid, kind, started_at, host, instance, pid FROM asked AS a
       WHERE NOT EXISTS (SELECT 1 FROM walked AS w WHERE w.n = a.n)
       ORDER BY a.n
       RETURNING id, schedule_uid
     )
     SELECT r.id, w.host, w.instance, w.pid, c.cursor, c.updated_at
     FROM asked AS a
     LEFT JOIN run AS r ON r.schedule_uid = a.schedule_uid
     LEFT JOIN walked AS w ON w.n = a.n
     LEFT JOIN sync_checkpoints AS c ON c.schedule_uid = a.schedule_uid
     ORDER BY a.n";

/// The ends of a group of passes (`PgWarehouse::finish_runs`), as arrays: one statement for
/// all.
const FINISH_RUNS: &str = "UPDATE sync_runs AS r SET finished_at = f.finished_at,
       pages = f.pages, calls_seen = f.calls_seen, calls_written = f.calls_written,
       requests = f.requests, retries = f.retries, error = f.error, outcome = f.outcome,
       horizon = f.horizon, lag_secs = f.lag_secs, detail_requests = f.detail_requests,
       rate_limited = f.rate_limited, throttled_secs = f.throttled_secs,
       future_rows = f.future_rows, error_kind = f.error_kind
     FROM unnest($1::int8[], $2::timestamptz[], $3::int8[], $4::int8[], $5::int8[], $6::int8[],
                 $7::int8[], $8::text[], $9::text[], $10::timestamptz[], $11::float8[],
                 $12::int8[], $13::int8[], $14::float8[], $15::int8[], $16::text[])
       AS f (id, finished_at, pages, calls_seen, calls_written, requests, retries, error,
             outcome, horizon, lag_secs, detail_requests, rate_limited, throttled_secs,
             future_rows, error_kind)
     WHERE r.id = f.id";

/// Moves the checkpoint of each schedule `$1` forward to its cursor `$2`, never back
/// (instants compared by the server), stamped `$3`; each schedule named once.
pub(super) const ADVANCE_CHECKPOINTS: &str =
    "INSERT INTO sync_checkpoints (schedule_uid, cursor, updated_at)
     SELECT k.s, k.c, $3 FROM unnest($1::uuid[], $2::timestamptz[]) AS k (s, c)
     ON CONFLICT (schedule_uid) DO UPDATE SET cursor = excluded.cursor,
       updated_at = excluded.updated_at
     WHERE sync_checkpoints.cursor < excluded.cursor";

impl PgWarehouse {
    /// A checkpoint's `cursor` and `updated_at`, from column `first` on.
    pub(in crate::warehouse::postgres) fn checkpoint_of(
        &self,
        schedule: Uuid,
        row: &Row,
        first: usize,
    ) -> Result<Checkpoint, WarehouseError> {
        Ok(Checkpoint {
            schedule_uid: schedule,
            cursor: instant(
                &self.target,
                row.column(first, &self.target, "reading a checkpoint")?,
                "sync_checkpoints.cursor",
            )?,
            updated_at: instant(
                &self.target,
                row.column(first + 1, &self.target, "reading a checkpoint")?,
                "sync_checkpoints.updated_at",
            )?,
        })
    }

    /// Commits after `result` succeeded, else rolls back (best effort: a broken connection
    /// has rolled back already).
    pub(super) fn end_transaction<T>(
        &self,
        result: Result<T, WarehouseError>,
        step: &'static str,
    ) -> Result<T, WarehouseError> {
        match result {
            Ok(value) => {
                wait(self.client()?.batch_execute("COMMIT")).pg(&self.target, step)?;
                Ok(value)
            }
            Err(err) => {
                if let Ok(client) = self.client() {
                    let _ = wait(client.batch_execute("ROLLBACK"));
                }
                Err(err)
            }
        }
    }

    /// [`OPEN_PASSES`] for `starts`, each of a different schedule: an error when the
    /// statement fails; else each pass's opening.
    pub(in crate::warehouse::postgres) fn open_group(
        &mut self,
        starts: &[PassStart<'_>],
    ) -> Result<Vec<Result<PassOpened, WarehouseError>>, WarehouseError> {
        self.reconnect_if_closed()?;
        let step = "recording the start of a pass";
        let schedules: Vec<Uuid> = starts.iter().map(|s| s.schedule).collect();
        let kinds: Vec<&str> = starts.iter().map(|s| s.kind.as_str()).collect();
        let started: Vec<OffsetDateTime> = starts.iter().map(|s| micros(s.started_at)).collect();
        let hosts: Vec<&str> = starts.iter().map(|s| s.walker.host.as_str()).collect();
        let instances: Vec<&str> = starts.iter().map(|s| s.walker.instance.as_str()).collect();
        let pids: Vec<i64> = starts.iter().map(|s| i64::from(s.walker.pid)).collect();
        let since: Vec<Option<OffsetDateTime>> = starts
            .iter()
            .map(|s| s.unless_walked_since.map(micros_from))
            .collect();
        let rows = self.replanning(|| {
            let statement = self.statement(OPEN_PASSES, step)?;
            wait(self.client()?.query(
                &statement,
                &[
                    &schedules,
                    &kinds,
                    &started,
                    &hosts,
                    &instances,
                    &pids,
                    &since,
                    &PROCESS_ENDED,
                ],
            ))
            .pg(&self.target, step)
        })?;
        if rows.len() != starts.len() {
            return Err(WarehouseError::Unanswered { step: "opening" });
        }
        Ok(starts
            .iter()
            .zip(&rows)
            .map(|(start, row)| self.opened(start.schedule, row))
            .collect())
    }

    /// One pass's opening from its row of [`OPEN_PASSES`].
    fn opened(&self, schedule: Uuid, row: &Row) -> Result<PassOpened, WarehouseError> {
        let step = "recording the start of a pass";
        let run: Option<i64> = row.column(0, &self.target, step)?;
        let Some(run) = run else {
            return Ok(PassOpened::WalkedBy(self.walker_of(row, 1)?));
        };
        // The row is recorded: a checkpoint that cannot be read is the pass's failure, kept
        // in that row, not the opening's.
        let cursor = row.column::<Option<OffsetDateTime>>(4, &self.target, "reading a checkpoint");
        let checkpoint = cursor.and_then(|cursor| {
            cursor
                .map(|_| self.checkpoint_of(schedule, row, 4))
                .transpose()
        });
        let opened_at = checkpoint
            .as_ref()
            .ok()
            .and_then(|c| c.as_ref().map(|c| c.cursor));
        self.expect_quiet(schedule, opened_at);
        Ok(PassOpened::Started {
            run: Some(RunId(run)),
            checkpoint,
        })
    }

    /// Who walked a pass: its `host`, `instance` and `pid` from column `first` on.
    fn walker_of(&self, row: &Row, first: usize) -> Result<ProcessIdentity, WarehouseError> {
        let what = "reading a schedule's latest pass";
        let text = |i: usize| -> Result<Option<String>, WarehouseError> {
            let value: Option<String> = row.column(i, &self.target, what)?;
            // Text from the database, shown in log lines: made safe first.
            Ok(value.map(|t| crate::untrusted::untrusted_text(&t, WALKER_CHARS)))
        };
        let host = text(first)?.unwrap_or_else(|| "?".to_owned());
        let pid: Option<i64> = row.column(first + 2, &self.target, what)?;
        Ok(ProcessIdentity {
            instance: text(first + 1)?.unwrap_or_else(|| host.clone()),
            host,
            pid: pid.and_then(|p| u32::try_from(p).ok()).unwrap_or_default(),
        })
    }

    pub(in crate::warehouse::postgres) fn finish_group(
        &mut self,
        runs: &[(RunId, &RunRecord)],
    ) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        let step = "recording the end of a pass";
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let column = |f: &dyn Fn(&RunRecord) -> i64| -> Vec<i64> {
            runs.iter().map(|(_, record)| f(record)).collect()
        };
        let ids: Vec<i64> = runs.iter().map(|(run, _)| run.0).collect();
        let finished: Vec<OffsetDateTime> =
            runs.iter().map(|(_, r)| micros(r.finished_at)).collect();
        let pages = column(&|r| n(r.stats.pages));
        let seen = column(&|r| n(r.stats.calls_seen));
        let written = column(&|r| n(r.stats.calls_written));
        let requests = column(&|r| n(r.stats.requests));
        let retries = column(&|r| n(r.stats.retries));
        let errors: Vec<Option<&str>> = runs.iter().map(|(_, r)| r.error.as_deref()).collect();
        let outcomes: Vec<&str> = runs.iter().map(|(_, r)| r.outcome.as_str()).collect();
        let horizons: Vec<Option<OffsetDateTime>> =
            runs.iter().map(|(_, r)| r.horizon.map(micros)).collect();
        let lags: Vec<Option<f64>> = runs.iter().map(|(_, r)| r.lag_secs).collect();
        let details = column(&|r| n(r.stats.detail_requests));
        let limited = column(&|r| n(r.stats.rate_limited));
        let throttled: Vec<f64> = runs
            .iter()
            .map(|(_, r)| r.stats.throttled_ms as f64 / 1000.0)
            .collect();
        let future = column(&|r| n(r.stats.future_rows));
        let kinds: Vec<Option<&str>> = runs
            .iter()
            .map(|(_, r)| r.error_kind.map(crate::ErrorKind::as_str))
            .collect();
        self.replanning(|| {
            let statement = self.statement(FINISH_RUNS, step)?;
            wait(self.client()?.execute(
                &statement,
                &[
                    &ids, &finished, &pages, &seen, &written, &requests, &retries, &errors,
                    &outcomes, &horizons, &lags, &details, &limited, &throttled, &future, &kinds,
                ],
            ))
            .pg(&self.target, step)
        })?;
        Ok(())
    }
}

/// The opening of a group of one.
pub(super) fn only(
    mut opened: Vec<Result<PassOpened, WarehouseError>>,
) -> Result<PassOpened, WarehouseError> {
    opened
        .pop()
        .unwrap_or(Err(WarehouseError::Unanswered { step: "opening" }))
}
