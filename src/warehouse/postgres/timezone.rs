//! `timezone_offsets` on PostgreSQL: the SQLite warehouse's rows for `warehouse.timezone`
//! (`warehouse/timezone.rs` decides them), so `local_day` gives the same days on both
//! destinations (migrations-postgres/0003 says why a table and not `AT TIME ZONE`).

use chrono_tz::Tz;
use time::OffsetDateTime;

use super::PgWarehouse;
use super::session::{PgContext, RowColumn, micros, wait};
use crate::service::Timestamp;
use crate::warehouse::days::offsets;
use crate::warehouse::error::WarehouseError;

/// One row: from `starts_at` on (`None`: from the beginning, stored as `-infinity`), local
/// time is UTC plus the seconds.
type OffsetRow = (Option<OffsetDateTime>, i32);

impl PgWarehouse {
    /// Makes `timezone_offsets` hold `zone`'s offsets; returns whether it changed anything.
    /// One transaction: a reader sees the old zone's days or the new one's.
    pub fn set_timezone(&mut self, zone: Tz) -> Result<bool, WarehouseError> {
        self.reconnect_if_closed()?;
        let want = wanted_rows(zone)?;
        let step = "reading the time zone's offsets";
        let have = wait(self.client()?.query(
            "SELECT CASE WHEN starts_at = '-infinity' THEN NULL ELSE starts_at END,
               utc_offset_secs, zone
             FROM timezone_offsets ORDER BY starts_at",
            &[],
        ))
        .pg(&self.target, step)?
        .iter()
        .map(|r| {
            let row: OffsetRow = (
                r.column(0, &self.target, step)?,
                r.column(1, &self.target, step)?,
            );
            Ok((row, r.column::<String>(2, &self.target, step)?))
        })
        .collect::<Result<Vec<_>, WarehouseError>>()?;
        let same = have.len() == want.len()
            && have
                .iter()
                .zip(&want)
                .all(|((row, name), w)| row == w && name == zone.name());
        if same {
            return Ok(false);
        }
        let (starts, seconds): (Vec<Option<OffsetDateTime>>, Vec<i32>) = want.into_iter().unzip();
        wait(self.client()?.batch_execute("BEGIN"))
            .pg(&self.target, "starting to record the time zone")?;
        let result = (|| {
            wait(self.client()?.execute("DELETE FROM timezone_offsets", &[]))
                .pg(&self.target, "forgetting the old time zone's offsets")?;
            wait(self.client()?.execute(
                "INSERT INTO timezone_offsets (starts_at, utc_offset_secs, zone)
                 SELECT coalesce(s, '-infinity'), o, $3
                 FROM unnest($1::timestamptz[], $2::integer[]) AS u(s, o)",
                &[&starts, &seconds, &zone.name()],
            ))
            .pg(&self.target, "recording the time zone's offsets")?;
            Ok(true)
        })();
        self.end_transaction(result, "committing the time zone's offsets")
    }
}

/// `zone`'s rows as PostgreSQL holds them: the first from the beginning, the others from
/// their instant.
fn wanted_rows(zone: Tz) -> Result<Vec<OffsetRow>, WarehouseError> {
    offsets(zone)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            if i == 0 {
                return Ok((None, row.utc_offset_secs));
            }
            let at =
                Timestamp::parse(&row.starts_at).map_err(|_| WarehouseError::BadTimestamp {
                    path: "timezone_offsets".into(),
                    what: "a time zone's offset row",
                    value: row.starts_at.clone(),
                })?;
            Ok((Some(micros(at)), row.utc_offset_secs))
        })
        .collect()
}
