//! `Sink`: where a pass's pages go — the one interface a destination implements.
//!
//! The pass loop (`pass.rs`) and the page walker know nothing of SQLite: they hand a sink a
//! page of calls with the checkpoint it allows, and ask it for the stored checkpoint and to
//! record the pass. A sink runs on the writer thread (`writer.rs`), which owns it, so its
//! methods are synchronous and never run concurrently. Three sinks exist: the SQLite
//! warehouse ([`WarehouseSink`]), the PostgreSQL one ([`PostgresSink`]), and a dry run that
//! counts what either would write ([`DryRunSink`]); nothing above this file tells them apart.
//!
//! A sink's contract: `write_page` stores the calls and moves the checkpoint in one atomic
//! step (the checkpoint is never ahead of the data), never moves a checkpoint backwards, and
//! writing the same page twice changes nothing. A page commits only while the schedule's
//! claim holds: on PostgreSQL, whose lock connection a network can cut without a word, each
//! page's transaction checks the claim's fencing token and fails with
//! `WarehouseError::ClaimLost` once another process has claimed the schedule (the pass then
//! ends `PassResult::ClaimLost`); the SQLite warehouse's file locks cannot be lost while
//! their process lives (`warehouse/locks.rs`).

use uuid::Uuid;

use super::error::SyncError;
use crate::service::{OutboundCall, Timestamp};
use std::path::Path;

use crate::warehouse::file_lock::LockError;
use crate::warehouse::postgres::PgWarehouse;
use crate::warehouse::{
    PageWrite, RunId, RunKind, RunRecord, ScheduleLock, Walker, Warehouse, WarehouseError,
};

/// One page for a sink: the calls of `schedule` and, when the pass may move it, the checkpoint
/// that goes with them.
#[derive(Debug)]
pub struct PageBatch {
    pub schedule: Uuid,
    pub calls: Vec<OutboundCall>,
    /// `calls`' content hashes (`OutboundCall::content_hash`), in order: the pass computes
    /// them once, the writer compares and stores them.
    pub content_hashes: Vec<u64>,
    pub checkpoint: Option<Timestamp>,
    pub synced_at: Timestamp,
}

/// Proof that this process may walk a schedule into the sink; released on drop.
pub struct Claim(#[allow(dead_code)] Box<dyn Send>);

pub trait Sink: Send + 'static {
    /// Claims `schedule` for this process (two processes never walk one schedule into one
    /// destination); [`SyncError::Busy`] when another holds it.
    fn claim(&self, schedule: Uuid) -> Result<Claim, SyncError>;
    /// Where the schedule's next incremental pass starts (before the lookback).
    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Timestamp>, SyncError>;
    /// Who walked `schedule`'s latest pass of `kind`, if it began at or after `since` and
    /// finished (asked while holding the claim, so an unfinished one's process died). A
    /// daemon sharing the schedules with others skips a schedule another walked since its
    /// tick; `None` from a sink that keeps no record.
    fn walked_since(
        &self,
        schedule: Uuid,
        kind: RunKind,
        since: Timestamp,
    ) -> Result<Option<Walker>, SyncError>;
    /// Records that a pass began, walked by `walker`; `None` when the sink keeps no record
    /// (a dry run).
    fn start_run(
        &mut self,
        schedule: Uuid,
        kind: RunKind,
        started_at: Timestamp,
        walker: &Walker,
    ) -> Result<Option<RunId>, SyncError>;
    /// Stores a page and its checkpoint, all or nothing.
    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, SyncError>;
    /// Records how the pass ended.
    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), SyncError>;
    /// Forgets the records of passes that finished before `cutoff`, but each schedule's
    /// latest and latest successful one; returns how many went.
    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, SyncError>;
    /// Another handle on the same destination, for another writer thread to write through
    /// at the same time (`writer.rs`), sharing this one's claims; `None` (the default) for a
    /// destination written by one writer at a time. Waits for nothing.
    fn fork(&self) -> Option<Box<dyn Sink>> {
        None
    }
}

/// The warehouse: pages written, passes recorded in `sync_runs`, one process per schedule
/// through a lock on the file.
pub struct WarehouseSink(pub Warehouse);

impl WarehouseSink {
    /// The warehouse, once its path is checked to still name the file it writes into (one
    /// `stat`): after `rm` or `mv` over it, writing on would be lost, or — as the `-wal` goes
    /// by the path — replayed onto the file now there.
    fn in_place(&mut self) -> Result<&mut Warehouse, WarehouseError> {
        self.0.check_in_place()?;
        Ok(&mut self.0)
    }
}

/// Takes `schedule`'s lock ([`ScheduleLock`]) on the existing warehouse file at `warehouse`,
/// without waiting.
pub fn lock_schedule(warehouse: &Path, schedule: Uuid) -> Result<ScheduleLock, SyncError> {
    ScheduleLock::acquire(warehouse, schedule).map_err(|err| match err {
        LockError::Busy => SyncError::Busy {
            schedule,
            path: warehouse.to_owned(),
        },
        LockError::Io(source) => SyncError::Lock {
            path: warehouse.to_owned(),
            source,
        },
    })
}

impl Sink for WarehouseSink {
    fn claim(&self, schedule: Uuid) -> Result<Claim, SyncError> {
        self.0.check_in_place()?;
        Ok(Claim(Box::new(lock_schedule(self.0.path(), schedule)?)))
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Timestamp>, SyncError> {
        Ok(self.0.checkpoint(schedule)?.map(|c| c.cursor))
    }

    fn walked_since(
        &self,
        schedule: Uuid,
        kind: RunKind,
        since: Timestamp,
    ) -> Result<Option<Walker>, SyncError> {
        Ok(self.0.walked_since(schedule, kind, since)?)
    }

    fn start_run(
        &mut self,
        schedule: Uuid,
        kind: RunKind,
        started_at: Timestamp,
        walker: &Walker,
    ) -> Result<Option<RunId>, SyncError> {
        Ok(Some(
            self.in_place()?
                .start_run(schedule, kind, started_at, walker)?,
        ))
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, SyncError> {
        Ok(self.in_place()?.write_hashed_page(
            page.schedule,
            &page.calls,
            &page.content_hashes,
            page.checkpoint,
            page.synced_at,
        )?)
    }

    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), SyncError> {
        Ok(self.in_place()?.finish_run(run, record)?)
    }

    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, SyncError> {
        Ok(self.in_place()?.forget_runs_before(cutoff)?)
    }
}

/// What a dry run reads of a warehouse, whichever destination it is.
pub trait DryRunSource: Send {
    fn cursor(&self, schedule: Uuid) -> Result<Option<Timestamp>, WarehouseError>;
    /// How many of `calls` the warehouse would change.
    fn count_changes(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        content_hashes: &[u64],
    ) -> Result<u64, WarehouseError>;
}

/// Both warehouses answer a dry run with their own methods of the same names.
macro_rules! dry_run_source {
    ($($warehouse:ty),*) => {$(
        impl DryRunSource for $warehouse {
            fn cursor(&self, schedule: Uuid) -> Result<Option<Timestamp>, WarehouseError> {
                Ok(self.checkpoint(schedule)?.map(|c| c.cursor))
            }

            fn count_changes(
                &mut self,
                schedule: Uuid,
                calls: &[OutboundCall],
                content_hashes: &[u64],
            ) -> Result<u64, WarehouseError> {
                <$warehouse>::count_changes(self, schedule, calls, content_hashes)
            }
        }
    )*};
}

dry_run_source!(Warehouse, PgWarehouse);

/// A dry run: reads the warehouse (the SQLite file read-only or an empty one in memory; the
/// PostgreSQL database never migrated, `None` when it holds no warehouse yet: every call is
/// new), counts what a page would change, and writes nothing — no rows, no checkpoint, no
/// `sync_runs`, no lock.
pub struct DryRunSink(pub Option<Box<dyn DryRunSource>>);

impl Sink for DryRunSink {
    fn claim(&self, _schedule: Uuid) -> Result<Claim, SyncError> {
        Ok(Claim(Box::new(())))
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Timestamp>, SyncError> {
        match &self.0 {
            Some(warehouse) => Ok(warehouse.cursor(schedule)?),
            None => Ok(None),
        }
    }

    fn walked_since(
        &self,
        _schedule: Uuid,
        _kind: RunKind,
        _since: Timestamp,
    ) -> Result<Option<Walker>, SyncError> {
        Ok(None)
    }

    fn start_run(
        &mut self,
        _schedule: Uuid,
        _kind: RunKind,
        _started_at: Timestamp,
        _walker: &Walker,
    ) -> Result<Option<RunId>, SyncError> {
        Ok(None)
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, SyncError> {
        let changed = match &mut self.0 {
            Some(warehouse) => {
                warehouse.count_changes(page.schedule, &page.calls, &page.content_hashes)?
            }
            None => page.calls.len() as u64,
        };
        Ok(PageWrite {
            calls_written: changed,
            calls_unchanged: page.calls.len() as u64 - changed,
        })
    }

    fn finish_run(&mut self, _run: RunId, _record: &RunRecord) -> Result<(), SyncError> {
        Ok(())
    }

    fn forget_runs_before(&mut self, _cutoff: Timestamp) -> Result<u64, SyncError> {
        Ok(0)
    }
}

/// The PostgreSQL warehouse: pages written in one transaction each, passes recorded in
/// `sync_runs`, one process per schedule through a session-level advisory lock (which the
/// server releases when the process's connection goes, kill -9 included).
pub struct PostgresSink(pub PgWarehouse);

impl Sink for PostgresSink {
    fn claim(&self, schedule: Uuid) -> Result<Claim, SyncError> {
        match self.0.claim(schedule)? {
            Some(claim) => Ok(Claim(Box::new(claim))),
            None => Err(SyncError::Busy {
                schedule,
                path: self.0.target().display().into(),
            }),
        }
    }

    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Timestamp>, SyncError> {
        Ok(self.0.checkpoint(schedule)?.map(|c| c.cursor))
    }

    fn start_run(
        &mut self,
        schedule: Uuid,
        kind: RunKind,
        started_at: Timestamp,
        walker: &Walker,
    ) -> Result<Option<RunId>, SyncError> {
        Ok(Some(self.0.start_run(schedule, kind, started_at, walker)?))
    }

    fn walked_since(
        &self,
        schedule: Uuid,
        kind: RunKind,
        since: Timestamp,
    ) -> Result<Option<Walker>, SyncError> {
        Ok(self.0.walked_since(schedule, kind, since)?)
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, SyncError> {
        Ok(self.0.write_hashed_page(
            page.schedule,
            &page.calls,
            &page.content_hashes,
            page.checkpoint,
            page.synced_at,
        )?)
    }

    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), SyncError> {
        Ok(self.0.finish_run(run, record)?)
    }

    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, SyncError> {
        Ok(self.0.forget_runs_before(cutoff)?)
    }

    /// Each writer thread writes over a connection of its own.
    fn fork(&self) -> Option<Box<dyn Sink>> {
        Some(Box::new(PostgresSink(self.0.fork())))
    }
}
