//! What an upload is asked to do ([`UploadOptions`]), what its check found ([`Checked`]), what
//! it did ([`UploadSummary`]), and whom it tells as it goes ([`UploadProgress`]).

use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

use super::problem::RowProblem;
use crate::service::MAX_BULK;
use crate::warehouse::ChunkKey;

/// Problems listed in full before the rest are only counted.
pub(super) const MAX_LISTED_PROBLEMS: usize = 1_000;

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
    pub(super) chunk_digests: Vec<[u8; 32]>,
    /// Each chunk's first CSV line, in file order (its key in the ledger).
    pub(super) chunk_first_lines: Vec<u64>,
}

impl Checked {
    /// Each chunk's key in the ledger, with its number of rows.
    pub(super) fn chunks(&self, schedule: Uuid) -> impl Iterator<Item = (ChunkKey, u64)> + '_ {
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
