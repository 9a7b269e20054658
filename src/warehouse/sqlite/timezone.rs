//! `timezone_offsets` in the SQLite warehouse: the analyst's days (`warehouse/days.rs`
//! decides the rows).

use chrono_tz::Tz;
use rusqlite::params;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use crate::warehouse::days::{OffsetRow, offsets};

impl Warehouse {
    /// Makes `timezone_offsets` hold `zone`'s offsets; returns whether it changed anything.
    /// One transaction: a reader sees the old zone's days or the new one's.
    pub fn set_timezone(&mut self, zone: Tz) -> Result<bool, WarehouseError> {
        let want = offsets(zone);
        let have: Vec<(OffsetRow, String)> = self
            .conn
            .prepare(
                "SELECT starts_at, utc_offset_secs, zone FROM timezone_offsets ORDER BY starts_at",
            )
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok((
                        OffsetRow {
                            starts_at: r.get(0)?,
                            utc_offset_secs: r.get(1)?,
                        },
                        r.get(2)?,
                    ))
                })?
                .collect()
            })
            .sql(&self.path, "reading the time zone's offsets")?;
        let same = have.len() == want.len()
            && have
                .iter()
                .zip(&want)
                .all(|((row, name), w)| row == w && name == zone.name());
        let days_filled =
            super::local_days::filled(&self.conn).sql(&self.path, "reading the local days")?;
        if same && days_filled {
            return Ok(false);
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .sql(&self.path, "starting to record the time zone")?;
        tx.execute("DELETE FROM timezone_offsets", [])
            .sql(&self.path, "forgetting the old time zone's offsets")?;
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO timezone_offsets (starts_at, utc_offset_secs, zone)
                     VALUES (?1, ?2, ?3)",
                )
                .sql(&self.path, "recording the time zone's offsets")?;
            for row in &want {
                insert
                    .execute(params![row.starts_at, row.utc_offset_secs, zone.name()])
                    .sql(&self.path, "recording the time zone's offsets")?;
            }
        }
        super::local_days::rewrite(&tx, zone).sql(&self.path, "recording the local days")?;
        tx.commit()
            .sql(&self.path, "committing the time zone's offsets")?;
        Ok(true)
    }
}
