//! A schedule's place in the daemon: what a tick means for it (start a pass, skip it while one
//! runs, queue a reconciliation, back off after failures), decided without a clock.

use super::scheduler::Tick;
use crate::sync::PassResult;
use crate::warehouse::RunKind;

/// Ticks a failing schedule sits out at most (docs/troubleshooting.md, ARCHITECTURE.md: "1, 3, 7 … up to 31
/// ticks"): from the 6th failure in a row on.
const MAX_BACKOFF_TICKS: u32 = 31;

/// Each schedule's place in the daemon.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// The kind of the pass running now: passes of one schedule never overlap.
    pub(super) running: Option<RunKind>,
    /// A reconciliation tick found the schedule busy or backing off: it runs as soon as the
    /// schedule is free, rather than being lost (the sync and reconcile crons often fire in
    /// the same second).
    pub(super) reconcile_due: bool,
    pub(super) failures: u32,
    skip_ticks: u32,
}

/// What a tick means for one schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TickDecision {
    Start(RunKind),
    /// A sync tick while a pass runs: skipped, never queued behind it.
    StillRunning(RunKind),
    /// A reconcile tick while the schedule is busy or backing off: it runs when it may.
    ReconcileQueued {
        backing_off: bool,
    },
    /// A sync tick sat out after failures.
    BackingOff {
        failures: u32,
        ticks_left: u32,
    },
    /// A tick that starts no pass (a backup's).
    NoPass,
}

impl Slot {
    /// The daemon's decision for this schedule on a tick; pure, so it is tested without a
    /// clock, a cron or a service.
    pub(super) fn on_tick(&mut self, tick: Tick) -> TickDecision {
        match (tick, self.running) {
            (Tick::Sync, Some(running)) => TickDecision::StillRunning(running),
            (Tick::Reconcile, Some(_)) => {
                self.reconcile_due = true;
                TickDecision::ReconcileQueued { backing_off: false }
            }
            (Tick::Sync, None) if self.skip_ticks > 0 => {
                self.skip_ticks -= 1;
                TickDecision::BackingOff {
                    failures: self.failures,
                    ticks_left: self.skip_ticks,
                }
            }
            (Tick::Reconcile, None) if self.skip_ticks > 0 => {
                self.reconcile_due = true;
                TickDecision::ReconcileQueued { backing_off: true }
            }
            (Tick::Sync, None) => TickDecision::Start(RunKind::Incremental),
            (Tick::Reconcile, None) => TickDecision::Start(RunKind::Reconcile),
            (Tick::Backup, _) => TickDecision::NoPass,
        }
    }

    /// A pass of this schedule ended with `result`; `true` when a queued reconciliation
    /// should start now.
    pub(super) fn on_done(&mut self, result: &PassResult) -> bool {
        self.running = None;
        match result {
            PassResult::Failed { .. } => {
                self.failures += 1;
                self.skip_ticks = backoff_ticks(self.failures);
            }
            // Behind is no failure: the pass moved the checkpoint as far as it may, and the
            // next one should start as soon as its tick comes.
            PassResult::Completed | PassResult::Behind => {
                self.failures = 0;
                self.skip_ticks = 0;
            }
            PassResult::Interrupted | PassResult::ClaimLost(_) | PassResult::Skipped(_) => {}
        }
        self.reconcile_due && self.skip_ticks == 0
    }
}

/// Ticks to sit out after `failures` failures in a row: 0, 1, 3, 7 … (2^(failures−1) − 1),
/// capped at [`MAX_BACKOFF_TICKS`], the only cap.
pub fn backoff_ticks(failures: u32) -> u32 {
    let doubled = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    (doubled - 1).min(MAX_BACKOFF_TICKS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn failed() -> PassResult {
        PassResult::Failed {
            kind: ErrorKind::Service,
            error: "HTTP 500".into(),
        }
    }

    /// Runs `result` as the outcome of the pass a sync tick starts, if it starts one.
    fn tick_and_finish(slot: &mut Slot, result: PassResult) -> TickDecision {
        let decision = slot.on_tick(Tick::Sync);
        if let TickDecision::Start(kind) = decision {
            slot.running = Some(kind);
            slot.on_done(&result);
        }
        decision
    }

    #[test]
    fn a_failing_schedule_sits_out_1_3_7_ticks_and_one_good_pass_ends_it() {
        let mut slot = Slot::default();
        let mut started = Vec::new();
        for tick in 0..16 {
            if let TickDecision::Start(_) = tick_and_finish(&mut slot, failed()) {
                started.push(tick);
            }
        }
        // Failures 1, 2, 3, 4 sit out 0, 1, 3, 7 ticks.
        assert_eq!(started, [0, 1, 3, 7, 15]);
        // Behind is no failure: the cadence is back at once.
        slot.skip_ticks = 0;
        assert_eq!(
            tick_and_finish(&mut slot, PassResult::Behind),
            TickDecision::Start(RunKind::Incremental)
        );
        assert_eq!((slot.failures, slot.skip_ticks), (0, 0));
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::Start(RunKind::Incremental)
        );
    }

    #[test]
    fn passes_never_overlap_and_a_reconciliation_is_queued_not_lost() {
        let mut slot = Slot::default();
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::Start(RunKind::Incremental)
        );
        slot.running = Some(RunKind::Incremental);
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::StillRunning(RunKind::Incremental)
        );
        assert_eq!(
            slot.on_tick(Tick::Reconcile),
            TickDecision::ReconcileQueued { backing_off: false }
        );
        // The running pass ends: the queued reconciliation starts now.
        assert!(slot.on_done(&PassResult::Completed));
        // A reconciliation during backoff waits for the backoff to end.
        let mut slot = Slot {
            running: Some(RunKind::Incremental),
            ..Slot::default()
        };
        assert!(!slot.on_done(&failed()));
        assert!(!slot.on_done(&failed()));
        assert_eq!(
            slot.on_tick(Tick::Reconcile),
            TickDecision::ReconcileQueued { backing_off: true }
        );
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::BackingOff {
                failures: 2,
                ticks_left: 0
            }
        );
        assert!(slot.on_done(&PassResult::Completed));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let ticks: Vec<u32> = (1..=8).map(backoff_ticks).collect();
        assert_eq!(ticks, vec![0, 1, 3, 7, 15, 31, 31, 31]);
        // The cap is the constant, reached at the 6th failure, and holds however many follow.
        assert_eq!(MAX_BACKOFF_TICKS, 31);
        assert_eq!(backoff_ticks(5), 15);
        assert_eq!(backoff_ticks(6), MAX_BACKOFF_TICKS);
        for failures in [7, 31, 32, 33, 1_000, u32::MAX] {
            assert_eq!(backoff_ticks(failures), MAX_BACKOFF_TICKS, "{failures}");
        }
        assert_eq!(backoff_ticks(0), 0);
    }

    /// At the cap the schedule sits out exactly MAX_BACKOFF_TICKS sync ticks, and the next
    /// one starts a pass.
    #[test]
    fn at_the_cap_a_schedule_sits_out_31_ticks_then_starts() {
        let mut slot = Slot {
            failures: 40,
            running: Some(RunKind::Incremental),
            ..Slot::default()
        };
        slot.on_done(&failed());
        let mut sat_out = 0;
        let next = loop {
            match slot.on_tick(Tick::Sync) {
                TickDecision::BackingOff { failures: 41, .. } => sat_out += 1,
                other => break other,
            }
        };
        assert_eq!(sat_out, MAX_BACKOFF_TICKS);
        assert_eq!(sat_out, 31);
        assert_eq!(next, TickDecision::Start(RunKind::Incremental));
    }
}
