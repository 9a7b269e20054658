//! The SQLite warehouse's side of the contract (`warehouse/destination.rs`): [`Backend`], the
//! file at `warehouse.path` before it is opened, and [`Warehouse`] as a `Destination`. Every
//! capability is offered: a backup into a file, its restore, the upload's ledger.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::file_lock::{FileIdentity, LockError};
use super::handle::{Warehouse, check_before_writing, check_usable};
use super::locks::{ScheduleLock, UploadLock};
use super::schema::latest_version;
use crate::config::WarehouseConfig;
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::capabilities::{BackupReport, Contents, RestoreReport, UploadLedger};
use crate::warehouse::destination::{
    Backend, Claim, Destination, MigrationReport, PageBatch, PassOpened, PassStart, Prepared, Watch,
};
use crate::warehouse::dry_run::DryRun;
use crate::warehouse::error::{Capability, WarehouseError};
use crate::warehouse::records::{Checkpoint, RunId, RunRecord};
use crate::warehouse::status::{Overview, ScheduleStatus};
use crate::warehouse::write_plan::PageWrite;

/// The SQLite file at `warehouse.path`, not yet opened.
pub struct SqliteFile {
    path: PathBuf,
    busy_timeout: Duration,
}

impl SqliteFile {
    pub fn new(path: &Path, config: &WarehouseConfig) -> SqliteFile {
        SqliteFile {
            path: path.to_owned(),
            busy_timeout: config.busy_timeout,
        }
    }
}

impl Backend for SqliteFile {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn writer(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        Ok(Box::new(Warehouse::open(&self.path, self.busy_timeout)?))
    }

    fn reader(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        Ok(Box::new(Warehouse::open_read_only(&self.path)?))
    }

    /// The existing file read-only, or an empty warehouse in memory when there is none yet.
    fn dry_run(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        let existing = Warehouse::open_for_dry_run(&self.path)?;
        Ok(Box::new(DryRun::over(Some(Box::new(existing)))))
    }

    fn migrate(&self) -> Result<MigrationReport, WarehouseError> {
        Warehouse::migrate(&self.path, self.busy_timeout)
    }

    /// One name, writable by this user, and — when it exists — identified as `run`
    /// identifies it.
    fn check(&self) -> Result<String, WarehouseError> {
        let path = self.path.display();
        let latest = latest_version();
        Ok(match check_before_writing(&self.path)? {
            None => format!(
                "{path} does not exist yet; its directory is writable, and callsync will create it"
            ),
            Some(found) if found == latest => {
                format!("{path} is writable, a callsync warehouse of schema version {found}")
            }
            Some(found) => format!(
                "{path} is writable, a callsync warehouse of schema version {found}, which callsync will migrate to {latest}"
            ),
        })
    }

    fn offers(&self, _capability: Capability) -> Result<(), WarehouseError> {
        Ok(())
    }

    fn declined(&self, capability: Capability) -> WarehouseError {
        WarehouseError::Declined {
            capability,
            reason: format!("the warehouse {} cannot do this", self.name()),
        }
    }

    fn restore(&self, backup: &Path) -> Result<RestoreReport, WarehouseError> {
        super::backup::restore(backup, &self.path, self.busy_timeout)
    }

    fn verify_backup(&self, backup: &Path) -> Result<Contents, WarehouseError> {
        super::backup::verify_backup(backup)
    }
}

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
        Warehouse::checkpoint(self, schedule)
    }

    fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError> {
        Warehouse::replace_checkpoint(self, schedule, cursor)
    }

    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        Warehouse::knows_schedule(self, schedule)
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
        self.in_place()?.write_hashed_page(
            page.schedule,
            &page.calls,
            &page.content_hashes,
            page.checkpoint,
            page.synced_at,
        )
    }

    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
        Warehouse::count_changes(self, page.schedule, &page.calls, &page.content_hashes)
    }

    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError> {
        self.in_place()?.finish_run(run, record)
    }

    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError> {
        self.in_place()?.forget_runs_before(cutoff)
    }

    fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError> {
        self.name_schedules(prepared.names.iter().copied())?;
        self.set_schedule_campaigns(prepared.campaigns.clone())?;
        // The analyst's days: the offsets of `warehouse.timezone` (rewritten only on a change).
        self.set_timezone(prepared.timezone)?;
        Ok(())
    }

    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        Warehouse::status_at(self, now)
    }

    fn overview(&self) -> Result<Overview, WarehouseError> {
        Warehouse::overview(self)
    }

    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        Warehouse::first_pass_at(self)
    }

    fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        Warehouse::remember_campaign(self, campaign)
    }

    fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        Warehouse::remember_schedule(self, schedule, campaign)
    }

    fn backup_to(&self, dest: &Path, overwrite: bool) -> Result<BackupReport, WarehouseError> {
        Warehouse::backup_to(self, dest, overwrite)
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
