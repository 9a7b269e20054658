//! The dry run as a destination: reads the warehouse there is (or none: every call is new),
//! counts what a page would change, and writes nothing — no rows, no checkpoint, no
//! `sync_runs`, no lock.

use std::sync::Arc;

use uuid::Uuid;

use super::destination::{Claim, Destination, PageBatch, PassOpened, PassStart, Prepared, Watch};
use super::error::WarehouseError;
use super::records::{Checkpoint, RunId, RunRecord};
use super::status::ScheduleStatus;
use super::write_plan::PageWrite;
use crate::service::{Campaign, Schedule, Timestamp};

/// A dry run over `existing`, the warehouse opened read-only (`None`: there is none yet).
pub struct DryRun(Option<Box<dyn Destination>>);

impl DryRun {
    pub fn over(existing: Option<Box<dyn Destination>>) -> DryRun {
        DryRun(existing)
    }

    fn unwritten(&self, what: &str) -> WarehouseError {
        WarehouseError::Declined {
            capability: super::error::Capability::Writing,
            reason: format!("a dry run writes nothing: it cannot {what}"),
        }
    }
}

/// Nothing is written, so nothing can be lost.
struct Unwatched;

impl Watch for Unwatched {
    fn check(&self) -> Result<(), WarehouseError> {
        Ok(())
    }
}

impl Destination for DryRun {
    fn name(&self) -> String {
        self.0
            .as_ref()
            .map_or_else(|| "a dry run".to_owned(), |d| d.name())
    }

    fn watch(&self) -> Arc<dyn Watch> {
        Arc::new(Unwatched)
    }

    fn claim(&self, _schedule: Uuid) -> Result<Option<Claim>, WarehouseError> {
        Ok(Some(Claim::new(())))
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError> {
        match &self.0 {
            Some(existing) => existing.checkpoint(schedule),
            None => Ok(None),
        }
    }

    fn replace_checkpoint(
        &mut self,
        _schedule: Uuid,
        _cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError> {
        Err(self.unwritten("move a checkpoint"))
    }

    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        match &self.0 {
            Some(existing) => existing.knows_schedule(schedule),
            None => Ok(false),
        }
    }

    /// Records nothing, so knows of no other walker either.
    fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError> {
        Ok(PassOpened::Started {
            run: None,
            checkpoint: self.checkpoint(start.schedule),
        })
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        let changed = self.count_changes(page)?;
        Ok(PageWrite {
            calls_written: changed,
            calls_unchanged: page.calls.len() as u64 - changed,
            set_aside: page.set_aside.len() as u64,
            hold_at: None,
            set_aside_now: None,
        })
    }

    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
        match &mut self.0 {
            Some(existing) => existing.count_changes(page),
            None => Ok(page.calls.len() as u64),
        }
    }

    fn finish_run(&mut self, _run: RunId, _record: &RunRecord) -> Result<(), WarehouseError> {
        Ok(())
    }

    fn forget_runs_before(&mut self, _cutoff: Timestamp) -> Result<u64, WarehouseError> {
        Ok(0)
    }

    fn prepare(&mut self, _prepared: Prepared<'_>) -> Result<(), WarehouseError> {
        Ok(())
    }

    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        match &self.0 {
            Some(existing) => existing.status_at(now),
            None => Ok(Vec::new()),
        }
    }

    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        match &self.0 {
            Some(existing) => existing.first_pass_at(),
            None => Ok(None),
        }
    }

    fn remember_campaign(&mut self, _campaign: &Campaign) -> Result<(), WarehouseError> {
        Err(self.unwritten("record a campaign"))
    }

    fn remember_schedule(
        &mut self,
        _schedule: &Schedule,
        _campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        Err(self.unwritten("record a schedule"))
    }
}
