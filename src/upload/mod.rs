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
mod existing;
mod rows;
mod send;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use uuid::Uuid;

use crate::api::ApiError;
use crate::service::MAX_BULK;
use crate::sync::cursor::WalkError;
use crate::warehouse::file_lock::LockError;
use crate::warehouse::{ChunkKey, UploadLock, WarehouseError};

pub use check::check;
pub use send::send;

use columns::Columns;
use existing::{InSchedule, refuse_rows_already_there, whole_chunk};
use rows::{Chunk, Row, Rows};
use send::{LOOKUP_CONCURRENCY, Sender};

/// Sends of one chunk that the service neither answered nor acted on, before giving up.
const MAX_CHUNK_TRIES: u32 = 3;

/// Problems listed in full before the rest are only counted.
const MAX_LISTED_PROBLEMS: usize = 1_000;

/// The first and the longest pause between lookups of a chunk whose answer was lost.
const FIRST_POLL: Duration = Duration::from_millis(250);
const LONGEST_POLL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {problem}", .path.display())]
    Csv { path: PathBuf, problem: String },
    #[error("{}: {problem}", .path.display())]
    Header { path: PathBuf, problem: String },
    #[error(
        "{} changed after it was checked (from line {first_line} on it is not what was checked); nothing from line {first_line} on was sent: run the upload again, which checks the file anew and finds the chunks already created",
        .path.display()
    )]
    FileChanged { path: PathBuf, first_line: u64 },
    #[error("schedule {schedule} not found on the service (HTTP 404); check the uid (`callsync schedule create` prints it) and api.base_url; {}",
        if *.sent_before { "the chunks sent before were created and stay" } else { "nothing was sent" })]
    ScheduleNotFound { schedule: Uuid, sent_before: bool },
    /// Listing the schedule's calls, the first thing an upload does, failed (the CLI names
    /// the upload).
    #[error("nothing was sent: {cause}")]
    Unreachable { cause: ApiError },
    #[error(
        "nothing was sent: the service's list of the schedule's calls cannot be trusted ({request}): {source}"
    )]
    Untrusted {
        request: String,
        #[source]
        source: WalkError,
    },
    #[error(
        "{count} rows have an external_id schedule {schedule} already has (the first {} above); nothing was sent: remove those rows, or pass --skip-existing to send only the others",
        .problems.len()
    )]
    AlreadyInSchedule {
        schedule: Uuid,
        /// At most [`MAX_LISTED_PROBLEMS`]; `count` has them all.
        problems: Vec<RowProblem>,
        count: u64,
    },
    #[error("the service refused the chunk of lines {first_line}–{last_line}: {}", describe_refusal(.problems, .cause))]
    Refused {
        first_line: u64,
        last_line: u64,
        /// The service's pointers mapped back to CSV lines and columns.
        problems: Vec<RowProblem>,
        cause: Box<ApiError>,
    },
    #[error(
        "whether the chunk of lines {first_line}–{last_line} was created is not known ({cause}); run the same upload again later: it looks the chunk up before sending anything again"
    )]
    Unconfirmed {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "the service did not create the chunk of lines {first_line}–{last_line} in {MAX_CHUNK_TRIES} tries, each looked for during the settle window after it (the last failure: {cause}); run the same upload again later"
    )]
    GaveUp {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "whether the chunk of lines {first_line}–{last_line} was created is not known ({cause}), and its rows have no external_id to look it up by: check the schedule's calls before running the upload again, which would send it again"
    )]
    Unknowable {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "the chunk of lines {first_line}–{last_line} is partly in the service already: {problem}; these external_ids were created by something else — remove those rows or use another schedule"
    )]
    PartlyThere {
        first_line: u64,
        last_line: u64,
        problem: String,
    },
    #[error(
        "another callsync process is uploading into schedule {schedule} (one upload into a schedule at a time, whatever the file: each looks for the contacts already there before sending, so two at once could both send one contact); wait for it to end, then run this upload: it skips what is there already"
    )]
    Busy { schedule: Uuid },
    #[error("cannot lock the upload in the warehouse {}", .path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
    #[error("the temporary table for duplicate external_ids failed: {0}")]
    Scratch(#[from] rusqlite::Error),
}

fn describe_refusal(problems: &[RowProblem], cause: &ApiError) -> String {
    if problems.is_empty() {
        return cause.to_string();
    }
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    each.join("; ")
}

/// One problem with one row, where an operator finds it in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    /// CSV line (the header is line 1).
    pub line: u64,
    /// The CSV column, as its header names it; `None` for a problem of the whole row.
    pub column: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for RowProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.column {
            // The column's name is the CSV file's text.
            Some(column) => write!(
                f,
                "line {}, column {}: {}",
                self.line,
                crate::untrusted::untrusted_text(column, 200),
                self.reason
            ),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
    }
}

/// What to upload, where, and how.
#[derive(Debug, Clone)]
pub struct UploadOptions {
    pub schedule: Uuid,
    pub path: PathBuf,
    /// `--map column=field`: a column renamed (to a call field or a parameter name); an empty
    /// field drops the column.
    pub renames: Vec<(String, String)>,
    /// Send `force=true`: create calls on an enabled schedule.
    pub force: bool,
    /// Accept rows without `external_id`; such chunks cannot be looked up, so exactly-once
    /// is lost for them.
    pub allow_missing_external_id: bool,
    /// Send only the rows whose external_id the schedule does not have yet, counting the
    /// others as skipped (without it, any such row stops the upload before anything is sent).
    pub skip_existing: bool,
    /// How long after a chunk was sent without an answer its calls are looked for before it
    /// counts as not created ([`crate::config::ApiConfig::create_settle_window`]).
    pub settle: Duration,
}

/// The result of [`check`].
#[derive(Debug, Clone)]
pub struct Checked {
    pub fingerprint: String,
    pub rows: u64,
    /// At most [`MAX_LISTED_PROBLEMS`]; `problem_count` has them all.
    pub problems: Vec<RowProblem>,
    pub problem_count: u64,
    /// Each chunk's rows as checked, in file order: what [`send`] may send.
    chunk_digests: Vec<[u8; 32]>,
    /// Each chunk's first CSV line, in file order (its key in the ledger).
    chunk_first_lines: Vec<u64>,
}

impl Checked {
    /// Each chunk's key in the ledger, with its number of rows.
    fn chunks(&self, schedule: Uuid) -> impl Iterator<Item = (ChunkKey, u64)> + '_ {
        let bulk = MAX_BULK as u64;
        self.chunk_first_lines
            .iter()
            .enumerate()
            .map(move |(i, &first_line)| {
                let key = ChunkKey {
                    schedule,
                    fingerprint: self.fingerprint.clone(),
                    first_line,
                };
                (key, (self.rows - i as u64 * bulk).min(bulk))
            })
    }
}

/// What [`send`] did with every row: `rows` = `calls_created` + `rows_found` +
/// `rows_skipped` + `rows_refused`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadSummary {
    pub rows: u64,
    /// Calls this run created, and the chunks sent that created them.
    pub calls_created: u64,
    pub chunks_created: u64,
    /// Rows of the chunks the ledger or the service showed created already (by an earlier
    /// run, or another file with the same rows), and those chunks.
    pub rows_found: u64,
    pub chunks_found: u64,
    /// Rows not sent because their external_id is in the schedule already
    /// (`--skip-existing`).
    pub rows_skipped: u64,
    /// Rows of the chunks the service refused (all or nothing: a chunk with one bad row is
    /// refused whole), and those chunks; the other chunks were sent.
    pub rows_refused: u64,
    pub chunks_refused: u64,
    /// The service's reasons, at most [`MAX_LISTED_PROBLEMS`].
    pub refusals: Vec<RowProblem>,
}

/// Told about each chunk as the upload goes.
pub trait UploadProgress {
    fn chunk_done(&self, rows_done: u64, rows: u64);
    /// What the upload is waiting for, when it waits for more than an answer; `None` when it
    /// no longer does.
    fn waiting(&self, what: Option<&str>);
}

/// Takes the lock of uploading into `schedule` ([`UploadLock`]), without waiting.
pub fn lock(warehouse: &Path, schedule: Uuid) -> Result<UploadLock, UploadError> {
    UploadLock::acquire(warehouse, schedule).map_err(|err| match err {
        LockError::Busy => UploadError::Busy { schedule },
        LockError::Io(source) => UploadError::Lock {
            path: warehouse.to_owned(),
            source,
        },
    })
}
