//! `callsync upload`: a contact list (CSV) to calls, checked whole before anything is sent,
//! sent in chunks of at most [`MAX_BULK`] rows, and resumable without duplicates.
//!
//! Two passes over the file, each streamed, so memory stays flat whatever its size:
//! 1. [`check`]: every row is mapped to a call and validated (as many fields as the header,
//!    phone number, datetime parameters with a zone, required fields, `external_id`s unique
//!    in the file — tracked in a temporary SQLite table, not in memory); the file's bytes and
//!    the mapping are hashed into the upload's fingerprint, and each chunk's rows into a
//!    digest.
//! 2. [`send`]: first the external_ids the schedule already has are found, into a temporary
//!    table: by listing its calls (`updated_after` paging from the beginning, 100 a request),
//!    or, when the rows still to send are fewer than that listing's requests, by asking for
//!    each row's external_id (the list's `external_id` filter, a few at once); nothing is
//!    asked when the ledger has every chunk as created already. A row whose
//!    external_id is there is never sent: outside the chunks the ledger knows, any such row
//!    stops the upload before anything is sent, or with `--skip-existing` is left out of its
//!    chunk and counted. Then chunk by chunk, the chunk's digest is compared with the check's
//!    (a file changed since is never sent), and the warehouse's upload ledger records the
//!    chunk as `sent` before its request goes out and as `created` with the service's uids
//!    after. A chunk the ledger has as `created`, or whose every row the schedule has, is
//!    not sent.
//!    What to do next with a chunk is decided by `plan.rs`, a pure function of the ledger's
//!    state and what just happened (table-tested); `send.rs` runs its steps.
//!
//! A create whose answer is lost (a timeout, a dropped connection, a 5xx) may still be done by
//! the service, later: such a chunk is never sent again until a lookup has failed to find it
//! for the whole settle window after it was sent (`api.create_settle_secs`), in this run or,
//! from the ledger's `sent_at`, in the next one. A lookup costs a few requests whatever the
//! chunk's size: none of the rows sent was in the schedule before and the bulk endpoint is
//! all or nothing, so the first row's external_id tells whether the chunk was created; the
//! uids of a created chunk come from the listing of what changed since that call was created
//! (its pages fetched at once), any row missing from it asked for alone.

mod check;
mod columns;
mod error;
mod existing;
mod job;
mod lookup;
mod plan;
mod problem;
mod rows;
mod scratch;
mod send;
mod sender;
#[cfg(test)]
mod tests;

use uuid::Uuid;

use crate::warehouse::{Claim, Destination, UploadLedger};

pub use check::check;
pub use error::UploadError;
pub use job::{Checked, UploadOptions, UploadProgress, UploadSummary};
pub use problem::RowProblem;
pub use send::send;

/// The destination's upload ledger, with the lock of uploading into `schedule` held as long
/// as the returned claim lives (one upload into a schedule at a time, whatever the file);
/// taken without waiting. A destination without a ledger declines.
pub fn ledger(
    destination: &mut dyn Destination,
    schedule: Uuid,
) -> Result<(Claim, &mut dyn UploadLedger), UploadError> {
    destination
        .upload_ledger(schedule)?
        .ok_or(UploadError::Busy { schedule })
}
