//! The warehouse: every SQL statement and every file callsync keeps, behind one contract
//! (`destination.rs`: [`Backend`], [`Destination`]) that each back end fulfils in its own
//! folder — `sqlite/` (the file, its locks, backups, the upload's ledger) and `postgres/`
//! (the same tables on a server) — over a shared floor: the records (`records.rs`), the
//! status read side (`status.rs`), the per-call write rule (`write_plan.rs`), the model →
//! row translation (`rows.rs`), the analyst's days (`days.rs`), the passes a dead process
//! left (`interrupted.rs`), the capabilities a back end may decline (`capabilities.rs`) and
//! the dry run (`dry_run.rs`). `open.rs` chooses the back end, once; nothing outside this
//! module names one.
//!
//! Synchronous, no tokio in the contract: the sync engine owns one [`Destination`] on its
//! writer thread.

mod capabilities;
mod days;
pub mod descriptions;
mod destination;
mod dry_run;
mod error;
mod interrupted;
mod open;
pub mod postgres;
mod records;
mod rows;
mod set_aside;
pub mod sqlite;
mod status;
mod write_plan;

pub use capabilities::{BackupReport, ChunkKey, ChunkState, Contents, RestoreReport, UploadLedger};
pub use destination::{
    Backend, Claim, Destination, MigrationReport, PageBatch, PassOpened, PassStart, Prepared,
    QuietRead, Watch,
};
pub use dry_run::DryRun;
pub use error::{Capability, WarehouseError};
pub use open::open;
pub use records::{
    Checkpoint, INTERRUPTED, PROCESS_ENDED, ProcessIdentity, RunId, RunKind, RunOutcome, RunRecord,
    RunStats, Stored, StoredName,
};
pub use rows::e164;
pub use set_aside::{SetAside, SetAsideKind, held};
pub use status::{
    BackingOff, FALLING_BEHIND_PASSES, LATE_PASS_TICKS, Overview, PassFigures, RunSummary,
    STALE_TICKS, ScheduleStatus, TICKS_COUNTED,
};
pub use write_plan::PageWrite;
