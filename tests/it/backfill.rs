//! `backfill`: re-reads a range; never moves a checkpoint backwards, never touches another
//! schedule's, moves its own forward only over a range it has fully read.

use callsync::service::Timestamp;
use callsync::simulator::SimulatorOptions;
use callsync::sync::{PassPlan, PassResult, Quiet, Skip};
use callsync::warehouse::Destination;
use callsync::warehouse::sqlite::ScheduleLock;
use callsync::warehouse::sqlite::Warehouse;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::harness::{Dest, TestEnv};

async fn backfill(env: &TestEnv, schedule: Uuid, since: Option<Timestamp>) -> PassResult {
    backfill_range(env, schedule, since, None).await
}

async fn backfill_range(
    env: &TestEnv,
    schedule: Uuid,
    since: Option<Timestamp>,
    until: Option<Timestamp>,
) -> PassResult {
    let engine = env.engine();
    let plan = PassPlan::backfill(engine.settings(), since, until);
    let report = engine
        .run_pass(schedule, &plan, &CancellationToken::new(), &Quiet)
        .await;
    engine.close().await;
    report.result
}

fn cursor(env: &TestEnv, schedule: Uuid) -> Option<Timestamp> {
    if let Some(db) = &env.pg {
        return callsync::warehouse::postgres::PgWarehouse::open_existing(&db.target())
            .expect("open")
            .checkpoint(schedule)
            .expect("checkpoint")
            .map(|c| c.cursor);
    }
    Warehouse::open(&env.warehouse_path(), std::time::Duration::from_secs(5))
        .expect("open")
        .checkpoint(schedule)
        .expect("checkpoint")
        .map(|c| c.cursor)
}

conformance!(
    backfill_from_the_beginning_fills_an_empty_warehouse_and_sets_the_checkpoint,
    backfill_from_the_beginning_fills_an_empty_warehouse_and_sets_the_checkpoint
);

async fn backfill_from_the_beginning_fills_an_empty_warehouse_and_sets_the_checkpoint(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 180,
            ..SimulatorOptions::default()
        },
        dest,
    )
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

conformance!(
    backfill_never_moves_the_checkpoint_backwards_nor_over_an_unread_range,
    backfill_never_moves_the_checkpoint_backwards_nor_over_an_unread_range
);

async fn backfill_never_moves_the_checkpoint_backwards_nor_over_an_unread_range(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 120,
            ..SimulatorOptions::default()
        },
        dest,
    )
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
    // Another process with the warehouse open holds the schedule's lock (on the file itself).
    env.create_warehouse();
    let _held = ScheduleLock::acquire(&env.warehouse_path(), s[0]).expect("lock");
    // Skipped, not failed: nothing is wrong with the schedule, and the daemon must not back
    // off from it while a backfill holds it.
    assert_eq!(
        backfill(&env, s[0], None).await,
        PassResult::Skipped(Skip::Busy {
            schedule: s[0],
            destination: env.warehouse_path().display().to_string(),
        }),
        "a locked schedule must be refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_through_a_symlink_or_hard_link_of_the_warehouse_is_refused_too() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let db = env.warehouse_path();
    env.create_warehouse();
    let _held = ScheduleLock::acquire(&db, s[0]).expect("lock");
    let config = std::fs::read_to_string(env.write_config("")).unwrap();
    let symlink = env.dir.path().join("alias.db");
    std::os::unix::fs::symlink(&db, &symlink).unwrap();
    let elsewhere = env.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let hard_link = elsewhere.join("hard.db");
    for alias in [&symlink, &hard_link] {
        if alias == &hard_link {
            // Only now: through the symlink too, a file with two names is refused.
            std::fs::hard_link(&db, &hard_link).unwrap();
        }
        let alias_config = env.dir.path().join("alias.toml");
        let text = config.replace(
            &format!("path = \"{}\"", db.display()),
            &format!("path = \"{}\"", alias.display()),
        );
        std::fs::write(&alias_config, text).unwrap();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .args([
                "--config",
                alias_config.to_str().unwrap(),
                "backfill",
                "--schedule",
                &s[0].to_string(),
            ])
            .env_remove("RUST_LOG")
            .env("CALLSYNC_LOG__LEVEL", "info")
            .output()
            .await
            .expect("callsync runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        // A second name of the file is refused before any lock (`files.rs`).
        let refusal = if alias == &hard_link {
            format!(
                "the warehouse {} has 2 names (hard links to one file)",
                alias.display()
            )
        } else {
            format!(
                "schedule {} is being synced by another callsync process (it holds the schedule's lock on {})",
                s[0],
                alias.display()
            )
        };
        assert!(err.contains(&refusal), "{err}");
    }
    // Nothing was read through either alias.
    assert!(env.sim.requests().is_empty());
}

conformance!(
    backfill_until_stops_after_the_page_that_passes_it,
    backfill_until_stops_after_the_page_that_passes_it
);

async fn backfill_until_stops_after_the_page_that_passes_it(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 400,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let mut truth = env.sim.truth(s[0]);
    truth.sort_by_key(|c| (c.updated_at, c.uid));
    let until = truth[149].updated_at;
    assert_eq!(
        backfill_range(&env, s[0], None, Some(until)).await,
        PassResult::Completed
    );
    // Keyset pages of 100 in (updated_at, uid) order: the first ends at call 100, the
    // second (read again from call 100's instant) at call 199, past `until`: the walk stops
    // there. The warehouse holds exactly those calls; the checkpoint follows them as far as
    // an answer proved them read (the second page's start: its end waits for the count of
    // an answer from there, which the walk stopped before asking).
    let read = &truth[..199];
    env.assert_holds(s[0], read);
    assert_eq!(cursor(&env, s[0]), Some(read[99].updated_at));
}

conformance!(
    backfill_from_at_or_before_the_checkpoint_moves_it_forward,
    backfill_from_at_or_before_the_checkpoint_moves_it_forward
);

async fn backfill_from_at_or_before_the_checkpoint_moves_it_forward(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 120,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    env.pass_ok(&s).await;
    let synced = cursor(&env, s[0]).expect("a checkpoint after a pass");
    let newest = || env.sim.truth(s[0]).iter().map(|c| c.updated_at).max();

    // From the checkpoint itself: everything after it is read, so it moves to the newest.
    env.sim.bulk_create_now(s[0], 10);
    assert_eq!(
        backfill(&env, s[0], Some(synced)).await,
        PassResult::Completed
    );
    let moved = cursor(&env, s[0]).expect("checkpoint");
    assert!(moved > synced);
    assert_eq!(Some(moved), newest());
    env.assert_matches_truth(&s);

    // From an hour before it: the same.
    env.sim.bulk_create_now(s[0], 10);
    let before = moved.saturating_sub(std::time::Duration::from_secs(3600));
    assert_eq!(
        backfill(&env, s[0], Some(before)).await,
        PassResult::Completed
    );
    let again = cursor(&env, s[0]).expect("checkpoint");
    assert!(again > moved);
    assert_eq!(Some(again), newest());
    env.assert_matches_truth(&s);
}

#[tokio::test]
async fn instants_beyond_year_9999_in_utc_are_usage_errors_not_panics() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 1,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let schedule = env.schedules()[0].to_string();
    let bad = "9999-12-31T23:59:59-01:00";
    for args in [
        vec![
            "--config",
            c,
            "backfill",
            "--schedule",
            &schedule,
            "--since",
            bad,
        ],
        vec![
            "--config",
            c,
            "backfill",
            "--schedule",
            &schedule,
            "--until",
            bad,
        ],
        vec![
            "--config",
            c,
            "checkpoint",
            "set",
            "--schedule",
            &schedule,
            "--cursor",
            bad,
        ],
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .args(&args)
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("callsync runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "`{bad}` is not an RFC 3339 timestamp with a zone, within the years 0000 to 9999 in UTC (e.g. 2026-01-31T09:30:00Z): its instant falls outside them"
            )),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert_eq!(
        cursor(&env, env.schedules()[0]),
        None,
        "nothing was written"
    );
}
