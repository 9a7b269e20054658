//! `open`: the one place a back end is chosen, from the configured destination. A new back
//! end is a folder beside `sqlite/` and `postgres/` implementing `Backend` and
//! `Destination` (`destination.rs`), and one line here.

use std::sync::Arc;

use super::destination::Backend;
use super::{postgres, sqlite};
use crate::config::{ConfigError, DestinationConfig, WarehouseConfig};

/// The configured destination, ready to be opened (nothing is connected or created yet).
/// Fails only on its configuration (an unreadable password file, a bad `warehouse.url`).
pub fn open(config: &WarehouseConfig) -> Result<Arc<dyn Backend>, ConfigError> {
    Ok(match &config.destination {
        DestinationConfig::Sqlite { path } => Arc::new(sqlite::SqliteFile::new(path, config)),
        DestinationConfig::Postgres(postgres) => {
            Arc::new(postgres::backend::PgDatabase::configured(postgres)?)
        }
    })
}
