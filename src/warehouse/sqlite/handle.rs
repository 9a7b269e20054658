//! The SQLite warehouse's handle: `Warehouse` opened (for writing, read-only, for a dry run),
//! migrated, checked in place, and closed with its WAL emptied.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use super::access;
use super::error::WarehouseError;
use super::file_lock::{FileIdentity, FileLock, LockByte, LockError, LockMode};
use super::schema;
use crate::warehouse::MigrationReport;

pub struct Warehouse {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    /// A writer's shared lock on the file: `restore` waits for every writer to be gone. It
    /// also says which file was opened, to notice the path being deleted or replaced.
    in_use: Option<FileLock>,
    /// How a read-only warehouse is read (a writer's is `Shared`).
    pub(super) reading: schema::Reading,
}

impl Warehouse {
    /// Opens or creates the warehouse, applies pending migrations, and marks the passes
    /// whose process ended mid-pass interrupted (`interrupted.rs`).
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Warehouse, WarehouseError> {
        let (conn, in_use, _) = open_locked(path, busy_timeout)?;
        let mut warehouse = Warehouse {
            conn,
            path: path.to_owned(),
            in_use: Some(in_use),
            reading: schema::Reading::Shared,
        };
        warehouse.mark_interrupted_runs()?;
        Ok(warehouse)
    }

    /// Opens an existing warehouse read-only (no migration; the schema must be current),
    /// creating no file beside it and changing none.
    pub fn open_read_only(path: &Path) -> Result<Warehouse, WarehouseError> {
        // Read through another name, it would be read without the WAL its writer uses.
        access::check_single_name(path)?;
        let (conn, reading) = schema::open_read_only(path)?;
        Ok(Warehouse {
            conn,
            path: path.to_owned(),
            in_use: None,
            reading,
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
            in_use: None,
            reading: schema::Reading::Shared,
        })
    }

    /// Applies pending migrations and says from which version to which.
    pub fn migrate(path: &Path, busy_timeout: Duration) -> Result<MigrationReport, WarehouseError> {
        let (conn, _in_use, from) = open_locked(path, busy_timeout)?;
        close_cleanly(&conn);
        Ok(MigrationReport {
            from,
            to: schema::latest_version(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file this writer opened; `None` for a read-only or in-memory warehouse.
    pub fn identity(&self) -> Option<FileIdentity> {
        self.in_use.as_ref().map(FileLock::identity)
    }

    /// Fails when the path no longer names the file this writer opened (deleted, or another
    /// file moved over it): what it writes would then be lost.
    pub fn check_in_place(&self) -> Result<(), WarehouseError> {
        match self.identity() {
            Some(opened) => check_in_place(&self.path, opened),
            None => Ok(()),
        }
    }
}

/// What `run` checks of the warehouse at `path` before it opens it, for `callsync check`:
/// one name, writable by this user, and — when it exists — identified as `run` identifies it
/// (a callsync warehouse of a schema this version can migrate; another program's database,
/// a damaged file or a newer callsync's are refused with `run`'s message). Creates, migrates
/// and changes nothing. Returns the schema version found, `None` when there is no file yet.
pub fn check_before_writing(path: &Path) -> Result<Option<usize>, WarehouseError> {
    access::check_single_name(path)?;
    access::check_writable(path)?;
    if !path.exists() {
        return Ok(None);
    }
    let (conn, _) = schema::open_reading(path)?;
    schema::identify(&conn, path).map(Some)
}

/// Fails when `path` no longer names the file `opened`, or this process could not write it.
pub fn check_usable(path: &Path, opened: FileIdentity) -> Result<(), WarehouseError> {
    check_in_place(path, opened)?;
    access::check_writable(path)
}

/// Fails when `path` no longer names the file `opened`.
fn check_in_place(path: &Path, opened: FileIdentity) -> Result<(), WarehouseError> {
    let now = FileIdentity::of_path(path).map_err(|source| WarehouseError::Io {
        path: path.to_owned(),
        step: "check the warehouse",
        cause: source,
    })?;
    match now {
        Some(now) if now == opened => Ok(()),
        Some(_) => Err(WarehouseError::Replaced {
            path: path.to_owned(),
        }),
        None => Err(WarehouseError::Deleted {
            path: path.to_owned(),
        }),
    }
}

/// Opens `path` for writing with the writers' shared lock; refused while `restore` runs.
fn open_locked(
    path: &Path,
    busy_timeout: Duration,
) -> Result<(Connection, FileLock, usize), WarehouseError> {
    access::check_single_name(path)?;
    access::check_writable(path)?;
    access::create_owned_by_directory(path)?;
    let (conn, before) = schema::open_for_writing(path, busy_timeout)?;
    let in_use = match FileLock::try_lock(path, LockByte::Warehouse, LockMode::Shared) {
        Ok(lock) => lock,
        Err(LockError::Busy) => {
            return Err(WarehouseError::Restoring {
                path: path.to_owned(),
            });
        }
        Err(LockError::Io(source)) => {
            return Err(WarehouseError::Io {
                path: path.to_owned(),
                step: "lock the warehouse",
                cause: source,
            });
        }
    };
    // The lock is on whatever the path named when it was taken: a restore that renamed a
    // file into place meanwhile is noticed here rather than at the first pass.
    check_in_place(path, in_use.identity())?;
    Ok((conn, in_use, before))
}

/// Moves every page of the WAL into the database and empties it, so that the file alone is
/// the whole warehouse (a copy of it is complete, and a stale WAL is never replayed onto a
/// restored file). The `-wal` file itself stays, for read-only readers. Best effort: a
/// reader still on an old snapshot keeps the frames it reads, and the next close empties it.
fn close_cleanly(conn: &Connection) {
    let emptied = conn
        .busy_timeout(CLOSE_CHECKPOINT_WAIT)
        // Also makes SQLite's own checkpoint on the last close truncate the WAL to 0 bytes.
        .and_then(|()| conn.pragma_update(None, "journal_size_limit", 0))
        .and_then(|()| {
            // `main.`: unqualified, the checkpoint covers the temp database too, which a
            // migration's sorter leaves in a state that fails it (SQLITE_LOCKED) once the
            // file went from a rollback journal back to WAL mode.
            conn.query_row("PRAGMA main.wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
        });
    match emptied {
        Ok(0) => {}
        Ok(_) => tracing::info!("the WAL was not emptied on close: a reader is still using it"),
        Err(err) => tracing::warn!(error = %err, "cannot empty the WAL on close"),
    }
}

/// How long closing waits for readers to leave the WAL before leaving it for the next close.
const CLOSE_CHECKPOINT_WAIT: Duration = Duration::from_secs(2);

impl Drop for Warehouse {
    fn drop(&mut self) {
        if self.in_use.is_some() {
            close_cleanly(&self.conn);
        }
    }
}
