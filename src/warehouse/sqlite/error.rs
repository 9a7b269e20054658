//! SQLite's errors as [`WarehouseError`]s: its words on one line, with what to do where the
//! code tells, and the file and step they happened on.

use std::path::Path;

use crate::untrusted::one_line;
pub use crate::warehouse::error::WarehouseError;

/// `WarehouseError::Open` for `path`.
pub(super) fn open_error(path: &Path, cause: &rusqlite::Error) -> WarehouseError {
    WarehouseError::Open {
        path: path.to_owned(),
        problem: opening_problem(cause),
    }
}

/// `WarehouseError::Migrate` for `path`.
pub(super) fn migrate_error(path: &Path, cause: &rusqlite_migration::Error) -> WarehouseError {
    WarehouseError::Migrate {
        path: path.to_owned(),
        problem: migration_problem(cause),
    }
}

/// `WarehouseError::Unreadable` for `path`.
pub(super) fn unreadable_error(path: &Path, cause: &rusqlite_migration::Error) -> WarehouseError {
    WarehouseError::Unreadable {
        path: path.to_owned(),
        problem: migration_problem(cause),
    }
}

/// SQLite's words and, where the code tells, what to do about it.
fn sqlite_problem(err: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode as C;
    let advice = match err.sqlite_error_code() {
        Some(C::DiskFull) => "free space on its filesystem, then run callsync again",
        Some(C::ReadOnly) => {
            "make the file, its -wal and -shm files and its directory writable by this user"
        }
        Some(C::NotADatabase | C::DatabaseCorrupt) => {
            "the file is damaged or not a database: restore it from a backup, or move it away to start a new warehouse"
        }
        Some(C::CannotOpen | C::PermissionDenied) => {
            "check the path and its directory's permissions"
        }
        _ => return one_line(&err.to_string()),
    };
    format!("{}; {advice}", one_line(&err.to_string()))
}

/// Opening fails mostly on the path or its permissions, so that is the advice by default.
fn opening_problem(err: &rusqlite::Error) -> String {
    match err.sqlite_error_code() {
        None | Some(rusqlite::ErrorCode::Unknown) => format!(
            "{}; check the path and its directory's permissions",
            one_line(&err.to_string())
        ),
        Some(_) => sqlite_problem(err),
    }
}

/// rusqlite_migration's own message quotes the whole SQL of the failing migration (a
/// 21-line dump); SQLite's error is what the operator can act on.
fn migration_problem(err: &rusqlite_migration::Error) -> String {
    match err {
        rusqlite_migration::Error::RusqliteError { err, .. } => sqlite_problem(err),
        other => one_line(&other.to_string()),
    }
}

/// Adds the warehouse's path and the step to a rusqlite error:
/// `conn.execute(..).sql(path, "saving the checkpoint")?`. A full disk or a file damaged
/// mid-write surfaces here, and the operator must learn which file.
pub(crate) trait SqlContext<T> {
    fn sql(self, path: &Path, step: &'static str) -> Result<T, WarehouseError>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn sql(self, path: &Path, step: &'static str) -> Result<T, WarehouseError> {
        self.map_err(|cause| WarehouseError::Sql {
            path: path.to_owned(),
            step,
            problem: sqlite_problem(&cause),
        })
    }
}
