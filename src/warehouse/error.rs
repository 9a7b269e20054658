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
        "{} is an SQLite database of another program, not a callsync warehouse (it has tables and no callsync schema version); point warehouse.path at a new file or at a callsync warehouse",
        path.display()
    )]
    NotAWarehouse { path: PathBuf },
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
