//! `backfill`: re-reads a range; never moves a checkpoint backwards, never touches another
//! schedule's, moves its own forward only over a range it has fully read.

use callsync::api::Timestamp;
use callsync::simulator::SimulatorOptions;
use callsync::sync::{Engine, PassPlan, PassResult, Quiet, ScheduleLock};
use callsync::warehouse::Warehouse;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::harness::TestEnv;

async fn backfill(env: &TestEnv, schedule: Uuid, since: Option<Timestamp>) -> PassResult {
    let engine = Engine::start(&env.config).expect("engine");
    let plan = PassPlan::backfill(engine.settings(), since, None);
    let report = engine
        .run_pass(schedule, &plan, &CancellationToken::new(), &Quiet)
        .await;
    engine.close().await;
    report.result
}

fn cursor(env: &TestEnv, schedule: Uuid) -> Option<Timestamp> {
    Warehouse::open(&env.warehouse_path(), std::time::Duration::from_secs(5))
        .expect("open")
        .checkpoint(schedule)
        .expect("checkpoint")
        .map(|c| c.cursor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_from_the_beginning_fills_an_empty_warehouse_and_sets_the_checkpoint() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 180,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    assert_eq!(backfill(&env, s[0], None).await, PassResult::Completed);
    env.assert_matches_truth(&s[..1]);
    let last = env.sim.truth(s[0]).iter().map(|c| c.updated_at).max();
    assert_eq!(cursor(&env, s[0]), last);
    assert_eq!(
        cursor(&env, s[1]),
        None,
        "another schedule's checkpoint is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_never_moves_the_checkpoint_backwards_nor_over_an_unread_range() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 120,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    env.pass_ok(&s).await;
    let synced = cursor(&env, s[0]).expect("a checkpoint after a pass");

    // From the beginning: re-reads everything, the checkpoint stays where it was.
    assert_eq!(backfill(&env, s[0], None).await, PassResult::Completed);
    assert_eq!(cursor(&env, s[0]), Some(synced));

    // New calls arrive; a backfill that starts after the checkpoint reads them but may not
    // move the checkpoint over the range it skipped.
    let new = env.sim.bulk_create_now(s[0], 10);
    assert_eq!(new.len(), 10);
    let later = Timestamp::now();
    let start = synced.saturating_add(std::time::Duration::from_nanos(1));
    assert!(start < later);
    assert_eq!(
        backfill(&env, s[0], Some(start)).await,
        PassResult::Completed
    );
    assert_eq!(cursor(&env, s[0]), Some(synced));
    env.assert_matches_truth(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_schedule_is_refused_clearly() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let _held = ScheduleLock::acquire(&env.warehouse_path(), s[0]).expect("lock");
    // Skipped, not failed: nothing is wrong with the schedule, and the daemon must not back
    // off from it while a backfill holds it.
    let PassResult::Skipped(error) = backfill(&env, s[0], None).await else {
        panic!("a locked schedule must be refused");
    };
    assert!(
        error.contains("is being synced by another callsync process"),
        "{error}"
    );
}
