//! The warehouse: the SQLite file — schema, page writes, checkpoints, runs, reads for status,
//! backups, the locks on the file, the upload's ledger and scratch tables — and, in
//! `postgres/`, the same tables on a PostgreSQL server.
//!
//! Synchronous rusqlite, no tokio: the sync engine owns one [`Warehouse`] on its writer
//! thread. Opening sets WAL (readers never block the writer nor see half a page), a busy
//! timeout, foreign keys and a persistent WAL, and applies `migrations/`; a writer holds the
//! warehouse's shared lock (`file_lock.rs`) until it closes, and closing empties the WAL, so
//! the file alone is the whole warehouse once callsync has stopped. Only this module speaks
//! SQL; `rows.rs` is the one place where a model field becomes a column.

mod access;
mod backup;
mod children;
pub mod descriptions;
mod error;
pub mod file_lock;
mod handle;
mod interrupted;
mod keys_first;
mod layout_v6;
mod ledger;
mod local_days;
mod locks;
pub mod postgres;
mod queries;
mod resources;
mod rows;
mod runs;
mod schema;
mod scratch;
mod snapshot;
mod timezone;
mod upsert;

pub use file_lock::FileIdentity;

pub use access::{check_writable, unwritable_for_owner};
pub use backup::{BackupReport, Contents, RestoreReport, restore, verify_backup};
pub use error::WarehouseError;
pub use handle::{MigrationReport, PageWrite, Warehouse, check_before_writing, check_usable};
pub use ledger::{ChunkKey, ChunkState};
pub use locks::{ScheduleLock, UploadLock};
pub use queries::{
    BackingOff, FALLING_BEHIND_PASSES, LATE_PASS_TICKS, Overview, RunSummary, STALE_TICKS,
    ScheduleStatus, TICKS_COUNTED,
};
pub use rows::e164;
pub use runs::{
    Checkpoint, INTERRUPTED, PROCESS_ENDED, RunId, RunKind, RunOutcome, RunRecord, RunStats, Walker,
};
pub use schema::{WAL_CHECKPOINT_PAGES, WRITER_CACHE_KIB, latest_version};
pub use scratch::{CallsByExternalId, SeenExternalIds};
pub use snapshot::{Row, Snapshot};

#[cfg(test)]
mod tests;
