//! The configured warehouse, whichever it is: the SQLite file (`warehouse.path`) or the
//! PostgreSQL database (`warehouse.url`). `status`, `checkpoint`, `migrate`, `check` and the
//! write commands' records (`campaign`, `schedule`) work on both through [`Opened`]; `backup` and `restore` are the SQLite file's
//! ([`refuse_on_postgres`]).

use anyhow::Result;
use uuid::Uuid;

use super::usage::UsageError;
use crate::config::Config;
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::postgres::{PgTarget, PgWarehouse};
use crate::warehouse::{Checkpoint, ScheduleStatus, Warehouse, WarehouseError};

/// The PostgreSQL warehouse the configuration names, if it names one.
pub(super) fn postgres(config: &Config) -> Result<Option<PgTarget>> {
    Ok(config
        .warehouse
        .postgres
        .as_ref()
        .map(PgTarget::configured)
        .transpose()?)
}

/// `backup`/`restore` copy the SQLite file; a PostgreSQL warehouse has pg_dump.
pub(super) fn refuse_on_postgres(config: &Config, command: &str) -> Result<()> {
    if config.warehouse.postgres.is_some() {
        return Err(UsageError(format!(
            "`callsync {command}` copies an SQLite warehouse file; this configuration's warehouse is PostgreSQL (warehouse.url): use pg_dump and pg_restore (docs/postgres.md, \"Backups\")"
        ))
        .into());
    }
    Ok(())
}

pub(super) enum Opened {
    Sqlite(Warehouse),
    Postgres(PgWarehouse),
}

impl Opened {
    /// An existing warehouse, to read: never created, never migrated.
    pub(super) fn read_only(config: &Config) -> Result<Opened> {
        Ok(match postgres(config)? {
            Some(target) => Opened::Postgres(PgWarehouse::open_existing(&target)?),
            None => Opened::Sqlite(Warehouse::open_read_only(&config.warehouse.path)?),
        })
    }

    /// The warehouse to write, created and migrated as needed.
    pub(super) fn writing(config: &Config) -> Result<Opened> {
        Ok(match postgres(config)? {
            Some(target) => Opened::Postgres(PgWarehouse::open(&target)?),
            None => Opened::Sqlite(Warehouse::open(
                &config.warehouse.path,
                config.warehouse.busy_timeout,
            )?),
        })
    }

    /// The file's path or the database's URI (never a password), for messages.
    pub(super) fn name(&self) -> String {
        match self {
            Opened::Sqlite(w) => w.path().display().to_string(),
            Opened::Postgres(w) => w.target().display().to_owned(),
        }
    }

    pub(super) fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.status_at(now),
            Opened::Postgres(w) => w.status_at(now),
        }
    }

    pub(super) fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.checkpoint(schedule),
            Opened::Postgres(w) => w.checkpoint(schedule),
        }
    }

    pub(super) fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.knows_schedule(schedule),
            Opened::Postgres(w) => w.knows_schedule(schedule),
        }
    }

    pub(super) fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.remember_campaign(campaign),
            Opened::Postgres(w) => w.remember_campaign(campaign),
        }
    }

    pub(super) fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.remember_schedule(schedule, campaign),
            Opened::Postgres(w) => w.remember_schedule(schedule, campaign),
        }
    }

    pub(super) fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
        match self {
            Opened::Sqlite(w) => w.first_pass_at(),
            Opened::Postgres(w) => w.first_pass_at(),
        }
    }

    /// Moves or deletes `schedule`'s checkpoint while holding the schedule's claim, so that no
    /// pass moves it meanwhile; returns what was there before.
    pub(super) fn replace_checkpoint(
        &mut self,
        schedule: Uuid,
        cursor: Option<Timestamp>,
    ) -> Result<Option<Checkpoint>> {
        match self {
            Opened::Sqlite(w) => {
                // The lock is on the warehouse file itself, which exists once it is open.
                let _lock = crate::sync::lock_schedule(w.path(), schedule)?;
                Ok(w.replace_checkpoint(schedule, cursor)?)
            }
            Opened::Postgres(w) => {
                let Some(_claim) = w.claim(schedule)? else {
                    return Err(crate::sync::SyncError::Busy {
                        schedule,
                        path: w.target().display().into(),
                    }
                    .into());
                };
                Ok(w.replace_checkpoint(schedule, cursor)?)
            }
        }
    }
}
