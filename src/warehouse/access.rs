//! Can the warehouse be written? Checked before a writer opens it and before every daemon
//! tick, so that a read-only file or directory stops callsync with one line naming it instead
//! of passes failing with SQLite's "attempt to write a readonly database" — failures that,
//! for the same reason, could not be recorded in `sync_runs`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
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

/// Creates the warehouse file when there is none yet, owned — when root creates it — by
/// its directory's owner: `sudo callsync backfill` on a new warehouse must not leave a file the
/// service user cannot write. SQLite then opens the empty file as an empty database and, as
/// root, gives its `-wal` and `-shm` the file's owner.
pub fn create_owned_by_directory(path: &Path) -> Result<(), WarehouseError> {
    let io = |source| WarehouseError::Io {
        path: path.to_owned(),
        step: "create the warehouse",
        cause: source,
    };
    use std::os::unix::fs::OpenOptionsExt;
    // A new file: no SQLite connection of this process has it open, so closing this
    // descriptor drops no lock of theirs. 0644 before the umask, as SQLite creates files.
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(err) => return Err(io(err)),
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let dir = std::fs::metadata(directory_of(path)).map_err(io)?;
    std::os::unix::fs::fchown(&file, Some(dir.uid()), Some(dir.gid())).map_err(io)
}

fn writable(file: &Path, what: &'static str, warehouse: &Path) -> Result<(), WarehouseError> {
    let Ok(c_path) = CString::new(file.as_os_str().as_bytes()) else {
        return Ok(()); // a NUL in the path: SQLite's own open reports it
    };
    // SAFETY: `c_path` is a NUL-terminated string alive for the call; faccessat only reads it.
    // AT_EACCESS: the effective user, the one that will write.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::W_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(WarehouseError::NotWritable {
        warehouse: warehouse.to_owned(),
        what,
        path: file.to_owned(),
        cause: std::io::Error::last_os_error(),
    })
}

fn read_only_filesystem(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero `statvfs` is a valid value of this plain C struct, which the call
    // fills; `c_path` is NUL-terminated and alive for the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &raw mut stats) };
    rc == 0 && stats.f_flag & libc::ST_RDONLY != 0
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
