//! The dialer: works the queues of enabled schedules while clients page, as a call centre
//! would, so that calls change in the ways and at the pace the service's would.
//!
//! Every tick it
//! 1. finishes the attempts whose end has come: the call gets its attempt (outcome, variable,
//!    sometimes a notification) and moves on — completed, or pending with `cooldown_until` =
//!    the attempt's end + the next retry interval — stamped with the service's clock (or, with
//!    late commits on, made visible only later);
//! 2. lets a batch of 1 to 10 new calls arrive every `new_calls_every` (if set), on a random
//!    enabled schedule, through the create path of a bulk request with `force=true`, so there
//!    is always new work;
//! 3. with `child_changes_without_bump`, changes some dialled calls' children only, leaving
//!    `updated_at` alone;
//! 4. starts up to `calls_per_tick` attempts on calls whose time has come (new, or out of
//!    their cooldown) in enabled schedules within their window. An attempt is not visible
//!    until it ends.
//!
//! Spans (ringing, talk, retry intervals, arrivals) are nominal seconds, run at
//! `time_scale` seconds of the simulator's clock each; the numbers the service reports
//! (`duration`, `retry_intervals`) stay nominal. Ticks fall on that clock too, so under a
//! test's manual clock the dialer works exactly as far as the test moved the clock.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, RngExt};
use uuid::Uuid;

use super::life::{self, AttemptPlan, Pace};
use super::options::DialerOptions;
use super::seed;
use super::state::State;
use crate::service::{NewCall, Timestamp};

/// The shortest tick: a zero tick would never let time pass.
pub(super) const MIN_TICK: Duration = Duration::from_millis(1);

/// An attempt under way: decided when it started, recorded when it ends.
struct InFlight {
    call: Uuid,
    plan: AttemptPlan,
    started: Timestamp,
    ends: Timestamp,
}

/// The dialer's own state. Its ticks fall on the simulator's clock, every `tick` from the
/// start; they run when the state is next used ([`Dialer::catch_up`]), each at its own
/// instant, so what a request sees depends on the clock, not on when a task was scheduled.
pub struct Dialer {
    options: DialerOptions,
    next_tick: Timestamp,
    /// Its own stream of the seed: how many ticks ran before a request (and its faults) drew
    /// from the runtime stream must not change what either draws.
    rng: StdRng,
    in_flight: Vec<InFlight>,
    next_arrival: Option<Timestamp>,
}

impl Dialer {
    pub fn new(options: DialerOptions, start: Timestamp, rng: StdRng) -> Self {
        let tick = options.tick.max(MIN_TICK);
        Dialer {
            options: DialerOptions { tick, ..options },
            next_tick: start.saturating_add(tick),
            rng,
            in_flight: Vec::new(),
            next_arrival: None,
        }
    }

    /// Runs, in order, every tick due by `now`; while the dialer is not `running` they pass
    /// without work. A late commit becomes visible `late_commit` after its tick.
    pub fn catch_up(
        &mut self,
        state: &mut State,
        now: Timestamp,
        running: bool,
        late_commit: Option<Duration>,
    ) {
        while self.next_tick <= now {
            let at = self.next_tick;
            self.next_tick = at.saturating_add(self.options.tick);
            if self.next_tick == at {
                return;
            }
            if running {
                self.tick(
                    state,
                    at.truncated(state.precision.unit_nanos()),
                    late_commit,
                );
            }
        }
    }

    fn tick(&mut self, state: &mut State, now: Timestamp, late_commit: Option<Duration>) {
        let options = &self.options;
        let rng = &mut self.rng;
        let pace = Pace {
            scale: options.time_scale,
            unit_nanos: state.precision.unit_nanos(),
        };

        let (ended, going): (Vec<InFlight>, Vec<InFlight>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|a| a.ends <= now);
        self.in_flight = going;
        for attempt in ended {
            let Some(mut call) = state.latest(attempt.call).cloned() else {
                continue;
            };
            life::record_attempt(&mut call, &attempt.plan, attempt.started, pace, now, rng);
            call.updated_at = now;
            state.requeue(&call);
            state.update_call(call, late_commit.map(|delay| now.saturating_add(delay)));
        }

        if let Some(every) = options.new_calls_every {
            let every = every.as_secs();
            let next = *self
                .next_arrival
                .get_or_insert_with(|| pace.after(now, every));
            if next <= now {
                arrive(state, now, rng);
                self.next_arrival = Some(pace.after(now, every));
            }
        }

        if options.child_changes_without_bump && !state.all_calls.is_empty() {
            for _ in 0..options.calls_per_tick {
                if !rng.random_bool(0.3) {
                    continue;
                }
                let uid = state.all_calls[rng.random_range(0..state.all_calls.len())];
                if let Some(mut call) = state.latest(uid).cloned()
                    && life::child_change(&mut call, now, rng)
                {
                    state.update_call(call, None);
                }
            }
        }

        for uid in state.take_due(now, options.calls_per_tick) {
            let Some(call) = state.latest(uid) else {
                continue;
            };
            // The queue follows the dialer's own changes; this guards against any other.
            if !life::dialable(call, now) {
                let call = call.clone();
                state.requeue(&call);
                continue;
            }
            let plan = AttemptPlan::draw(rng);
            let ends = pace.after(now, plan.length_secs());
            self.in_flight.push(InFlight {
                call: uid,
                plan,
                started: now,
                ends,
            });
        }
    }
}

/// New calls arriving: 1 to 10 contacts on a random enabled schedule, as one bulk request
/// with `force=true` would create them.
fn arrive(state: &mut State, now: Timestamp, rng: &mut impl Rng) {
    let enabled: Vec<Uuid> = state
        .schedule_order
        .iter()
        .filter(|uid| {
            state
                .schedules
                .get(uid)
                .is_some_and(|s| s.schedule.is_enabled)
        })
        .copied()
        .collect();
    let Some(&schedule) = enabled.choose(rng) else {
        return;
    };
    let first = state.call_count();
    let entries: Vec<NewCall> = (first..first + rng.random_range(1..=10))
        .map(|n| seed::contact(rng, n))
        .collect();
    // Cannot be refused: the schedule exists, and force=true is what lets calls in.
    let _ = state.create_calls(schedule, entries, true, now, rng);
}
