//! The simulator's clock: its one source of "now". Everything it stamps (calls, schedules,
//! campaigns, the seeded history), its `Date` header, token expiry, late commits, the request
//! quota and the dialer's ticks read it.
//!
//! The system clock by default: `callsync simulate` and the demo keep real time. A test hands
//! it a [`ManualClock`] instead, which stands still until the test moves it, so that a run
//! replays exactly, timestamps included (the seed replays the rest). Delays a fault plan asks
//! for (slow or held answers) are real waits on tokio's clock: they shape the network, not the
//! service's clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderValue;

use crate::service::Timestamp;

/// Where the simulator reads the time.
#[derive(Debug, Clone, Default)]
pub enum SimClock {
    /// The machine's clock.
    #[default]
    System,
    /// A test's clock: moves only when the test says.
    Manual(ManualClock),
}

impl SimClock {
    pub fn now(&self) -> Timestamp {
        match self {
            SimClock::System => Timestamp::now(),
            SimClock::Manual(clock) => clock.now(),
        }
    }

    /// The `Date` header for now, `skew_secs` off (RFC 9110's IMF-fixdate, whole seconds);
    /// `None` for an instant the format cannot hold (before 1970 or after 9999), which only a
    /// test's clock or skew reaches.
    pub(super) fn http_date(&self, skew_secs: i64) -> Option<HeaderValue> {
        const YEAR_10000_SECS: u64 = 253_402_300_800;
        let now = self.now().unix_nanos().div_euclid(1_000_000_000);
        let secs = u64::try_from(now.checked_add(i128::from(skew_secs))?).ok()?;
        if secs >= YEAR_10000_SECS {
            return None;
        }
        let at: SystemTime = UNIX_EPOCH + Duration::from_secs(secs);
        HeaderValue::from_str(&httpdate::fmt_http_date(at)).ok()
    }
}

/// A clock that stands still until [`ManualClock::advance`] (or, once a test calls
/// [`ManualClock::run`], moves with the machine's); clones share one time, so a test keeps a
/// clone to move the clock of the simulator it started with it.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Manual>>);

#[derive(Debug)]
struct Manual {
    at: Timestamp,
    /// Since `run`: the clock reads `at` plus the machine's time since then.
    running_since: Option<std::time::Instant>,
}

impl Manual {
    fn now(&self) -> Timestamp {
        match self.running_since {
            Some(since) => self.at.saturating_add(since.elapsed()),
            None => self.at,
        }
    }
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Arc::new(Mutex::new(Manual {
            at: start,
            running_since: None,
        })))
    }

    pub fn now(&self) -> Timestamp {
        super::mutex::lock(&self.0).now()
    }

    /// Moves the clock `by` forward.
    pub fn advance(&self, by: Duration) {
        let mut clock = super::mutex::lock(&self.0);
        clock.at = clock.at.saturating_add(by);
    }

    /// From now on the clock moves with the machine's, from where it stands: a test holds the
    /// service's time still until an event (e.g. the quota's bucket ran dry), then lets it go.
    pub fn run(&self) {
        let mut clock = super::mutex::lock(&self.0);
        if clock.running_since.is_none() {
            clock.at = clock.now();
            clock.running_since = Some(std::time::Instant::now());
        }
    }

    /// Moves the clock forward to `at`; a clock never goes back.
    pub(super) fn advance_to(&self, at: Timestamp) {
        let mut clock = super::mutex::lock(&self.0);
        let now = clock.now();
        clock.at = clock.at.saturating_add(at.since(now));
    }
}

impl From<ManualClock> for SimClock {
    fn from(clock: ManualClock) -> Self {
        SimClock::Manual(clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_never_back() {
        let start = Timestamp::parse("2026-03-01T12:00:00.123456Z").unwrap();
        let manual = ManualClock::new(start);
        let clock = SimClock::from(manual.clone());
        assert_eq!(clock.now(), start);
        manual.advance(Duration::from_millis(1500));
        assert_eq!(
            clock.now(),
            Timestamp::parse("2026-03-01T12:00:01.623456Z").unwrap()
        );
        manual.advance_to(start);
        assert_eq!(
            clock.now(),
            Timestamp::parse("2026-03-01T12:00:01.623456Z").unwrap()
        );
    }

    #[test]
    fn a_running_manual_clock_goes_on_from_where_it_stood() {
        let start = Timestamp::parse("2026-03-01T12:00:00Z").unwrap();
        let manual = ManualClock::new(start);
        manual.advance(Duration::from_secs(60));
        manual.run();
        let running = manual.now();
        assert!(running >= start.saturating_add(Duration::from_secs(60)));
        manual.advance(Duration::from_secs(3600));
        assert!(manual.now() >= running.saturating_add(Duration::from_secs(3600)));
    }

    #[test]
    fn the_date_header_is_the_clock_in_whole_seconds() {
        let skewed = |text: &str, skew: i64| {
            SimClock::from(ManualClock::new(Timestamp::parse(text).unwrap())).http_date(skew)
        };
        let at = |text: &str| skewed(text, 0);
        assert_eq!(
            at("2026-03-01T12:00:01.999Z").unwrap(),
            "Sun, 01 Mar 2026 12:00:01 GMT"
        );
        assert_eq!(at("1969-12-31T23:59:59Z"), None);
        assert_eq!(
            at("9999-12-31T23:59:59Z").unwrap(),
            "Fri, 31 Dec 9999 23:59:59 GMT"
        );
        // A front whose clock is a day behind, or ahead, of the one that stamps the calls.
        assert_eq!(
            skewed("2026-03-01T12:00:01.999Z", -86_400).unwrap(),
            "Sat, 28 Feb 2026 12:00:01 GMT"
        );
        assert_eq!(
            skewed("2026-03-01T12:00:01.999Z", 86_400).unwrap(),
            "Mon, 02 Mar 2026 12:00:01 GMT"
        );
        assert_eq!(skewed("1970-01-01T00:00:10Z", -11), None);
    }
}
