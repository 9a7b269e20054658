//! Incremental sync against the simulator: after churn and a final pass, the warehouse equals
//! the service's truth, in every setting the service can throw at us.

use std::time::Duration;

use callsync::ErrorKind;
use callsync::config::DetailsMode;
use callsync::service::Timestamp;
use callsync::simulator::{
    BadBody, DialerOptions, FaultPlan, ManualClock, Precision, SimulatorOptions,
};
use callsync::sync::PassResult;
use callsync::warehouse::Destination;
use callsync::warehouse::WarehouseError;

use crate::harness::{Auth, Dest, TestEnv, wait_for};

fn options(schedules: usize, calls: usize) -> SimulatorOptions {
    SimulatorOptions {
        schedules,
        calls_per_schedule: calls,
        seed: 7,
        ..SimulatorOptions::default()
    }
}

conformance!(
    several_schedules_sync_exactly_and_a_second_pass_writes_nothing,
    several_schedules_sync_exactly_and_a_second_pass_writes_nothing
);

async fn several_schedules_sync_exactly_and_a_second_pass_writes_nothing(dest: Dest) {
    let env = TestEnv::start_on(options(3, 250), dest).await;
    let schedules = env.schedules();
    let first = env.pass_ok(&schedules).await;
    assert_eq!(
        first.iter().map(|r| r.stats.calls_written).sum::<u64>(),
        750
    );
    env.assert_matches_truth(&schedules);

    let before: Vec<_> = schedules.iter().map(|s| env.snapshot(*s)).collect();
    let second = env.pass_ok(&schedules).await;
    for r in &second {
        assert_eq!(r.stats.calls_written, 0, "idempotent: {r:?}");
    }
    let after: Vec<_> = schedules.iter().map(|s| env.snapshot(*s)).collect();
    assert_eq!(before, after);
}

conformance!(
    an_empty_schedule_syncs_to_nothing,
    an_empty_schedule_syncs_to_nothing
);

async fn an_empty_schedule_syncs_to_nothing(dest: Dest) {
    let env = TestEnv::start_on(options(1, 0), dest).await;
    let schedules = env.schedules();
    let reports = env.pass_ok(&schedules).await;
    assert_eq!(reports[0].stats.calls_seen, 0);
    env.assert_matches_truth(&schedules);
}

conformance!(
    tie_groups_at_second_precision_of_every_shape,
    tie_groups_at_second_precision_of_every_shape
);

async fn tie_groups_at_second_precision_of_every_shape(dest: Dest) {
    // The service's clock moves only when the test moves it: "a later second" by
    // construction, not by waiting for one.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            clock: clock.clone().into(),
            ..options(4, 0)
        },
        dest,
    )
    .await;
    let s = env.schedules();
    // A 1,000-call bulk upload (one updated_at), then more data after it.
    env.sim.bulk_create_now(s[0], 1000);
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[0], 37);
    // A tie group ending exactly on a page edge at the end of the data.
    env.sim.bulk_create_now(s[1], 200);
    // A tie group ending exactly on a page edge before more data.
    env.sim.bulk_create_now(s[2], 300);
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[2], 5);
    // s[3] stays empty.
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);

    // More ties arriving later, on top of a synced warehouse.
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[1], 100);
    env.sim.bulk_create_now(s[3], 1000);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    bulk_tie_groups_losing_rows_while_paged_sync_exactly,
    bulk_tie_groups_losing_rows_while_paged_sync_exactly
);

async fn bulk_tie_groups_losing_rows_while_paged_sync_exactly(dest: Dest) {
    // Second precision, a 1,000-call bulk upload per schedule with rows after it. While the
    // client pages through a group, rows leave it (an update stamps them with a later
    // second), shifting the rows under the scans.
    // The service's clock (and so the dialer) moves only when the test moves it.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let mut env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            clock: clock.clone().into(),
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(5),
                calls_per_tick: 5,
                ..DialerOptions::default()
            }),
            ..options(2, 0)
        },
        dest,
    )
    .await;
    env.sim.set_dialer_running(false);
    let s = env.schedules();
    let groups: Vec<Vec<uuid::Uuid>> = s
        .iter()
        .map(|s| env.sim.bulk_create_now(*s, 1000))
        .collect();
    clock.advance(Duration::from_secs(1));
    env.sim.bulk_create_now(s[0], 37);
    env.sim.bulk_create_now(s[1], 10);
    // Updates land in a later second than the groups', so rows leave them.
    clock.advance(Duration::from_secs(1));
    // Slow enough that the changes below meet the scans.
    env.config.api.requests_per_second = Some(100);
    // Whether the walk of `schedule` has asked for page `page` of a tie group.
    let reached = |schedule: uuid::Uuid, page: u32| {
        env.sim.requests().iter().any(|r| {
            r.path.contains(&schedule.to_string()) && r.query.contains(&format!("&page={page}&"))
        })
    };
    let asked_for = |schedule, page| async move {
        let what = format!("the walk of {schedule} to ask for page {page} of its tie group");
        wait_for(&what, || reached(schedule, page)).await;
    };

    // 100 rows, all read already by the upward scan (page 11 is past the group), leave at
    // once while the walk scans down: 900 remain, a multiple of the page size, with data
    // after them. The walk must complete in this very pass (it used to place its exit probe
    // from every uid ever seen, land past the group every time, and end in "did not settle"
    // after 8 scans although nothing changed any more).
    let leave = async {
        asked_for(s[0], 11).await;
        env.sim.touch_calls(&groups[0][..100]);
    };
    let (reports, ()) = tokio::join!(env.pass(&s[..1]), leave);
    assert_eq!(reports[0].result, PassResult::Completed);
    // The rows that left were stamped after the pass began: this pass reads them only if
    // they share its horizon's second, the next one certainly.
    env.pass_ok(&s[..1]).await;
    env.assert_matches_truth(&s[..1]);

    // Rows leaving the other group 50 at a time every 20 ms of the service's clock, the
    // dialer working meanwhile: the pass may give up on the group (the next one retries),
    // nothing else may go wrong.
    let churn = async {
        asked_for(s[1], 2).await;
        env.sim.set_dialer_running(true);
        for round in 0..12 {
            clock.advance(Duration::from_millis(20));
            env.sim
                .touch_calls(&groups[1][round * 50..(round + 1) * 50]);
            // Injected delay: spreads the changes over the walk's requests.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.sim.set_dialer_running(false);
    };
    let (reports, ()) = tokio::join!(env.pass(&s[1..]), churn);
    match &reports[0].result {
        PassResult::Completed => {}
        // A group that keeps changing breaks the walk's rules: the walk gives up on it.
        PassResult::Failed {
            kind: ErrorKind::Protocol,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    env.config.api.requests_per_second = None;
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    the_dialer_updating_calls_while_we_page_loses_nothing,
    the_dialer_updating_calls_while_we_page_loses_nothing
);

async fn the_dialer_updating_calls_while_we_page_loses_nothing(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(5),
                calls_per_tick: 5,
                ..DialerOptions::default()
            }),
            ..options(2, 600)
        },
        dest,
    )
    .await;
    let s = env.schedules();
    for _ in 0..3 {
        env.pass_ok(&s).await;
    }
    env.sim.set_dialer_running(false);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    late_commits_within_the_lookback_are_caught,
    late_commits_within_the_lookback_are_caught
);

async fn late_commits_within_the_lookback_are_caught(dest: Dest) {
    // The service's clock (and so the dialer and the commits) moves only when the test
    // moves it.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let env = TestEnv::start_on(
        SimulatorOptions {
            late_commit: Some(Duration::from_secs(1)),
            clock: clock.clone().into(),
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(10),
                calls_per_tick: 3,
                ..DialerOptions::default()
            }),
            ..options(2, 300)
        },
        dest,
    )
    .await;
    let s = env.schedules();
    for _ in 0..3 {
        env.pass_ok(&s).await;
        // 300 ms of the service's work between passes, some of it committed late.
        clock.advance(Duration::from_millis(300));
    }
    env.sim.set_dialer_running(false);
    // Every late change becomes visible within δ (the clock moves there); the lookback
    // (5 s) covers it.
    env.sim.settle().await;
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    faults_and_three_second_tokens_are_ridden_out,
    faults_and_three_second_tokens_are_ridden_out
);

async fn faults_and_three_second_tokens_are_ridden_out(dest: Dest) {
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let mut env = TestEnv::start_with_on(
        SimulatorOptions {
            token_lifetime: Duration::from_secs(3),
            faults: FaultPlan {
                error_5xx_rate: 0.1,
                rate_429: 0.05,
                retry_after_secs: 1,
                slow_rate: 0.05,
                slow_delay: Duration::from_millis(200),
                truncate_rate: 0.05,
                quota_per_second: 0,
                hold_write_answers: Duration::ZERO,
                delay_writes: Duration::ZERO,
                date_skew_secs: 0,
                lone_surrogate_rate: 0.0,
            },
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(20),
                calls_per_tick: 3,
                ..DialerOptions::default()
            }),
            // Faults follow the seed: with 7, 429s land at the start of passes, where the
            // limiter's cut leaves about 1 request a second, and the test took 40 s, not 11.
            seed: 11,
            // The service's clock (the dialer, token expiry) moves only when the test moves it.
            clock: clock.clone().into(),
            ..options(2, 400)
        },
        Auth::OAuth,
        dest,
    )
    .await;
    // Small pages: over a hundred requests, so faults are certain to hit some.
    env.config.sync.page_size = 20;
    let s = env.schedules();
    let mut retries = 0;
    for _ in 0..3 {
        let reports = env.pass_ok(&s).await;
        retries += reports.iter().map(|r| r.stats.retries).sum::<u64>();
        // A second of the service's work between passes; after three its tokens expired.
        clock.advance(Duration::from_secs(1));
    }
    assert!(
        retries > 0,
        "faults were injected, so some requests were retried"
    );
    env.sim.set_dialer_running(false);
    env.sim.set_faults(FaultPlan::default());
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

conformance!(
    summary_lists_are_completed_from_the_detail_endpoint,
    summary_lists_are_completed_from_the_detail_endpoint
);

async fn summary_lists_are_completed_from_the_detail_endpoint(dest: Dest) {
    // The service's clock (and so the dialer) moves only when the test moves it.
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let env = TestEnv::start_on(
        SimulatorOptions {
            summary_list: true,
            clock: clock.clone().into(),
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(5),
                calls_per_tick: 10,
                ..DialerOptions::default()
            }),
            ..options(1, 200)
        },
        dest,
    )
    .await;
    let s = env.schedules();
    // 300 ms of the dialer's work: attempts with outcomes and variables the list leaves out.
    clock.advance(Duration::from_millis(300));
    env.sim.set_dialer_running(false);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

/// The spec does not promise that a call's detail is at least as new as its list item. A
/// detail endpoint answering an older version (a replica behind the list's) fails the pass
/// loudly, naming the call, with its page unwritten and the checkpoint held: written, the
/// older version would have stayed while the checkpoint passed the newer one's instant.
/// Once the detail has caught up, the next pass leaves the warehouse equal to the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detail_older_than_its_list_item_fails_the_pass_and_the_next_writes_the_newer() {
    let clock = ManualClock::new(Timestamp::parse("2026-03-01T12:00:00.250Z").unwrap());
    let env = TestEnv::start(SimulatorOptions {
        summary_list: true,
        clock: clock.clone().into(),
        ..options(1, 120)
    })
    .await;
    let s = env.schedules();
    env.pass_ok(&s).await;
    let checkpoint = || {
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .and_then(|w| w.checkpoint(s[0]))
            .expect("the checkpoint reads")
            .expect("the first pass wrote one")
            .cursor
    };
    let (held, written) = (checkpoint(), env.snapshot(s[0]));

    let calls = env.sim.truth(s[0]);
    let lagging = calls[7].uid;
    env.sim.freeze_detail(lagging);
    clock.advance(Duration::from_secs(5));
    env.sim.touch_calls(&[calls[3].uid, lagging, calls[9].uid]);
    let report = env.pass(&s).await.remove(0);
    let PassResult::Failed {
        kind: ErrorKind::Protocol,
        error,
    } = &report.result
    else {
        panic!("a detail older than its list item fails the pass: {report:?}");
    };
    assert!(
        error.contains(&format!("call {lagging}")) && error.contains("older than"),
        "the error names the call and what is wrong: {error}"
    );
    assert_eq!(checkpoint(), held, "the checkpoint is held");
    assert_eq!(
        env.snapshot(s[0]),
        written,
        "nothing of the page is written"
    );

    env.sim.thaw_details();
    let report = env.pass_ok(&s).await.remove(0);
    assert_eq!(report.stats.calls_written, 3);
    env.assert_matches_truth(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_response_fails_its_schedule_only_and_writes_nothing_partial() {
    for bad in [
        BadBody::InvalidJson,
        BadBody::MissingRequiredField,
        BadBody::HtmlErrorPage,
    ] {
        let mut env = TestEnv::start(options(2, 150)).await;
        env.config.api.retry.max_attempts = 2;
        let s = env.schedules();
        env.sim.break_schedule(s[0], Some(bad));
        let reports = env.pass(&s).await;
        let PassResult::Failed {
            kind: ErrorKind::BadResponse,
            error,
        } = &reports[0].result
        else {
            panic!(
                "{bad:?}: the broken schedule must fail, got {:?}",
                reports[0]
            );
        };
        assert!(
            error.contains(&format!("/schedules/{}/outbound_calls", s[0])),
            "{bad:?}: the error names the request: {error}"
        );
        assert!(
            reports[1].succeeded(),
            "{bad:?}: the other schedule goes on"
        );
        assert_eq!(
            env.snapshot(s[0]).calls.len(),
            0,
            "{bad:?}: nothing written"
        );
        env.assert_matches_truth(&s[1..]);

        env.sim.break_schedule(s[0], None);
        env.pass_ok(&s).await;
        env.assert_matches_truth(&s);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_filters_reach_the_service() {
    let mut env = TestEnv::start(options(1, 300)).await;
    env.config.sync.filter.is_test_call = Some(false);
    env.config.sync.filter.status = vec!["completed".into()];
    let s = env.schedules();
    env.pass_ok(&s).await;
    let expected: Vec<_> = env
        .sim
        .truth(s[0])
        .into_iter()
        .filter(|c| c.is_test_call == Some(false) && c.status == "completed")
        .collect();
    assert!(!expected.is_empty());
    env.assert_holds(s[0], &expected);
    let lists: Vec<_> = env
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/outbound_calls"))
        .collect();
    assert!(!lists.is_empty());
    for r in lists {
        assert!(
            r.query.contains("status=completed") && r.query.contains("is_test_call=false"),
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_modes_decide_detail_requests() {
    let detail_requests = |env: &TestEnv| {
        env.sim
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/api/v1/outbound_calls/"))
            .count()
    };
    // never: summary list items are written as they are; attempts known, outcomes unknown.
    let mut env = TestEnv::start(SimulatorOptions {
        summary_list: true,
        ..options(1, 150)
    })
    .await;
    env.config.sync.details = DetailsMode::Never;
    let s = env.schedules();
    env.pass_ok(&s).await;
    assert_eq!(detail_requests(&env), 0);
    let snap = env.snapshot(s[0]);
    let truth = env.sim.truth(s[0]);
    let attempts: usize = truth
        .iter()
        .map(|c| c.outbound_call_attempts.as_ref().map_or(0, Vec::len))
        .sum();
    assert!(attempts > 0);
    assert_eq!(snap.call_attempts.len(), attempts);
    assert_eq!(snap.attempt_outcomes.len(), 0, "outcomes were never listed");

    // always: one detail request per call, and the warehouse equals the truth.
    let mut env = TestEnv::start(options(1, 150)).await;
    env.config.sync.details = DetailsMode::Always;
    let s = env.schedules();
    env.pass_ok(&s).await;
    assert_eq!(detail_requests(&env), 150);
    env.assert_matches_truth(&s);
}

/// Summary list items of a walk long enough for quiet runs, every answer 20 ms away: each
/// page asked ahead brings its details, and still every call costs exactly one detail
/// request (none for a row the walk handed over already) and the warehouse equals the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_come_with_the_pages_asked_ahead_once_a_call() {
    let mut env = TestEnv::start(SimulatorOptions {
        summary_list: true,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_millis(20),
            ..FaultPlan::default()
        },
        ..options(1, 600)
    })
    .await;
    // 60 pages: the walk opens quiet runs, whose pages it asks ahead.
    env.config.sync.page_size = 10;
    env.config.api.detail_concurrency = 64;
    // Every call needs one (with `auto`, those without attempts would not).
    env.config.sync.details = DetailsMode::Always;
    let s = env.schedules();
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
    let requests = env.sim.requests();
    let details: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.path.strip_prefix("/api/v1/outbound_calls/"))
        .collect();
    let calls: std::collections::HashSet<&str> = details.iter().copied().collect();
    assert_eq!((details.len(), calls.len()), (600, 600));
    let counts = requests
        .iter()
        .filter(|r| r.path.ends_with("/outbound_calls") && r.query.ends_with("&page_size=1"))
        .count();
    assert!(counts > 0, "the walk read in quiet runs: {requests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_catches_changes_that_did_not_bump_updated_at() {
    let env = TestEnv::start(SimulatorOptions {
        summary_list: true,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(5),
            calls_per_tick: 5,
            child_changes_without_bump: true,
            ..DialerOptions::default()
        }),
        ..options(1, 200)
    })
    .await;
    let s = env.schedules();
    env.make_child_only_changes(&s).await;
    let engine = crate::harness::engine_for(&env.config);
    let plan = callsync::sync::PassPlan::reconcile(Duration::from_secs(8 * 86_400));
    let report = engine
        .run_pass(
            s[0],
            &plan,
            &tokio_util::sync::CancellationToken::new(),
            &callsync::sync::Quiet,
        )
        .await;
    engine.close().await;
    assert!(report.succeeded(), "{report:?}");
    assert!(
        report.stats.calls_written > 0,
        "the reconcile pass fixed calls"
    );
    env.assert_matches_truth(&s);
    let kind: String = rusqlite::Connection::open(env.warehouse_path())
        .unwrap()
        .query_row(
            "SELECT kind FROM sync_runs ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kind, "reconcile");
}

#[tokio::test]
async fn an_engine_without_credentials_is_refused_before_the_warehouse_exists() {
    let env = TestEnv::start(options(1, 1)).await;
    let mut config = env.config.clone();
    config.api.auth = None;
    for dry_run in [false, true] {
        let backend = callsync::warehouse::open(&config.warehouse).expect("configured");
        let mode = if dry_run {
            callsync::sync::Mode::DryRun
        } else {
            callsync::sync::Mode::Write
        };
        let started = callsync::sync::Engine::start(&config, backend.as_ref(), mode);
        let Err(err) = started else {
            panic!("an engine without credentials started (dry run: {dry_run})");
        };
        assert_eq!(
            err.to_string(),
            "config: api: no credentials: set api.access_token, api.access_token_file, the systemd credential access_token, or an [api.oauth] table"
        );
    }
    assert!(!env.warehouse_path().exists(), "no warehouse created");
}

/// The SQLite warehouse, counting the pages handed to it that would change nothing: no
/// calls, and the checkpoint the page before it left.
struct CountingSink {
    inner: callsync::warehouse::sqlite::Warehouse,
    writes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    empty_in_place: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    last: Option<Option<Timestamp>>,
}

/// Methods that go to the warehouse as they are.
macro_rules! delegate {
    () => {};
    (ref $name:ident($($arg:ident: $ty:ty),*) -> $out:ty; $($rest:tt)*) => {
        fn $name(&self $(, $arg: $ty)*) -> $out {
            callsync::warehouse::Destination::$name(&self.inner $(, $arg)*)
        }
        delegate!($($rest)*);
    };
    (mut $name:ident($($arg:ident: $ty:ty),*) -> $out:ty; $($rest:tt)*) => {
        fn $name(&mut self $(, $arg: $ty)*) -> $out {
            callsync::warehouse::Destination::$name(&mut self.inner $(, $arg)*)
        }
        delegate!($($rest)*);
    };
}

/// An engine over `env`'s service that writes through `sink`.
fn engine_over(
    env: &TestEnv,
    sink: Box<dyn callsync::warehouse::Destination>,
) -> callsync::sync::Engine {
    let client = callsync::api::ApiClient::new(
        &env.config.api,
        &env.config.api.credentials().expect("credentials"),
    )
    .expect("a client");
    callsync::sync::Engine::with_destination(&env.config, client, sink, false)
        .expect("the engine starts")
}

/// The methods every test sink here leaves to the warehouse (`delegate!`).
macro_rules! delegate_common {
    () => {
        delegate! {
            ref name() -> String;
            ref watch() -> std::sync::Arc<dyn callsync::warehouse::Watch>;
            ref claim(schedule: uuid::Uuid) -> Result<Option<callsync::warehouse::Claim>, WarehouseError>;
            ref checkpoint(schedule: uuid::Uuid) -> Result<Option<callsync::warehouse::Checkpoint>, WarehouseError>;
            mut replace_checkpoint(schedule: uuid::Uuid, cursor: Option<Timestamp>) -> Result<Option<callsync::warehouse::Checkpoint>, WarehouseError>;
            ref knows_schedule(schedule: uuid::Uuid) -> Result<bool, WarehouseError>;
            mut count_changes(page: &callsync::warehouse::PageBatch) -> Result<u64, WarehouseError>;
            mut forget_runs_before(cutoff: Timestamp) -> Result<u64, WarehouseError>;
            mut prepare(prepared: callsync::warehouse::Prepared<'_>) -> Result<(), WarehouseError>;
            ref status_at(now: Timestamp) -> Result<Vec<callsync::warehouse::ScheduleStatus>, WarehouseError>;
            ref first_pass_at() -> Result<Option<Timestamp>, WarehouseError>;
            mut remember_campaign(campaign: &callsync::service::Campaign) -> Result<(), WarehouseError>;
            mut remember_schedule(schedule: &callsync::service::Schedule, campaign: Option<uuid::Uuid>) -> Result<(), WarehouseError>;
        }
    };
}

/// Every method but `write_page` to the warehouse.
macro_rules! delegate_all_but_write_page {
    () => {
        delegate_common!();
        delegate! {
            mut open_pass(start: &callsync::warehouse::PassStart<'_>) -> Result<callsync::warehouse::PassOpened, WarehouseError>;
            mut finish_run(run: callsync::warehouse::RunId, record: &callsync::warehouse::RunRecord) -> Result<(), WarehouseError>;
        }
    };
}

impl callsync::warehouse::Destination for CountingSink {
    delegate_all_but_write_page!();

    fn write_page(
        &mut self,
        page: &callsync::warehouse::PageBatch,
    ) -> Result<callsync::warehouse::PageWrite, WarehouseError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.writes.fetch_add(1, SeqCst);
        self.calls.fetch_add(page.calls.len(), SeqCst);
        if page.calls.is_empty() && self.last == Some(page.checkpoint) {
            self.empty_in_place.fetch_add(1, SeqCst);
        }
        self.last = Some(page.checkpoint);
        callsync::warehouse::Destination::write_page(&mut self.inner, page)
    }
}

#[tokio::test]
async fn a_quiet_run_that_calls_leave_under_is_read_again_with_two_scans() {
    // Seeded history in tie groups of 300, old enough for quiet runs. The walk's third list
    // request is the run's page 2 (the first is the pass's start, the second page 1 of the
    // first group's instant); it is held until 50 calls of that group have changed, so
    // offsets shifted under the run after its first page, whatever the machine's speed. The
    // run's quiet check finds them: the walk reads the group again with the two scans,
    // confirmed by a cover whose window is proven by two measurements of the group (pages
    // of 100, no count); the groups after it (300, 300 and 100) are read as quiet runs
    // again, opened by the count that found the change, each run closed by its own count
    // (the first ends at its first boundary, the next at 4 pages). Nothing is lost.
    let env = TestEnv::start(SimulatorOptions {
        tie_group: 300,
        ..options(1, 1000)
    })
    .await;
    let s = env.schedules();
    let mut calls = env.sim.truth(s[0]);
    calls.sort_by_key(|c| (c.updated_at, c.uid));
    let leaving: Vec<uuid::Uuid> = calls[..50].iter().map(|c| c.uid).collect();
    assert!(
        calls[..300]
            .iter()
            .all(|c| c.updated_at == calls[0].updated_at)
    );
    let before = env.sim.requests().len();
    let hold = env.sim.hold_list_requests(3);
    let leave = async {
        hold.arrived(3).await;
        env.sim.touch_calls(&leaving);
        drop(hold);
    };
    let (reports, ()) = tokio::join!(env.pass(&s), leave);
    assert_eq!(reports[0].result, PassResult::Completed);
    let checks = env.sim.requests()[before..]
        .iter()
        .filter(|r| r.query.ends_with("&page_size=1"))
        .count();
    assert_eq!(
        checks,
        1 + 3,
        "one quiet check, which found the change; a check for each of the three runs over \
         the groups after it"
    );
    // The calls that changed were stamped after the pass began: this pass reads them only
    // if they share its horizon's second, the next one certainly.
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

#[tokio::test]
async fn tie_groups_read_again_are_not_written_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    // Seeded calls in tie groups of 300 (3 pages each, ending on a page edge), read in quiet
    // runs: each run after the first starts with page 1 again from the instant the one
    // before ended at. That page holds nothing to write and leaves the checkpoint where it
    // was: the walk goes on without handing it to the writer (it used to wait for the page
    // before to commit, then commit an empty transaction, each time).
    let env = TestEnv::start(SimulatorOptions {
        tie_group: 300,
        ..options(1, 1000)
    })
    .await;
    let s = env.schedules();
    let writes = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let empty_in_place = Arc::new(AtomicUsize::new(0));
    let warehouse =
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .expect("the warehouse opens");
    let sink = CountingSink {
        inner: warehouse,
        writes: writes.clone(),
        calls: calls.clone(),
        empty_in_place: empty_in_place.clone(),
        last: None,
    };
    let engine = engine_over(&env, Box::new(sink));
    let plan = callsync::sync::PassPlan::incremental(engine.settings());
    let reports = engine
        .sync_all(&s, &plan, &tokio_util::sync::CancellationToken::new())
        .await;
    engine.close().await;
    assert!(reports.iter().all(|r| r.succeeded()), "the pass failed");
    env.assert_matches_truth(&s);
    let pages = reports[0].stats.pages;
    assert_eq!(
        empty_in_place.load(SeqCst),
        0,
        "pages written that change nothing"
    );
    // The walk: 17 pages. The first from the pass's start; run 1: group 1's pages 1 to 3,
    // the page past it (group 2's first) and its quiet check; run 2: group 2's page 1 again,
    // its pages 2 and 3, the page past it, the check; run 3: group 3's page 1 again, its
    // pages 2 and 3, group 4 (100 calls, one page), an empty page (the end of the data), the
    // check. Handed to the writer: the 10 pages with fresh calls and the 3 checks that move
    // the checkpoint (with no calls), in at most 13 writes (pages read while the write
    // before them is in flight go together), each call once.
    assert_eq!(pages, 17);
    assert_eq!(calls.load(SeqCst), 1000, "calls handed over");
    assert!(writes.load(SeqCst) <= 13, "{} writes", writes.load(SeqCst));
}

/// The SQLite warehouse, holding its first page write until the walk has read every page
/// (or until a hang's patience ran out), failing it if told to; each write's calls and
/// checkpoint recorded.
struct HeldSink {
    inner: callsync::warehouse::sqlite::Warehouse,
    release: std::sync::mpsc::Receiver<()>,
    fail_first: bool,
    writes: Writes,
}

impl callsync::warehouse::Destination for HeldSink {
    delegate_all_but_write_page!();

    fn write_page(
        &mut self,
        page: &callsync::warehouse::PageBatch,
    ) -> Result<callsync::warehouse::PageWrite, WarehouseError> {
        let first = {
            let mut writes = self.writes.lock().unwrap();
            writes.push((page.calls.len(), page.checkpoint));
            writes.len() == 1
        };
        if first {
            // Only a hang waits this long: the test fails on the writes it then sees.
            let _ = self.release.recv_timeout(Duration::from_secs(120));
            if self.fail_first {
                return Err(WarehouseError::Sql {
                    path: env!("CARGO_MANIFEST_DIR").into(),
                    step: "writing calls",
                    problem: "disk I/O error (injected into the first page)".into(),
                });
            }
        }
        callsync::warehouse::Destination::write_page(&mut self.inner, page)
    }
}

/// Tells the test once the walk has read `pages` pages.
struct PagesRead {
    pages: u64,
    read: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl callsync::sync::PassProgress for PagesRead {
    fn page(&self, pages: u64, _calls_seen: u64, _total: Option<u64>) {
        if pages >= self.pages
            && let Some(read) = self.read.lock().unwrap().take()
        {
            let _ = read.send(());
        }
    }
}

/// Each write of a [`HeldSink`]: its calls and its checkpoint.
type Writes = std::sync::Arc<std::sync::Mutex<Vec<(usize, Option<Timestamp>)>>>;

/// One pass of `schedule` through a [`HeldSink`] whose first write is held until the walk
/// has read `pages` pages, with `alongside` run beside it: its report, and each write's
/// calls and checkpoint.
async fn pass_with_the_first_write_held(
    env: &TestEnv,
    schedule: uuid::Uuid,
    pages: u64,
    fail_first: bool,
    alongside: impl std::future::Future<Output = ()>,
    writes: Writes,
) -> (callsync::sync::PassReport, Vec<(usize, Option<Timestamp>)>) {
    let (release, released) = std::sync::mpsc::channel();
    let sink = HeldSink {
        inner: callsync::warehouse::sqlite::Warehouse::open(
            &env.warehouse_path(),
            Duration::from_secs(5),
        )
        .expect("the warehouse opens"),
        release: released,
        fail_first,
        writes: writes.clone(),
    };
    let engine = engine_over(env, Box::new(sink));
    let (read, all_read) = tokio::sync::oneshot::channel();
    let progress = PagesRead {
        pages,
        read: std::sync::Mutex::new(Some(read)),
    };
    let plan = callsync::sync::PassPlan::incremental(engine.settings());
    let cancel = tokio_util::sync::CancellationToken::new();
    let release_when_read = async {
        let _ = all_read.await;
        release.send(()).expect("the sink waits");
    };
    let (report, (), ()) = tokio::join!(
        engine.run_pass(schedule, &plan, &cancel, &progress),
        release_when_read,
        alongside
    );
    engine.close().await;
    let writes = writes.lock().unwrap().clone();
    (report, writes)
}

/// A walk that reads faster than its pages are written hands the pages read meanwhile over
/// as one write, once the write before them commits: 5 pages of 100 calls and the empty
/// page past them, the first write held until all 6 are read, make two writes (100 calls,
/// then 400 with the last page's checkpoint), and the warehouse equals the truth.
#[tokio::test]
async fn pages_read_while_a_write_is_in_flight_are_written_together() {
    let env = TestEnv::start(options(1, 500)).await;
    let s = env.schedules();
    let (report, writes) =
        pass_with_the_first_write_held(&env, s[0], 6, false, async {}, Writes::default()).await;
    assert_eq!(report.result, PassResult::Completed);
    assert_eq!((report.stats.pages, report.stats.calls_written), (6, 500));
    let mut truth = env.sim.truth(s[0]);
    truth.sort_by_key(|c| (c.updated_at, c.uid));
    let stamp = |i: usize| Some(truth[i].updated_at);
    // The first page's checkpoint is where it began (its end is proven by the next
    // answer's count); the last page, not full, proves itself.
    assert_eq!(
        writes,
        vec![(100, Some(Timestamp::EPOCH)), (400, stamp(499))]
    );
    env.assert_matches_truth(&s);
    let stored =
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .unwrap()
            .checkpoint(s[0])
            .unwrap()
            .map(|c| c.cursor);
    assert_eq!(stored, stamp(499));
}

/// Pages waiting behind a write go to the writer as soon as it commits, not when the walk
/// next reads a page: 3 pages of 100 calls, the third list request held in the simulator,
/// the first write held until page 2 is read. Once the first write is let go, page 2 is
/// committed (99 calls more: page 2 starts at page 1's last, written already) while the
/// third request is still held; let go, the pass completes and the warehouse equals the truth.
#[tokio::test]
async fn pages_waiting_are_written_once_the_write_before_commits_while_the_walk_waits() {
    let env = TestEnv::start(options(1, 250)).await;
    let s = env.schedules();
    let hold = env.sim.hold_list_requests(3);
    let writes = Writes::default();
    let stored = || {
        let conn = rusqlite::Connection::open(env.warehouse_path()).unwrap();
        conn.query_row("SELECT count(*) FROM calls", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0)
    };
    let page_2_committed = async {
        hold.arrived(3).await;
        wait_for("page 2 committed", || stored() == 199).await;
        assert_eq!(writes.lock().unwrap().len(), 2);
        drop(hold);
    };
    let (report, written) =
        pass_with_the_first_write_held(&env, s[0], 2, false, page_2_committed, writes.clone())
            .await;
    assert_eq!(report.result, PassResult::Completed);
    assert_eq!(
        written.iter().map(|w| w.0).collect::<Vec<_>>(),
        [100, 99, 51]
    );
    env.assert_matches_truth(&s);
}

/// The pages waiting behind a write that fails are never written: no checkpoint passes the
/// calls that write lost. 15 pages of 100 calls: the first write is held until the walk
/// has read 11, when the 1,000 calls waiting behind it (the most) make the walk wait for it
/// with pages still to read; it fails. The pass fails with the write's error, nothing is
/// stored, and the next pass reads it all.
#[tokio::test]
async fn pages_waiting_behind_a_failed_write_are_not_written() {
    let env = TestEnv::start(options(1, 1500)).await;
    let s = env.schedules();
    let (report, writes) =
        pass_with_the_first_write_held(&env, s[0], 11, true, async {}, Writes::default()).await;
    let PassResult::Failed { error, .. } = &report.result else {
        panic!("the pass did not fail: {:?}", report.result);
    };
    assert!(error.contains("injected into the first page"), "{error}");
    assert_eq!(writes.len(), 1, "written after a failed write: {writes:?}");
    let warehouse =
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .unwrap();
    assert_eq!(warehouse.checkpoint(s[0]).unwrap(), None);
    assert!(env.diff_from(s[0], &[]).is_empty(), "calls stored");
    drop(warehouse);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}

/// The step of a pass's bookkeeping [`FailingSink`] fails, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bookkeeping {
    OpenPass,
    Checkpoint,
    FinishRun,
}

/// The SQLite warehouse, failing the next `fail` step of a pass's bookkeeping (then working
/// again): what a disk error there does to the pass, its record and its claim.
struct FailingSink {
    inner: callsync::warehouse::sqlite::Warehouse,
    fail: std::sync::Arc<std::sync::Mutex<Option<Bookkeeping>>>,
}

impl FailingSink {
    fn failing(&self, step: Bookkeeping) -> Result<(), WarehouseError> {
        let mut fail = self.fail.lock().unwrap();
        if *fail != Some(step) {
            return Ok(());
        }
        *fail = None;
        Err(WarehouseError::Sql {
            path: env!("CARGO_MANIFEST_DIR").into(),
            step: "a step of the pass's bookkeeping",
            problem: format!("disk I/O error (injected into {step:?})"),
        })
    }
}

impl callsync::warehouse::Destination for FailingSink {
    delegate_common!();
    delegate! {
        mut write_page(page: &callsync::warehouse::PageBatch) -> Result<callsync::warehouse::PageWrite, WarehouseError>;
    }

    /// Fails the opening whole (`OpenPass`: nothing recorded), or only its checkpoint read
    /// (`Checkpoint`: the pass's row recorded, as when the checkpoint's row cannot be read).
    fn open_pass(
        &mut self,
        start: &callsync::warehouse::PassStart<'_>,
    ) -> Result<callsync::warehouse::PassOpened, WarehouseError> {
        use callsync::warehouse::PassOpened;
        self.failing(Bookkeeping::OpenPass)?;
        Ok(
            match callsync::warehouse::Destination::open_pass(&mut self.inner, start)? {
                PassOpened::Started { run, checkpoint } => PassOpened::Started {
                    run,
                    checkpoint: self.failing(Bookkeeping::Checkpoint).and(checkpoint),
                },
                walked => walked,
            },
        )
    }

    fn finish_run(
        &mut self,
        run: callsync::warehouse::RunId,
        record: &callsync::warehouse::RunRecord,
    ) -> Result<(), WarehouseError> {
        self.failing(Bookkeeping::FinishRun)?;
        callsync::warehouse::Destination::finish_run(&mut self.inner, run, record)
    }
}

/// A pass opens (claim, walked since the tick, its `sync_runs` row, the checkpoint) in one job
/// of the writer and ends (its row closed, the claim let go) in another. A failure at any of
/// those steps fails the pass, with the error; its row, when it has one, ends `failed` with
/// that error (but when closing the row is what failed: it stays open); the claim is let go
/// whatever failed, so the next pass walks the schedule (a claim kept would make it
/// `Skipped`); nothing is written past a checkpoint not read. After each, a pass that fails
/// nowhere completes, and the warehouse equals the truth.
#[tokio::test]
async fn a_failure_opening_or_ending_a_pass_is_its_failure_and_lets_the_claim_go() {
    let env = TestEnv::start(options(1, 120)).await;
    let s = env.schedules();
    let fail = std::sync::Arc::new(std::sync::Mutex::new(None));
    let warehouse =
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .expect("the warehouse opens");
    let sink = FailingSink {
        inner: warehouse,
        fail: fail.clone(),
    };
    let engine = engine_over(&env, Box::new(sink));
    let runs = || -> Vec<(Option<String>, Option<String>)> {
        let conn = rusqlite::Connection::open(env.warehouse_path()).unwrap();
        let mut stmt = conn
            .prepare("SELECT outcome, error FROM sync_runs ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let pass = || pass_on_a_tick(&engine, s[0]);
    let checkpoint = || {
        callsync::warehouse::sqlite::Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .unwrap()
            .checkpoint(s[0])
            .unwrap()
    };
    let steps = [
        Bookkeeping::Checkpoint,
        Bookkeeping::FinishRun,
        Bookkeeping::OpenPass,
    ];
    for step in steps {
        env.sim.touch_calls(&[env.sim.truth(s[0])[0].uid]);
        let rows_before = runs().len();
        let checkpoint_before = checkpoint();
        *fail.lock().unwrap() = Some(step);
        let report = pass().await;
        assert_eq!(*fail.lock().unwrap(), None, "{step:?} was reached");
        let PassResult::Failed { kind, error } = &report.result else {
            panic!("{step:?}: the pass did not fail: {report:?}");
        };
        assert_eq!(*kind, ErrorKind::Warehouse, "{step:?}: {error}");
        assert!(
            error.contains(&format!("injected into {step:?}")),
            "{error}"
        );
        let rows = runs();
        let opened = rows.len() - rows_before;
        match step {
            // Failed before its row exists: none.
            Bookkeeping::OpenPass => {
                assert_eq!((opened, report.run), (0, None), "{step:?}: {rows:?}")
            }
            // Its row ends failed, with why; nothing was read, nothing written.
            Bookkeeping::Checkpoint => {
                assert_eq!(opened, 1);
                let (outcome, stored) = rows.last().unwrap();
                assert_eq!(outcome.as_deref(), Some("failed"));
                assert!(
                    stored.as_deref().unwrap().contains("injected"),
                    "{stored:?}"
                );
                assert_eq!(report.stats.requests, 0);
                assert_eq!(checkpoint(), checkpoint_before);
            }
            // The walk committed its pages and checkpoint; the row could not be closed.
            Bookkeeping::FinishRun => {
                assert_eq!(opened, 1);
                assert_eq!(rows.last().unwrap(), &(None, None));
                assert!(report.stats.calls_written > 0, "{report:?}");
            }
        }
        let next = pass().await;
        assert_eq!(next.result, PassResult::Completed, "after {step:?}");
        assert_eq!(
            runs().last().unwrap(),
            &(Some("completed".to_owned()), None)
        );
        env.assert_matches_truth(&s);
    }
    engine.close().await;
}

/// An incremental pass of `schedule` as the daemon plans it on a tick now: it first asks who
/// walked the schedule since.
async fn pass_on_a_tick(
    engine: &callsync::sync::Engine,
    schedule: uuid::Uuid,
) -> callsync::sync::PassReport {
    let mut plan = callsync::sync::PassPlan::incremental(engine.settings());
    plan.unless_walked_since = Some(Timestamp::now());
    let cancel = tokio_util::sync::CancellationToken::new();
    engine
        .run_pass(schedule, &plan, &cancel, &callsync::sync::Quiet)
        .await
}
