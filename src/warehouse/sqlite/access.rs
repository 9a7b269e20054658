//! Can the warehouse be written? Checked before a writer opens it and before every daemon
//! tick, so that a read-only file or directory stops callsync with one line naming it instead
//! of passes failing with SQLite's "attempt to write a readonly database" — failures that,
//! for the same reason, could not be recorded in `sync_runs`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::error::WarehouseError;

/// Fails when this process could not write the warehouse at `path`: the file, its `-wal` and
/// `-shm`, and the directory when SQLite would have to create one of them there.
pub fn check_writable(path: &Path) -> Result<(), WarehouseError> {
    let dir = directory_of(path);
    let mut needs_dir = !path.exists();
    for file in [path.to_owned(), beside(path, "-wal"), beside(path, "-shm")] {
        if file.exists() {
            writable(&file, "the file", path)?;
        } else {
            needs_dir = true;
        }
    }
    if needs_dir {
        writable(&dir, "the directory", path)?;
    }
    Ok(())
}

/// Refuses a warehouse file with more than one name (hard links). SQLite names the `-wal` and
/// `-shm` after the path it opened, so two processes on one file through two names keep two
/// WALs, each believes it alone may write, and both checkpoint into the file: it is
/// corrupted. A lock on the file keeps callsync's own processes apart but not SQLite's pages,
/// nor another program; one name is the only safe state. (A symlink is fine: SQLite names
/// the files after the path it resolves to.)
pub fn check_single_name(path: &Path) -> Result<(), WarehouseError> {
    match std::fs::metadata(path) {
        Ok(file) if file.nlink() > 1 => Err(WarehouseError::HardLinked {
            path: path.to_owned(),
            names: file.nlink(),
        }),
        _ => Ok(()),
    }
}

/// Why the warehouse's owner — the user the daemon runs as — could not write it, if so: no
/// write permission for the owner on the file or its directory, or a read-only filesystem.
/// For `status`, which may run as anyone.
pub fn unwritable_for_owner(path: &Path) -> Option<String> {
    let file = std::fs::metadata(path).ok()?;
    if file.mode() & 0o200 == 0 {
        return Some(format!(
            "{} has no write permission for its owner (mode {:o})",
            path.display(),
            file.mode() & 0o7777
        ));
    }
    if read_only_filesystem(path) {
        return Some(format!("{} is on a read-only filesystem", path.display()));
    }
    let dir = directory_of(path);
    let dir_meta = std::fs::metadata(&dir).ok()?;
    (dir_meta.uid() == file.uid() && dir_meta.mode() & 0o200 == 0).then(|| {
        format!(
            "its directory {} has no write permission for its owner (mode {:o})",
            dir.display(),
            dir_meta.mode() & 0o7777
        )
    })
}

/// The mode a new warehouse is created with, before the umask: its owner reads and writes, its
/// group (the BI readers, docs/operate.md, "BI users") reads, others nothing: it holds names and phone
/// numbers. SQLite gives its `-wal` and `-shm` the database file's mode exactly.
pub(super) const NEW_WAREHOUSE_MODE: u32 = 0o640;

/// Creates the warehouse file when there is none yet, with [`NEW_WAREHOUSE_MODE`] (a stricter
/// umask narrows it) and owned — when root creates it — by its directory's owner: `sudo
/// callsync backfill` on a new warehouse must not leave a file the service user cannot write.
/// SQLite then opens the empty file as an empty database and, as root, gives its `-wal` and
/// `-shm` the file's owner and mode.
pub fn create_owned_by_directory(path: &Path) -> Result<(), WarehouseError> {
    let io = |source| WarehouseError::Io {
        path: path.to_owned(),
        step: "create the warehouse",
        cause: source,
    };
    // A new file: no SQLite connection of this process has it open, so closing this
    // descriptor drops no lock of theirs.
    let file = match create_data_file(path, None) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(err) => return Err(io(err)),
    };
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let dir = std::fs::metadata(directory_of(path)).map_err(io)?;
    std::os::unix::fs::fchown(&file, Some(dir.uid()), Some(dir.gid())).map_err(io)
}

/// Creates the new, empty file `path` (refused if anything is there) for call data, before
/// any byte is written: with `mode` exactly when given — whatever the umask —, else with
/// [`NEW_WAREHOUSE_MODE`] narrowed by the umask. SQLite would create it 0644 before the umask.
pub(super) fn create_data_file(path: &Path, mode: Option<u32>) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(NEW_WAREHOUSE_MODE)
        .open(path)?;
    if let Some(mode) = mode {
        // fchmod, which the umask does not narrow: the mode asked for, exactly.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(file)
}

fn writable(file: &Path, what: &'static str, warehouse: &Path) -> Result<(), WarehouseError> {
    use rustix::fs::{Access, AtFlags, CWD, accessat};
    // AT_EACCESS: the effective user, the one that will write. (A NUL in the path fails with
    // EINVAL: SQLite's own open would refuse it too.)
    accessat(CWD, file, Access::WRITE_OK, AtFlags::EACCESS).map_err(|errno| {
        WarehouseError::NotWritable {
            warehouse: warehouse.to_owned(),
            what,
            path: file.to_owned(),
            cause: errno.into(),
        }
    })
}

fn read_only_filesystem(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|stats| stats.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

pub(super) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
