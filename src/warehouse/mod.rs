//! The SQLite warehouse: schema, page writes, checkpoints, runs, and reads for status.
//!
//! Synchronous rusqlite, no tokio: the sync engine owns one [`Warehouse`] on its writer
//! thread. Opening sets WAL (readers never block the writer nor see half a page), a busy
//! timeout, foreign keys and a persistent WAL, and applies `migrations/`. Only this module
//! speaks SQL; `rows.rs` is the one place where a model field becomes a column.

mod error;
mod ledger;
mod queries;
mod rows;
mod runs;
mod schema;
mod upsert;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

pub use error::WarehouseError;
pub use ledger::{ChunkKey, ChunkState};
pub use queries::{
    FALLING_BEHIND_PASSES, Overview, PassOutcome, Row, RunSummary, ScheduleStatus, Snapshot,
    render_status,
};
pub use rows::e164;
pub use runs::{Checkpoint, INTERRUPTED, RunId, RunKind, RunOutcome, RunRecord, RunStats};

pub struct Warehouse {
    conn: Connection,
    path: PathBuf,
}

/// What `write_page` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageWrite {
    pub calls_written: u64,
    pub calls_unchanged: u64,
}

/// Schema versions before and after `migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationReport {
    pub from: usize,
    pub to: usize,
}

impl Warehouse {
    /// Opens or creates the warehouse and applies pending migrations.
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Warehouse, WarehouseError> {
        let (conn, _) = schema::open_for_writing(path, busy_timeout)?;
        Ok(Warehouse {
            conn,
            path: path.to_owned(),
        })
    }

    /// Opens an existing warehouse read-only (no migration; the schema must be current).
    pub fn open_read_only(path: &Path) -> Result<Warehouse, WarehouseError> {
        Ok(Warehouse {
            conn: schema::open_read_only(path)?,
            path: path.to_owned(),
        })
    }

    /// For a dry run: the existing file read-only, or an empty in-memory warehouse when
    /// there is no file yet. Nothing is ever written to disk.
    pub fn open_for_dry_run(path: &Path) -> Result<Warehouse, WarehouseError> {
        if path.exists() {
            return Self::open_read_only(path);
        }
        Ok(Warehouse {
            conn: schema::open_in_memory()?,
            path: path.to_owned(),
        })
    }

    /// Applies pending migrations and says from which version to which.
    pub fn migrate(path: &Path, busy_timeout: Duration) -> Result<MigrationReport, WarehouseError> {
        let (_, from) = schema::open_for_writing(path, busy_timeout)?;
        Ok(MigrationReport {
            from,
            to: schema::latest_version(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests;
