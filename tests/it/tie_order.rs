//! A service that does not keep the order of calls sharing an `updated_at` (drawn anew for
//! every request, or by each request's `LIMIT` as a top-N sort): every group is read whole,
//! or the pass fails loudly with its checkpoint held at the group; never an exit 0 with a
//! call of a read group missing. Both destinations, both unstable orders.

use std::time::Duration;

use callsync::ErrorKind;
use callsync::service::Timestamp;
use callsync::simulator::{DialerOptions, ManualClock, Precision, SimulatorOptions, TieOrder};
use callsync::sync::{PassReport, PassResult};

use crate::harness::{Dest, TestEnv};

/// Past the late-commit window (`sync.lookback`, 5 s in tests): a group this old can be
/// proven read.
const PAST_LOOKBACK: Duration = Duration::from_secs(10);

fn start_clock() -> ManualClock {
    ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap())
}

/// A pass that did not complete failed loudly on a group it could not prove whole: a
/// `protocol` failure naming the group's instant and size.
fn completed_or_failed_loudly(report: &PassReport) {
    match &report.result {
        PassResult::Completed => {}
        PassResult::Failed {
            kind: ErrorKind::Protocol,
            error,
        } => assert!(
            error.contains("calls sharing updated_at") && error.contains("the checkpoint stays at"),
            "{error}"
        ),
        other => panic!("pass of {}: {other:?}", report.schedule),
    }
}

conformance!(
    tie_groups_of_every_shape_are_read_whole,
    tie_groups_of_every_shape_are_read_whole,
    [
        shuffled => callsync::simulator::TieOrder::Shuffled,
        top_n => callsync::simulator::TieOrder::TopN,
    ]
);

async fn tie_groups_of_every_shape_are_read_whole(dest: Dest, order: TieOrder) {
    let clock = start_clock();
    let env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            clock: clock.clone().into(),
            tie_order: order,
            schedules: 4,
            calls_per_schedule: 0,
            seed: 11,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    // A 1,000-call bulk upload, then more; a group on a page edge at the end of the data; a
    // group on a page edge before more data; nothing.
    env.sim.bulk_create_now(s[0], 1000);
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[0], 37);
    env.sim.bulk_create_now(s[1], 200);
    env.sim.bulk_create_now(s[2], 300);
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[2], 5);

    // Younger than the late-commit window, a group cannot be proven read under such an
    // order: the pass says so, and the next pass (the groups older) reads them whole.
    for report in env.pass(&s).await {
        completed_or_failed_loudly(&report);
    }
    clock.advance(PAST_LOOKBACK);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);

    // More groups on top of a synced warehouse, read once old enough.
    env.sim.bulk_create_now(s[1], 100);
    env.sim.bulk_create_now(s[3], 1000);
    clock.advance(PAST_LOOKBACK);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    bulk_groups_dialled_while_paged_lose_nothing,
    bulk_groups_dialled_while_paged_lose_nothing,
    [
        shuffled => callsync::simulator::TieOrder::Shuffled,
        top_n => callsync::simulator::TieOrder::TopN,
    ]
);

async fn bulk_groups_dialled_while_paged_lose_nothing(dest: Dest, order: TieOrder) {
    // Two 500-call bulk uploads dialled while the walk pages through them (the calls
    // leave the groups as they change), and new calls: passes during the churn may fail
    // loudly on a group that changed under every read; once the dialer stops, a pass reads
    // everything.
    let clock = start_clock();
    let env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            clock: clock.clone().into(),
            tie_order: order,
            schedules: 2,
            calls_per_schedule: 0,
            seed: 12,
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(5),
                calls_per_tick: 5,
                ..DialerOptions::default()
            }),
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    env.sim.set_dialer_running(false);
    let s = env.schedules();
    for schedule in &s {
        env.sim.bulk_create_now(*schedule, 500);
    }
    clock.advance(PAST_LOOKBACK);
    env.sim.set_dialer_running(true);
    for _ in 0..2 {
        let churn = async {
            for _ in 0..5 {
                clock.advance(Duration::from_millis(200));
                // Injected delay: spreads the dialer's changes over the walk's requests.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let (reports, ()) = tokio::join!(env.pass(&s), churn);
        for report in &reports {
            completed_or_failed_loudly(report);
        }
    }
    env.sim.set_dialer_running(false);
    clock.advance(PAST_LOOKBACK);
    env.sim.settle().await;
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    late_commits_into_seeded_groups_are_caught,
    late_commits_into_seeded_groups_are_caught,
    [
        shuffled => callsync::simulator::TieOrder::Shuffled,
        top_n => callsync::simulator::TieOrder::TopN,
    ]
);

async fn late_commits_into_seeded_groups_are_caught(dest: Dest, order: TieOrder) {
    // Seeded history in groups of 150, a dialer whose changes become visible up to 1 s
    // after their stamps (the lookback, 5 s, covers it).
    let clock = start_clock();
    let env = TestEnv::start_on(
        SimulatorOptions {
            late_commit: Some(Duration::from_secs(1)),
            clock: clock.clone().into(),
            tie_order: order,
            tie_group: 150,
            schedules: 2,
            calls_per_schedule: 600,
            seed: 13,
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(10),
                calls_per_tick: 3,
                ..DialerOptions::default()
            }),
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    for _ in 0..3 {
        for report in env.pass(&s).await {
            completed_or_failed_loudly(&report);
        }
        clock.advance(Duration::from_millis(300));
    }
    env.sim.set_dialer_running(false);
    env.sim.settle().await;
    clock.advance(PAST_LOOKBACK);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}
