//! Locks on the warehouse file itself: Linux open-file-description (OFD) byte-range locks on
//! bytes far beyond the ones SQLite locks.
//!
//! Locking the database file, not a file beside it, is what every path to the warehouse
//! shares: a symlink or a hard link reaches the same inode (a warehouse with two names is
//! refused anyway, `access::check_single_name`: the lock would hold, but SQLite keeps a WAL
//! per name), and `sudo callsync …` leaves no
//! root-owned file behind that the service user could not open later. The operating system
//! releases the locks when the process dies, even by `kill -9`.
//!
//! Two rules keep SQLite safe: the bytes are at 2^61 and above, far from SQLite's lock bytes
//! at 1 GiB; and a descriptor opened here is **never closed**. Closing any descriptor of a
//! file drops every POSIX lock the process holds on it, SQLite's own included, so a released
//! lock returns its descriptor to a pool for the next lock on the same file instead. OFD locks
//! belong to the open file description, so two pooled descriptors conflict with each other as
//! two processes do.
//!
//! The `fcntl` call is `nix`'s safe one: rustix's `fcntl_lock` cannot serve here, as it takes
//! a classic POSIX lock on the whole file (`F_SETLK`, offset 0 to the end), which would cover
//! SQLite's lock bytes and, being the process's, be dropped by closing any descriptor.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{LazyLock, Mutex};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

/// Which file a path names: two paths with the same identity are one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    fn of(metadata: &std::fs::Metadata) -> Self {
        FileIdentity {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }

    /// The file `path` names now; `None` when nothing is there.
    pub fn of_path(path: &Path) -> std::io::Result<Option<Self>> {
        match std::fs::metadata(path) {
            Ok(metadata) => Ok(Some(Self::of(&metadata))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// The first byte callsync locks: 2^61, far beyond SQLite's lock bytes (at 2^30).
const BASE: i64 = 1 << 61;

const SIXTY_BITS: u64 = (1 << 60) - 1;

/// Which byte a lock takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockByte {
    /// Held shared by every process that writes the warehouse, exclusive by `restore`.
    Warehouse,
    /// One per schedule: the process walking it.
    Schedule(uuid::Uuid),
    /// One per schedule uploaded into (its uid hashed by the caller to 60 bits):
    /// the process sending it.
    Upload(u64),
}

impl LockByte {
    fn offset(self) -> i64 {
        match self {
            LockByte::Warehouse => BASE,
            LockByte::Schedule(uid) => {
                // 60 bits of the uid's 122 random ones: two schedules of one warehouse
                // sharing a byte (and so a lock) is as likely as a 60-bit collision.
                let bits = uid.as_u128();
                let folded = (bits as u64) ^ ((bits >> 64) as u64);
                BASE + 1 + (folded & SIXTY_BITS) as i64
            }
            // The 2^60 bytes after the schedules' range.
            LockByte::Upload(key) => BASE + 1 + (1 << 60) + (key & SIXTY_BITS) as i64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another process holds it")]
    Busy,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A held lock; released (and its descriptor pooled) on drop.
#[derive(Debug)]
pub struct FileLock {
    file: Option<File>,
    identity: FileIdentity,
    byte: LockByte,
}

/// Descriptors no lock holds now, by file: never closed (see the module comment).
static IDLE: LazyLock<Mutex<HashMap<FileIdentity, Vec<File>>>> = LazyLock::new(Mutex::default);

impl FileLock {
    /// Takes `byte` of the existing file at `path` in `mode`, without waiting.
    pub fn try_lock(path: &Path, byte: LockByte, mode: LockMode) -> Result<FileLock, LockError> {
        let (file, identity) = descriptor(path)?;
        let mut lock = FileLock {
            file: Some(file),
            identity,
            byte,
        };
        let kind = match mode {
            LockMode::Shared => libc::F_RDLCK,
            LockMode::Exclusive => libc::F_WRLCK,
        };
        match lock.set(kind) {
            Ok(()) => Ok(lock),
            Err(err) => {
                // Nothing was taken: pooled now, `drop` has nothing left to release.
                lock.pool();
                Err(err)
            }
        }
    }

    /// The file this lock is on (the one the warehouse had when it was opened).
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    fn set(&self, kind: libc::c_int) -> Result<(), LockError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        // One byte; `l_pid` must be 0 for OFD locks.
        let range = libc::flock {
            l_type: kind as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: self.byte.offset(),
            l_len: 1,
            l_pid: 0,
        };
        match fcntl(file, FcntlArg::F_OFD_SETLK(&range)) {
            Ok(_) => Ok(()),
            Err(Errno::EAGAIN | Errno::EACCES) => Err(LockError::Busy),
            Err(errno) => Err(LockError::Io(errno.into())),
        }
    }

    fn pool(&mut self) {
        if let Some(file) = self.file.take()
            && let Ok(mut idle) = IDLE.lock()
        {
            idle.entry(self.identity).or_default().push(file);
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // If the unlock fails the descriptor still holds the byte: leak it rather than pool a
        // descriptor that would take a lock it does not ask for.
        if self.set(libc::F_UNLCK).is_ok() {
            self.pool();
        } else if let Some(file) = self.file.take() {
            std::mem::forget(file);
        }
    }
}

/// A descriptor of the file at `path` that holds no lock: a pooled one when the path still
/// names a file opened before, else a new one.
fn descriptor(path: &Path) -> std::io::Result<(File, FileIdentity)> {
    if let Some(identity) = FileIdentity::of_path(path)?
        && let Some(file) = IDLE
            .lock()
            .ok()
            .and_then(|mut idle| idle.get_mut(&identity)?.pop())
    {
        return Ok((file, identity));
    }
    // Read and write: a shared lock needs a readable descriptor, an exclusive one a writable.
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let identity = FileIdentity::of(&file.metadata()?);
    Ok((file, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        std::fs::write(&path, b"").unwrap();
        (dir, path)
    }

    #[test]
    fn shared_locks_coexist_and_keep_an_exclusive_one_out() {
        let (_dir, path) = file();
        let a = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Shared).unwrap();
        let b = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Shared).unwrap();
        let busy = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Exclusive);
        assert!(matches!(busy, Err(LockError::Busy)), "{busy:?}");
        drop((a, b));
        let held = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Exclusive).unwrap();
        let busy = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Shared);
        assert!(matches!(busy, Err(LockError::Busy)), "{busy:?}");
        drop(held);
    }

    /// Byte-range locks, not whole-file ones: each schedule's byte is held apart from the
    /// others' and from the warehouse's, and none reaches SQLite's lock bytes (at 2^30),
    /// which a whole-file lock would (another descriptor's lock on them stays free).
    #[test]
    fn each_lock_takes_its_own_byte_and_leaves_sqlites_free() {
        let (_dir, path) = file();
        let warehouse =
            FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Exclusive).unwrap();
        let a = LockByte::Schedule(uuid::Uuid::from_u128(7));
        let b = LockByte::Schedule(uuid::Uuid::from_u128(8));
        let held_a = FileLock::try_lock(&path, a, LockMode::Exclusive).unwrap();
        let held_b = FileLock::try_lock(&path, b, LockMode::Exclusive).unwrap();
        let busy = FileLock::try_lock(&path, a, LockMode::Shared);
        assert!(matches!(busy, Err(LockError::Busy)), "{busy:?}");
        let other = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let sqlite_pending_byte = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 1 << 30,
            l_len: 512,
            l_pid: 0,
        };
        fcntl(&other, FcntlArg::F_OFD_SETLK(&sqlite_pending_byte))
            .expect("SQLite's lock bytes are not ours");
        drop((warehouse, held_a, held_b));
    }

    #[test]
    fn schedules_take_distinct_bytes_beyond_sqlites() {
        let a = LockByte::Schedule(uuid::Uuid::from_u128(7)).offset();
        let b = LockByte::Schedule(uuid::Uuid::from_u128(8)).offset();
        assert_ne!(a, b);
        assert!(a > LockByte::Warehouse.offset() && b > LockByte::Warehouse.offset());
        assert!(LockByte::Warehouse.offset() > 1 << 40);
        // Uploads have their own range, after every schedule's, within what fcntl takes.
        let last_schedule =
            LockByte::Schedule(uuid::Uuid::from_u128(u128::from(u64::MAX))).offset();
        let first_upload = LockByte::Upload(0).offset();
        assert!(
            first_upload > last_schedule,
            "{first_upload} {last_schedule}"
        );
        assert!(LockByte::Upload(u64::MAX).offset() > first_upload);
        assert!(LockByte::Upload(u64::MAX).offset() < i64::MAX);
    }
}
