//! The SQLite warehouse: the file — schema, page writes, checkpoints, runs, reads for status,
//! backups, the locks on the file, the upload's ledger.
//!
//! Synchronous rusqlite: the sync engine owns one [`Warehouse`] on its writer thread. Opening
//! sets WAL (readers never block the writer nor see half a page), a busy timeout, foreign
//! keys and a persistent WAL, and applies `migrations/`; a writer holds the warehouse's
//! shared lock (`file_lock.rs`) until it closes, and closing empties the WAL, so the file
//! alone is the whole warehouse once callsync has stopped. `destination.rs` is this back
//! end's side of the contract (`warehouse/destination.rs`).

mod access;
mod backend;
mod backup;
mod children;
mod destination;
mod error;
pub mod file_lock;
mod handle;
mod interrupted;
mod keys_first;
mod layout_v6;
mod ledger;
mod local_days;
mod locks;
mod queries;
mod resources;
mod runs;
mod schema;
mod set_aside;
mod snapshot;
mod timezone;
mod upsert;

pub use access::{check_writable, unwritable_for_owner};
pub use backend::SqliteFile;
pub use backup::{restore, verify_backup};
pub use file_lock::FileIdentity;
pub use handle::{Warehouse, check_before_writing, check_usable};
pub use locks::{ScheduleLock, UploadLock};
pub use schema::{WAL_CHECKPOINT_PAGES, WRITER_CACHE_KIB, latest_version};
pub use snapshot::{Row, Snapshot};

#[cfg(test)]
use crate::warehouse::capabilities::Contents;
#[cfg(test)]
use crate::warehouse::error::WarehouseError;
#[cfg(test)]
use crate::warehouse::records::{
    INTERRUPTED, ProcessIdentity, RunKind, RunOutcome, RunRecord, RunStats,
};
#[cfg(test)]
use crate::warehouse::status::TICKS_COUNTED;
#[cfg(test)]
use crate::warehouse::write_plan::PageWrite;

#[cfg(test)]
mod tests;
