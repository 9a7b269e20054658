//! Issue 49's load: a campaign that never pauses (a dialer changing calls while passes run
//! back to back), bulk tie groups several pages long and older than the late-commit window,
//! pages in flight, and an ordinary bad day's faults (5 % 500/502/503, 3 % 429 with
//! `Retry-After`, 2 % bodies cut mid-way, 1 % answers late, OAuth tokens that live 3 s), so
//! that answers come back in any order and some twice. Under the stable order every pass
//! exits 0, its checkpoint moves, and the walk never takes the order for unstable (a false
//! verdict); under the two unstable orders a pass may only fail loudly, its checkpoint held
//! at the group; under all three, once the dialer stops, the warehouse equals the truth.

use std::time::Duration;

use callsync::service::Timestamp;
use callsync::simulator::{
    DialerOptions, FaultPlan, ManualClock, Precision, SimulatorOptions, TieOrder,
};

use crate::harness::{Auth, Dest, TestEnv};

/// Passes run back to back while the dialer works.
const PASSES_UNDER_CHURN: usize = 6;

fn bad_day() -> FaultPlan {
    FaultPlan {
        error_5xx_rate: 0.05,
        rate_429: 0.03,
        retry_after_secs: 1,
        truncate_rate: 0.02,
        slow_rate: 0.01,
        // Late enough to be answered after requests asked after it.
        slow_delay: Duration::from_millis(300),
        ..FaultPlan::default()
    }
}

conformance!(
    a_campaign_that_never_pauses_on_a_bad_day,
    a_campaign_that_never_pauses_on_a_bad_day,
    [
        stable => (callsync::simulator::TieOrder::Stable, 4901),
        shuffled => (callsync::simulator::TieOrder::Shuffled, 4902),
        top_n => (callsync::simulator::TieOrder::TopN, 4903),
    ]
);

async fn a_campaign_that_never_pauses_on_a_bad_day(dest: Dest, (order, seed): (TieOrder, u64)) {
    // Calls stamped to the millisecond, history ten minutes old in bulk ties of 300 (six
    // pages of 50 each), three schedules.
    // This machine's time, so that the service's `Date` is trusted (its clock and counts
    // are what the walk proves groups by).
    let clock = ManualClock::new(Timestamp::now());
    let mut env = TestEnv::start_with_on(
        SimulatorOptions {
            precision: Precision::Millis,
            clock: clock.clone().into(),
            tie_order: order,
            tie_group: 300,
            schedules: 3,
            calls_per_schedule: 900,
            seed: seed + if dest == Dest::Postgres { 100 } else { 0 },
            token_lifetime: Duration::from_secs(3),
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(5),
                calls_per_tick: 1,
                ..DialerOptions::default()
            }),
            faults: bad_day(),
            ..SimulatorOptions::default()
        },
        Auth::OAuth,
        dest,
    )
    .await;
    env.config.sync.page_size = 50;
    let s = env.schedules();
    let (mut verdicts, mut held) = (0, 0);
    for _ in 0..PASSES_UNDER_CHURN {
        let newest = |schedule| env.sim.truth(schedule).iter().map(|c| c.updated_at).max();
        let before: Vec<Option<Timestamp>> = s.iter().map(|&schedule| newest(schedule)).collect();
        let reports = while_the_campaign_runs(&clock, env.pass(&s)).await;
        for (report, newest_before) in reports.iter().zip(before) {
            // Every pass exits 0, on every order: a group that cannot be proven is held, not
            // failed, and the pass writes what follows it.
            assert!(
                report.succeeded(),
                "{order:?} under churn and faults: {:?}",
                report.result
            );
            verdicts += usize::from(report.unstable_tie_order);
            held += report.held_groups.len();
            if let Some(first) = report.held_groups.iter().map(|h| h.at).min() {
                assert!(
                    report.position <= Some(first),
                    "the checkpoint passed a held group"
                );
            } else {
                // Live: the checkpoint reaches the newest call the schedule had when the
                // pass began (the walk ends at a tie group at the end of the data, so
                // `position` is that group's instant, never before it).
                assert!(
                    report.position >= newest_before,
                    "the checkpoint of {} stayed at {:?}, before {newest_before:?}",
                    report.schedule,
                    report.position
                );
            }
        }
    }
    if order == TieOrder::Stable {
        assert_eq!(
            (verdicts, held),
            (0, 0),
            "false verdicts of an unstable order, and groups held"
        );
    }
    settle_and_compare(&env, &s, &clock).await;
}

/// `work`, while the simulator's clock runs at about real time (the dialer changing a call
/// every tick of 5 ms): the campaign goes on for as long as the pass does.
async fn while_the_campaign_runs<T>(clock: &ManualClock, work: impl Future<Output = T>) -> T {
    let campaign = async {
        loop {
            clock.advance(Duration::from_millis(5));
            // Injected delay: the clock's pace, spreading the dialer's changes over the
            // walk's requests.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        done = work => done,
        never = campaign => never,
    }
}

/// The dialer stopped and the faults gone, a pass reads everything: the warehouse equals
/// the truth.
async fn settle_and_compare(env: &TestEnv, s: &[uuid::Uuid], clock: &ManualClock) {
    env.sim.set_dialer_running(false);
    env.sim.settle().await;
    env.sim.set_faults(FaultPlan::default());
    clock.advance(Duration::from_secs(10));
    env.pass_ok(s).await;
    env.assert_matches_truth(s);
}
