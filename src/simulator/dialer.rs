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
//! `time_scale` real seconds each; the numbers the service reports (`duration`,
//! `retry_intervals`) stay nominal.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rand::Rng;
use rand::seq::IndexedRandom;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::life::{self, AttemptPlan, Pace};
use super::state::State;
use super::{DialerOptions, Shared, seed};
use crate::api::{NewCall, Timestamp};

pub async fn run(shared: Arc<Shared>, options: DialerOptions, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(options.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dialer = Dialer::default();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if shared.dialer_running.load(Ordering::SeqCst) {
            dialer.tick(&shared, &options);
        }
    }
}

/// An attempt under way: decided when it started, recorded when it ends.
struct InFlight {
    call: Uuid,
    plan: AttemptPlan,
    started: Timestamp,
    ends: Timestamp,
}

#[derive(Default)]
struct Dialer {
    in_flight: Vec<InFlight>,
    next_arrival: Option<Timestamp>,
}

impl Dialer {
    fn tick(&mut self, shared: &Shared, options: &DialerOptions) {
        let mut state = shared.state();
        // Re-checked under the lock: `set_dialer_running(false)` takes it after storing.
        if !shared.dialer_running.load(Ordering::SeqCst) {
            return;
        }
        let mut rng = shared.rng();
        let rng = &mut *rng;
        let now = state.now();
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
            state.update_call(call, shared.late_commit);
        }

        if let Some(every) = options.new_calls_every {
            let every = every.as_secs();
            let next = *self
                .next_arrival
                .get_or_insert_with(|| pace.after(now, every));
            if next <= now {
                arrive(&mut state, rng);
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
fn arrive(state: &mut State, rng: &mut impl Rng) {
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
    let _ = state.create_calls(schedule, entries, true, rng);
}
