//! Every pass ends, bounded by the service's clock, and the checkpoint never passes it.

use std::time::Duration;

use callsync::service::Timestamp;
use callsync::simulator::{ManualClock, SimulatorOptions};
use callsync::sync::{PassReport, PassResult};
use callsync::warehouse::Destination;
use callsync::warehouse::sqlite::Warehouse;
use uuid::Uuid;

use crate::harness::{PATIENCE, TestEnv};

fn checkpoint(env: &TestEnv, schedule: Uuid) -> Timestamp {
    Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
        .expect("warehouse opens")
        .checkpoint(schedule)
        .expect("checkpoint reads")
        .expect("a checkpoint")
        .cursor
}

/// A pass that must end: a hang guard, not a timing assertion (it ends in well under a
/// second; only a pass without an end reaches the guard).
async fn bounded_pass(env: &TestEnv, schedule: Uuid) -> PassReport {
    tokio::time::timeout(Duration::from_secs(120), env.pass(&[schedule]))
        .await
        .expect("a pass under churn ends")
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_changing_faster_than_they_may_be_read_still_end_every_pass() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 400,
        seed: 11,
        ..SimulatorOptions::default()
    })
    .await;
    // 5 requests/s of 10 calls: at most 50 calls/s read, while 5 calls change every 2 ms
    // (about 2,500/s). Groups of 5 never fill a page, so only the horizon can end a pass.
    env.config.api.requests_per_second = Some(5);
    env.config.sync.page_size = 10;
    // Any lag is too much: every pass that stops at its horizon with changes waiting ends
    // behind, so that the status can be checked.
    env.config.sync.behind_after = Duration::ZERO;
    let schedule = env.schedules()[0];
    let uids: Vec<Uuid> = env.sim.truth(schedule).iter().map(|c| c.uid).collect();
    let churn = async {
        for next in 0usize.. {
            let batch: Vec<Uuid> = (0..5).map(|i| uids[(next + i * 79) % uids.len()]).collect();
            env.sim.touch_calls(&batch);
            // Injected delay: paces the churn (any pace above 50 calls/s outruns the reads).
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let passes = async {
        let mut previous: Option<Timestamp> = None;
        for pass in 0..3 {
            let report = bounded_pass(&env, schedule).await;
            assert_eq!(report.result, PassResult::Behind, "pass {pass}");
            assert!(report.horizon.is_some(), "pass {pass} knows its horizon");
            let now = checkpoint(&env, schedule);
            if let Some(before) = previous {
                assert!(
                    now > before,
                    "pass {pass} moved the checkpoint: {before} -> {now}"
                );
            }
            previous = Some(now);
        }
    };
    tokio::select! {
        () = churn => unreachable!("the churn never stops by itself"),
        () = passes => {}
    }
    let status = Warehouse::open_read_only(&env.warehouse_path())
        .expect("warehouse")
        .status()
        .expect("status");
    assert_eq!(
        (status[0].behind_passes, status[0].falling_behind),
        (3, true)
    );
    // The passes spent their time waiting for the 5 requests/s ceiling, and status says so.
    assert!(
        status[0].slowed_by.iter().any(|r| r == "rate limit"),
        "{:?}",
        status[0].slowed_by
    );
    // Everything changed before the next pass began is read by it.
    let last = bounded_pass(&env, schedule).await;
    assert_eq!(last.result, PassResult::Completed);
    env.assert_matches_truth(&[schedule]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stamped_in_the_future_never_carries_the_checkpoint_past_the_services_clock() {
    // The service's clock stands still unless the test moves it: what the checkpoint and the
    // lag are measured against does not move with the machine's speed.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 60,
        seed: 12,
        clock: clock.clone().into(),
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    let uids: Vec<Uuid> = env.sim.truth(schedule).iter().map(|c| c.uid).collect();
    env.pass_ok(&[schedule]).await;

    // PATIENCE bounds the real time a pass takes (callsync's estimate of the service's clock
    // moves with it between two answers); only a hang reaches a minute.
    // Both further ahead than the patience, so a checkpoint that followed them cannot pass.
    for ahead in [
        Duration::from_secs(120),
        Duration::from_secs(80 * 365 * 86_400),
    ] {
        // One node's clock runs ahead: a call stamped that far in the future.
        let stamped = clock.now().saturating_add(ahead);
        env.sim.stamp_call(uids[0], stamped);
        let report = env.pass_ok(&[schedule]).await.remove(0);
        assert_eq!(report.stats.future_rows, 1, "{ahead:?}: reported");
        let cursor = checkpoint(&env, schedule);
        // At most the end of the `Date`'s second, plus the pass's own time.
        assert!(
            cursor
                < clock
                    .now()
                    .saturating_add(Duration::from_secs(1) + PATIENCE),
            "{ahead:?}: the checkpoint {cursor} stays at the service's clock ({})",
            clock.now()
        );
        // Calls changed after it (stamped by the service's own clock) are not skipped.
        clock.advance(Duration::from_secs(1));
        env.sim.touch_calls(&uids[1..10]);
        let next = env.pass_ok(&[schedule]).await.remove(0);
        assert!(
            next.stats.calls_written >= 9,
            "{ahead:?}: the 9 calls changed since were synced: {next:?}"
        );
        // The future call is still read (not rewritten) until time catches up with it.
        assert_eq!(next.stats.future_rows, 1, "{ahead:?}: read again");
        env.assert_matches_truth(&[schedule]);
        let status = Warehouse::open_read_only(&env.warehouse_path())
            .expect("warehouse")
            .status()
            .expect("status");
        let run = status[0].last_run.as_ref().expect("a run");
        assert_eq!(run.figures.future_rows, 1);
        let lag = run.figures.lag_secs.expect("a lag");
        // The service's clock stood still: the lag is the `Date`'s rounding and the pass's own
        // time, never the future call's distance.
        let patience = PATIENCE.as_secs_f64();
        assert!(lag > -patience && lag < patience, "{ahead:?}: lag {lag}");
        // Back to the present for the next case.
        env.sim.stamp_call(uids[0], clock.now());
        env.pass_ok(&[schedule]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_horizon_is_the_date_the_service_sends_from_its_clock() {
    let at = |text: &str| Timestamp::parse(text).unwrap();
    let clock = ManualClock::new(at("2025-06-01T08:00:00.250Z"));
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 50,
        seed: 13,
        clock: clock.clone().into(),
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    // `Date: Sun, 01 Jun 2025 08:00:00 GMT`: the service's clock was within that second.
    let first = env.pass_ok(&[schedule]).await.remove(0);
    assert_eq!(first.horizon, Some(at("2025-06-01T08:00:01Z")));
    env.assert_matches_truth(&[schedule]);

    clock.advance(Duration::from_secs(3600));
    let touched = env.sim.truth(schedule)[7].uid;
    env.sim.touch_calls(&[touched]);
    let next = env.pass_ok(&[schedule]).await.remove(0);
    assert_eq!(next.horizon, Some(at("2025-06-01T09:00:01Z")));
    assert_eq!(next.stats.calls_written, 1);
    // The touched call, stamped by the clock, is where the walk ended.
    assert_eq!(checkpoint(&env, schedule), at("2025-06-01T09:00:00.250Z"));
    env.assert_matches_truth(&[schedule]);
}
