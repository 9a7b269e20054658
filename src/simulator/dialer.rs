//! The dialer: moves calls of enabled schedules along while clients page.
//!
//! Each tick picks calls at random and dials them (a new attempt, outcome, variables,
//! sometimes a notification; status, progress, attempts_remaining and cooldown move on),
//! stamping `updated_at` with the service's clock — or, with late commits on, making the
//! change visible only later. With `child_changes_without_bump`, some ticks change only a
//! call's children and leave `updated_at` alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::{DialerOptions, Shared, life};

pub async fn run(shared: Arc<Shared>, options: DialerOptions, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(options.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if shared.dialer_running.load(Ordering::SeqCst) {
            tick(&shared, &options);
        }
    }
}

fn tick(shared: &Shared, options: &DialerOptions) {
    let mut state = shared.state();
    // Re-checked under the lock: `set_dialer_running(false)` takes it after storing.
    if !shared.dialer_running.load(Ordering::SeqCst) || state.all_calls.is_empty() {
        return;
    }
    let mut rng = shared.rng();
    let now = state.now();
    for _ in 0..options.calls_per_tick {
        let uid = state.all_calls[rng.random_range(0..state.all_calls.len())];
        let enabled = state
            .calls
            .get(&uid)
            .and_then(|c| state.schedules.get(&c.schedule))
            .is_some_and(|s| s.schedule.is_enabled);
        let Some(mut call) = state.latest(uid).cloned().filter(|_| enabled) else {
            continue;
        };
        if options.child_changes_without_bump && rng.random_bool(0.3) {
            if life::child_change(&mut call, now, &mut *rng) {
                state.update_call(call, None);
            }
        } else if call.status != "completed" {
            life::dial(&mut call, now, &mut *rng);
            call.updated_at = now;
            state.update_call(call, shared.late_commit);
        }
    }
}
