//! One value of the configuration parsed and checked: a URL, a cron expression, a duration,
//! a number within bounds.

use std::ops::RangeInclusive;
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use url::Url;

use super::error::{ConfigError, ConfigErrorKind as Kind};
use super::url_credentials::{refuse_user_info, user_info_redacted};
use crate::service::Timestamp;

pub(super) fn url(key: &str, text: &str) -> Result<Url, ConfigError> {
    // Every message shows the URL without its user info, whatever else is wrong with it.
    let shown = user_info_redacted(text);
    let url = Url::parse(text.trim())
        .map_err(|e| ConfigError::new(Kind::BadUrl, key, format!("{shown:?} is not a URL: {e}")))?;
    refuse_user_info(key, &url, text)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ConfigError::new(
            Kind::BadUrl,
            key,
            format!("{shown:?} must be an http:// or https:// URL with a host"),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(ConfigError::new(
            Kind::BadUrl,
            key,
            format!("{shown:?} must not have a query or a fragment"),
        ));
    }
    Ok(url)
}

/// A cron expression parsed once, as the daemon's scheduler reads it; evaluated in UTC.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    text: String,
    cron: Cron,
}

impl CronSchedule {
    /// `text` read with tokio-cron-scheduler's own options — seconds required, and a
    /// day-of-month and a day-of-week that must both match when both are given — narrowed to
    /// six fields (no year). The scheduler reads the text again with those options when it
    /// computes each firing, so what was checked here is what fires.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(true)
            .year(Year::Disallowed)
            .build()
            .parse(text)?;
        Ok(CronSchedule {
            text: text.to_owned(),
            cron,
        })
    }

    /// The expression as written (for the scheduler, logs and messages).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its first firing after `after`, if it has one.
    pub fn next_after(&self, after: &DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(after, false).ok()
    }

    /// [`Self::next_after`] an instant; `None` also beyond chrono's range (after 2262).
    pub fn first_after(&self, after: Timestamp) -> Option<Timestamp> {
        let after = DateTime::from_timestamp_nanos(i64::try_from(after.unix_nanos()).ok()?);
        let next = self.next_after(&after)?.timestamp_nanos_opt()?;
        Timestamp::from_unix_nanos(i128::from(next))
    }
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CronSchedule {}

impl std::fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A 6-field cron expression (seconds first), parsed as the daemon's scheduler parses it, that
/// fires within a year from now.
pub(super) fn cron(key: &str, expr: String) -> Result<CronSchedule, ConfigError> {
    cron_at(key, expr, chrono::Utc::now())
}

/// The longest a valid cron may wait for its next firing: a year, leap day included.
pub(super) const CRON_HORIZON_DAYS: i64 = 366;

/// [`cron`] as of `now`. A cron that parses but never fires soon (`0 0 0 30 2 *`, the 30th of
/// February) would leave the daemon running and syncing nothing after its first pass.
pub(super) fn cron_at(
    key: &str,
    expr: String,
    now: DateTime<Utc>,
) -> Result<CronSchedule, ConfigError> {
    let schedule = CronSchedule::parse(&expr).map_err(|e| {
        ConfigError::new(
            Kind::BadCron,
            key,
            format!("{expr:?} is not a 6-field cron expression with seconds first (e.g. \"0 */5 * * * *\"): {e}"),
        )
    })?;
    match schedule.next_after(&now) {
        Some(next) if next - now <= chrono::TimeDelta::days(CRON_HORIZON_DAYS) => Ok(schedule),
        _ => Err(ConfigError::new(
            Kind::CronNeverFires,
            key,
            format!(
                "{expr:?} does not fire within a year of now ({} UTC); check its day and month fields",
                now.format("%Y-%m-%d %H:%M:%S")
            ),
        )),
    }
}

/// Ten years: any longer window is a mistake (and would overflow the arithmetic on instants).
pub(super) const MAX_DURATION_SECS: u64 = 3650 * 86_400;

/// `90s`, `15m`, `12h`, `7d`.
pub(super) fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let bad = || {
        ConfigError::new(
            Kind::NotADuration,
            key,
            format!("{text:?} is not a duration such as 90s, 15m, 12h or 7d"),
        )
    };
    let text = text.trim();
    let unit_at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(unit_at);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_secs) {
        Some(0) => Err(bad()),
        Some(secs) if secs <= MAX_DURATION_SECS => Ok(Duration::from_secs(secs)),
        _ => Err(ConfigError::new(
            Kind::OutOfRange,
            key,
            format!("{text:?} is longer than 3650d; to re-read more, use `callsync backfill`"),
        )),
    }
}

pub(super) fn secs(
    key: &str,
    value: Option<i64>,
    default: i64,
    allowed: RangeInclusive<i64>,
) -> Result<Duration, ConfigError> {
    bounded(key, value, default, allowed).map(Duration::from_secs)
}

/// `value` (or `default`) checked against `allowed`, in the type the typed config holds.
pub(super) fn bounded<T: TryFrom<i64>>(
    key: &str,
    value: Option<i64>,
    default: i64,
    allowed: RangeInclusive<i64>,
) -> Result<T, ConfigError> {
    let value = value.unwrap_or(default);
    let outside = || {
        ConfigError::new(
            Kind::OutOfRange,
            key,
            format!("{value} is outside {}..={}", allowed.start(), allowed.end()),
        )
    };
    if !allowed.contains(&value) {
        return Err(outside());
    }
    // Every `allowed` fits its `T`; this only keeps a wrong range from panicking.
    T::try_from(value).map_err(|_| outside())
}
