//! The PostgreSQL warehouse's side of the contract (`warehouse/destination.rs`): [`PgDatabase`],
//! the database at `warehouse.url` before it is connected, and [`PgWarehouse`] as a
//! `Destination`. A database has no file to back up or restore (pg_dump does that) and keeps
//! no upload ledger: those capabilities are declined.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use uuid::Uuid;

use super::PgWarehouse;
use super::target::PgTarget;
use crate::config::{ConfigError, PostgresConfig};
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::capabilities::{BackupReport, UploadLedger};
use crate::warehouse::destination::{
    Backend, Claim, Destination, MigrationReport, PageBatch, PassOpened, PassStart, Prepared,
    QuietRead, Watch,
};
use crate::warehouse::dry_run::DryRun;
use crate::warehouse::error::{Capability, WarehouseError};
use crate::warehouse::records::{Checkpoint, RunId, RunRecord};
use crate::warehouse::status::ScheduleStatus;
use crate::warehouse::write_plan::PageWrite;

/// The PostgreSQL database at `warehouse.url`, not yet connected.
pub struct PgDatabase {
    target: PgTarget,
}

impl PgDatabase {
    /// The configured target; fails on `warehouse.url` or an unreadable password file.
    pub fn configured(config: &PostgresConfig) -> Result<PgDatabase, ConfigError> {
        Ok(PgDatabase {
            target: PgTarget::configured(config)?,
        })
    }
}

impl Backend for PgDatabase {
    fn name(&self) -> String {
        self.target.display().to_owned()
    }

    fn writer(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        Ok(Box::new(PgWarehouse::open(&self.target)?))
    }

    fn reader(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        Ok(Box::new(PgWarehouse::open_existing(&self.target)?))
    }

    /// The database as it is, never migrated; none yet: every call is new.
    fn dry_run(&self) -> Result<Box<dyn Destination>, WarehouseError> {
        let existing = match PgWarehouse::open_existing(&self.target) {
            Ok(existing) => Some(Box::new(existing) as Box<dyn Destination>),
            Err(WarehouseError::Missing { .. }) => None,
            Err(err) => return Err(err),
        };
        Ok(Box::new(DryRun::over(existing)))
    }

    fn migrate(&self) -> Result<MigrationReport, WarehouseError> {
        PgWarehouse::migrate(&self.target)
    }

    /// The server answers, this role may write (or, on an empty database, create the
    /// tables), and the schema version is one this callsync knows.
    fn check(&self) -> Result<String, WarehouseError> {
        let name = self.target.display();
        let latest = super::latest_version();
        Ok(match PgWarehouse::check(&self.target)? {
            None => format!("{name} answers, holds no warehouse yet, and this role may create it"),
            Some(found) if found == latest => format!(
                "{name} answers, this role may write, a callsync warehouse of schema version {found}"
            ),
            Some(found) => format!(
                "{name} answers, this role may write, a callsync warehouse of schema version {found}, which callsync will migrate to {latest}"
            ),
        })
    }

    fn answers(&self) -> BoxFuture<'static, Result<(), WarehouseError>> {
        let target = self.target.clone();
        Box::pin(async move { super::ping(&target).await })
    }

    fn declined(&self, capability: Capability) -> WarehouseError {
        declined(capability)
    }
}

/// What a PostgreSQL warehouse does not offer, and what to use instead.
fn declined(capability: Capability) -> WarehouseError {
    let reason = match capability {
        Capability::Backup => copies("backup"),
        Capability::Restore => copies("restore"),
        Capability::UploadLedger => "`callsync upload` keeps its ledger of sent chunks in an SQLite file, and this configuration's warehouse is PostgreSQL (warehouse.url): run the upload with a configuration that sets warehouse.path (a ledger file kept for every upload) instead of warehouse.url; the calls it creates reach PostgreSQL with the daemon's next pass".to_owned(),
        Capability::Writing => "a PostgreSQL warehouse is written by passes and commands".to_owned(),
        Capability::Overview => "the demo's overview reads its own SQLite warehouse; query the views (call_results, outcome_results) instead".to_owned(),
    };
    WarehouseError::Declined { capability, reason }
}

fn copies(command: &str) -> String {
    format!(
        "`callsync {command}` copies an SQLite warehouse file; this configuration's warehouse is PostgreSQL (warehouse.url): use pg_dump and pg_restore (docs/postgres.md, \"Backups\")"
    )
}

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
        PgWarehouse::checkpoint(self, schedule)
    }

    fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>, WarehouseError> {
        PgWarehouse::replace_checkpoint(self, schedule, cursor)
    }

    fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        PgWarehouse::knows_schedule(self, schedule)
    }

    fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError> {
        PgWarehouse::open_pass(self, start)
    }

    fn open_passes(&mut self, starts: &[PassStart<'_>]) -> Vec<Result<PassOpened, WarehouseError>> {
        PgWarehouse::open_passes(self, starts)
    }

    fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        self.write_hashed_page(
            page.schedule,
            &page.calls,
            &page.content_hashes,
            page.checkpoint,
            page.synced_at,
        )
    }

    fn write_pages(
        &mut self,
        pages: Vec<PageBatch>,
        written: &mut dyn FnMut(Result<PageWrite, WarehouseError>),
    ) {
        PgWarehouse::write_pages(self, pages, written);
    }

    fn write_quiet_pages(
        &mut self,
        pages: Vec<PageBatch>,
    ) -> Vec<Result<QuietRead, WarehouseError>> {
        PgWarehouse::write_quiet_pages(self, pages)
    }

    fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
        PgWarehouse::count_changes(self, page.schedule, &page.calls, &page.content_hashes)
    }

    fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError> {
        PgWarehouse::finish_run(self, run, record)
    }

    fn finish_runs(&mut self, runs: &[(RunId, &RunRecord)]) -> Vec<Result<(), WarehouseError>> {
        PgWarehouse::finish_runs(self, runs)
    }

    fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError> {
        PgWarehouse::forget_runs_before(self, cutoff)
    }

    fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError> {
        self.name_schedules(prepared.names.iter().copied())?;
        self.set_schedule_campaigns(prepared.campaigns.clone())?;
        self.set_timezone(prepared.timezone)?;
        Ok(())
    }

    fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        PgWarehouse::status_at(self, now)
    }

    fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        PgWarehouse::first_pass_at(self)
    }

    fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        PgWarehouse::remember_campaign(self, campaign)
    }

    fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        PgWarehouse::remember_schedule(self, schedule, campaign)
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
