//! `campaigns` and `schedules` on PostgreSQL: what the write commands (`campaign`,
//! `schedule`) created or changed, as the service last answered, and the names the
//! configuration gives schedules; the SQLite warehouse's statements (`resources.rs`), with
//! PostgreSQL's parameters and native types.

use uuid::Uuid;

use super::PgWarehouse;
use super::session::{PgContext, wait};
use crate::warehouse::error::WarehouseError;

/// A campaign as the service answered.
pub(super) const RECORD_CAMPAIGN: &str = "INSERT INTO campaigns
   (uid, name, type, direction, is_enabled, created_at, updated_at, recorded_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
 ON CONFLICT (uid) DO UPDATE SET
   name = excluded.name, type = excluded.type, direction = excluded.direction,
   is_enabled = excluded.is_enabled, updated_at = excluded.updated_at,
   recorded_at = excluded.recorded_at";

/// A schedule as the service answered; an update keeps the campaign recorded before.
pub(super) const RECORD_SCHEDULE: &str = "INSERT INTO schedules
   (uid, campaign_uid, name, starts_at, ends_at, retry_type, retry_intervals,
    is_enabled, created_at, updated_at, recorded_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
 ON CONFLICT (uid) DO UPDATE SET
   campaign_uid = coalesce(excluded.campaign_uid, schedules.campaign_uid),
   name = excluded.name, starts_at = excluded.starts_at,
   ends_at = excluded.ends_at, retry_type = excluded.retry_type,
   retry_intervals = excluded.retry_intervals,
   is_enabled = excluded.is_enabled, updated_at = excluded.updated_at,
   recorded_at = excluded.recorded_at";

impl PgWarehouse {
    /// The configuration's campaigns of schedules, into `schedules.campaign_uid` (see the
    /// SQLite warehouse's `set_schedule_campaigns`). One statement.
    pub fn set_schedule_campaigns(
        &mut self,
        campaigns: impl IntoIterator<Item = (Uuid, Uuid)>,
    ) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        let (schedules, campaigns): (Vec<Uuid>, Vec<Uuid>) = campaigns.into_iter().unzip();
        wait(self.client()?.execute(
            "INSERT INTO schedules (uid, campaign_uid)
             SELECT * FROM unnest($1::uuid[], $2::uuid[])
             ON CONFLICT (uid) DO UPDATE SET campaign_uid = excluded.campaign_uid",
            &[&schedules, &campaigns],
        ))
        .pg(&self.target, "recording a schedule's campaign")?;
        Ok(())
    }

    /// The configuration's schedule names, into `schedules.config_name` (see the SQLite
    /// warehouse's `name_schedules`). One transaction.
    pub fn name_schedules<'a>(
        &mut self,
        schedules: impl IntoIterator<Item = (Uuid, Option<&'a str>)>,
    ) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        let (mut named, mut names, mut unnamed) = (Vec::new(), Vec::new(), Vec::new());
        for (uid, name) in schedules {
            match name {
                Some(name) => {
                    named.push(uid);
                    names.push(name);
                }
                None => unnamed.push(uid),
            }
        }
        wait(self.client()?.batch_execute("BEGIN"))
            .pg(&self.target, "starting to record schedule names")?;
        let result = (|| {
            wait(self.client()?.execute(
                "INSERT INTO schedules (uid, config_name)
                 SELECT * FROM unnest($1::uuid[], $2::text[])
                 ON CONFLICT (uid) DO UPDATE SET config_name = excluded.config_name",
                &[&named, &names],
            ))
            .pg(&self.target, "recording a schedule's name")?;
            wait(self.client()?.execute(
                "UPDATE schedules SET config_name = NULL
                 WHERE uid = ANY($1) AND config_name IS NOT NULL",
                &[&unnamed],
            ))
            .pg(&self.target, "recording a schedule's name")?;
            Ok(())
        })();
        self.end_transaction(result, "committing schedule names")
    }
}
