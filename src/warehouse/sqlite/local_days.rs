//! The table `local_days` (schema 12): for each UTC day from 1970 to 2100, the local days of
//! `warehouse.timezone` its instants fall on, so a view gives an instant's local day with an
//! equality join and one comparison — SQL that SQLite, DuckDB and Datasette all read
//! (`migrations/0012-local-days` says why not SQLite's date modifiers). Written from the same
//! zone rules as `timezone_offsets` (`timezone.rs`), in the same transaction.

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use rusqlite::{Transaction, params};

/// The UTC days kept: those `timezone_offsets` covers.
const FIRST_DAY: (i32, u32, u32) = (1970, 1, 1);
const LAST_DAY: (i32, u32, u32) = (2100, 12, 31);

/// One row: an instant of `utc_day` is on `day_before` until `switch_at`, on `day_after`
/// from it on. Days `YYYY-MM-DD`; `switch_at` the warehouse's instant text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDayRow {
    pub utc_day: String,
    pub day_before: String,
    pub switch_at: String,
    pub day_after: String,
}

/// The local date of the UTC instant `utc` in `zone`.
fn local_date(zone: Tz, utc: NaiveDateTime) -> NaiveDate {
    zone.from_utc_datetime(&utc).date_naive()
}

/// The first second of `day` (UTC) whose local date is `after`: found by halving, as the
/// local date only moves forward through a UTC day.
fn switch_second(zone: Tz, start: NaiveDateTime, after: NaiveDate) -> i64 {
    let (mut lo, mut hi) = (0_i64, 86_399_i64);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if local_date(zone, start + chrono::Duration::seconds(mid)) >= after {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The row of the UTC day `day` in `zone`. A UTC day holds at most one local midnight
/// strictly inside it (local days last 23 to 25 hours); a midnight at its first instant is no
/// switch: `switch_at` is then that first instant and both days are the same.
fn row(zone: Tz, day: NaiveDate) -> LocalDayRow {
    let start = day.and_time(chrono::NaiveTime::MIN);
    let before = local_date(zone, start);
    let after = local_date(zone, start + chrono::Duration::seconds(86_399));
    // The local midnight starting `after`, mapped to UTC (the earlier of two when the clocks
    // went back over it); a midnight the clocks skipped is found by halving.
    let midnight = zone
        .from_local_datetime(&after.and_time(chrono::NaiveTime::MIN))
        .earliest()
        .map(|t| t.naive_utc())
        .filter(|t| t.date() == day && local_date(zone, *t) == after);
    let switch = match (before == after, midnight) {
        (true, _) => start,
        (false, Some(t)) => t,
        (false, None) => start + chrono::Duration::seconds(switch_second(zone, start, after)),
    };
    LocalDayRow {
        utc_day: day.format("%Y-%m-%d").to_string(),
        day_before: before.format("%Y-%m-%d").to_string(),
        switch_at: switch.format("%Y-%m-%dT%H:%M:%S.000000Z").to_string(),
        day_after: after.format("%Y-%m-%d").to_string(),
    }
}

/// Every row for `zone`, in UTC day order.
pub fn rows(zone: Tz) -> Vec<LocalDayRow> {
    let day = |(y, m, d)| NaiveDate::from_ymd_opt(y, m, d).unwrap_or_default();
    day(FIRST_DAY)
        .iter_days()
        .take_while(|d| *d <= day(LAST_DAY))
        .map(|d| row(zone, d))
        .collect()
}

/// Whether the table is filled: it is written with `timezone_offsets`, in the same
/// transaction, so a full table is the zone those offsets are of. Empty after the migration
/// of a warehouse whose zone is not UTC, until the next start writes it.
pub(super) fn filled(conn: &rusqlite::Connection) -> rusqlite::Result<bool> {
    let count: i64 = conn.query_row("SELECT count(*) FROM local_days", [], |r| r.get(0))?;
    Ok(usize::try_from(count).is_ok_and(|c| c == rows_count()))
}

/// How many UTC days the table holds.
fn rows_count() -> usize {
    let first = NaiveDate::from_ymd_opt(FIRST_DAY.0, FIRST_DAY.1, FIRST_DAY.2);
    let last = NaiveDate::from_ymd_opt(LAST_DAY.0, LAST_DAY.1, LAST_DAY.2);
    match (first, last) {
        (Some(f), Some(l)) => {
            usize::try_from(l.num_days_from_ce() - f.num_days_from_ce() + 1).unwrap_or_default()
        }
        _ => 0,
    }
}

/// Replaces the table's rows with `zone`'s, inside the caller's transaction.
pub(super) fn rewrite(tx: &Transaction<'_>, zone: Tz) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM local_days", [])?;
    let mut insert = tx.prepare(
        "INSERT INTO local_days (utc_day, day_before, switch_at, day_after)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for r in rows(zone) {
        insert.execute(params![r.utc_day, r.day_before, r.switch_at, r.day_after])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The local day of `instant` as the views compute it from the rows.
    fn day_from_rows(rows: &[LocalDayRow], instant: &str) -> String {
        let r = rows
            .iter()
            .find(|r| r.utc_day == instant[..10])
            .expect("a row for the UTC day");
        match instant < r.switch_at.as_str() {
            true => r.day_before.clone(),
            false => r.day_after.clone(),
        }
    }

    #[test]
    fn the_rows_give_chronos_local_day_on_both_sides_of_every_midnight_and_change() {
        for zone in [
            chrono_tz::UTC,
            chrono_tz::Europe::Berlin,
            chrono_tz::Europe::London,
            chrono_tz::America::New_York,
            chrono_tz::Asia::Kolkata,
            chrono_tz::Pacific::Kiritimati,
            chrono_tz::America::Havana,
            chrono_tz::America::Sao_Paulo,
        ] {
            // Each UTC day of 2026 and 1999 (rows computed for those days only: the whole
            // table is slow in a debug build), the second around each row's switch and each
            // hour of the day.
            let days = ["1999-01-01", "2026-01-01"].into_iter().flat_map(|first| {
                NaiveDate::parse_from_str(first, "%Y-%m-%d")
                    .unwrap()
                    .iter_days()
                    .take(365)
            });
            let rows: Vec<LocalDayRow> = days.map(|d| row(zone, d)).collect();
            for r in &rows {
                let start = NaiveDate::parse_from_str(&r.utc_day, "%Y-%m-%d")
                    .unwrap()
                    .and_time(chrono::NaiveTime::MIN);
                let switch =
                    NaiveDateTime::parse_from_str(&r.switch_at, "%Y-%m-%dT%H:%M:%S%.fZ").unwrap();
                let probes = (0..24)
                    .map(|h| start + chrono::Duration::minutes(60 * h))
                    .chain([-1, 0, 1].map(|s| switch + chrono::Duration::seconds(s)))
                    .filter(|t| t.date() == start.date());
                for t in probes {
                    let text = t.format("%Y-%m-%dT%H:%M:%S.000000Z").to_string();
                    let want = local_date(zone, t).format("%Y-%m-%d").to_string();
                    assert_eq!(day_from_rows(&rows, &text), want, "{zone} {text}");
                }
            }
        }
    }

    #[test]
    fn utc_rows_are_the_ones_the_migration_writes() {
        let rows = rows(chrono_tz::UTC);
        assert_eq!(
            rows[0],
            LocalDayRow {
                utc_day: "1970-01-01".into(),
                day_before: "1970-01-01".into(),
                switch_at: "1970-01-01T00:00:00.000000Z".into(),
                day_after: "1970-01-01".into(),
            }
        );
        assert_eq!(rows.last().unwrap().utc_day, "2100-12-31");
        assert!(rows.iter().all(|r| r.day_before == r.utc_day
            && r.day_after == r.utc_day
            && r.switch_at == format!("{}T00:00:00.000000Z", r.utc_day)));
    }
}
