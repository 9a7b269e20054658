//! Scheduled backups (`[backup]`): on its cron the daemon copies the warehouse into a
//! directory as `callsync-YYYYMMDDTHHMMSSZ.db` — SQLite's online backup, as `callsync backup`
//! makes it, so passes go on writing —, checks the new copy as `callsync restore` would
//! (`PRAGMA integrity_check`, a callsync warehouse), and only then removes the oldest of its
//! own backups beyond `keep`. A copy that fails its check is removed and every older backup
//! kept. Files in the directory that are not named so are never touched.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::metrics::Metrics;
use crate::service::Timestamp;
use crate::warehouse::{Backend, Contents, WarehouseError};

const PREFIX: &str = "callsync-";
const SUFFIX: &str = ".db";

/// A scheduled backup that was made and checked.
#[derive(Debug)]
pub struct Taken {
    pub path: PathBuf,
    pub bytes: u64,
    pub contents: Contents,
    /// The oldest backups removed to keep `keep`.
    pub removed: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The cause names the warehouse or the file already.
    #[error("scheduled backup into {dir}: {cause}")]
    Copy {
        dir: PathBuf,
        cause: Box<WarehouseError>,
    },
    #[error(
        "scheduled backup {path} failed its check, so it was removed and every older backup kept: {cause}"
    )]
    Verify {
        path: PathBuf,
        cause: Box<WarehouseError>,
    },
    #[error("scheduled backups in {dir}: cannot {step}: {cause}; check [backup] dir")]
    Dir {
        dir: PathBuf,
        step: &'static str,
        cause: std::io::Error,
    },
}

/// The file name of a backup taken at `at`: sorts as time does.
fn file_name(at: Timestamp) -> String {
    let t = at.as_offset_date_time();
    format!(
        "{PREFIX}{:04}{:02}{:02}T{:02}{:02}{:02}Z{SUFFIX}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Whether `name` is one of the names [`file_name`] gives.
fn is_ours(name: &str) -> bool {
    taken_at(name).is_some()
}

/// When the backup named `name` was taken, if [`file_name`] gave that name.
fn taken_at(name: &str) -> Option<Timestamp> {
    let stamp = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let b = stamp.as_bytes();
    let shaped = b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit);
    if !shaped {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &stamp[..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15]
    );
    Timestamp::parse(&rfc3339).ok()
}

/// The newest of the backups in `dir` (by the time its name says) and its size: what the
/// daemon's backup series start from, so a restart does not look like a missed backup.
/// `None` when there is none, or the directory cannot be read.
pub(super) fn newest(dir: &Path) -> Option<(Timestamp, u64)> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let at = taken_at(entry.file_name().to_str()?)?;
            Some((at, entry.metadata().ok()?.len()))
        })
        .max_by_key(|(at, _)| *at)
}

/// Whether the daemon could make backups in `dir`, as `callsync check` asks: the directory
/// exists and a file can be created in it, or it can be created. Tried for real — a probe
/// file created and removed, directories made for the probe removed again —, since
/// permission bits say nothing for root, nor of a filesystem like /proc.
pub fn check_dir(dir: &Path) -> Result<(), BackupError> {
    let error = |step, cause| BackupError::Dir {
        dir: dir.to_owned(),
        step,
        cause,
    };
    let mut missing = Vec::new();
    let mut ancestor = dir;
    while !ancestor.exists() {
        missing.push(ancestor.to_owned());
        match ancestor.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => ancestor = parent,
            _ => break,
        }
    }
    let probed = std::fs::create_dir_all(dir)
        .map_err(|e| error("create the directory", e))
        .and_then(|()| {
            let probe = dir.join(format!(".{PREFIX}check-{}", std::process::id()));
            std::fs::File::create_new(&probe).map_err(|e| error("create a file in it", e))?;
            std::fs::remove_file(&probe).map_err(|e| error("remove its probe file", e))
        });
    // Deepest first: what the probe made, and only that, goes again.
    for made in &missing {
        let _ = std::fs::remove_dir(made);
    }
    probed
}

/// Backs the warehouse up into `dir` as of `at`, checks the copy, then keeps the newest
/// `keep` (at least 1) of the backups there. A warehouse that cannot be backed up into a file
/// declines (`Capability::Backup`).
pub fn take(
    warehouse: &dyn Backend,
    dir: &Path,
    keep: usize,
    at: Timestamp,
) -> Result<Taken, BackupError> {
    std::fs::create_dir_all(dir).map_err(|cause| BackupError::Dir {
        dir: dir.to_owned(),
        step: "create the directory",
        cause,
    })?;
    let dest = dir.join(file_name(at));
    let copied = (warehouse.offers(crate::warehouse::Capability::Backup))
        .and_then(|()| warehouse.reader())
        .and_then(|w| w.backup_to(&dest, false));
    let report = copied.map_err(|cause| BackupError::Copy {
        dir: dir.to_owned(),
        cause: Box::new(cause),
    })?;
    finish(dir, &dest, report.bytes, keep, |backup| {
        warehouse.verify_backup(backup)
    })
}

/// Checks the new backup with `verify`; only if it passes, removes the oldest beyond `keep`.
fn finish(
    dir: &Path,
    new: &Path,
    bytes: u64,
    keep: usize,
    verify: impl FnOnce(&Path) -> Result<Contents, WarehouseError>,
) -> Result<Taken, BackupError> {
    let contents = match verify(new) {
        Ok(contents) => contents,
        Err(cause) => {
            let _ = std::fs::remove_file(new);
            return Err(BackupError::Verify {
                path: new.to_owned(),
                cause: Box::new(cause),
            });
        }
    };
    let dir_error = |step, cause| BackupError::Dir {
        dir: dir.to_owned(),
        step,
        cause,
    };
    let mut ours: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| dir_error("list the directory", e))?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(is_ours))
        .map(|entry| entry.path())
        .collect();
    ours.sort();
    let excess = ours.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for old in ours.into_iter().take(excess) {
        // Never the one just made, whatever the clock did meanwhile.
        if old == new {
            continue;
        }
        std::fs::remove_file(&old).map_err(|e| dir_error("remove an old backup", e))?;
        removed.push(old);
    }
    Ok(Taken {
        path: new.to_owned(),
        bytes,
        contents,
        removed,
    })
}

/// `[backup]`: a backup on each of its ticks, one at a time, off the daemon's loop (SQLite's
/// online backup reads in one transaction while passes go on writing).
pub(super) struct Backups {
    config: Option<crate::config::BackupConfig>,
    running: Option<tokio::task::JoinHandle<()>>,
    /// Told of each backup made or failed: `/metrics`' backup series.
    metrics: Arc<Metrics>,
}

impl Backups {
    pub(super) fn new(config: Option<crate::config::BackupConfig>, metrics: Arc<Metrics>) -> Self {
        Backups {
            config,
            running: None,
            metrics,
        }
    }

    /// Starts a backup of `warehouse`, unless the previous one still runs.
    pub(super) fn on_tick(&mut self, warehouse: &std::sync::Arc<dyn Backend>) {
        let Some(config) = self.config.clone() else {
            return;
        };
        if self.running.as_ref().is_some_and(|r| !r.is_finished()) {
            tracing::info!("backup tick skipped: the previous backup is still being made");
            return;
        }
        let warehouse = warehouse.clone();
        let metrics = self.metrics.clone();
        self.running = Some(tokio::task::spawn_blocking(move || {
            let at = crate::service::Timestamp::now();
            let taken = take(warehouse.as_ref(), &config.dir, config.keep, at);
            metrics.backup_ended(taken.as_ref().ok().map(|taken| (at, taken.bytes)));
            match taken {
                Ok(taken) => tracing::info!(
                    path = %taken.path.display(),
                    bytes = taken.bytes,
                    calls = taken.contents.calls,
                    removed = taken.removed.len(),
                    keep = config.keep,
                    "scheduled backup made and checked (integrity_check ok)"
                ),
                // A person must look: backups are not being made.
                Err(err) => {
                    tracing::error!(error = %crate::error_chain(&err), "scheduled backup failed")
                }
            }
        }));
    }

    /// Waits for a backup being made, `timeout` at most (it cannot be cancelled: a copy
    /// left half-made is removed by the next one's start).
    pub(super) async fn finish(&mut self, timeout: std::time::Duration) {
        if let Some(running) = self.running.take()
            && tokio::time::timeout(timeout, running).await.is_err()
        {
            tracing::warn!("shutdown timeout reached while a scheduled backup was being made");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: i128) -> Timestamp {
        Timestamp::from_unix_nanos(secs * 1_000_000_000).unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn backup_names_sort_as_time_and_only_ours_are_ours() {
        assert_eq!(file_name(at(1_764_106_200)), "callsync-20251125T213000Z.db");
        assert_eq!(
            taken_at("callsync-20251125T213000Z.db"),
            Some(at(1_764_106_200))
        );
        assert!(is_ours("callsync-20251125T213000Z.db"));
        for other in [
            "callsync.db",
            "callsync-manual.db",
            "callsync-20251125T213000Z.db-journal",
            "callsync-2025112XT213000Z.db",
            "notes.txt",
        ] {
            assert!(!is_ours(other), "{other}");
        }
    }

    #[test]
    fn each_backup_is_checked_then_the_oldest_beyond_keep_go() {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("callsync.db");
        drop(
            crate::warehouse::sqlite::Warehouse::open(&warehouse, Duration::from_secs(5)).unwrap(),
        );
        let backend = crate::warehouse::open(&crate::config::WarehouseConfig {
            destination: crate::config::DestinationConfig::Sqlite {
                path: warehouse.clone(),
            },
            busy_timeout: Duration::from_secs(5),
            keep_runs: None,
            timezone: chrono_tz::UTC,
        })
        .unwrap();
        let backups = dir.path().join("backups");
        std::fs::create_dir(&backups).unwrap();
        std::fs::write(backups.join("notes.txt"), "mine").unwrap();
        std::fs::write(backups.join("callsync-manual.db"), "mine too").unwrap();
        let base = 1_764_106_200;
        for i in 0..4 {
            let taken = take(backend.as_ref(), &backups, 2, at(base + i * 3600)).unwrap();
            assert_eq!(taken.contents.calls, 0);
            assert_eq!(taken.removed.len(), usize::from(i >= 2));
        }
        assert_eq!(
            names(&backups),
            [
                "callsync-20251125T233000Z.db",
                "callsync-20251126T003000Z.db",
                "callsync-manual.db",
                "notes.txt"
            ]
        );
        // What is kept is a warehouse `restore` takes.
        crate::warehouse::sqlite::verify_backup(&backups.join("callsync-20251126T003000Z.db"))
            .unwrap();
    }

    #[test]
    fn the_newest_backup_is_found_by_its_name_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest(dir.path()), None);
        assert_eq!(newest(&dir.path().join("missing")), None);
        std::fs::write(dir.path().join("callsync-20251125T213000Z.db"), "older").unwrap();
        std::fs::write(dir.path().join("callsync-20251126T213000Z.db"), "newest").unwrap();
        std::fs::write(dir.path().join("callsync-manual.db"), "not ours, bigger").unwrap();
        assert_eq!(newest(dir.path()), Some((at(1_764_106_200 + 86_400), 6)));
    }

    #[test]
    fn a_backup_dir_is_checked_by_trying_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        // Creatable: made for the probe, then removed again.
        let deep = dir.path().join("a/b/backups");
        check_dir(&deep).unwrap();
        assert!(!dir.path().join("a").exists());
        // Existing and writable: the probe file leaves nothing behind.
        check_dir(dir.path()).unwrap();
        assert_eq!(names(dir.path()), Vec::<String>::new());
        // Neither, for root too: /proc takes no directory.
        let failed = check_dir(Path::new("/proc/nonexistent/backups")).unwrap_err();
        assert!(
            failed.to_string().starts_with(
                "scheduled backups in /proc/nonexistent/backups: cannot create the directory: "
            ),
            "{failed}"
        );
        // A file where the directory should be.
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(check_dir(&file.join("backups")).is_err());
    }

    #[test]
    fn a_backup_that_fails_its_check_is_removed_and_the_older_kept() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "callsync-20251125T213000Z.db",
            "callsync-20251125T223000Z.db",
        ] {
            std::fs::write(dir.path().join(name), "old").unwrap();
        }
        let new = dir.path().join("callsync-20251125T233000Z.db");
        std::fs::write(&new, "damaged").unwrap();
        let failed = finish(dir.path(), &new, 7, 1, |path| {
            Err(WarehouseError::BadBackup {
                path: path.to_owned(),
                problem: "integrity_check says *** in database main ***".into(),
            })
        })
        .unwrap_err();
        assert!(matches!(failed, BackupError::Verify { .. }), "{failed}");
        assert_eq!(
            names(dir.path()),
            [
                "callsync-20251125T213000Z.db",
                "callsync-20251125T223000Z.db"
            ]
        );
    }
}
