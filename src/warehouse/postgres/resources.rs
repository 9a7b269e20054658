//! `campaigns` and `schedules` on PostgreSQL: what the write commands (`campaign`,
//! `schedule`) created or changed, as the service last answered; the SQLite warehouse's
//! statements (`resources.rs`), with PostgreSQL's parameters and native types.

use uuid::Uuid;

use super::PgWarehouse;
use super::session::{PgContext, micros, wait};
use crate::service::{Campaign, Schedule, Timestamp};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::resources::{RECORD_CAMPAIGN, RECORD_SCHEDULE, numbered_for_postgres};

impl PgWarehouse {
    pub fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        wait(self.client()?.execute(
            &numbered_for_postgres(RECORD_CAMPAIGN),
            &[
                &campaign.uid,
                &campaign.name,
                &campaign.kind,
                &campaign.direction,
                &campaign.is_enabled,
                &micros(campaign.created_at),
                &micros(campaign.updated_at),
                &micros(Timestamp::now()),
            ],
        ))
        .pg(&self.target, "recording a campaign")?;
        Ok(())
    }

    /// `campaign`: when known (callsync created the schedule in it); an update keeps the
    /// campaign recorded before.
    pub fn remember_schedule(
        &mut self,
        schedule: &Schedule,
        campaign: Option<Uuid>,
    ) -> Result<(), WarehouseError> {
        self.reconnect_if_closed()?;
        let intervals = serde_json::Value::from(schedule.retry_intervals.clone());
        wait(self.client()?.execute(
            &numbered_for_postgres(RECORD_SCHEDULE),
            &[
                &schedule.uid,
                &campaign,
                &schedule.name,
                &micros(schedule.starts_at),
                &micros(schedule.ends_at),
                &schedule.retry_type,
                &intervals,
                &schedule.is_enabled,
                &micros(schedule.created_at),
                &micros(schedule.updated_at),
                &micros(Timestamp::now()),
            ],
        ))
        .pg(&self.target, "recording a schedule")?;
        Ok(())
    }
}
