//! The two locks a command takes on the warehouse file: [`ScheduleLock`] (one process at a
//! time syncs a given schedule) and [`UploadLock`] (one upload into a schedule at a time).
//!
//! `ScheduleLock`: an exclusive lock on one byte of the warehouse file itself, chosen by the schedule's uid
//! (`warehouse::file_lock`), held for the whole pass. Every path to the warehouse (a symlink;
//! a hard link too, though a warehouse with two names is refused before it is opened, as
//! SQLite would keep a WAL per name) reaches the same file and so the same lock; no lock file is ever created, so a
//! command run as root leaves nothing the service user cannot open. The operating system
//! releases the lock when the process dies, even by `kill -9`, so a crash never leaves a
//! stale lock behind. The daemon and a `backfill` run may share a warehouse; they may not
//! walk the same schedule at once.
//!
//! Unlike the PostgreSQL warehouse's claims (`postgres/claim.rs`), these need no fencing
//! token: the lock is held by this process's own open file description and the pages go
//! through the same kernel into the same file, so nothing between holder and file can be
//! partitioned — the lock is lost only when the process is gone, and its writes with it.
//! (A warehouse on a network filesystem is not supported: SQLite's own locking is not
//! reliable there, and neither would these be.)

use std::path::Path;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::file_lock::{FileLock, LockByte, LockError, LockMode};

#[derive(Debug)]
pub struct ScheduleLock {
    _lock: FileLock,
}

impl ScheduleLock {
    /// Takes `schedule`'s lock on the existing warehouse file at `warehouse`, without waiting.
    /// [`LockError::Busy`] when another process holds it.
    pub fn acquire(warehouse: &Path, schedule: Uuid) -> Result<ScheduleLock, LockError> {
        let lock =
            FileLock::try_lock(warehouse, LockByte::Schedule(schedule), LockMode::Exclusive)?;
        Ok(ScheduleLock { _lock: lock })
    }
}

/// One upload into a schedule at a time, whatever the file: an exclusive lock on a byte of
/// the warehouse file chosen by the schedule, held from before the upload looks for the
/// external_ids already in the schedule until it ends (see `warehouse::file_lock`: no lock
/// file, released when the process dies). Two files sent into one schedule at once would
/// each look before the other sent, and could both send one contact.
///
/// A second upload fails at once rather than waiting: the first may take hours (a big file,
/// a settle window), a cron job or a terminal is better told than left hanging, and the
/// second run, started again later, looks at the schedule as the first left it. The sync's
/// lock of the schedule ([`ScheduleLock`]) is another byte: a pass and an upload go on together.
#[derive(Debug)]
pub struct UploadLock {
    _lock: FileLock,
}

impl UploadLock {
    /// Takes the lock of uploading into `schedule`, without waiting.
    /// [`LockError::Busy`] when another process holds it.
    pub fn acquire(warehouse: &Path, schedule: Uuid) -> Result<UploadLock, LockError> {
        let digest = Sha256::digest(schedule.as_bytes());
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        let byte = LockByte::Upload(u64::from_le_bytes(first));
        let lock = FileLock::try_lock(warehouse, byte, LockMode::Exclusive)?;
        Ok(UploadLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warehouse() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        std::fs::write(&db, b"").unwrap();
        (dir, db)
    }

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let (_dir, db) = warehouse();
        let schedule = Uuid::from_u128(7);
        let first = ScheduleLock::acquire(&db, schedule).unwrap();
        let err = ScheduleLock::acquire(&db, schedule).unwrap_err();
        assert!(matches!(err, LockError::Busy), "{err}");
        // Another schedule is independent.
        ScheduleLock::acquire(&db, Uuid::from_u128(8)).unwrap();
        drop(first);
        ScheduleLock::acquire(&db, schedule).unwrap();
    }

    #[test]
    fn a_symlink_or_a_hard_link_to_the_warehouse_shares_its_locks() {
        let (dir, db) = warehouse();
        let symlink = dir.path().join("alias.db");
        std::os::unix::fs::symlink(&db, &symlink).unwrap();
        let other_dir = dir.path().join("elsewhere");
        std::fs::create_dir(&other_dir).unwrap();
        let hard_link = other_dir.join("hard.db");
        std::fs::hard_link(&db, &hard_link).unwrap();
        let schedule = Uuid::from_u128(7);
        for (held_through, tried_through) in
            [(&db, &symlink), (&symlink, &hard_link), (&hard_link, &db)]
        {
            let held = ScheduleLock::acquire(held_through, schedule).unwrap();
            let err = ScheduleLock::acquire(tried_through, schedule).unwrap_err();
            assert!(matches!(err, LockError::Busy), "{err}");
            drop(held);
        }
    }

    #[test]
    fn locking_creates_no_file() {
        let (dir, db) = warehouse();
        let listing = || -> Vec<_> {
            let mut names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing();
        let _held = ScheduleLock::acquire(&db, Uuid::from_u128(7)).unwrap();
        assert_eq!(listing(), before);
    }
}
