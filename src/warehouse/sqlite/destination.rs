//! The SQLite warehouse's side of the contract (`warehouse/destination.rs`): [`Warehouse`] as a
//! `Destination`, its methods' bodies here. Every capability is offered: a backup into a file,
//! its restore, the upload's ledger. The file before it is opened is `backend.rs`'s.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::params;
use rusqlite::types::Value;
use uuid::Uuid;

use super::error::SqlContext;
use super::file_lock::{FileIdentity, LockError};
use super::handle::{Warehouse, check_usable};
use super::locks::{ScheduleLock, UploadLock};
use super::{backup, resources, runs, upsert};
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::capabilities::{BackupReport, UploadLedger};
use crate::warehouse::destination::{
    Claim, Destination, PageBatch, PassOpened, PassStart, Prepared, Watch,
};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::records::{Checkpoint, RunId, RunRecord};
use crate::warehouse::status::{Overview, ScheduleStatus};
use crate::warehouse::write_plan::{PageWrite, plan, rows_of};

/// The file a writer opened, checked apart from it.
struct FileWatch {
    path: PathBuf,
    opened: Option<FileIdentity>,
}

impl Watch for FileWatch {
    /// Fails when the path no longer names the file opened (deleted, or another file moved
    /// over it: everything written would be lost), or when it has become read-only.
    fn check(&self) -> Result<(), WarehouseError> {
        match self.opened {
            Some(opened) => check_usable(&self.path, opened),
            None => Ok(()),
        }
    }
}

/// The lock on the file, as the contract's error.
fn lock_error(path: &Path, err: LockError) -> Result<Option<Claim>, WarehouseError> {
    match err {
        LockError::Busy => Ok(None),
        LockError::Io(source) => Err(WarehouseError::Lock {
            path: path.to_owned(),
            source,
        }),
    }
}

impl Warehouse {
    /// The warehouse, once its path is checked to still name the file it writes into (one
    /// `stat`): after `rm` or `mv` over it, writing on would be lost, or — as the `-wal` goes
    /// by the path — replayed onto the file now there.
    fn in_place(&mut self) -> Result<&mut Warehouse, WarehouseError> {
        self.check_in_place()?;
        Ok(self)
    }
}

impl Destination for Warehouse {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

    fn watch(&self) -> Arc<dyn Watch> {
        Arc::new(FileWatch {
            path: self.path().to_owned(),
            opened: self.identity(),
        })
    }

    fn unwritable_for_owner(&self) -> Option<String> {
        super::access::unwritable_for_owner(self.path())
    }

    /// The schedule's lock on the file itself ([`ScheduleLock`]), without waiting.
    fn claim(&self, schedule: Uuid) -> Result<Option<Claim>, WarehouseError> {
        self.check_in_place()?;
        match ScheduleLock::acquire(self.path(), schedule) {
            Ok(lock) => Ok(Some(Claim::new(lock))),
            Err(err) => lock_error(self.path(), err),
        }
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError> {
        runs::read_checkpoint(&self.conn, &self.path, schedule)
    }

    /// Operator tool (`checkpoint set` / `reset`): sets or deletes the cursor, backwards too.
    /// Returns what was there before.
    fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError> {
        let path = self.path.as_path();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .sql(path, "starting a checkpoint change")?;
        let before = runs::read_checkpoint(&tx, path, schedule)?;
        match cursor {
            Some(cursor) => runs::write_checkpoint(&tx, path, schedule, cursor)?,
            None => {
                tx.execute(
                    "DELETE FROM sync_checkpoints WHERE schedule_uid = ?1",
                    [schedule.to_string()],
                )
                .sql(path, "deleting a checkpoint")?;
            }
        }
        tx.commit().sql(path, "committing a checkpoint change")?;
        Ok(before)
    }

    /// Whether the warehouse has heard of `schedule`: a checkpoint, a pass or a call.
    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sync_checkpoints WHERE schedule_uid = ?1)
                     OR EXISTS (SELECT 1 FROM sync_runs WHERE schedule_uid = ?1)
                     OR EXISTS (SELECT 1 FROM calls WHERE schedule_uid = ?1)",
                [schedule.to_string()],
                |r| r.get(0),
            )
            .sql(&self.path, "looking a schedule up")
    }

    /// Three statements: on one file they cost no round trip.
    fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError> {
        let PassStart { schedule, kind, .. } = *start;
        if let Some(since) = start.unless_walked_since
            && let Some(walker) = Warehouse::walked_since(self, schedule, kind, since)?
        {
            return Ok(PassOpened::WalkedBy(walker));
        }
        let run = (self.in_place()?).start_run(schedule, kind, start.started_at, start.walker)?;
        Ok(PassOpened::Started {
            run: Some(run),
            checkpoint: Warehouse::checkpoint(self, schedule),
        })
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        self.in_place()?.write_hashed_page(page)
    }

    /// How many of the page's calls `write_page` would write (new or changed content); writes
    /// nothing.
    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
        let schedule_uid = page.schedule.to_string();
        let call_rows = rows_of(&schedule_uid, &page.calls, &page.content_hashes);
        let stored = upsert::stored_fingerprints(&self.conn, &self.path, &page.calls)?;
        Ok(plan(&page.calls, &call_rows, stored, page.schedule)
            .counts
            .calls_written)
    }

    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError> {
        self.check_in_place()?;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let stats = &record.stats;
        self.conn
            .prepare_cached(
                "UPDATE sync_runs SET finished_at = ?2, pages = ?3, calls_seen = ?4,
                   calls_written = ?5, requests = ?6, retries = ?7, error = ?8, outcome = ?9,
                   horizon = ?10, lag_secs = ?11, detail_requests = ?12, rate_limited = ?13,
                   throttled_secs = ?14, future_rows = ?15, error_kind = ?16
                 WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run.0,
                    record.finished_at.to_warehouse_text(),
                    n(stats.pages),
                    n(stats.calls_seen),
                    n(stats.calls_written),
                    n(stats.requests),
                    n(stats.retries),
                    record.error,
                    record.outcome.as_str(),
                    record.horizon.map(Timestamp::to_warehouse_text),
                    record.lag_secs,
                    n(stats.detail_requests),
                    n(stats.rate_limited),
                    stats.throttled_ms as f64 / 1000.0,
                    n(stats.future_rows),
                    record.error_kind.map(crate::ErrorKind::as_str),
                ])
            })
            .sql(&self.path, "recording the end of a pass")?;
        Ok(())
    }

    /// Deletes the `sync_runs` rows of passes that finished before `cutoff`, except each
    /// schedule's latest pass and its latest successful one (`status` shows both, however
    /// old); a pass still running, or whose process died, has no `finished_at` and stays.
    /// Returns how many rows went.
    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError> {
        self.check_in_place()?;
        let deleted = self
            .conn
            .execute(
                "DELETE FROM sync_runs
                 WHERE finished_at IS NOT NULL AND finished_at < ?1
                   AND id NOT IN (SELECT max(id) FROM sync_runs GROUP BY schedule_uid)
                   AND id NOT IN (SELECT max(id) FROM sync_runs
                                  WHERE outcome IN ('completed', 'behind')
                                  GROUP BY schedule_uid)",
                [cutoff.to_warehouse_text()],
            )
            .sql(&self.path, "forgetting old passes")?;
        Ok(deleted as u64)
    }

    fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError> {
        self.name_schedules(prepared.names.iter().copied())?;
        self.set_schedule_campaigns(prepared.campaigns.clone())?;
        // The analyst's days: the offsets of `warehouse.timezone` (rewritten only on a change).
        self.set_timezone(prepared.timezone)?;
        Ok(())
    }

    /// Every schedule's status, with lags measured at `now`.
    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
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

    fn overview(&self) -> Result<Overview, WarehouseError> {
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

    /// When the oldest pass the warehouse remembers began (retention forgets older ones).
    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        let first: Option<String> = self
            .conn
            .query_row("SELECT min(started_at) FROM sync_runs", [], |r| r.get(0))
            .sql(&self.path, "reading the first pass")?;
        first
            .map(|t| runs::parse(&self.path, &t, "sync_runs.started_at"))
            .transpose()
    }

    fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        self.conn
            .execute(
                resources::RECORD_CAMPAIGN,
                params![
                    campaign.uid.to_string(),
                    campaign.name,
                    campaign.kind,
                    campaign.direction,
                    campaign.is_enabled,
                    campaign.created_at.to_warehouse_text(),
                    campaign.updated_at.to_warehouse_text(),
                    Timestamp::now().to_warehouse_text(),
                ],
            )
            .sql(&self.path, "recording a campaign")?;
        Ok(())
    }

    /// `campaign`: when known (callsync created the schedule in it); an update keeps the
    /// campaign recorded before.
    fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        let intervals =
            serde_json::to_string(&schedule.retry_intervals).unwrap_or_else(|_| "[]".into());
        self.conn
            .execute(
                resources::RECORD_SCHEDULE,
                params![
                    schedule.uid.to_string(),
                    campaign.map(|c| c.to_string()),
                    schedule.name,
                    schedule.starts_at.to_warehouse_text(),
                    schedule.ends_at.to_warehouse_text(),
                    schedule.retry_type,
                    intervals,
                    schedule.is_enabled,
                    schedule.created_at.to_warehouse_text(),
                    schedule.updated_at.to_warehouse_text(),
                    Timestamp::now().to_warehouse_text(),
                ],
            )
            .sql(&self.path, "recording a schedule")?;
        Ok(())
    }

    /// Writes a consistent copy of the warehouse to `dest` (refused if something is there,
    /// unless `overwrite`): one self-contained file, without a `-wal` of its own.
    fn backup_to(&self, dest: &Path, overwrite: bool) -> Result<BackupReport, WarehouseError> {
        if backup::same_file(dest, &self.path) {
            return Err(WarehouseError::BackupOverWarehouse {
                path: dest.to_owned(),
            });
        }
        match dest.symlink_metadata() {
            Ok(_) if !overwrite => {
                return Err(WarehouseError::BackupExists {
                    path: dest.to_owned(),
                });
            }
            Ok(found) if found.nlink() > 1 => {
                return Err(WarehouseError::BackupTargetHardLinked {
                    path: dest.to_owned(),
                    names: found.nlink(),
                });
            }
            _ => {}
        }
        let mode = backup::backup_mode(&self.path)?;
        let partial = backup::sibling(dest, "partial");
        let written = backup::copy_into(&self.conn, &partial, Some(mode)).and_then(|contents| {
            // Read as the file alone (no writer had it open): a writer that started since
            // may have moved pages into the file under the copy.
            if !self.reading.unchanged(&self.path) {
                return Err(WarehouseError::ChangedWhileCopying {
                    path: self.path.clone(),
                });
            }
            backup::install(&partial, dest)?;
            Ok(contents)
        });
        let contents = written.inspect_err(|_| backup::remove_copy(&partial))?;
        Ok(BackupReport {
            path: dest.to_owned(),
            bytes: backup::file_len(dest)?,
            contents,
        })
    }

    /// The ledger in this file, with [`UploadLock`] held.
    fn upload_ledger(
        &mut self,
        schedule: Uuid,
    ) -> Result<Option<(Claim, &mut dyn UploadLedger)>, WarehouseError> {
        match UploadLock::acquire(self.path(), schedule) {
            Ok(lock) => Ok(Some((Claim::new(lock), self as &mut dyn UploadLedger))),
            Err(err) => lock_error(self.path(), err).map(|_| None),
        }
    }
}
