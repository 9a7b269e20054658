//! `ScheduleLock`: one process at a time syncs a given schedule.
//!
//! An exclusive advisory lock on `<warehouse>.locks/<schedule>.lock`, held for the whole
//! pass. The operating system releases it when the process dies, even by `kill -9`, so a
//! crash never leaves a stale lock behind. The daemon and a `backfill` run may share a
//! warehouse; they may not walk the same schedule at once.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::error::SyncError;

#[derive(Debug)]
pub struct ScheduleLock {
    _file: File,
}

impl ScheduleLock {
    pub fn acquire(warehouse: &Path, schedule: Uuid) -> Result<ScheduleLock, SyncError> {
        let dir = lock_dir(warehouse);
        let path = dir.join(format!("{schedule}.lock"));
        let io = |source| SyncError::Lock {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(ScheduleLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(SyncError::Busy { schedule, path }),
            Err(TryLockError::Error(source)) => Err(io(source)),
        }
    }
}

fn lock_dir(warehouse: &Path) -> PathBuf {
    let mut name = warehouse.as_os_str().to_owned();
    name.push(".locks");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let schedule = Uuid::from_u128(7);
        let first = ScheduleLock::acquire(&db, schedule).unwrap();
        let err = ScheduleLock::acquire(&db, schedule).unwrap_err();
        assert!(matches!(err, SyncError::Busy { .. }), "{err}");
        assert!(
            err.to_string().contains("another callsync process"),
            "{err}"
        );
        // Another schedule is independent.
        ScheduleLock::acquire(&db, Uuid::from_u128(8)).unwrap();
        drop(first);
        ScheduleLock::acquire(&db, schedule).unwrap();
    }
}
