//! Days in the analyst's time zone. SQLite has no time-zone database, so the writer keeps the
//! UTC offsets of `warehouse.timezone` (an IANA name) in the table `timezone_offsets`, and the
//! canned queries (and any analyst's query) take a day in that zone as
//! `date(t, <the offset in force at t> || ' seconds')`.
//!
//! The offsets come from the zone rules compiled into callsync (chrono-tz, the IANA
//! database), for 1970 to 2100: a row from each instant the offset changes, so a day is right
//! on either side of a daylight-saving change. The table is rewritten (one transaction) only
//! when what the configured zone gives differs from what it holds: another zone, or newer
//! rules in a newer callsync; `local_days` (each UTC day's local days, `local_days.rs`) with
//! it. This module decides the rows; the SQL reading them lives in
//! `migrations/` and `contrib/datasette/metadata.json`.

use chrono::{Offset, TimeZone};
use chrono_tz::Tz;

use crate::service::Timestamp;

/// The years whose offsets are kept: the service's calls and their attempts fall in them.
const FIRST_YEAR: i32 = 1970;
const LAST_YEAR: i32 = 2100;

/// Where the first row starts: every instant the warehouse can hold is after it. Year 1, the
/// first every reader represents (Python's `datetime.min`; year 0 it cannot).
const BEGINNING: &str = "0001-01-01T00:00:00.000000Z";

/// One row of `timezone_offsets`: from `starts_at` on, local time is UTC plus
/// `utc_offset_secs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRow {
    pub starts_at: String,
    pub utc_offset_secs: i32,
}

/// The rows for `zone`: the offset from the beginning, then one row at each change from
/// 1970 to 2100, to the second.
pub fn offsets(zone: Tz) -> Vec<OffsetRow> {
    let offset_at = |unix: i64| -> i32 {
        zone.timestamp_opt(unix, 0)
            .single()
            .map_or(0, |t| t.offset().fix().local_minus_utc())
    };
    let start = chrono::NaiveDate::from_ymd_opt(FIRST_YEAR, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map_or(0, |t| t.and_utc().timestamp());
    let end = chrono::NaiveDate::from_ymd_opt(LAST_YEAR + 1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map_or(0, |t| t.and_utc().timestamp());
    let mut rows = vec![OffsetRow {
        starts_at: BEGINNING.to_owned(),
        utc_offset_secs: offset_at(start),
    }];
    // An hour apart, no zone's offset changes twice (changes are months apart): each hour
    // whose offset differs from the one before holds one change, found to the second.
    const STEP: i64 = 3600;
    let mut before = start;
    let mut offset = offset_at(start);
    while before < end {
        let after = before + STEP;
        let next = offset_at(after);
        if next != offset {
            let (mut lo, mut hi) = (before, after);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if offset_at(mid) == offset {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let at = Timestamp::from_unix_nanos(i128::from(hi) * 1_000_000_000)
                .map(Timestamp::to_warehouse_text)
                .unwrap_or_else(|| BEGINNING.to_owned());
            rows.push(OffsetRow {
                starts_at: at,
                utc_offset_secs: next,
            });
            offset = next;
        }
        before = after;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(starts_at: &str, utc_offset_secs: i32) -> OffsetRow {
        OffsetRow {
            starts_at: starts_at.to_owned(),
            utc_offset_secs,
        }
    }

    #[test]
    fn utc_is_one_row_of_zero() {
        assert_eq!(offsets(chrono_tz::UTC), [row(BEGINNING, 0)]);
    }

    #[test]
    fn berlin_changes_at_the_instants_its_clocks_do() {
        let rows = offsets(chrono_tz::Europe::Berlin);
        // 2026: summer time from 29 March 01:00 UTC to 25 October 01:00 UTC.
        let y2026: Vec<&OffsetRow> = rows
            .iter()
            .filter(|r| r.starts_at.starts_with("2026-"))
            .collect();
        assert_eq!(
            y2026,
            [
                &row("2026-03-29T01:00:00.000000Z", 7200),
                &row("2026-10-25T01:00:00.000000Z", 3600)
            ]
        );
        // Text order is time order, and each row changes the offset.
        assert!(rows.windows(2).all(|w| w[0].starts_at < w[1].starts_at));
        assert!(
            rows.windows(2)
                .all(|w| w[0].utc_offset_secs != w[1].utc_offset_secs)
        );
        assert_eq!(rows[0], row(BEGINNING, 3600));
    }

    #[test]
    fn a_zone_west_of_greenwich_and_one_off_the_hour() {
        let new_york = offsets(chrono_tz::America::New_York);
        assert!(new_york.contains(&row("2026-03-08T07:00:00.000000Z", -4 * 3600)));
        assert!(new_york.contains(&row("2026-11-01T06:00:00.000000Z", -5 * 3600)));
        let kolkata = offsets(chrono_tz::Asia::Kolkata);
        assert_eq!(kolkata, [row(BEGINNING, 19800)]);
    }
}
