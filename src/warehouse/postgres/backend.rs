//! The PostgreSQL warehouse before it is connected: [`PgDatabase`], the database at
//! `warehouse.url`, as a [`Backend`] — connected for writing, reading or a dry run, migrated,
//! checked, asked whether it answers — and what a database declines (it has no file to back
//! up or restore, pg_dump does that, and keeps no upload ledger).

use futures::future::BoxFuture;

use super::PgWarehouse;
use super::target::PgTarget;
use crate::config::{ConfigError, PostgresConfig};
use crate::warehouse::destination::{Backend, Destination, MigrationReport};
use crate::warehouse::dry_run::DryRun;
use crate::warehouse::error::{Capability, WarehouseError};

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
pub(super) fn declined(capability: Capability) -> WarehouseError {
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
