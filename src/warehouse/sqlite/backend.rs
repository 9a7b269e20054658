//! The SQLite warehouse before it is opened: [`SqliteFile`], the file at `warehouse.path`, as a
//! [`Backend`] — opened for writing, reading or a dry run, migrated, checked, restored into.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::handle::{Warehouse, check_before_writing};
use super::schema::latest_version;
use crate::config::WarehouseConfig;
use crate::warehouse::capabilities::{Contents, RestoreReport};
use crate::warehouse::destination::{Backend, Destination, MigrationReport};
use crate::warehouse::dry_run::DryRun;
use crate::warehouse::error::{Capability, WarehouseError};

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
