//! The upload's scratch tables: on disk in SQLite's temporary database (the file is deleted
//! on close), not in memory, whatever the size of the file or the schedule; nothing of them
//! needs to be durable, so each lives in one transaction. The upload's own, whatever the
//! warehouse: SQLite here is an on-disk map, not a destination. Their errors are
//! [`UploadError::Scratch`].

use rusqlite::Connection;
use uuid::Uuid;

use super::error::UploadError;
use crate::service::OutboundCall;
use crate::untrusted::one_line;

/// Names the scratch table and the step of a failure: `.scratch(SEEN, "record an external_id")`.
trait ScratchContext<T> {
    fn scratch(self, table: &'static str, step: &'static str) -> Result<T, UploadError>;
}

impl<T> ScratchContext<T> for Result<T, rusqlite::Error> {
    fn scratch(self, table: &'static str, step: &'static str) -> Result<T, UploadError> {
        self.map_err(|cause| UploadError::Scratch {
            table,
            step,
            problem: problem(&cause),
        })
    }
}

/// SQLite's words on one line and, where the temporary directory is the cause, what to do.
fn problem(err: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode as C;
    match err.sqlite_error_code() {
        Some(
            C::DiskFull | C::SystemIoFailure | C::CannotOpen | C::PermissionDenied | C::ReadOnly,
        ) => format!(
            "{}; SQLite keeps it in $SQLITE_TMPDIR, else $TMPDIR, else /var/tmp or /tmp: free space there or make it writable (or point SQLITE_TMPDIR at a directory that is), then run the upload again",
            one_line(&err.to_string())
        ),
        _ => one_line(&err.to_string()),
    }
}

const SEEN: &str = "for duplicate external_ids";
const CALLS: &str = "of the schedule's calls by external_id";

/// The external_ids seen so far, on disk (SQLite's temporary database), not in memory.
pub struct SeenExternalIds {
    scratch: Connection,
}

impl SeenExternalIds {
    pub fn new() -> Result<Self, UploadError> {
        let scratch = Connection::open("").scratch(SEEN, "open")?;
        scratch
            .execute_batch(
                "CREATE TABLE seen (external_id TEXT PRIMARY KEY, line INTEGER NOT NULL) WITHOUT ROWID;
                 BEGIN",
            )
            .scratch(SEEN, "create")?;
        Ok(SeenExternalIds { scratch })
    }

    /// The line `id` was first seen on, if not this one.
    pub fn first_seen(&mut self, id: &str, line: u64) -> Result<Option<u64>, UploadError> {
        let inserted = self
            .scratch
            .prepare_cached("INSERT OR IGNORE INTO seen VALUES (?1, ?2)")
            .and_then(|mut insert| insert.execute(rusqlite::params![id, line as i64]))
            .scratch(SEEN, "record an external_id")?;
        if inserted == 1 {
            return Ok(None);
        }
        let first: i64 = self
            .scratch
            .prepare_cached("SELECT line FROM seen WHERE external_id = ?1")
            .and_then(|mut select| select.query_row([id], |r| r.get(0)))
            .scratch(SEEN, "read where an external_id was first seen")?;
        Ok(Some(first as u64))
    }

    pub fn finish(self) -> Result<(), UploadError> {
        self.scratch.execute_batch("COMMIT").scratch(SEEN, "close")
    }
}

/// Calls by external_id: on disk (SQLite's temporary database), not in memory, however many
/// calls a schedule has.
pub struct CallsByExternalId {
    scratch: Connection,
}

impl CallsByExternalId {
    pub fn new() -> Result<Self, UploadError> {
        let scratch = Connection::open("").scratch(CALLS, "open")?;
        // One transaction for the scratch table's life: nothing of it needs to be durable.
        scratch
            .execute_batch(
                "CREATE TABLE calls (external_id TEXT NOT NULL, uid BLOB NOT NULL,
                                     PRIMARY KEY (external_id, uid)) WITHOUT ROWID;
                 BEGIN",
            )
            .scratch(CALLS, "create")?;
        Ok(CallsByExternalId { scratch })
    }

    pub fn add(&mut self, call: &OutboundCall) -> Result<(), UploadError> {
        if let Some(id) = &call.external_id {
            self.scratch
                .prepare_cached("INSERT OR IGNORE INTO calls VALUES (?1, ?2)")
                .and_then(|mut insert| {
                    insert.execute(rusqlite::params![id, call.uid.as_bytes().as_slice()])
                })
                .scratch(CALLS, "record a call")?;
        }
        Ok(())
    }

    /// The calls with this external_id.
    pub fn uids(&self, external_id: &str) -> Result<Vec<Uuid>, UploadError> {
        self.uids_of(external_id)
            .scratch(CALLS, "read the calls of an external_id")
    }

    fn uids_of(&self, external_id: &str) -> Result<Vec<Uuid>, rusqlite::Error> {
        let mut statement = self
            .scratch
            .prepare_cached("SELECT uid FROM calls WHERE external_id = ?1")?;
        let uids = statement.query_map([external_id], |r| r.get::<_, Vec<u8>>(0))?;
        let mut out = Vec::new();
        for uid in uids {
            out.extend(Uuid::from_slice(&uid?).ok());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_external_id_seen_again_names_the_line_it_was_first_seen_on() {
        let mut seen = SeenExternalIds::new().unwrap();
        assert_eq!(seen.first_seen("a", 2).unwrap(), None);
        assert_eq!(seen.first_seen("b", 3).unwrap(), None);
        assert_eq!(seen.first_seen("a", 4).unwrap(), Some(2));
        seen.finish().unwrap();
    }

    /// What failed (which temporary table, doing what), on what (SQLite's temporary
    /// directory, not the warehouse), what to do; SQLite's words once.
    #[test]
    fn a_failing_scratch_table_says_what_failed_where_and_what_to_do() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        );
        let err = Err::<(), _>(full)
            .scratch(SEEN, "record an external_id")
            .unwrap_err();
        crate::assert_each_cause_once(&err);
        assert_eq!(
            crate::error_chain(&err),
            "the upload's temporary table for duplicate external_ids failed to record an external_id: database or disk is full; SQLite keeps it in $SQLITE_TMPDIR, else $TMPDIR, else /var/tmp or /tmp: free space there or make it writable (or point SQLITE_TMPDIR at a directory that is), then run the upload again"
        );
        let other = Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
            .scratch(CALLS, "read the calls of an external_id")
            .unwrap_err();
        assert_eq!(
            crate::error_chain(&other),
            "the upload's temporary table of the schedule's calls by external_id failed to read the calls of an external_id: Query returned no rows"
        );
    }
}
