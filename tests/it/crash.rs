//! Crash safety: `callsync sync` killed with SIGKILL at random instants, round after round.
//! After every kill no checkpoint is ahead of the committed data; after a clean pass the
//! warehouse equals the truth.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use callsync::api::Timestamp;
use callsync::simulator::{DialerOptions, Precision, SimulatorOptions};
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::harness::TestEnv;

/// Every call the service shows with `updated_at` before the schedule's checkpoint is in the
/// warehouse in exactly that version.
fn assert_checkpoint_not_ahead(env: &TestEnv, schedule: Uuid) {
    let conn = rusqlite::Connection::open(env.warehouse_path()).expect("open");
    let cursor: Option<String> = conn
        .query_row(
            "SELECT cursor FROM sync_checkpoints WHERE schedule_uid = ?1",
            [schedule.to_string()],
            |row| row.get(0),
        )
        .ok();
    let Some(cursor) = cursor else { return };
    let cursor = Timestamp::parse_sqlite(&cursor).expect("cursor parses");
    let mut stmt = conn
        .prepare("SELECT uid, updated_at FROM calls WHERE schedule_uid = ?1")
        .expect("prepare");
    let stored: HashMap<String, String> = stmt
        .query_map([schedule.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    for call in env.sim.truth(schedule) {
        if call.updated_at < cursor {
            assert_eq!(
                stored.get(&call.uid.to_string()),
                Some(&call.updated_at.to_sqlite()),
                "call {} (updated {}) is before checkpoint {cursor} but not committed",
                call.uid,
                call.updated_at
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_instants_never_leaves_the_checkpoint_ahead() {
    let env = TestEnv::start(SimulatorOptions {
        precision: Precision::Seconds,
        schedules: 2,
        calls_per_schedule: 1500,
        seed: 11,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(10),
            calls_per_tick: 4,
            ..DialerOptions::default()
        }),
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("page_size = 25\n");
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut killed = 0;
    for _round in 0..15 {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .arg("--config")
            .arg(&config)
            .arg("sync")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("callsync starts");
        let wait = Duration::from_millis(rng.random_range(30..600));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {
                child.kill().await.expect("SIGKILL");
                killed += 1;
            }
            status = child.wait() => {
                assert!(status.expect("exit status").success(), "an unkilled pass succeeds");
            }
        }
        for schedule in env.schedules() {
            assert_checkpoint_not_ahead(&env, schedule);
        }
    }
    assert!(killed >= 5, "most rounds were killed mid-pass ({killed})");
    env.sim.set_dialer_running(false);
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(&config)
        .arg("sync")
        .stderr(Stdio::null())
        .status()
        .await
        .expect("callsync runs");
    assert!(status.success());
    env.assert_matches_truth(&env.schedules());
}
