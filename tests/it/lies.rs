//! A service that lies about one call of every list page (`simulator::Lie`), on every
//! destination: what it says may hold a pass, never lose a call nor move a checkpoint past
//! calls the walk has not read.

use callsync::ErrorKind;
use callsync::service::Timestamp;
use callsync::simulator::{Lie, SimulatorOptions};
use callsync::sync::{PassPlan, PassResult};
use rusqlite::types::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::harness::{Dest, TestEnv};

/// Two schedules of 300 calls on `dest`.
pub(crate) async fn env_of(dest: Dest) -> TestEnv {
    TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 300,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await
}

fn stored_uids(env: &TestEnv, schedule: Uuid) -> Vec<String> {
    let mut uids: Vec<String> = (env.snapshot(schedule).calls.iter())
        .map(|row| match row.get("uid") {
            Some(Value::Text(uid)) => uid.clone(),
            other => panic!("a call's uid: {other:?}"),
        })
        .collect();
    uids.sort();
    uids
}

fn truth_uids(env: &TestEnv, schedule: Uuid) -> Vec<String> {
    let mut uids: Vec<String> = (env.sim.truth(schedule).iter())
        .map(|c| c.uid.to_string())
        .collect();
    uids.sort();
    uids
}

/// The latest honest stamp of `schedule`.
pub(crate) fn newest(env: &TestEnv, schedule: Uuid) -> Timestamp {
    let truth = env.sim.truth(schedule);
    truth.iter().map(|c| c.updated_at).max().expect("calls")
}

/// Reads `schedule` again from the start, the service honest.
pub(crate) async fn backfill(env: &TestEnv, schedule: Uuid) {
    let engine = env.engine();
    let plan = PassPlan::backfill(engine.settings(), None, None);
    let reports = engine
        .sync_all(&[schedule], &plan, &CancellationToken::new())
        .await;
    engine.close().await;
    assert_eq!(reports[0].result, PassResult::Completed, "{:?}", reports[0]);
}

conformance!(
    a_call_stamped_in_the_future_moves_no_checkpoint_past_unread_calls,
    stamped_in_the_future,
    [ahead_200_s => 200, in_2099 => 2_300_000_000]
);

/// The first call of every page stamped in the future and listed last: the walk reads on
/// from the last call before it, so every call is stored and the checkpoint stays at the
/// newest call read in order, never the service's "now".
async fn stamped_in_the_future(dest: Dest, secs: i64) {
    let env = env_of(dest).await;
    let s = env.schedules();
    env.sim.lie_about(s[0], Some(Lie::StampAhead { secs }));
    let reports = env.pass(&s).await;
    for report in &reports {
        assert_eq!(report.result, PassResult::Completed, "{report:?}");
    }
    assert_eq!(
        stored_uids(&env, s[0]),
        truth_uids(&env, s[0]),
        "no call lost"
    );
    let position = reports[0].position.expect("a position");
    assert!(position <= newest(&env, s[0]), "{position} passed the data");
    env.assert_holds(s[1], &env.sim.truth(s[1]));

    // Honest again: a re-read from the start puts every call at its own stamp.
    env.sim.lie_about(s[0], None);
    backfill(&env, s[0]).await;
    env.assert_matches_truth(&s);
}

conformance!(
    a_call_stamped_past_calls_it_hides_fails_the_pass_with_the_checkpoint_held,
    stamped_past_hidden_calls
);

/// The first call of every page stamped at the service's clock (later than every other
/// call, not in the future) and listed last: the next answer counts fewer calls than the
/// page promised, a protocol error naming both counts; no checkpoint is saved past the
/// walk's start, and once the service is honest the next pass reads everything.
async fn stamped_past_hidden_calls(dest: Dest) {
    let env = env_of(dest).await;
    let s = env.schedules();
    env.sim.lie_about(s[0], Some(Lie::StampAhead { secs: 0 }));
    let reports = env.pass(&s).await;
    match &reports[0].result {
        PassResult::Failed { kind, error } => {
            assert_eq!(*kind, ErrorKind::Protocol, "{error}");
            assert!(
                error.contains("left at least 201 calls") && error.contains("counted 0"),
                "{error}"
            );
        }
        other => panic!("the lie went unnoticed: {other:?}"),
    }
    assert_eq!(
        reports[0].position,
        Some(Timestamp::EPOCH),
        "{:?}",
        reports[0]
    );
    assert_eq!(reports[1].result, PassResult::Completed);

    env.sim.lie_about(s[0], None);
    let reports = env.pass(&s).await;
    assert_eq!(reports[0].result, PassResult::Completed, "{:?}", reports[0]);
    env.assert_matches_truth(&s);
}
