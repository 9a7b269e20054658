//! `callsync backup` and `callsync restore`: copies made by SQLite's online backup, and a
//! restore that swaps the file whole.
//!
//! A backup is a consistent snapshot (one read transaction, so the daemon goes on writing)
//! written beside its destination and renamed into place, so a half-written backup never
//! bears the name; created 0600 or 0640 before a byte of it is written, and, if the copy
//! fails, removed with everything SQLite made beside it. A restore validates the backup, waits for no writer (it takes the
//! warehouse's lock exclusively), removes the old warehouse's `-wal`/`-shm` (frames of the
//! old file must never be replayed onto the restored one), and renames a copy over the
//! warehouse: readers see the old file or the new one, never a mix.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::backup::{Backup, StepResult};

use super::access::{beside, create_data_file};
use super::error::{SqlContext, WarehouseError, open_error};
use super::file_lock::{FileLock, LockByte, LockError, LockMode};
use super::handle::Warehouse;
use super::schema;
use crate::warehouse::capabilities::{Contents, RestoreReport};

impl Warehouse {}

/// Replaces the warehouse at `target` with the backup at `backup`; refused while another
/// callsync process writes the warehouse. Migrates a backup of an older schema.
pub fn restore(
    backup: &Path,
    target: &Path,
    busy_timeout: Duration,
) -> Result<RestoreReport, WarehouseError> {
    let source = open_backup(backup)?;
    // Renamed over, one name would hold the backup and the others the old warehouse.
    super::access::check_single_name(target)?;
    // Held until the new file is in place: no callsync writer opens the old one meanwhile.
    let _no_writers = lock_out_writers(target)?;
    let staged = sibling(target, "restore");
    // The old warehouse's mode, or a new warehouse's.
    let mode = std::fs::metadata(target)
        .ok()
        .map(|old| old.mode() & 0o7777);
    let staged_ok = copy_into(&source, &staged, mode)
        .and_then(|_| keep_owner(target, &staged))
        .and_then(|()| {
            let removed = remove_stale_wal(target)?;
            install(&staged, target)?;
            Ok(removed)
        });
    let removed = staged_ok.inspect_err(|_| remove_copy(&staged))?;
    // Opened once for writing: migrated if the backup is older, WAL set up (its files are
    // created as the warehouse's owner), so read-only readers can open it at once.
    let restored = Warehouse::open(target, busy_timeout)?;
    let contents = contents(&restored.conn, target)?;
    drop(restored);
    Ok(RestoreReport {
        bytes: file_len(target)?,
        contents,
        removed,
    })
}

/// Checks the backup at `path` as `restore` would (`PRAGMA integrity_check`, a callsync
/// warehouse this version can use) and says what it holds; the daemon's scheduled backups
/// check each new copy so before older ones are removed.
pub fn verify_backup(path: &Path) -> Result<Contents, WarehouseError> {
    let conn = open_backup(path)?;
    contents(&conn, path)
}

/// Opens a backup read-only and checks that it is an intact callsync warehouse this version
/// can use.
fn open_backup(path: &Path) -> Result<Connection, WarehouseError> {
    let bad = |problem: String| WarehouseError::BadBackup {
        path: path.to_owned(),
        problem,
    };
    if !path.is_file() {
        return Err(bad("no such file".into()));
    }
    // Read-only, creating nothing beside it (a copy of a stopped warehouse is a WAL database).
    let (conn, _) = schema::open_reading(path).map_err(|e| match e {
        WarehouseError::Open { problem, .. } => bad(problem),
        other => other,
    })?;
    let check: String = conn
        .query_row("PRAGMA integrity_check(1)", [], |r| r.get(0))
        .map_err(|e| bad(e.to_string()))?;
    if check != "ok" {
        return Err(bad(format!("integrity_check says {check}")));
    }
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('calls', 'sync_checkpoints', 'sync_runs')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| bad(e.to_string()))?;
    if tables != 3 {
        return Err(bad("it is not a callsync warehouse".into()));
    }
    if schema::identify(&conn, path)? == 0 {
        return Err(bad("it is not a callsync warehouse".into()));
    }
    Ok(conn)
}

/// The warehouse's lock, exclusively: no callsync process is writing it. `None` when there
/// is no warehouse yet.
fn lock_out_writers(target: &Path) -> Result<Option<FileLock>, WarehouseError> {
    if !target.exists() {
        return Ok(None);
    }
    match FileLock::try_lock(target, LockByte::Warehouse, LockMode::Exclusive) {
        Ok(lock) => Ok(Some(lock)),
        Err(LockError::Busy) => Err(WarehouseError::InUse {
            path: target.to_owned(),
        }),
        Err(LockError::Io(source)) => Err(WarehouseError::Io {
            path: target.to_owned(),
            step: "lock the warehouse",
            cause: source,
        }),
    }
}

/// A backup's mode: 0600, or 0640 when the warehouse is readable by its group (the BI
/// readers); never readable by others, whatever the warehouse's mode or the umask.
pub(super) fn backup_mode(warehouse: &Path) -> Result<u32, WarehouseError> {
    let mode = std::fs::metadata(warehouse)
        .map_err(|source| WarehouseError::Io {
            path: warehouse.to_owned(),
            step: "read the mode of",
            cause: source,
        })?
        .mode();
    Ok(0o600 | (mode & 0o040))
}

/// Copies every page of `source` into a new file at `dest`, created with `mode` (see
/// `access::create_data_file`) before any byte is written, in one read transaction (a
/// consistent snapshot while others write), as a self-contained file (rollback journal, no
/// `-wal`); returns what it holds. On failure the caller removes it with [`remove_copy`].
pub(super) fn copy_into(
    source: &Connection,
    dest: &Path,
    mode: Option<u32>,
) -> Result<Contents, WarehouseError> {
    remove_copy(dest);
    create_data_file(dest, mode).map_err(|source| WarehouseError::Io {
        path: dest.to_owned(),
        step: "create",
        cause: source,
    })?;
    let mut copy = Connection::open(dest).map_err(|source| open_error(dest, &source))?;
    // No rollback journal while copying: a copy that fails is deleted whole, so there is
    // nothing to roll back, and a journal left by a failed write would be litter.
    copy.pragma_update(None, "journal_mode", "OFF")
        .sql(dest, "starting the copy")?;
    {
        let backup = Backup::new(source, &mut copy).sql(dest, "starting the copy")?;
        // -1: every page in one step, so the copy is one snapshot and never restarts.
        match backup.step(-1).sql(dest, "copying the pages")? {
            StepResult::Done => {}
            _ => {
                return Err(WarehouseError::Io {
                    path: dest.to_owned(),
                    step: "copy the warehouse into",
                    cause: std::io::Error::other("the copy did not finish in one step"),
                });
            }
        }
    }
    copy.pragma_update(None, "journal_mode", "DELETE")
        .sql(dest, "making the copy self-contained")?;
    let contents = contents(&copy, dest)?;
    drop(copy);
    sync_file(dest)?;
    Ok(contents)
}

fn contents(conn: &Connection, path: &Path) -> Result<Contents, WarehouseError> {
    let count = |sql: &str| -> Result<u64, WarehouseError> {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .sql(path, "counting what the warehouse holds")
            .map(|n| n.max(0) as u64)
    };
    Ok(Contents {
        schema_version: schema::version(conn, path)?,
        schedules: count(
            "SELECT count(*) FROM (SELECT schedule_uid FROM calls UNION SELECT schedule_uid FROM sync_checkpoints)",
        )?,
        calls: count("SELECT count(*) FROM calls")?,
    })
}

/// The restored file gets the old warehouse's owner (its mode was given at creation), or
/// without one its directory's owner (`sudo callsync restore` must not leave a file the
/// service user cannot write).
fn keep_owner(target: &Path, staged: &Path) -> Result<(), WarehouseError> {
    let io = |source| WarehouseError::Io {
        path: staged.to_owned(),
        step: "set the owner of",
        cause: source,
    };
    let owner = match std::fs::metadata(target) {
        Ok(old) => old,
        Err(_) => match target.parent().map(std::fs::metadata) {
            Some(Ok(dir)) => dir,
            _ => return Ok(()),
        },
    };
    let new = std::fs::metadata(staged).map_err(io)?;
    // Only root may give a file away; anyone else restores as themselves.
    let root = rustix::process::geteuid().is_root();
    if root && (new.uid(), new.gid()) != (owner.uid(), owner.gid()) {
        std::os::unix::fs::chown(staged, Some(owner.uid()), Some(owner.gid())).map_err(io)?;
    }
    Ok(())
}

/// Removes a copy that failed, and every file SQLite may have made beside it (its journal,
/// and the `-wal`/`-shm` it opens for a moment while making the copy self-contained).
pub(super) fn remove_copy(copy: &Path) {
    let _ = std::fs::remove_file(copy);
    for suffix in ["-journal", "-wal", "-shm"] {
        let _ = std::fs::remove_file(beside(copy, suffix));
    }
}

/// Removes `-wal` and `-shm` beside `target`, returning those that were there.
fn remove_stale_wal(target: &Path) -> Result<Vec<PathBuf>, WarehouseError> {
    let mut removed = Vec::new();
    for suffix in ["-wal", "-shm"] {
        let mut name = target.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(WarehouseError::Io {
                    path,
                    step: "remove the old warehouse's WAL file",
                    cause: source,
                });
            }
        }
    }
    Ok(removed)
}

/// Renames `staged` to `dest` (atomic on one filesystem) and makes the rename durable.
pub(super) fn install(staged: &Path, dest: &Path) -> Result<(), WarehouseError> {
    std::fs::rename(staged, dest).map_err(|source| WarehouseError::Io {
        path: dest.to_owned(),
        step: "move the new file into place at",
        cause: source,
    })?;
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Best effort: not every filesystem lets a directory be synced.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn sync_file(path: &Path) -> Result<(), WarehouseError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|source| WarehouseError::Io {
            path: path.to_owned(),
            step: "flush to disk",
            cause: source,
        })
}

pub(super) fn file_len(path: &Path) -> Result<u64, WarehouseError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| WarehouseError::Io {
            path: path.to_owned(),
            step: "read the size of",
            cause: source,
        })
}

pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    use super::file_lock::FileIdentity;
    matches!(
        (FileIdentity::of_path(a), FileIdentity::of_path(b)),
        (Ok(Some(a)), Ok(Some(b))) if a == b
    )
}

/// `.<name>.<what>-<pid>` beside `path`: same directory, so the final rename is atomic.
pub(super) fn sibling(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{what}-{}", std::process::id()))
}
