//! Every knob of the simulator: [`SimulatorOptions`], the seeded calls' shape, the dialer's.

use std::time::Duration;

use super::clock::SimClock;
use super::fault_plan::FaultPlan;
use super::state::Precision;
use super::tie_order::TieOrder;

/// Every knob; `Default` is a small, well-behaved service on the system clock.

#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    pub precision: Precision,
    /// Everything random — the seeded data, and at runtime new uids, the dialer's choices and
    /// injected faults — follows from it: the same seed replays the same run.
    pub seed: u64,
    /// Where its "now" comes from; with a [`ManualClock`] and a seed, a run replays
    /// byte for byte.
    pub clock: SimClock,
    /// Schedules created (enabled) at start, each with `calls_per_schedule` calls.
    pub schedules: usize,
    pub calls_per_schedule: usize,
    /// What the seeded calls carry (children per call).
    pub shape: CallShape,
    /// Seeded calls stamped in tie groups: each run of this many consecutive calls of a
    /// schedule, in list order, shares one `updated_at` at a whole second, as a service
    /// that stamps a bulk upload or a batch job would (`seed::tie_stamps`). 0: none (the
    /// calls' instants spread over the week, as without it).
    pub tie_group: usize,
    /// List items' attempts omit `call_outcomes` and `call_attempts_variables`.
    pub summary_list: bool,
    /// Lifetime of tokens from the OAuth endpoint.
    pub token_lifetime: Duration,
    pub dialer: Option<DialerOptions>,
    /// A change becomes visible only this long after the instant it is stamped with.
    pub late_commit: Option<Duration>,
    /// The order within a tie of an `updated_after` list (`tie_order.rs`).
    pub tie_order: TieOrder,
    pub faults: FaultPlan,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        SimulatorOptions {
            precision: Precision::Micros,
            seed: 1,
            clock: SimClock::System,
            schedules: 1,
            calls_per_schedule: 100,
            shape: CallShape::Varied,
            tie_group: 0,
            summary_list: false,
            token_lifetime: Duration::from_secs(3600),
            dialer: None,
            late_commit: None,
            tie_order: TieOrder::Stable,
            faults: FaultPlan::default(),
        }
    }
}

/// What the seeded calls carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallShape {
    /// Two custom parameters; about a third of the calls have an attempt history (some
    /// attempts with an outcome and a variable): about 6 rows a call on average.
    #[default]
    Varied,
    /// Every call worked twice: 4 custom parameters, 2 attempts, each with 2 outcomes and 3
    /// variables, and 1 notification — 18 rows with the call, as calls with retries carry
    /// them in a calling campaign (the shape BENCHMARKS.md measures beside `Varied`).
    Eighteen,
}

/// The dialer (`dialer.rs`): every `tick` it finishes the attempts whose end has come, lets new
/// calls arrive now and then, and starts attempts on calls whose time has come.
///
/// Spans (ringing, talk, retry intervals, arrivals) are nominal seconds that last
/// `time_scale` seconds of the simulator's clock each (real seconds on the system clock). `Default` runs 1,000 times faster than real time
/// (`time_scale` 0.001: a 300 s retry interval passes in 0.3 s) and lets no new calls in, so
/// that tests and the demo see whole call histories in seconds and keep a known number of
/// calls; `callsync simulate --dialer` runs [`DialerOptions::endless`].
#[derive(Debug, Clone)]
pub struct DialerOptions {
    /// Ticks fall every `tick` of the simulator's clock (at least 1 ms).
    pub tick: Duration,
    /// At most this many attempts start per tick (the lines of the call centre).
    pub calls_per_tick: usize,
    /// Clock seconds per nominal second; 1.0 is real time.
    pub time_scale: f64,
    /// A batch of 1 to 10 new calls arrives this often (nominal time) on a random enabled
    /// schedule; `None`: no new calls.
    pub new_calls_every: Option<Duration>,
    /// Also make child-only changes (an outcome, a delivered notification) that do NOT bump
    /// the call's `updated_at`, as the service may.
    pub child_changes_without_bump: bool,
}

impl Default for DialerOptions {
    fn default() -> Self {
        DialerOptions {
            tick: Duration::from_millis(50),
            calls_per_tick: 5,
            time_scale: 0.001,
            new_calls_every: None,
            child_changes_without_bump: false,
        }
    }
}

impl DialerOptions {
    /// A dialer that never runs out of work, for `callsync simulate --dialer`: 1 to 10 new
    /// calls every 5 minutes besides the retries, at `time_scale` (1 is real time).
    pub fn endless(time_scale: f64) -> Self {
        DialerOptions {
            time_scale,
            new_calls_every: Some(Duration::from_secs(300)),
            ..DialerOptions::default()
        }
    }
}
