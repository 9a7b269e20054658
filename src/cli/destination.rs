//! The configured warehouse, whichever back end it is: `warehouse::open` chooses it once;
//! every command works on the `Backend` and `Destination` it gives (`status`, `checkpoint`,
//! `migrate`, `check`, `backup`, `restore`, `upload`, the write commands' records). A
//! capability a back end lacks (a PostgreSQL warehouse's backup) is declined by the back end
//! itself, with an error that says what to use instead (exit code 2).

use std::sync::Arc;

use anyhow::{Context, Result};
use uuid::Uuid;

use crate::config::Config;
use crate::service::Timestamp;
use crate::warehouse::{Backend, Checkpoint, Destination, WarehouseError};

/// The configured back end, not yet opened.
pub(super) fn backend(config: &Config) -> Result<Arc<dyn Backend>> {
    Ok(crate::warehouse::open(&config.warehouse)?)
}

/// An existing warehouse, to read: never created, never migrated.
pub(super) fn read_only(config: &Config) -> Result<Box<dyn Destination>> {
    // Every error opening it names the file or the database already.
    Ok(backend(config)?.reader()?)
}

/// The warehouse to write, created and migrated as needed.
pub(super) fn writing(config: &Config) -> Result<Box<dyn Destination>> {
    Ok(backend(config)?.writer()?)
}

/// Moves or deletes `schedule`'s checkpoint while holding the schedule's claim, so that no
/// pass moves it meanwhile; returns what was there before.
pub(super) fn replace_checkpoint(
    warehouse: &mut dyn Destination,
    schedule: Uuid,
    cursor: Option<Timestamp>,
) -> Result<Option<Checkpoint>> {
    let Some(_claim) = warehouse.claim(schedule)? else {
        return Err(WarehouseError::Busy {
            schedule,
            name: warehouse.name(),
        }
        .into());
    };
    let name = warehouse.name();
    warehouse
        .replace_checkpoint(schedule, cursor)
        .with_context(|| format!("cannot change the checkpoint in {name}"))
}
