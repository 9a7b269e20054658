//! `WarehouseError`: what can go wrong with the SQLite file, naming the file and the step.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WarehouseError {
    #[error(
        "there is no warehouse at {} yet: run `callsync sync` or start the daemon to create it (or check warehouse.path)",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("cannot open the warehouse {}: {source}; check the path and its directory's permissions", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot migrate the warehouse {}: {source}", path.display())]
    Migrate {
        path: PathBuf,
        #[source]
        source: rusqlite_migration::Error,
    },
    #[error(
        "the warehouse {} has schema version {found}, newer than this callsync knows ({supported}); upgrade callsync",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: usize,
        supported: usize,
    },
    #[error(
        "the warehouse {} has schema version {found}, this callsync needs {supported}; run `callsync migrate` as the warehouse's owner",
        path.display()
    )]
    TooOld {
        path: PathBuf,
        found: usize,
        supported: usize,
    },
    #[error(
        "the warehouse {} is being restored by `callsync restore`; run this again when it has finished",
        path.display()
    )]
    Restoring { path: PathBuf },
    #[error(
        "the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`",
        path.display()
    )]
    Deleted { path: PathBuf },
    #[error(
        "the warehouse {} was replaced by another file while callsync had it open; restart callsync (systemctl restart callsync) to use the new file (`callsync restore` does this safely)",
        path.display()
    )]
    Replaced { path: PathBuf },
    #[error(
        "{} already exists; choose another path, or pass --force to overwrite it",
        path.display()
    )]
    BackupExists { path: PathBuf },
    #[error(
        "{} is the warehouse itself; back up to another path (to put a backup back, use `callsync restore`)",
        path.display()
    )]
    BackupOverWarehouse { path: PathBuf },
    #[error("cannot restore {}: {problem}; choose an intact callsync backup", path.display())]
    BadBackup { path: PathBuf, problem: String },
    #[error(
        "the warehouse {} is in use by another callsync process (the daemon, sync, backfill or checkpoint); stop it (systemctl stop callsync) and run restore again",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error(
        "cannot write the warehouse {}: {what} {} is not writable ({source}); give the user callsync runs as write permission on it, or choose a writable warehouse.path",
        warehouse.display(), path.display()
    )]
    NotWritable {
        warehouse: PathBuf,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot {step} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("warehouse: {step}: {source}")]
    Sql {
        step: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("warehouse: {what} holds `{value}`, which is not a callsync timestamp")]
    BadTimestamp { what: &'static str, value: String },
}

/// Adds the step to a rusqlite error: `conn.execute(..).sql("saving the checkpoint")?`.
pub(crate) trait SqlContext<T> {
    fn sql(self, step: &'static str) -> Result<T, WarehouseError>;
}

impl<T> SqlContext<T> for Result<T, rusqlite::Error> {
    fn sql(self, step: &'static str) -> Result<T, WarehouseError> {
        self.map_err(|source| WarehouseError::Sql { step, source })
    }
}
