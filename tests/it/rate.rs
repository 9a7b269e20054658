//! The request rate adapts to a service that rate-limits, and schedules share it.

use callsync::service::Timestamp;
use callsync::simulator::{FaultPlan, ManualClock, SimulatorOptions};
use callsync::sync::PassResult;

use crate::harness::{TestEnv, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_service_is_met_at_its_rate_and_every_schedule_is_synced() {
    // The quota's bucket refills on the service's clock, held still until the first 429:
    // the first burst meets the quota by construction (its 41st request), on a machine of any
    // speed, and the limiter must learn the rate from it.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00Z").unwrap());
    let env = TestEnv::start(SimulatorOptions {
        clock: clock.clone().into(),
        schedules: 3,
        calls_per_schedule: 200,
        seed: 21,
        // List items without children: every call needs a detail request, so the three
        // schedules' detail fetches compete for the quota.
        summary_list: true,
        faults: FaultPlan {
            quota_per_second: 40,
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    // The default configuration: no ceiling, the limiter learns the quota from the 429s.
    assert_eq!(env.config.api.requests_per_second, None);
    let refused = || env.sim.requests().iter().any(|r| r.status == 429);
    let (reports, ()) = tokio::join!(env.pass(&s), async {
        wait_for("the quota to refuse a request", refused).await;
        clock.run();
    });
    for report in &reports {
        assert_eq!(report.result, PassResult::Completed, "{report:?}");
    }
    env.assert_matches_truth(&s);

    let requests = env.sim.requests();
    let refused = requests.iter().filter(|r| r.status == 429).count();
    // The first run of 429s (in the order the requests came) are those in flight when the
    // quota ran out, as many as the client had out, which depends on the machine: nothing is
    // asserted of their number. From the first answer after it on, the limiter paces by the
    // rate it learned, whatever was in flight: a 429 after that is the rate climbing back past
    // the quota, one now and then, not a storm.
    let first = requests.iter().position(|r| r.status == 429);
    assert!(first.is_some(), "the first burst met the quota");
    let after_burst: Vec<u16> = (requests.iter().skip(first.unwrap_or_default()))
        .skip_while(|r| r.status == 429)
        .map(|r| r.status)
        .collect();
    let refused_later = after_burst.iter().filter(|s| **s == 429).count();
    assert!(
        refused_later * 20 < after_burst.len(),
        "{refused_later} of the {} requests after the first burst answered 429",
        after_burst.len()
    );
    let rate_limited: u64 = reports.iter().map(|r| r.stats.rate_limited).sum();
    assert_eq!(rate_limited, refused as u64);
    assert!(
        reports.iter().any(|r| r.stats.throttled_ms > 0),
        "the limiter held requests back: {reports:?}"
    );
}
