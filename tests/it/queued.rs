//! Requests that wait in callsync's limiter (issue 53): the token a request carries is taken
//! when it is sent, after the wait, and a pass's figures count the requests it sent, never
//! those it only queued.
//!
//! One request in flight at a time (`sync.concurrency = 1`) and the first detail request
//! held in the simulator: the pass's other detail requests then wait in the limiter for as
//! long as the test holds it, on a machine of any speed.

use std::time::Duration;

use callsync::config::DetailsMode;
use callsync::simulator::{CallShape, SimulatorOptions};
use callsync::sync::{PassPlan, PassResult, Quiet};
use tokio_util::sync::CancellationToken;

use crate::harness::{Auth, PATIENCE, TestEnv, wait_for};

/// A schedule of `calls` calls, each listed without its attempts' children (a summary list),
/// so that the pass asks every call's detail.
fn summary_list(calls: usize) -> SimulatorOptions {
    SimulatorOptions {
        schedules: 1,
        calls_per_schedule: calls,
        shape: CallShape::Eighteen,
        summary_list: true,
        ..SimulatorOptions::default()
    }
}

/// One request in flight, and a held request never cut by the request timeout.
fn one_at_a_time(env: &mut TestEnv) {
    env.config.sync.concurrency = 1;
    env.config.sync.details = DetailsMode::Always;
    env.config.api.detail_concurrency = 4;
    env.config.api.request_timeout = PATIENCE;
}

/// The reported failure: OAuth tokens that live a second, requests that wait in the limiter
/// longer than that. The waiting requests' token is taken once they may go, so the service
/// refuses none of them (a token taken before the wait was refused: HTTP 401, and after a
/// second wait its fresh token too, failing the pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_past_its_token_s_life_is_sent_with_a_new_token() {
    let mut env = TestEnv::start_with(
        SimulatorOptions {
            token_lifetime: Duration::from_secs(1),
            ..summary_list(20)
        },
        Auth::OAuth,
    )
    .await;
    one_at_a_time(&mut env);
    let s = env.schedules();
    let hold = env.sim.hold_detail_requests(1);
    let steer = async {
        // The first detail is at the service (its token accepted); the next ones wait in
        // the limiter behind it.
        hold.arrived(1).await;
        // The service's first token expired, so callsync's copy is past its refresh too
        // (callsync refreshes a quarter of a lifetime early): a patience, not a delay.
        wait_for("the first token to expire at the service", || {
            env.sim.live_tokens() == 0
        })
        .await;
        hold.release(usize::MAX);
    };
    let (reports, ()) = tokio::join!(env.pass_ok(&s), steer);
    assert_eq!(reports[0].result, PassResult::Completed);
    let refused: Vec<_> = env
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.status == 401)
        .collect();
    assert_eq!(refused, [], "no request went out with an expired token");
    assert!(
        env.sim
            .requests()
            .iter()
            .filter(|r| r.path == "/oauth/token")
            .count()
            >= 2,
        "the waiting requests took a new token: {:#?}",
        env.sim.requests()
    );
    env.assert_matches_truth(&s);
}

/// The reported figures: a pass cut by shutdown while its requests wait in the limiter
/// counts the requests it sent (the list request and the held detail), not the three
/// details still waiting for their turn; its `sync_runs` row says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_cut_while_its_requests_wait_counts_only_those_it_sent() {
    let mut env = TestEnv::start(summary_list(20)).await;
    one_at_a_time(&mut env);
    let s = env.schedules()[0];
    let hold = env.sim.hold_detail_requests(1);
    let engine = env.engine();
    let plan = PassPlan::incremental(engine.settings());
    let cancel = CancellationToken::new();
    let cut = async {
        hold.arrived(1).await;
        cancel.cancel();
    };
    let (report, ()) = tokio::join!(engine.run_pass(s, &plan, &cancel, &Quiet), cut);
    engine.close().await;
    drop(hold);
    assert_eq!(report.result, PassResult::Interrupted);
    // What the service saw: the list request, answered, and one detail, held.
    let answered: Vec<_> = env.sim.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        answered,
        [format!("/api/v1/schedules/{s}/outbound_calls")],
        "only the list request was answered"
    );
    assert_eq!(
        (report.stats.requests, report.stats.retries),
        (2, 0),
        "{report:?}"
    );
    let conn = rusqlite::Connection::open(env.warehouse_path()).expect("warehouse");
    let stored: (i64, i64, Option<String>) = conn
        .query_row(
            "SELECT requests, retries, outcome FROM sync_runs WHERE schedule_uid = ?1",
            [s.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("the pass's row");
    assert_eq!(stored, (2, 0, Some("interrupted".to_owned())));
}
