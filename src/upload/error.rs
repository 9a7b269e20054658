//! What can stop an upload ([`UploadError`]); one problem with one row is `problem.rs`'s.

use std::io;
use std::path::PathBuf;

use uuid::Uuid;

use super::plan::MAX_CHUNK_TRIES;
use super::problem::RowProblem;
use crate::api::ApiError;
use crate::sync::cursor::WalkError;
use crate::warehouse::WarehouseError;

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read {}", .path.display())]
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
        "nothing was sent: the service's list of the schedule's calls cannot be trusted ({request})"
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
    /// The upload's scratch tables (`scratch.rs`): a temporary database, no file to name.
    #[error("the upload's temporary table {table} failed to {step}: {problem}")]
    Scratch {
        table: &'static str,
        step: &'static str,
        problem: String,
    },
    /// The warehouse, or the upload's ledger.
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
}

fn describe_refusal(problems: &[RowProblem], cause: &ApiError) -> String {
    if problems.is_empty() {
        return cause.to_string();
    }
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    each.join("; ")
}

impl UploadError {
    /// The message names the contact list's path already (a context should not again).
    pub fn names_the_file(&self) -> bool {
        matches!(
            self,
            UploadError::Read { .. }
                | UploadError::Csv { .. }
                | UploadError::Header { .. }
                | UploadError::FileChanged { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Timestamp;

    /// Each error's chain, as the CLI prints it, names its cause once: the message stops
    /// before what it returns as its source.
    fn says_once(err: &UploadError, cause: &str) -> String {
        crate::assert_each_cause_once(err);
        let chain = crate::error_chain(err);
        assert_eq!(chain.matches(cause).count(), 1, "{cause} in {chain}");
        chain
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named_once_and_its_cause_once() {
        let path = PathBuf::from("/nonexistent/contacts.csv");
        let err = UploadError::Read {
            path: path.clone(),
            source: io::Error::new(io::ErrorKind::NotFound, "No such file or directory"),
        };
        assert_eq!(
            says_once(&err, "No such file or directory"),
            "cannot read /nonexistent/contacts.csv: No such file or directory"
        );
    }

    #[test]
    fn an_untrusted_listing_names_its_request_and_its_cause_once() {
        let after = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let err = UploadError::Untrusted {
            request: "GET /schedules/x/outbound_calls page 2".into(),
            source: WalkError::PageTooLarge {
                after,
                page: 2,
                got: 101,
                asked: 100,
            },
        };
        assert_eq!(
            says_once(&err, "101 rows"),
            "nothing was sent: the service's list of the schedule's calls cannot be trusted (GET /schedules/x/outbound_calls page 2): page 2 after 2026-01-01T00:00:00Z has 101 rows, more than the 100 asked for"
        );
    }
}
