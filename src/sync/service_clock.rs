//! The service's clock, as its responses tell it (their `Date` headers, tightened by the
//! calls stamped within the header's second): a pass's horizon and the service's "now".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::service::Timestamp;

/// The `Date` header has whole seconds (the service's clock, truncated): a row stamped less
/// than this after it may still be from the present.
const DATE_PRECISION: Duration = Duration::from_secs(1);

/// The service's clock, as its responses tell it.
#[derive(Default)]
pub(super) struct ServiceClock {
    /// Its clock at the pass's first response, rounded up to the second: the pass reads the
    /// calls stamped before this instant, which holds every change made before it began.
    pub(super) horizon: Option<Timestamp>,
    /// Its latest "now", and when we received it (on tokio's clock, the machine's except
    /// under a test's `tokio::time::pause`, which moves it instead of waiting).
    latest: Option<(Timestamp, tokio::time::Instant)>,
}

/// Said once per process: a service without `Date` headers stays so.
static NO_DATE_WARNED: AtomicBool = AtomicBool::new(false);

impl ServiceClock {
    /// Takes a response's `Date` and the stamps of the calls it lists; returns the service's
    /// "now" for it and the instant from which a stamp is in the future.
    ///
    /// The header holds whole seconds, so the service's clock was somewhere in
    /// `[date, date + 1 s)`: a call stamped in that second proves how far into it, and one
    /// stamped at or after `date + 1 s` comes from a clock ahead of the service's.
    pub(super) fn observe(
        &mut self,
        served_at: Option<Timestamp>,
        stamps: impl Iterator<Item = Timestamp>,
    ) -> (Timestamp, Timestamp) {
        let date = served_at.unwrap_or_else(|| {
            if !NO_DATE_WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the service sent no Date header: callsync's own clock bounds passes and caps checkpoints, so a clock behind the service's shows as lag"
                );
            }
            Timestamp::now()
        });
        let future = date.saturating_add(DATE_PRECISION);
        let now = stamps.filter(|at| *at < future).fold(date, Timestamp::max);
        self.horizon.get_or_insert(future);
        self.latest = Some((now, tokio::time::Instant::now()));
        (now, future)
    }

    /// The service's "now" estimated from its latest answer.
    pub(super) fn now(&self) -> Option<Timestamp> {
        self.latest
            .map(|(at, received)| at.saturating_add(received.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_horizon_is_the_first_answer_and_now_follows_the_latest() {
        let mut clock = ServiceClock::default();
        assert_eq!(clock.now(), None);
        let first = ts("2026-01-01T00:00:00Z");
        let none = std::iter::empty();
        assert_eq!(
            clock.observe(Some(first), none),
            (first, ts("2026-01-01T00:00:01Z"))
        );
        let second = ts("2026-01-01T00:00:07Z");
        clock.observe(Some(second), std::iter::empty());
        // Everything stamped before the first answer's second ended.
        assert_eq!(clock.horizon, Some(ts("2026-01-01T00:00:01Z")));
        // Virtual time: "now" follows the latest answer by exactly the time since it came.
        assert_eq!(clock.now(), Some(second));
        tokio::time::advance(Duration::from_millis(2_500)).await;
        assert_eq!(clock.now(), Some(ts("2026-01-01T00:00:09.5Z")));
        // Without a Date header our own clock stands in.
        let before = Timestamp::now();
        let mut own = ServiceClock::default();
        assert!(own.observe(None, std::iter::empty()).0 >= before);
    }

    #[test]
    fn a_stamp_within_the_dates_second_says_how_far_into_it_the_service_was() {
        let mut clock = ServiceClock::default();
        let date = ts("2026-01-01T00:00:00Z");
        let stamps = [
            ts("2025-12-31T23:59:58Z"),
            ts("2026-01-01T00:00:00.75Z"),
            // From a node 33 s ahead: no proof of the service's time.
            ts("2026-01-01T00:00:33Z"),
        ];
        let (now, future) = clock.observe(Some(date), stamps.into_iter());
        assert_eq!(now, ts("2026-01-01T00:00:00.75Z"));
        assert_eq!(future, ts("2026-01-01T00:00:01Z"));
    }
}
