//! The contract every warehouse back end fulfils (litestream's `ReplicaClient` is the model:
//! one interface here, one folder per back end, the command line choosing once, in
//! `open.rs`).
//!
//! A [`Backend`] is a configured destination, not yet opened: what the commands that do not
//! write pages need (`migrate`, `check`, `restore`, `/healthz`), and the three ways to open
//! it. A [`Destination`] is one opened: the pages and checkpoints of passes, the records of
//! passes, status, the write commands' records. A destination runs on a sync engine's
//! writer thread, which owns it, so its methods are synchronous and never run concurrently;
//! a back end that can be written from several connections at once hands out more handles on
//! itself (`fork`), one for each further writer thread.
//!
//! The contract of a page write: `write_page` stores the calls and moves the checkpoint in
//! one atomic step (the checkpoint is never ahead of the data), never moves a checkpoint
//! backwards, and writing the same page twice changes nothing (`write_plan.rs` is the rule).
//! A page commits only while the schedule's claim holds: a back end whose claim can be lost
//! without its process knowing (PostgreSQL's lock connection) checks it in the page's
//! transaction and fails with [`WarehouseError::ClaimLost`].
//!
//! Capabilities beyond the contract (a backup into a file, its restore, the upload's ledger)
//! are methods a back end may decline with [`WarehouseError::Declined`]: the defaults here.

use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use futures::future::BoxFuture;
use uuid::Uuid;

use super::capabilities::{BackupReport, Contents, RestoreReport, UploadLedger};
use super::error::{Capability, WarehouseError};
use super::records::{Checkpoint, ProcessIdentity, RunId, RunKind, RunRecord};
use super::set_aside::SetAside;
use super::status::{Overview, ScheduleStatus};
use super::write_plan::PageWrite;
use crate::service::{Campaign, OutboundCall, Schedule, Timestamp};

/// One page for a destination: the calls of `schedule` and, when the pass may move it, the
/// checkpoint that goes with them.
#[derive(Debug)]
pub struct PageBatch {
    pub schedule: Uuid,
    pub calls: Vec<OutboundCall>,
    /// `calls`' content hashes (`OutboundCall::content_hash`), in order: the pass computes
    /// them once, the writer compares and stores them.
    pub content_hashes: Vec<u64>,
    pub checkpoint: Option<Timestamp>,
    pub synced_at: Timestamp,
    /// The page's calls that did not fit, set aside in the page's transaction.
    pub set_aside: Vec<SetAside>,
    /// The pass (`sync_runs.id`) that read the page, if recorded.
    pub run: Option<i64>,
}

impl PageBatch {
    /// Adds the page that follows this one in its walk: written together, the two change
    /// what writing them one after the other would (rows in order, a call listed in both
    /// written twice, the later checkpoint kept, as a destination never moves one back).
    pub fn append(&mut self, later: PageBatch) {
        debug_assert_eq!(self.schedule, later.schedule, "pages of one walk");
        self.calls.extend(later.calls);
        self.content_hashes.extend(later.content_hashes);
        self.checkpoint = self.checkpoint.max(later.checkpoint);
        self.synced_at = later.synced_at;
        self.set_aside.extend(later.set_aside);
    }
}

/// What [`Destination::write_quiet_pages`] did with a page.
#[derive(Debug)]
pub enum QuietRead {
    /// Written, or found to change nothing (no call changed, the checkpoint stays).
    Written(PageWrite),
    /// Not written: it changes something, and is written as other pages are
    /// (`write_pages`).
    ToWrite(PageBatch),
}

/// What a pass asks of the destination as it opens, its claim held ([`Destination::open_pass`]).
#[derive(Debug, Clone, Copy)]
pub struct PassStart<'a> {
    pub schedule: Uuid,
    pub kind: RunKind,
    pub started_at: Timestamp,
    pub walker: &'a ProcessIdentity,
    /// With several daemons sharing the schedules, the daemon's tick: a pass of `kind` that
    /// began at or after it and finished means another process walked the schedule since,
    /// and this pass is not started.
    pub unless_walked_since: Option<Timestamp>,
}

/// What a pass found as it opened ([`Destination::open_pass`]).
#[derive(Debug)]
pub enum PassOpened {
    /// Another process walked the schedule since `PassStart::unless_walked_since` (its
    /// latest pass of the kind began then and finished); nothing was recorded.
    WalkedBy(ProcessIdentity),
    /// The pass's start is recorded (`run`; `None` from a destination that keeps no record)
    /// and its checkpoint read, or why it could not be: a failure the pass records in its
    /// row.
    Started {
        run: Option<RunId>,
        checkpoint: Result<Option<Checkpoint>, WarehouseError>,
    },
}

/// Proof that this process may walk a schedule into the destination; released on drop, or
/// with others by [`Destination::release`].
pub struct Claim(Box<dyn std::any::Any + Send>);

impl Claim {
    pub fn new(held: impl Send + 'static) -> Claim {
        Claim(Box::new(held))
    }

    /// What the back end that made it holds, when it is `T`; else the claim itself.
    pub fn held<T: 'static>(self) -> Result<T, Claim> {
        self.0.downcast::<T>().map(|held| *held).map_err(Claim)
    }
}

/// Schema versions before and after `migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationReport {
    pub from: usize,
    pub to: usize,
}

/// What the configuration gives every destination alike, to set before any pass: BI then
/// shows a schedule's name and campaign from its first call on, and days in the zone.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    pub names: &'a [(Uuid, Option<&'a str>)],
    pub campaigns: &'a std::collections::BTreeMap<Uuid, Uuid>,
    pub timezone: Tz,
}

/// A configured destination, not yet opened ([`super::open`] makes one).
pub trait Backend: Send + Sync {
    /// The file's path or the database's URI (never a password), for messages and metrics.
    fn name(&self) -> String;
    /// Opened for writing: created and migrated as needed; the passes whose process ended
    /// mid-pass marked interrupted (`interrupted.rs`).
    fn writer(&self) -> Result<Box<dyn Destination>, WarehouseError>;
    /// An existing warehouse, to read: never created, never migrated.
    fn reader(&self) -> Result<Box<dyn Destination>, WarehouseError>;
    /// For a dry run (`DryRun`): reads what is there, counts what a page would change,
    /// writes nothing.
    fn dry_run(&self) -> Result<Box<dyn Destination>, WarehouseError>;
    /// Applies pending migrations and says from which version to which.
    fn migrate(&self) -> Result<MigrationReport, WarehouseError>;
    /// What `run` needs of it, creating and migrating nothing; `Ok` says in a sentence what
    /// was found (for `callsync check`).
    fn check(&self) -> Result<String, WarehouseError>;
    /// Whether it answers now (`/healthz` asks on every request); a file always does.
    fn answers(&self) -> BoxFuture<'static, Result<(), WarehouseError>> {
        Box::pin(async { Ok(()) })
    }
    /// Declines `capability` up front when this back end never offers it, so a command
    /// refuses before it reads or sends anything.
    fn offers(&self, capability: Capability) -> Result<(), WarehouseError> {
        Err(self.declined(capability))
    }
    /// The error declining `capability`, saying what to use instead.
    fn declined(&self, capability: Capability) -> WarehouseError;
    /// Puts the backup at `backup` in the warehouse's place.
    fn restore(&self, backup: &Path) -> Result<RestoreReport, WarehouseError> {
        let _ = backup;
        Err(self.declined(Capability::Restore))
    }
    /// Checks that the file at `backup` is a backup `restore` would take.
    fn verify_backup(&self, backup: &Path) -> Result<Contents, WarehouseError> {
        let _ = backup;
        Err(self.declined(Capability::Backup))
    }
}

/// What the daemon checks of an opened destination apart from the writer thread, between
/// ticks and on `/healthz`.
pub trait Watch: Send + Sync {
    /// Fails when the destination can no longer be written where it was opened (an SQLite
    /// file deleted, replaced or made read-only): what a pass wrote would be lost.
    fn check(&self) -> Result<(), WarehouseError>;
}

/// An opened destination.
pub trait Destination: Send + 'static {
    /// The file's path or the database's URI (never a password), for messages.
    fn name(&self) -> String;
    /// A watch on where it was opened, for the daemon.
    fn watch(&self) -> Arc<dyn Watch>;
    /// Why its owner (the user the daemon runs as) could not write it, if it could not: the
    /// daemon then cannot record its passes, and `status` warns.
    fn unwritable_for_owner(&self) -> Option<String> {
        None
    }

    /// Claims `schedule` for this process (two processes never walk one schedule into one
    /// destination); `None` when another holds it. A pass, a backfill and `checkpoint set`
    /// hold it.
    fn claim(&self, schedule: Uuid) -> Result<Option<Claim>, WarehouseError>;
    /// [`Self::claim`] for each of `schedules`, in one statement where the back end allows:
    /// at a tick every pass claims its schedule at once. One result each, in order.
    fn claims(&self, schedules: &[Uuid]) -> Vec<Result<Option<Claim>, WarehouseError>> {
        schedules
            .iter()
            .map(|schedule| self.claim(*schedule))
            .collect()
    }
    /// Lets `claims` go, in one statement where the back end allows (the passes of a tick
    /// end together); dropping each does the same, one at a time.
    fn release(&self, claims: Vec<Claim>) {
        drop(claims);
    }
    /// Where the schedule's next incremental pass starts (before the lookback).
    fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError>;
    /// Moves or deletes `schedule`'s checkpoint (the caller holds its claim); returns what
    /// was there before.
    fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError>;
    /// Whether the warehouse has a checkpoint, a pass or a call of `schedule`.
    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError>;
    /// Opens a pass of `start.schedule`, whose claim the caller holds: unless another
    /// process walked it since `start.unless_walked_since` (its latest pass of the kind
    /// began then and finished; an unfinished one's process died, as the claim is held),
    /// records that the pass began and reads its checkpoint. One round trip where the back
    /// end allows: every pass of every schedule opens so, idle or not.
    fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError>;
    /// [`Self::open_pass`] for each of `starts` (schedules claimed by this process, each
    /// once), in one statement where the back end allows: at a tick every pass opens at
    /// once. One result each, in order.
    fn open_passes(&mut self, starts: &[PassStart<'_>]) -> Vec<Result<PassOpened, WarehouseError>> {
        starts.iter().map(|start| self.open_pass(start)).collect()
    }
    /// Stores a page and its checkpoint, all or nothing.
    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError>;
    /// [`Self::write_page`] for each of `pages` (of several passes, a schedule's once), in
    /// one transaction where the back end allows: each page all or nothing, as alone. One
    /// result each to `written`, in order, as soon as the page is committed: a page written
    /// alone does not wait for the others.
    fn write_pages(
        &mut self,
        pages: Vec<PageBatch>,
        written: &mut dyn FnMut(Result<PageWrite, WarehouseError>),
    ) {
        for page in &pages {
            written(self.write_page(page));
        }
    }
    /// Pages of passes that opened with a checkpoint and have changed nothing yet (an idle
    /// pass's, most often), from several passes at once: each written, or answered at once
    /// when it changes nothing; a back end may hand a page back (`QuietRead::ToWrite`) to be
    /// written on its own. One answer each, in order. PostgreSQL reads the group's stored
    /// calls in one statement.
    fn write_quiet_pages(
        &mut self,
        pages: Vec<PageBatch>,
    ) -> Vec<Result<QuietRead, WarehouseError>> {
        pages
            .into_iter()
            .map(|page| self.write_page(&page).map(QuietRead::Written))
            .collect()
    }
    /// How many of the page's calls `write_page` would write; writes nothing.
    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError>;
    /// Records how the pass ended.
    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError>;
    /// [`Self::finish_run`] for each of `runs`, in one statement where the back end allows:
    /// the passes of a tick end within a few of the service's latencies of each other. One
    /// result each, in order.
    fn finish_runs(&mut self, runs: &[(RunId, &RunRecord)]) -> Vec<Result<(), WarehouseError>> {
        runs.iter()
            .map(|(run, record)| self.finish_run(*run, record))
            .collect()
    }
    /// Forgets the records of passes that finished before `cutoff`, but each schedule's
    /// latest and latest successful one; returns how many went.
    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError>;
    /// Sets what the configuration says of schedules and days, before any pass.
    fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError>;

    /// Every schedule's status, with lags measured at `now`.
    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError>;
    /// What an analyst looks at first (the demo shows it), read from the BI views.
    fn overview(&self) -> Result<Overview, WarehouseError> {
        Err(WarehouseError::Declined {
            capability: Capability::Overview,
            reason: format!("the warehouse {} gives no overview", self.name()),
        })
    }
    /// When the oldest pass the warehouse remembers began (retention forgets older ones).
    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError>;
    /// Records a campaign as a write command created or changed it.
    fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError>;
    /// Records a schedule as a write command created or changed it.
    fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError>;

    /// Another handle on the same destination, for another writer thread to write through at
    /// the same time (`sync/writer.rs`), sharing this one's claims; `None` (the default) for a
    /// destination written by one writer at a time. Waits for nothing.
    fn fork(&self) -> Option<Box<dyn Destination>> {
        None
    }

    /// Writes a consistent copy into the file `dest` (refused if something is there, unless
    /// `overwrite`).
    fn backup_to(&self, dest: &Path, overwrite: bool) -> Result<BackupReport, WarehouseError> {
        let _ = (dest, overwrite);
        Err(WarehouseError::Declined {
            capability: Capability::Backup,
            reason: format!(
                "the warehouse {} cannot be backed up into a file",
                self.name()
            ),
        })
    }
    /// The upload's ledger, with `schedule`'s upload lock held as long as the claim lives;
    /// `None` while another process uploads into `schedule`.
    fn upload_ledger(
        &mut self,
        schedule: Uuid,
    ) -> Result<Option<(Claim, &mut dyn UploadLedger)>, WarehouseError> {
        let _ = schedule;
        Err(WarehouseError::Declined {
            capability: Capability::UploadLedger,
            reason: format!("the warehouse {} keeps no upload ledger", self.name()),
        })
    }
}
