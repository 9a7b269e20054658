//! The service's instants: RFC 3339 in, full-precision UTC inside, two text forms out.
//!
//! Every timestamp the service sends is parsed once into [`Timestamp`], a UTC instant with
//! nanosecond precision. Comparisons are on instants, never on text (`…37Z` sorts after
//! `…37.500Z` as text). Output forms: RFC 3339 `…T…Z` for the wire and for people, whose
//! fraction comes in groups of three digits (none, milli, micro, nano) with trailing zero
//! groups dropped, so the service's precision is kept; and the warehouse's form, RFC 3339 in
//! UTC with exactly six fraction digits (`2026-01-31T09:30:00.250000Z`): fixed width, so text
//! order is time order, and a `Z`, so every BI tool reads a UTC instant (docs/analyse.md,
//! "Timestamps": pandas, Grafana and SQLite's date functions were tried).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime, UtcOffset};

/// A UTC instant with nanosecond precision.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

/// A string that is not an RFC 3339 timestamp with a zone, or whose instant has no RFC 3339
/// form in UTC (years 0000 to 9999).
#[derive(Debug, thiserror::Error)]
#[error(
    "`{value}` is not an RFC 3339 timestamp with a zone, within the years 0000 to 9999 in UTC (e.g. 2026-01-31T09:30:00Z): {reason}"
)]
pub struct TimestampError {
    pub value: String,
    reason: String,
}

/// The years the four-digit RFC 3339 and SQLite forms can write. An offset can carry a
/// valid text (`9999-12-31T23:30:00-01:00`) into year 10000 once in UTC.
const YEARS: std::ops::RangeInclusive<i32> = 0..=9999;

impl Timestamp {
    /// 1970-01-01T00:00:00Z: where a schedule without a checkpoint starts.
    pub const EPOCH: Timestamp = Timestamp(OffsetDateTime::UNIX_EPOCH);

    /// The current instant, at full precision.
    pub fn now() -> Self {
        Timestamp(OffsetDateTime::now_utc())
    }

    /// Parses RFC 3339 with any offset and any fraction precision; the result is UTC.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        let error = |reason: String| TimestampError {
            value: text.to_owned(),
            reason,
        };
        let parsed =
            OffsetDateTime::parse(text.trim(), &Rfc3339).map_err(|e| error(e.to_string()))?;
        Timestamp::try_from(parsed).map_err(|e| error(e.reason))
    }

    /// Parses the warehouse's text form ([`Self::to_warehouse_text`]), and the form of schema 6 and
    /// older (`YYYY-MM-DD HH:MM:SS[.fraction]`, UTC, no zone), which migration 7 rewrites.
    pub fn parse_warehouse_text(text: &str) -> Result<Self, TimestampError> {
        let text = text.trim();
        if text.ends_with(['Z', 'z']) {
            Self::parse(text)
        } else {
            Self::parse(&format!("{}Z", text.replacen(' ', "T", 1)))
        }
    }

    pub fn from_unix_nanos(nanos: i128) -> Option<Self> {
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .map(Timestamp)
    }

    pub fn unix_nanos(self) -> i128 {
        self.0.unix_timestamp_nanos()
    }

    pub fn as_offset_date_time(self) -> OffsetDateTime {
        self.0
    }

    /// RFC 3339 in UTC with a `Z`, e.g. `2026-01-31T09:30:00.250Z`.
    pub fn to_rfc3339(self) -> String {
        self.text(Fraction::Shortest).as_str().to_owned()
    }

    /// The warehouse's form: RFC 3339 in UTC with exactly six fraction digits, e.g.
    /// `2026-01-31T09:30:00.250000Z`. Fixed width, so text order is time order; a finer
    /// fraction is truncated to the microsecond (the instant at or before this one), which is
    /// what SQLite (milliseconds), pandas and Grafana (nanoseconds) read alike.
    pub fn to_warehouse_text(self) -> String {
        self.text(Fraction::Micros).as_str().to_owned()
    }

    /// Truncates to whole multiples of `unit_nanos` (used to model a service's precision);
    /// a unit that is not positive leaves the instant as it is.
    pub fn truncated(self, unit_nanos: i128) -> Self {
        if unit_nanos <= 0 {
            return self;
        }
        let n = self.unix_nanos();
        Timestamp::from_unix_nanos(n - n.rem_euclid(unit_nanos)).unwrap_or(self)
    }

    /// Whether `self` is before `other` cut to the precision `self` shows: the coarsest of
    /// whole seconds, milliseconds and microseconds that leaves `self` as it is. So an
    /// instant one endpoint writes to the millisecond is not before the same instant another
    /// writes to the microsecond (the spec does not say that they write alike); an instant
    /// written to the nanosecond is compared as it is.
    pub fn before_at_own_precision(self, other: Timestamp) -> bool {
        let shown = [1_000_000_000, 1_000_000, 1_000]
            .into_iter()
            .find(|unit| self.truncated(*unit) == self)
            .unwrap_or(1);
        self < other.truncated(shown)
    }

    pub fn saturating_sub(self, d: std::time::Duration) -> Self {
        let d = Duration::try_from(d).unwrap_or(Duration::MAX);
        Timestamp(self.0.checked_sub(d).unwrap_or(self.0))
    }

    pub fn saturating_add(self, d: std::time::Duration) -> Self {
        let d = Duration::try_from(d).unwrap_or(Duration::MAX);
        Timestamp(self.0.checked_add(d).unwrap_or(self.0))
    }

    /// Seconds from `earlier` to `self`, negative when `earlier` is later: a lag shown as it
    /// is, never clamped.
    pub fn secs_since(self, earlier: Timestamp) -> f64 {
        (self.0 - earlier.0).as_seconds_f64()
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> std::time::Duration {
        std::time::Duration::try_from(self.0 - earlier.0).unwrap_or_default()
    }

    /// The instant as text, written digit by digit into a buffer on the stack: a call carries
    /// about thirty instants, each written for its content hash and again for its row, and
    /// `format!` (five allocations an instant) showed in a first sync's profile (BENCHMARKS.md,
    /// "First sync, SQLite").
    fn text(self, fraction: Fraction) -> InstantText {
        let (date, time) = (self.0.date(), self.0.time());
        let mut out = InstantText::default();
        // The year is within 0000 to 9999 (`YEARS`): four digits.
        out.digits(date.year().unsigned_abs(), 4);
        out.byte(b'-');
        out.digits(u32::from(u8::from(date.month())), 2);
        out.byte(b'-');
        out.digits(u32::from(date.day()), 2);
        out.byte(b'T');
        out.digits(u32::from(time.hour()), 2);
        out.byte(b':');
        out.digits(u32::from(time.minute()), 2);
        out.byte(b':');
        out.digits(u32::from(time.second()), 2);
        let nanos = time.nanosecond();
        let (value, width) = match fraction {
            Fraction::Micros => (nanos / 1_000, 6),
            Fraction::Shortest if nanos == 0 => (0, 0),
            Fraction::Shortest if nanos % 1_000_000 == 0 => (nanos / 1_000_000, 3),
            Fraction::Shortest if nanos % 1_000 == 0 => (nanos / 1_000, 6),
            Fraction::Shortest => (nanos, 9),
        };
        if width > 0 {
            out.byte(b'.');
            out.digits(value, width);
        }
        out.byte(b'Z');
        out
    }
}

/// How many fraction digits an instant's text has.
#[derive(Clone, Copy)]
enum Fraction {
    /// None, 3, 6 or 9: the fewest that keep the instant (RFC 3339 out).
    Shortest,
    /// Always 6 (the warehouse's fixed width).
    Micros,
}

/// `YYYY-MM-DDTHH:MM:SS.fffffffffZ` at most: 30 bytes of ASCII.
#[derive(Default)]
struct InstantText {
    bytes: [u8; 32],
    len: usize,
}

impl InstantText {
    fn byte(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    /// `value`'s last `width` decimal digits, zero-padded.
    fn digits(&mut self, mut value: u32, width: usize) {
        for slot in self.bytes[self.len..self.len + width].iter_mut().rev() {
            *slot = b'0' + (value % 10) as u8;
            value /= 10;
        }
        self.len += width;
    }

    fn as_str(&self) -> &str {
        // Only ASCII digits and separators were written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl TryFrom<OffsetDateTime> for Timestamp {
    type Error = TimestampError;

    /// The same instant in UTC; an error when that falls outside the years 0000 to 9999.
    fn try_from(t: OffsetDateTime) -> Result<Self, Self::Error> {
        t.checked_to_offset(UtcOffset::UTC)
            .filter(|utc| YEARS.contains(&utc.year()))
            .map(Timestamp)
            .ok_or_else(|| TimestampError {
                value: t.to_string(),
                // The message names the years and UTC already.
                reason: "its instant falls outside them".to_owned(),
            })
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text(Fraction::Shortest).as_str())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text(Fraction::Shortest).as_str())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.text(Fraction::Shortest).as_str())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    /// The texts as `format!` wrote them before they were written digit by digit.
    fn formatted(t: Timestamp) -> (String, String) {
        let (d, c) = (t.0.date(), t.0.time());
        let date = format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day());
        let base = format!("{:02}:{:02}:{:02}", c.hour(), c.minute(), c.second());
        let time = match c.nanosecond() {
            0 => base.clone(),
            n if n % 1_000_000 == 0 => format!("{base}.{:03}", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{base}.{:06}", n / 1_000),
            n => format!("{base}.{n:09}"),
        };
        let micros = format!("{date}T{base}.{:06}Z", c.microsecond());
        (format!("{date}T{time}Z"), micros)
    }

    #[test]
    fn texts_are_written_as_format_wrote_them() {
        let first = ts("0000-01-01T00:00:00Z").unix_nanos();
        let last = ts("9999-12-31T23:59:59.999999999Z").unix_nanos();
        // Every fraction class (none, millis, micros, nanos) across the years, and the ends.
        let steps = [1_i128, 1_000, 1_000_000, 1_000_000_000, 86_400_000_000_000];
        let mut instants = vec![first, last];
        let mut n = first;
        let mut i = 0_usize;
        while n < last {
            instants.push(n);
            n += 7_919_i128 * 3_600_000_000_000 * 24 + steps[i % steps.len()] * 13;
            i += 1;
        }
        for nanos in instants {
            let t = Timestamp::from_unix_nanos(nanos).unwrap();
            let (rfc3339, sqlite) = formatted(t);
            assert_eq!(t.to_rfc3339(), rfc3339);
            assert_eq!(t.to_string(), rfc3339);
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{rfc3339}\""));
            assert_eq!(t.to_warehouse_text(), sqlite);
        }
    }

    #[test]
    fn parses_any_offset_and_precision_to_utc() {
        let cases = [
            ("2026-01-31T09:30:00Z", "2026-01-31T09:30:00Z"),
            ("2026-01-31T10:30:00+01:00", "2026-01-31T09:30:00Z"),
            ("2026-01-31T04:00:00.5-05:30", "2026-01-31T09:30:00.500Z"),
            ("2026-01-31T09:30:00.123456Z", "2026-01-31T09:30:00.123456Z"),
            (
                "2026-01-31T09:30:00.123456789Z",
                "2026-01-31T09:30:00.123456789Z",
            ),
            ("2026-01-31t09:30:00.000z", "2026-01-31T09:30:00Z"),
        ];
        for (input, expected) in cases {
            assert_eq!(ts(input).to_rfc3339(), expected, "input {input}");
        }
    }

    #[test]
    fn rejects_instants_outside_the_four_digit_years_in_utc() {
        // Valid text whose UTC instant is in year 10000 (a call's `cooldown_until`, a
        // `backfill --since`) or year -1: an error, never a panic.
        for bad in [
            "9999-12-31T23:30:00-01:00",
            "9999-12-31T23:59:59-01:00",
            "9999-12-31T23:59:59.999999999-23:59",
            "0000-01-01T00:30:00+01:00",
        ] {
            let err = Timestamp::parse(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "`{bad}` is not an RFC 3339 timestamp with a zone, within the years 0000 to 9999 in UTC (e.g. 2026-01-31T09:30:00Z): its instant falls outside them"
                )
            );
            // Each said once: the value, the years, UTC.
            let chain = crate::error_chain(&err);
            for once in [bad, "0000 to 9999", "UTC"] {
                assert_eq!(chain.matches(once).count(), 1, "{once} in {chain}");
            }
            assert!(serde_json::from_str::<Timestamp>(&format!("\"{bad}\"")).is_err());
        }
        // The edges themselves are fine, and print back in four digits.
        assert_eq!(
            ts("9999-12-31T22:59:59-01:00").to_warehouse_text(),
            "9999-12-31T23:59:59.000000Z"
        );
        assert_eq!(
            ts("0000-01-01T01:00:00+01:00").to_rfc3339(),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(
            ts("2026-01-31T09:30:00Z").truncated(0),
            ts("2026-01-31T09:30:00Z")
        );
    }

    #[test]
    fn rejects_text_without_zone() {
        for bad in ["2026-01-31T09:30:00", "2026-01-31", "yesterday", ""] {
            assert!(Timestamp::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn compares_instants_not_text() {
        assert!(ts("2026-01-31T09:30:37Z") < ts("2026-01-31T09:30:37.500Z"));
        assert_eq!(
            ts("2026-01-31T10:30:37+01:00"),
            ts("2026-01-31T09:30:37.000Z")
        );
    }

    #[test]
    fn sqlite_form_keeps_precision_and_sorts_as_time() {
        let mut values = [
            ts("2026-01-31T09:30:37.5Z"),
            ts("2026-01-31T09:30:37Z"),
            ts("2026-01-31T09:30:37.000001Z"),
            ts("2026-01-31T09:30:36.999Z"),
            ts("2026-01-31T09:30:37.25Z"),
        ];
        let mut texts: Vec<String> = values.iter().map(|t| t.to_warehouse_text()).collect();
        values.sort();
        texts.sort();
        let sorted: Vec<String> = values.iter().map(|t| t.to_warehouse_text()).collect();
        assert_eq!(texts, sorted);
        assert_eq!(sorted[0], "2026-01-31T09:30:36.999000Z");
        assert_eq!(sorted[1], "2026-01-31T09:30:37.000000Z");
        assert_eq!(sorted[2], "2026-01-31T09:30:37.000001Z");
        // Read back as the same instant; the form of schema 6 and older too.
        for t in values {
            assert_eq!(
                Timestamp::parse_warehouse_text(&t.to_warehouse_text()).unwrap(),
                t
            );
        }
        assert_eq!(
            Timestamp::parse_warehouse_text("2026-01-31 09:30:37.250").unwrap(),
            ts("2026-01-31T09:30:37.25Z")
        );
    }

    #[test]
    fn sqlite_form_truncates_below_the_microsecond() {
        // The instant at or before: a checkpoint read back never skips a change.
        assert_eq!(
            ts("2026-01-31T09:30:37.123456789Z").to_warehouse_text(),
            "2026-01-31T09:30:37.123456Z"
        );
        assert_eq!(
            ts("1969-12-31T23:59:59.999999999Z").to_warehouse_text(),
            "1969-12-31T23:59:59.999999Z"
        );
    }

    #[test]
    fn truncation_models_service_precision() {
        let t = ts("2026-01-31T09:30:37.123456789Z");
        assert_eq!(
            t.truncated(1_000_000_000).to_rfc3339(),
            "2026-01-31T09:30:37Z"
        );
        assert_eq!(
            t.truncated(1_000_000).to_rfc3339(),
            "2026-01-31T09:30:37.123Z"
        );
        assert_eq!(
            t.truncated(1_000).to_rfc3339(),
            "2026-01-31T09:30:37.123456Z"
        );
    }

    #[test]
    fn before_at_own_precision_cuts_the_other_to_the_precision_it_shows() {
        let t = |text: &str| Timestamp::parse(text).unwrap();
        let listed = t("2026-03-01T12:00:00.123456Z");
        // The same instant, written coarser: not before it.
        for same in [
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.123Z",
            "2026-03-01T12:00:00.123456Z",
        ] {
            assert!(!t(same).before_at_own_precision(listed), "{same}");
        }
        // An older instant, at any precision; and one a nanosecond older at nanoseconds.
        for older in [
            "2026-03-01T11:59:59Z",
            "2026-03-01T12:00:00.122Z",
            "2026-03-01T12:00:00.123455Z",
        ] {
            assert!(t(older).before_at_own_precision(listed), "{older}");
        }
        let fine = t("2026-03-01T12:00:00.123456789Z");
        assert!(t("2026-03-01T12:00:00.123456788Z").before_at_own_precision(fine));
        assert!(!fine.before_at_own_precision(fine));
        // Newer is never before.
        assert!(!t("2026-03-01T12:00:01Z").before_at_own_precision(listed));
    }
}
