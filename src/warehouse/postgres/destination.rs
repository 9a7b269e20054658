//! The PostgreSQL warehouse's side of the contract (`warehouse/destination.rs`): [`PgWarehouse`]
//! as a `Destination`, its methods' bodies here. A database has no file to back up or restore
//! (pg_dump does that) and keeps no upload ledger: those capabilities are declined
//! (`backend.rs`, which has the database before it is connected).

use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;

use std::collections::HashMap;

use time::OffsetDateTime;

use super::PgWarehouse;
use super::backend::declined;
use super::session::{PgContext, RowColumn, instant, micros, wait};
use super::write::quiet;
use super::{resources, runs};
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::capabilities::{BackupReport, UploadLedger};
use crate::warehouse::destination::{
    Claim, Destination, PageBatch, PassOpened, PassStart, Prepared, QuietRead, Watch,
};
use crate::warehouse::error::{Capability, WarehouseError};
use crate::warehouse::records::{Checkpoint, RunId, RunRecord};
use crate::warehouse::status::ScheduleStatus;
use crate::warehouse::write_plan::PageWrite;
use crate::warehouse::write_plan::{plan, rows_of};

/// Not a file: nothing to check between ticks (`/healthz` asks the server instead).
struct ServerWatch;

impl Watch for ServerWatch {
    fn check(&self) -> Result<(), WarehouseError> {
        Ok(())
    }
}

impl Destination for PgWarehouse {
    fn name(&self) -> String {
        self.target().display().to_owned()
    }

    fn watch(&self) -> Arc<dyn Watch> {
        Arc::new(ServerWatch)
    }

    /// A session-level advisory lock, which the server releases when the process's
    /// connection goes (kill -9 included).
    fn claim(&self, schedule: Uuid) -> Result<Option<Claim>, WarehouseError> {
        Ok(PgWarehouse::claim(self, schedule)?.map(Claim::new))
    }

    fn release(&self, claims: Vec<Claim>) {
        let mut ours = Vec::with_capacity(claims.len());
        for claim in claims {
            // A claim of another back end is dropped, releasing itself.
            if let Ok(claim) = claim.held::<super::PgClaim>() {
                ours.push(claim);
            }
        }
        super::claim::release_all(ours);
    }

    fn claims(&self, schedules: &[Uuid]) -> Vec<Result<Option<Claim>, WarehouseError>> {
        PgWarehouse::claim_all(self, schedules)
            .into_iter()
            .map(|claim| claim.map(|claim| claim.map(Claim::new)))
            .collect()
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError> {
        self.reconnect_if_closed()?;
        // Prepared once per connection, as every statement of a pass's opening, pages and
        // end: parsed and planned anew, they took the server's CPU at 10,000 schedules.
        let row = self.replanning(|| {
            let statement = self.statement(runs::READ_CHECKPOINT, "reading a checkpoint")?;
            wait(self.client()?.query_opt(&statement, &[&schedule]))
                .pg(&self.target, "reading a checkpoint")
        })?;
        row.map(|r| self.checkpoint_of(schedule, &r, 0)).transpose()
    }

    /// Operator tool (`checkpoint set` / `reset`): sets or deletes the cursor, backwards too.
    /// Returns what was there before.
    fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError> {
        self.reconnect_if_closed()?;
        // A pass of this process reading on as quiet would compare with the cursor it opened with.
        self.expect_quiet(schedule, None);
        let target = self.target.clone();
        wait(self.client()?.batch_execute("BEGIN")).pg(&target, "starting a checkpoint change")?;
        let result = (|| {
            let before = wait(self.client()?.query_opt(
                &format!("{} FOR UPDATE", runs::READ_CHECKPOINT),
                &[&schedule],
            ))
            .pg(&target, "reading a checkpoint")?
            .map(|r| self.checkpoint_of(schedule, &r, 0))
            .transpose()?;
            match cursor {
                Some(cursor) => wait(self.client()?.execute(
                    "INSERT INTO sync_checkpoints (schedule_uid, cursor, updated_at)
                     VALUES ($1, $2, $3)
                     ON CONFLICT (schedule_uid) DO UPDATE SET cursor = excluded.cursor,
                       updated_at = excluded.updated_at",
                    &[&schedule, &micros(cursor), &micros(Timestamp::now())],
                ))
                .pg(&target, "saving a checkpoint")?,
                None => wait(self.client()?.execute(
                    "DELETE FROM sync_checkpoints WHERE schedule_uid = $1",
                    &[&schedule],
                ))
                .pg(&target, "deleting a checkpoint")?,
            };
            Ok(before)
        })();
        self.end_transaction(result, "committing a checkpoint change")
    }

    /// Whether the warehouse has heard of `schedule`: a checkpoint, a pass or a call.
    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        self.reconnect_if_closed()?;
        let step = "looking a schedule up";
        wait(self.client()?.query_one(
            "SELECT EXISTS (SELECT 1 FROM sync_checkpoints WHERE schedule_uid = $1)
                 OR EXISTS (SELECT 1 FROM sync_runs WHERE schedule_uid = $1)
                 OR EXISTS (SELECT 1 FROM calls WHERE schedule_uid = $1)",
            &[&schedule],
        ))
        .pg(&self.target, step)?
        .column(0, &self.target, step)
    }

    /// One pass's opening: [`Self::open_passes`] of one.
    fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError> {
        runs::only(self.open_passes(std::slice::from_ref(start)))
    }

    /// The openings of a group of passes ([`crate::warehouse::Destination::open_passes`]) in
    /// one statement, prepared once per connection ([`OPEN_PASSES`]): for each, the latest
    /// pass of the kind read, the pass's row inserted unless that one was walked since
    /// `unless_walked_since`, and the checkpoint read. At 10,000 schedules every idle pass
    /// opens so, and a statement a pass was most of the server's work. When the group's
    /// statement fails, or a schedule is in it twice, each pass is opened alone, so that a
    /// failure is the pass's own.
    fn open_passes(&mut self, starts: &[PassStart<'_>]) -> Vec<Result<PassOpened, WarehouseError>> {
        let distinct: std::collections::HashSet<Uuid> = starts.iter().map(|s| s.schedule).collect();
        if distinct.len() == starts.len() {
            match self.open_group(starts) {
                Ok(opened) => return opened,
                Err(err) if starts.len() == 1 => return vec![Err(err)],
                Err(err) => tracing::debug!(
                    error = %err,
                    passes = starts.len(),
                    "cannot open a group of passes together; opening each alone"
                ),
            }
        }
        starts
            .iter()
            .map(|start| {
                self.open_group(std::slice::from_ref(start))
                    .and_then(runs::only)
            })
            .collect()
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        self.write_hashed_page(page)
    }

    /// [`crate::warehouse::Destination::write_pages`]: the pages of several passes in one
    /// transaction ([`Self::write_together`]), which costs the server a fraction of a
    /// transaction each (on pages of 10 new calls, most of a page's cost is its statements'
    /// and its transaction's, not its rows'). Pages that cannot go together (two of one
    /// schedule, a call in two of them, a pass still reading its pages first), or a group the
    /// server refused, are each written alone, as `write_page` does: so a page's failure is
    /// its own, and the single page's path keeps its whole handling. Each result goes to
    /// `written` once its page is committed.
    fn write_pages(
        &mut self,
        pages: Vec<PageBatch>,
        written: &mut dyn FnMut(Result<PageWrite, WarehouseError>),
    ) {
        if pages.len() > 1 && self.may_write_together(&pages) {
            match self.write_together(&pages) {
                Ok(Some(counts)) => return counts.into_iter().map(Ok).for_each(written),
                Ok(None) => tracing::debug!(
                    pages = pages.len(),
                    "another transaction stored a call of a group of pages while it was inserted as new; writing each page alone"
                ),
                Err(err) => tracing::debug!(
                    error = %err,
                    pages = pages.len(),
                    "cannot write a group of pages in one transaction; writing each alone"
                ),
            }
        }
        for page in &pages {
            written(self.write_hashed_page(page));
        }
    }

    /// [`crate::warehouse::Destination::write_quiet_pages`]: the stored calls of every page
    /// whose pass still expects it quiet, read in one statement; each page that changes
    /// nothing answered so ([`Self::unchanged_given`]), every other handed back to be written
    /// on its own (in parallel with the others', on the writer's threads). When that read
    /// fails, every page is handed back: its own write reads again, and fails on its own.
    fn write_quiet_pages(
        &mut self,
        pages: Vec<PageBatch>,
    ) -> Vec<Result<QuietRead, WarehouseError>> {
        // A page with calls to set aside has rows to write: not quiet.
        let opened: Vec<Option<Timestamp>> = pages
            .iter()
            .map(|p| {
                self.quiet_expected(p.schedule)
                    .filter(|_| p.set_aside.is_empty())
            })
            .collect();
        let uids: Vec<Uuid> = (pages.iter().zip(&opened))
            .filter(|(_, opened)| opened.is_some())
            .flat_map(|(page, _)| page.calls.iter().map(|c| c.uid))
            .collect();
        let stored = match self.reconnect_if_closed() {
            Ok(()) if uids.is_empty() => Ok(HashMap::new()),
            Ok(()) => self.replanning(|| self.stored_of(&uids)),
            Err(err) => Err(err),
        };
        let stored = stored.inspect_err(|err| {
            tracing::debug!(
                error = %err,
                pages = pages.len(),
                "cannot read a group of pages' stored calls together; writing each alone"
            );
        });
        let Ok(stored) = stored else {
            return pages
                .into_iter()
                .map(|page| Ok(QuietRead::ToWrite(page)))
                .collect();
        };
        (pages.into_iter().zip(opened))
            .map(|(page, opened)| {
                let Some(opened_at) = opened else {
                    return Ok(QuietRead::ToWrite(page));
                };
                self.locks.fence(page.schedule)?;
                let unchanged = {
                    let schedule_uid = page.schedule.to_string();
                    let call_rows = rows_of(&schedule_uid, &page.calls, &page.content_hashes);
                    let own = quiet::stored_among(&stored, &page.calls);
                    self.unchanged_given(
                        page.schedule,
                        &page.calls,
                        &call_rows,
                        page.checkpoint,
                        opened_at,
                        own,
                    )
                };
                Ok(match unchanged {
                    Some(counts) => QuietRead::Written(counts),
                    None => QuietRead::ToWrite(page),
                })
            })
            .collect()
    }

    /// How many of the page's calls `write_page` would write; writes nothing.
    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
        self.reconnect_if_closed()?;
        let schedule_uid = page.schedule.to_string();
        let call_rows = rows_of(&schedule_uid, &page.calls, &page.content_hashes);
        let stored = self.replanning(|| self.stored_calls(&page.calls))?;
        Ok(plan(&page.calls, &call_rows, stored, page.schedule)
            .counts
            .calls_written)
    }

    /// One pass's end: [`Self::finish_runs`] of one.
    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError> {
        self.finish_group(&[(run, record)])
    }

    /// The ends of a group of passes ([`crate::warehouse::Destination::finish_runs`]) in one
    /// statement ([`FINISH_RUNS`]); when it fails, each alone, so that a failure is the
    /// pass's own.
    fn finish_runs(&mut self, runs: &[(RunId, &RunRecord)]) -> Vec<Result<(), WarehouseError>> {
        match self.finish_group(runs) {
            Ok(()) => return runs.iter().map(|_| Ok(())).collect(),
            Err(err) if runs.len() == 1 => return vec![Err(err)],
            Err(err) => tracing::debug!(
                error = %err,
                passes = runs.len(),
                "cannot record the ends of a group of passes together; recording each alone"
            ),
        }
        runs.iter()
            .map(|run| self.finish_group(std::slice::from_ref(run)))
            .collect()
    }

    /// As the SQLite warehouse's: passes finished before `cutoff` go, but each schedule's
    /// latest and latest successful one, and any not finished.
    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError> {
        self.reconnect_if_closed()?;
        wait(self.client()?.execute(
            "DELETE FROM sync_runs
             WHERE finished_at IS NOT NULL AND finished_at < $1
               AND id NOT IN (SELECT max(id) FROM sync_runs GROUP BY schedule_uid)
               AND id NOT IN (SELECT max(id) FROM sync_runs
                              WHERE outcome IN ('completed', 'behind')
                              GROUP BY schedule_uid)",
            &[&micros(cutoff)],
        ))
        .pg(&self.target, "forgetting old passes")
    }

    fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError> {
        self.name_schedules(prepared.names.iter().copied())?;
        self.set_schedule_campaigns(prepared.campaigns.clone())?;
        self.set_timezone(prepared.timezone)?;
        Ok(())
    }

    /// Every schedule's status, with lags measured at `now` (as `Warehouse::status_at`).
    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        self.reconnect_if_closed()?;
        let step = "listing schedules";
        let schedules: Vec<Uuid> = wait(self.client()?.query(
            "SELECT schedule_uid FROM sync_checkpoints
             UNION SELECT schedule_uid FROM sync_runs
             UNION SELECT DISTINCT schedule_uid FROM calls
             ORDER BY 1",
            &[],
        ))
        .pg(&self.target, step)?
        .iter()
        .map(|r| r.column(0, &self.target, step))
        .collect::<Result<_, _>>()?;
        schedules
            .into_iter()
            .map(|s| self.schedule_status(s, now))
            .collect()
    }

    /// When the oldest pass the warehouse remembers began.
    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        self.reconnect_if_closed()?;
        let step = "reading the first pass";
        let first: Option<OffsetDateTime> = wait(
            self.client()?
                .query_one("SELECT min(started_at) FROM sync_runs", &[]),
        )
        .pg(&self.target, step)?
        .column(0, &self.target, step)?;
        first
            .map(|t| instant(&self.target, t, "sync_runs.started_at"))
            .transpose()
    }

    fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        wait(self.client()?.execute(
            resources::RECORD_CAMPAIGN,
            &[
                &campaign.uid,
                &campaign.name,
                &campaign.kind,
                &campaign.direction,
                &campaign.is_enabled,
                &micros(campaign.created_at),
                &micros(campaign.updated_at),
                &micros(Timestamp::now()),
            ],
        ))
        .pg(&self.target, "recording a campaign")?;
        Ok(())
    }

    /// `campaign`: when known (callsync created the schedule in it); an update keeps the
    /// campaign recorded before.
    fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        let intervals = serde_json::Value::from(schedule.retry_intervals.clone());
        wait(self.client()?.execute(
            resources::RECORD_SCHEDULE,
            &[
                &schedule.uid,
                &campaign,
                &schedule.name,
                &micros(schedule.starts_at),
                &micros(schedule.ends_at),
                &schedule.retry_type,
                &intervals,
                &schedule.is_enabled,
                &micros(schedule.created_at),
                &micros(schedule.updated_at),
                &micros(Timestamp::now()),
            ],
        ))
        .pg(&self.target, "recording a schedule")?;
        Ok(())
    }

    /// Each writer thread writes over a connection of its own.
    fn fork(&self) -> Option<Box<dyn Destination>> {
        Some(Box::new(PgWarehouse::fork(self)))
    }

    fn backup_to(&self, _dest: &Path, _overwrite: bool) -> Result<BackupReport, WarehouseError> {
        Err(declined(Capability::Backup))
    }

    fn upload_ledger(
        &mut self,
        _schedule: Uuid,
    ) -> Result<Option<(Claim, &mut dyn UploadLedger)>, WarehouseError> {
        Err(declined(Capability::UploadLedger))
    }
}
