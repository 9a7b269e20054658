//! The service's clock, as its responses tell it (their `Date` headers, tightened by the
//! calls stamped within the header's second): a pass's horizon and the service's "now".
//!
//! **A `Date` far from our clock is not trusted.** Further than `sync.max_clock_skew_secs`
//! (300 s by default) from this machine's clock, one of the two clocks is wrong, and taking
//! the wrong one for the service's either stalls the walk or loses calls:
//!
//! - a clock *behind* the service's stalls it: the horizon ends each pass at the first page
//!   past it and the checkpoint is capped at that clock, so a `Date` in 1971 read one page
//!   per pass, for ever;
//! - a clock *ahead* of it lets the checkpoint pass the service's "now": a call stamped in
//!   the future (a node whose clock runs ahead) would carry it past calls that change before
//!   that instant, and a quiet run's check (`Q`, `sync/cursor.rs`) would ask after changes
//!   not yet made and find none.
//!
//! The calls' own stamps tell the two apart, as they come from the service's clock: a call
//! is never stamped much later than that clock's "now". So the pass takes the **earlier** of
//! the two clocks (behind is the side that cannot lose a call), unless the calls show it is
//! behind them — a page whose oldest call, or the stored checkpoint, is more than
//! `max_clock_skew` past it — while the later one is not; then it takes the later. Which
//! covers each clock being the wrong one: a `Date` in 1971 or 2099 over calls stamped today
//! takes ours; our clock stopped in the past, or a service whose whole clock is elsewhere
//! (its `Date` and its calls agree), takes the `Date`. It says so once a pass (a warning
//! naming both clocks and the skew), and again if the calls change its choice.
//!
//! When our clock is taken, the pass runs as without a `Date`: no quiet run starts (it needs
//! the service's clock), the horizon and the checkpoint's cap are our clock's. A walk that
//! still meets calls stamped further past the clock it took than the bound (both clocks
//! behind the calls) cannot move its checkpoint past them: the pass says so with an error
//! ([`super::SyncError::ClockBehindCalls`]) rather than stalling quietly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::service::Timestamp;

/// The `Date` header has whole seconds (the service's clock, truncated): a row stamped less
/// than this after it may still be from the present.
const DATE_PRECISION: Duration = Duration::from_secs(1);

/// Which clock stands for the service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockTaken {
    /// The service's `Date` (trusted, or chosen over ours by the calls' stamps).
    Date,
    /// callsync's own: no `Date`, or one not trusted.
    Local,
}

impl ClockTaken {
    /// As `--json` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClockTaken::Date => "date",
            ClockTaken::Local => "local",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            ClockTaken::Date => "the service's Date",
            ClockTaken::Local => "this machine's clock",
        }
    }
}

/// What one response says of the service's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reading {
    /// The service's "now" when it answered.
    pub(super) now: Timestamp,
    /// From this instant on, a call's stamp is later than the service's clock.
    pub(super) future: Timestamp,
    /// The `Date` when it is the clock taken; `None` when ours stands in.
    pub(super) date: Option<Timestamp>,
}

/// The service's clock, as its responses tell it.
pub(super) struct ServiceClock {
    /// Its clock at the pass's first response, rounded up to the second: the pass reads the
    /// calls stamped before this instant, which holds every change made before it began.
    pub(super) horizon: Option<Timestamp>,
    /// Its latest "now", and when we received it (on tokio's clock, the machine's except
    /// under a test's `tokio::time::pause`, which moves it instead of waiting).
    latest: Option<(Timestamp, tokio::time::Instant)>,
    /// How far a `Date` may be from ours and still be trusted (`sync.max_clock_skew_secs`).
    max_skew: Duration,
    /// The service has stamped a call at or after this instant: the stored checkpoint, and
    /// the oldest call of each page since (the latest of them).
    stamped_by: Option<Timestamp>,
    /// The clock taken for the last `Date` not trusted, and that `Date`'s skew from ours in
    /// seconds; `None` while every `Date` was trusted.
    distrust: Option<(ClockTaken, f64)>,
    /// Which clock the latest response's reading came from.
    taken: Option<ClockTaken>,
}

/// Said once per process: a service without `Date` headers stays so.
static NO_DATE_WARNED: AtomicBool = AtomicBool::new(false);

impl ServiceClock {
    /// The clock of a pass that starts from `checkpoint` (stamped, or capped, by the service's
    /// clock as an earlier pass took it).
    pub(super) fn new(max_skew: Duration, checkpoint: Option<Timestamp>) -> Self {
        ServiceClock {
            horizon: None,
            latest: None,
            max_skew,
            stamped_by: checkpoint,
            distrust: None,
            taken: None,
        }
    }

    /// Takes a response's `Date`, this machine's clock when it arrived and the stamps of the
    /// calls it lists (in list order: the oldest first); returns what it says of the
    /// service's clock.
    ///
    /// The header holds whole seconds, so the service's clock was somewhere in
    /// `[date, date + 1 s)`: a call stamped in that second proves how far into it, and one
    /// stamped at or after `date + 1 s` comes from a clock ahead of the service's.
    pub(super) fn observe(
        &mut self,
        served_at: Option<Timestamp>,
        local: Timestamp,
        stamps: &[Timestamp],
    ) -> Reading {
        if let Some(oldest) = stamps.iter().min() {
            self.stamped_by = Some(self.stamped_by.map_or(*oldest, |at| at.max(*oldest)));
        }
        let (taken, clock) = match served_at {
            Some(date) => self.judge(date, local),
            None => {
                if !NO_DATE_WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the service sent no Date header (or none callsync can read): callsync's own clock bounds passes and caps checkpoints, so a clock behind the service's shows as lag"
                    );
                }
                (ClockTaken::Local, local)
            }
        };
        let future = clock.saturating_add(DATE_PRECISION);
        let now = stamps
            .iter()
            .copied()
            .filter(|at| *at < future)
            .fold(clock, Timestamp::max);
        self.horizon.get_or_insert(future);
        self.latest = Some((now, tokio::time::Instant::now()));
        self.taken = Some(taken);
        Reading {
            now,
            future,
            date: (taken == ClockTaken::Date).then_some(clock),
        }
    }

    /// The clock to take for a response dated `date` that arrived at `local` by ours: the
    /// `Date` when within the bound, else as the module's doc says.
    fn judge(&mut self, date: Timestamp, local: Timestamp) -> (ClockTaken, Timestamp) {
        let skew = date.secs_since(local);
        if skew.abs() <= self.max_skew.as_secs_f64() {
            return (ClockTaken::Date, date);
        }
        let (earlier, later) = if date < local {
            ((ClockTaken::Date, date), (ClockTaken::Local, local))
        } else {
            ((ClockTaken::Local, local), (ClockTaken::Date, date))
        };
        let taken = if self.behind_the_calls(earlier.1) && !self.behind_the_calls(later.1) {
            later
        } else {
            earlier
        };
        let changed = self.distrust.map(|(before, _)| before) != Some(taken.0);
        self.distrust = Some((taken.0, skew));
        if changed {
            tracing::warn!(
                service_date = %date,
                local_clock = %local,
                skew_secs = skew,
                max_clock_skew_secs = self.max_skew.as_secs(),
                taken = taken.0.describe(),
                "the service's Date is further from this machine's clock than sync.max_clock_skew_secs: not trusted; this pass takes {} as the service's clock ({}); check the clocks of both",
                taken.0.describe(),
                if taken == later {
                    "the later of the two: calls are stamped further than that past the earlier"
                } else {
                    "the earlier of the two: no call is stamped further than that past it"
                },
            );
        }
        taken
    }

    /// The service has stamped calls more than the bound past `clock`: it is not the
    /// service's.
    fn behind_the_calls(&self, clock: Timestamp) -> bool {
        self.stamped_by
            .is_some_and(|at| at > clock.saturating_add(self.max_skew))
    }

    /// The service's "now" estimated from its latest answer.
    pub(super) fn now(&self) -> Option<Timestamp> {
        self.latest
            .map(|(at, received)| at.saturating_add(received.elapsed()))
    }

    /// A `Date` not trusted in this pass: its skew from our clock in seconds (the `Date`
    /// minus ours), and the clock taken instead of it or over ours.
    pub(super) fn distrust(&self) -> Option<(ClockTaken, f64)> {
        self.distrust
    }

    /// Which clock the latest reading came from.
    pub(super) fn taken(&self) -> Option<ClockTaken> {
        self.taken
    }

    /// How far calls may be stamped past the clock taken before they stop the walk.
    pub(super) fn max_skew(&self) -> Duration {
        self.max_skew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    const SKEW: Duration = Duration::from_secs(300);

    #[tokio::test(start_paused = true)]
    async fn the_horizon_is_the_first_answer_and_now_follows_the_latest() {
        let mut clock = ServiceClock::new(SKEW, None);
        assert_eq!(clock.now(), None);
        let first = ts("2026-01-01T00:00:00Z");
        assert_eq!(
            clock.observe(Some(first), first, &[]),
            Reading {
                now: first,
                future: ts("2026-01-01T00:00:01Z"),
                date: Some(first),
            }
        );
        let second = ts("2026-01-01T00:00:07Z");
        clock.observe(Some(second), second, &[]);
        // Everything stamped before the first answer's second ended.
        assert_eq!(clock.horizon, Some(ts("2026-01-01T00:00:01Z")));
        // Virtual time: "now" follows the latest answer by exactly the time since it came.
        assert_eq!(clock.now(), Some(second));
        tokio::time::advance(Duration::from_millis(2_500)).await;
        assert_eq!(clock.now(), Some(ts("2026-01-01T00:00:09.5Z")));
        // Without a Date header our own clock stands in.
        let mut own = ServiceClock::new(SKEW, None);
        let reading = own.observe(None, second, &[]);
        assert_eq!((reading.now, reading.date), (second, None));
        assert_eq!(own.distrust(), None, "no Date is not a Date distrusted");
    }

    #[test]
    fn a_stamp_within_the_dates_second_says_how_far_into_it_the_service_was() {
        let mut clock = ServiceClock::new(SKEW, None);
        let date = ts("2026-01-01T00:00:00Z");
        let stamps = [
            ts("2025-12-31T23:59:58Z"),
            ts("2026-01-01T00:00:00.75Z"),
            // From a node 33 s ahead: no proof of the service's time.
            ts("2026-01-01T00:00:33Z"),
        ];
        let reading = clock.observe(Some(date), date, &stamps);
        assert_eq!(reading.now, ts("2026-01-01T00:00:00.75Z"));
        assert_eq!(reading.future, ts("2026-01-01T00:00:01Z"));
    }

    #[test]
    fn a_date_within_the_bound_is_trusted_whatever_the_calls_say() {
        let local = ts("2026-11-28T03:00:00Z");
        let date = ts("2026-11-28T02:55:00Z");
        let mut clock = ServiceClock::new(SKEW, None);
        let reading = clock.observe(Some(date), local, &[ts("2026-11-28T04:00:00Z")]);
        assert_eq!((reading.now, reading.date), (date, Some(date)));
        assert_eq!(clock.distrust(), None);
    }

    /// `(Date, our clock, the page's stamps)` → the clock taken.
    fn taken(date: &str, local: &str, stamps: &[&str]) -> (ClockTaken, Timestamp) {
        let mut clock = ServiceClock::new(SKEW, None);
        let stamps: Vec<Timestamp> = stamps.iter().map(|s| ts(s)).collect();
        let reading = clock.observe(Some(ts(date)), ts(local), &stamps);
        let (taken, skew) = clock.distrust().expect("the Date is not trusted");
        assert_eq!(skew, ts(date).secs_since(ts(local)));
        assert_eq!(reading.date.is_some(), taken == ClockTaken::Date);
        assert_eq!(clock.taken(), Some(taken));
        (taken, reading.future.saturating_sub(DATE_PRECISION))
    }

    #[test]
    fn a_date_far_from_ours_gives_way_to_the_clock_the_calls_agree_with() {
        let today = "2026-11-28T03:00:00Z";
        let calls = ["2026-11-27T10:00:00Z", "2026-11-28T02:59:00Z"];
        // A Date in 1971 over calls stamped today: ours.
        assert_eq!(
            taken("1971-01-01T00:00:00Z", today, &calls),
            (ClockTaken::Local, ts(today))
        );
        // In 2099: ours, the earlier of the two, which no call is stamped past.
        assert_eq!(
            taken("2099-11-28T03:00:00Z", today, &calls),
            (ClockTaken::Local, ts(today))
        );
        // A whole service elsewhere in time, its Date and its calls agreeing: its Date.
        let ahead = ["2099-11-27T10:00:00Z", "2099-11-28T02:59:00Z"];
        assert_eq!(
            taken("2099-11-28T03:00:00Z", today, &ahead),
            (ClockTaken::Date, ts("2099-11-28T03:00:00Z"))
        );
        let behind = ["2026-02-27T10:00:00Z"];
        assert_eq!(
            taken("2026-03-01T12:00:00Z", today, &behind),
            (ClockTaken::Date, ts("2026-03-01T12:00:00Z"))
        );
        // Our clock stopped in 1971: the Date.
        assert_eq!(
            taken(today, "1971-01-01T00:00:00Z", &calls),
            (ClockTaken::Date, ts(today))
        );
        // Calls past both clocks (a node far ahead): the earlier, the side that loses none.
        assert_eq!(
            taken("2026-03-01T12:00:00Z", today, &["2106-01-01T00:00:00Z"]),
            (ClockTaken::Date, ts("2026-03-01T12:00:00Z"))
        );
        // Nothing read yet: the earlier.
        assert_eq!(
            taken("1971-01-01T00:00:00Z", today, &[]),
            (ClockTaken::Date, ts("1971-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn the_stored_checkpoint_and_earlier_pages_are_evidence_too() {
        let (date, today) = (ts("1971-01-01T00:00:00Z"), ts("2026-11-28T03:00:00Z"));
        // An empty page after a checkpoint of today's: the Date is behind the calls.
        let mut clock = ServiceClock::new(SKEW, Some(ts("2026-11-28T02:00:00Z")));
        assert_eq!(clock.observe(Some(date), today, &[]).date, None);
        // A first page takes the Date (nothing read), the next sees the calls.
        let mut clock = ServiceClock::new(SKEW, None);
        assert_eq!(clock.observe(Some(date), today, &[]).date, Some(date));
        clock.observe(Some(date), today, &[ts("2026-11-20T00:00:00Z")]);
        assert_eq!(clock.taken(), Some(ClockTaken::Local));
        // ... and keeps it for an empty page after.
        clock.observe(Some(date), today, &[]);
        assert_eq!(clock.taken(), Some(ClockTaken::Local));
        assert_eq!(clock.horizon, Some(ts("1971-01-01T00:00:01Z")));
    }
}
