//! `campaigns` and `schedules`: what callsync created or changed through the write
//! endpoints, as the service last answered, and the names the configuration gives schedules,
//! so BI shows names next to uids.

use rusqlite::params;
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;

/// A campaign as the service answered.
pub(super) const RECORD_CAMPAIGN: &str = "INSERT INTO campaigns
   (uid, name, type, direction, is_enabled, created_at, updated_at, recorded_at)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
 ON CONFLICT (uid) DO UPDATE SET
   name = excluded.name, type = excluded.type, direction = excluded.direction,
   is_enabled = excluded.is_enabled, updated_at = excluded.updated_at,
   recorded_at = excluded.recorded_at";

/// A schedule as the service answered; an update keeps the campaign recorded before.
pub(super) const RECORD_SCHEDULE: &str = "INSERT INTO schedules
   (uid, campaign_uid, name, starts_at, ends_at, retry_type, retry_intervals,
    is_enabled, created_at, updated_at, recorded_at)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
 ON CONFLICT (uid) DO UPDATE SET
   campaign_uid = coalesce(excluded.campaign_uid, schedules.campaign_uid),
   name = excluded.name, starts_at = excluded.starts_at,
   ends_at = excluded.ends_at, retry_type = excluded.retry_type,
   retry_intervals = excluded.retry_intervals,
   is_enabled = excluded.is_enabled, updated_at = excluded.updated_at,
   recorded_at = excluded.recorded_at";

impl Warehouse {
    /// Records the campaigns the configuration says schedules belong to
    /// (`[[sync.schedule]] campaign`) in `schedules.campaign_uid`: the service has no endpoint
    /// that says it, so "per campaign" questions need it for schedules callsync did not
    /// create. A schedule the configuration gives no campaign keeps what the write commands
    /// recorded. One transaction.
    pub fn set_schedule_campaigns(
        &mut self,
        campaigns: impl IntoIterator<Item = (Uuid, Uuid)>,
    ) -> Result<(), WarehouseError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .sql(&self.path, "starting to record schedules' campaigns")?;
        for (schedule, campaign) in campaigns {
            tx.execute(
                "INSERT INTO schedules (uid, campaign_uid) VALUES (?1, ?2)
                 ON CONFLICT (uid) DO UPDATE SET campaign_uid = excluded.campaign_uid",
                params![schedule.to_string(), campaign.to_string()],
            )
            .sql(&self.path, "recording a schedule's campaign")?;
        }
        tx.commit()
            .sql(&self.path, "committing schedules' campaigns")
    }

    /// Records the names the configuration gives schedules (`[[sync.schedule]]`) in
    /// `schedules.config_name`, and forgets a name the configuration no longer gives a
    /// schedule it lists; every other column, written by the write commands, stays as it is.
    /// One transaction.
    pub fn name_schedules<'a>(
        &mut self,
        schedules: impl IntoIterator<Item = (Uuid, Option<&'a str>)>,
    ) -> Result<(), WarehouseError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .sql(&self.path, "starting to record schedule names")?;
        for (uid, name) in schedules {
            match name {
                Some(name) => tx.execute(
                    "INSERT INTO schedules (uid, config_name) VALUES (?1, ?2)
                     ON CONFLICT (uid) DO UPDATE SET config_name = excluded.config_name",
                    params![uid.to_string(), name],
                ),
                None => tx.execute(
                    "UPDATE schedules SET config_name = NULL
                     WHERE uid = ?1 AND config_name IS NOT NULL",
                    [uid.to_string()],
                ),
            }
            .sql(&self.path, "recording a schedule's name")?;
        }
        tx.commit().sql(&self.path, "committing schedule names")
    }
}
