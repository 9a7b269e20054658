//! The service's instants: RFC 3339 in, full-precision UTC inside, two text forms out.
//!
//! Every timestamp the service sends is parsed once into [`Timestamp`], a UTC instant with
//! nanosecond precision. Comparisons are on instants, never on text (`…37Z` sorts after
//! `…37.500Z` as text). Output forms: RFC 3339 `…T…Z` for the wire, and SQLite's
//! `YYYY-MM-DD HH:MM:SS[.fraction]` for the warehouse. Both print the fraction in groups of
//! three digits (none, milli, micro, nano) with trailing zero groups dropped, so the service's
//! precision is kept and, in the SQLite form, text order is time order.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime, UtcOffset};

/// A UTC instant with nanosecond precision.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

/// A string that is not an RFC 3339 timestamp with a zone.
#[derive(Debug, thiserror::Error)]
#[error("`{value}` is not an RFC 3339 timestamp with a zone (e.g. 2026-01-31T09:30:00Z): {reason}")]
pub struct TimestampError {
    pub value: String,
    reason: String,
}

impl Timestamp {
    /// 1970-01-01T00:00:00Z: where a schedule without a checkpoint starts.
    pub const EPOCH: Timestamp = Timestamp(OffsetDateTime::UNIX_EPOCH);

    /// The current instant, at full precision.
    pub fn now() -> Self {
        Timestamp(OffsetDateTime::now_utc())
    }

    /// Parses RFC 3339 with any offset and any fraction precision; the result is UTC.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        OffsetDateTime::parse(text.trim(), &Rfc3339)
            .map(|t| Timestamp(t.to_offset(UtcOffset::UTC)))
            .map_err(|e| TimestampError {
                value: text.to_owned(),
                reason: e.to_string(),
            })
    }

    /// Parses the warehouse's own text form (`YYYY-MM-DD HH:MM:SS[.fraction]`, UTC).
    pub fn parse_sqlite(text: &str) -> Result<Self, TimestampError> {
        Self::parse(&format!("{}Z", text.trim().replacen(' ', "T", 1)))
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
        format!("{}T{}Z", self.date_part(), self.time_part())
    }

    /// SQLite's own form, e.g. `2026-01-31 09:30:00.250`: text order is time order.
    pub fn to_sqlite(self) -> String {
        format!("{} {}", self.date_part(), self.time_part())
    }

    /// Truncates to whole multiples of `unit_nanos` (used to model a service's precision).
    pub fn truncated(self, unit_nanos: i128) -> Self {
        let n = self.unix_nanos();
        Timestamp::from_unix_nanos(n - n.rem_euclid(unit_nanos)).unwrap_or(self)
    }

    pub fn saturating_sub(self, d: std::time::Duration) -> Self {
        let d = Duration::try_from(d).unwrap_or(Duration::MAX);
        Timestamp(self.0.checked_sub(d).unwrap_or(self.0))
    }

    pub fn saturating_add(self, d: std::time::Duration) -> Self {
        let d = Duration::try_from(d).unwrap_or(Duration::MAX);
        Timestamp(self.0.checked_add(d).unwrap_or(self.0))
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> std::time::Duration {
        std::time::Duration::try_from(self.0 - earlier.0).unwrap_or_default()
    }

    fn date_part(self) -> String {
        let d = self.0.date();
        format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
    }

    fn time_part(self) -> String {
        let t = self.0.time();
        let base = format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second());
        let nanos = t.nanosecond();
        match nanos {
            0 => base,
            n if n % 1_000_000 == 0 => format!("{base}.{:03}", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{base}.{:06}", n / 1_000),
            n => format!("{base}.{n:09}"),
        }
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(t: OffsetDateTime) -> Self {
        Timestamp(t.to_offset(UtcOffset::UTC))
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
        f.write_str(&self.to_rfc3339())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
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
        let mut texts: Vec<String> = values.iter().map(|t| t.to_sqlite()).collect();
        values.sort();
        texts.sort();
        let sorted: Vec<String> = values.iter().map(|t| t.to_sqlite()).collect();
        assert_eq!(texts, sorted);
        assert_eq!(sorted[0], "2026-01-31 09:30:36.999");
        assert_eq!(sorted[2], "2026-01-31 09:30:37.000001");
        assert_eq!(
            Timestamp::parse_sqlite("2026-01-31 09:30:37.250").unwrap(),
            ts("2026-01-31T09:30:37.25Z")
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
}
