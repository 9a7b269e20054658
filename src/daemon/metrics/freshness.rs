//! What the daemon knows of each schedule between scrapes, pure: the lag and the passes in a
//! row that ended behind or held a tie group, and each schedule's freshness (progress between
//! sync ticks, judged against a running pass's own cadence) — what `/healthz` judges by.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::service::Timestamp;
use crate::sync::HeldGroup;
use crate::warehouse::{LATE_PASS_TICKS, STALE_TICKS};

/// Sync ticks without progress after which a schedule is unhealthy.
pub const STALE_INTERVALS: u32 = STALE_TICKS;

/// The most sync ticks a running pass may go without progress, however slow its own cadence
/// has been (`status`'s bound for a running pass, [`LATE_PASS_TICKS`]).
const MOST_QUIET_TICKS: u32 = LATE_PASS_TICKS as u32;

#[derive(Default)]
pub(super) struct ScheduleStates {
    /// The lag a pass ended with (service clock minus checkpoint), and when it ended.
    pub(super) lag: BTreeMap<Uuid, (f64, std::time::Instant)>,
    /// Passes in a row that ended behind, and what slowed the latest down.
    pub(super) behind: BTreeMap<Uuid, (i64, Vec<&'static str>)>,
    /// Passes in a row that held a tie group, and the latest's earliest held group; `None`
    /// once a pass held none (its series read 0 at the next scrape, then go).
    pub(super) held: BTreeMap<Uuid, Option<(i64, HeldGroup)>>,
    /// Calls set aside, as the latest pass that counted them saw; only schedules with some.
    pub(super) set_aside: BTreeMap<Uuid, u64>,
    pub(super) freshness: BTreeMap<Uuid, Freshness>,
    /// Schedules whose `freshness` has a `busy` pass: counted as they change, as the status
    /// line after every pass asks for it (counting them there was a walk over every schedule
    /// a pass: at 10,000 schedules, most of the daemon's time in an idle tick).
    pub(super) busy_passes: usize,
}

impl ScheduleStates {
    /// Sets or clears the pass `schedule` runs, keeping [`ScheduleStates::busy_passes`].
    pub(super) fn set_busy(&mut self, schedule: Uuid, busy: Option<Busy>) -> &mut Freshness {
        let fresh = self.freshness.entry(schedule).or_default();
        match (fresh.busy.is_some(), busy.is_some()) {
            (false, true) => self.busy_passes += 1,
            (true, false) => self.busy_passes -= 1,
            _ => {}
        }
        fresh.busy = busy;
        fresh
    }

    pub(super) fn progressed(&mut self, schedule: Uuid) {
        let fresh = self.freshness.entry(schedule).or_default();
        fresh.progressed = true;
        fresh.slowest = fresh.slowest.max(fresh.idle_ticks);
        fresh.idle_ticks = 0;
    }
}

/// Progress of one schedule between sync ticks.
#[derive(Default)]
pub(super) struct Freshness {
    /// A pass completed, a page committed or a request answered since the last tick.
    pub(super) progressed: bool,
    /// Ticks in a row that found no progress.
    pub(super) idle_ticks: u32,
    /// The running pass's own cadence: the most ticks in a row it went without progress
    /// before moving again (a Retry-After pause, a slow page). 0 between passes.
    pub(super) slowest: u32,
    /// The pass the daemon has started for the schedule, until it ends.
    pub(super) busy: Option<Busy>,
}

impl Freshness {
    /// Sync ticks without progress after which the schedule is stale: [`STALE_INTERVALS`];
    /// for a running pass, more than twice its own slowest stretch so far, up to
    /// [`MOST_QUIET_TICKS`] — a slow but moving pass is judged against its own cadence.
    pub(super) fn allowed_ticks(&self) -> u32 {
        match self.busy {
            Some(busy) if busy.running => {
                (2 * self.slowest + 1).clamp(STALE_INTERVALS, MOST_QUIET_TICKS.max(STALE_INTERVALS))
            }
            _ => STALE_INTERVALS,
        }
    }
}

/// A schedule without progress for more sync ticks than it is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    pub schedule: Uuid,
    /// Sync ticks in a row without progress.
    pub ticks: u32,
    /// The most its running pass had gone without progress before (0: none running).
    pub slowest: u32,
}

/// A pass the daemon started and that has not ended yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub kind: &'static str,
    /// When the daemon started it (its task, which may first wait for a slot).
    pub since: Timestamp,
    /// It holds a pass slot (at most `sync.concurrency`) and reads; `false` while it waits.
    pub running: bool,
}
