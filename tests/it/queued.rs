//! Requests that wait in callsync's limiter (issue 53): the token a request carries is taken
//! when it is sent, after the wait, and a pass's figures count the requests it sent, never
//! those it only queued.
//!
//! One request in flight at a time (`sync.concurrency = 1`) and the first detail request
//! held in the simulator: the pass's other detail requests then wait in the limiter for as
//! long as the test holds it, on a machine of any speed.

use callsync::config::DetailsMode;
use callsync::simulator::{CallShape, SimulatorOptions};
use callsync::sync::{PassPlan, PassResult, Quiet};
use tokio_util::sync::CancellationToken;

use crate::harness::{PATIENCE, TestEnv};

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
