//! Crash safety: `callsync sync` killed with SIGKILL inside a pass, round after round, at
//! points chosen by construction (after the answer to a seeded k-th list request, a seeded
//! delay into that page, the next list request held so the pass cannot end first). After
//! every kill the pass's `sync_runs` row is open and no checkpoint is ahead of the committed
//! data; after a clean pass the warehouse equals the truth.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use callsync::service::Timestamp;
use callsync::simulator::{DialerOptions, Precision, SimulatorOptions, TieOrder};
use rand::{RngExt, SeedableRng};
use uuid::Uuid;

use crate::harness::{Dest, PATIENCE, TestEnv};
use crate::pg;

/// Every call the service shows with `updated_at` before the schedule's checkpoint is in the
/// warehouse in exactly that version.
fn assert_checkpoint_not_ahead(env: &TestEnv, schedule: Uuid) {
    let (cursor, stored) = match &env.pg {
        Some(db) => {
            let utc = |column: &str| {
                format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            };
            let cursor = pg::query(
                db,
                &format!(
                    "SELECT {} FROM sync_checkpoints WHERE schedule_uid = '{schedule}'",
                    utc("cursor")
                ),
            );
            let stored = pg::query(
                db,
                &format!(
                    "SELECT uid::text, {} FROM calls WHERE schedule_uid = '{schedule}'",
                    utc("updated_at")
                ),
            );
            (
                cursor.into_iter().next().and_then(|r| r[0].clone()),
                stored
                    .into_iter()
                    .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
                    .collect::<Vec<_>>(),
            )
        }
        None => {
            let conn = rusqlite::Connection::open(env.warehouse_path()).expect("open");
            let cursor: Option<String> = conn
                .query_row(
                    "SELECT cursor FROM sync_checkpoints WHERE schedule_uid = ?1",
                    [schedule.to_string()],
                    |row| row.get(0),
                )
                .ok();
            let mut stmt = conn
                .prepare("SELECT uid, updated_at FROM calls WHERE schedule_uid = ?1")
                .expect("prepare");
            let stored = stmt
                .query_map([schedule.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))
                .expect("query")
                .collect::<Result<Vec<(String, String)>, _>>()
                .expect("rows");
            (cursor, stored)
        }
    };
    let Some(cursor) = cursor else { return };
    let cursor = Timestamp::parse_warehouse_text(&cursor).expect("cursor parses");
    let stored: HashMap<String, Timestamp> = stored
        .into_iter()
        .map(|(uid, at)| {
            (
                uid,
                Timestamp::parse_warehouse_text(&at).expect("updated_at parses"),
            )
        })
        .collect();
    for call in env.sim.truth(schedule) {
        if call.updated_at < cursor {
            assert_eq!(
                stored.get(&call.uid.to_string()),
                Some(&call.updated_at),
                "call {} (updated {}) is before checkpoint {cursor} but not committed",
                call.uid,
                call.updated_at
            );
        }
    }
}

/// The `sync_runs` rows after `after` (an id) that are still open: passes that were running
/// (or died) when we looked.
fn open_runs_after(env: &TestEnv, after: i64) -> i64 {
    if let Some(db) = &env.pg {
        let n = pg::query(
            db,
            &format!("SELECT count(*) FROM sync_runs WHERE id > {after} AND finished_at IS NULL"),
        );
        return n[0][0].as_deref().unwrap().parse().unwrap();
    }
    let conn = rusqlite::Connection::open(env.warehouse_path()).expect("open");
    conn.query_row(
        "SELECT count(*) FROM sync_runs WHERE id > ?1 AND finished_at IS NULL",
        [after],
        |row| row.get(0),
    )
    .expect("sync_runs")
}

/// The `sync_runs` rows still open, and those marked as cut short by their process's end.
fn open_and_marked(env: &TestEnv) -> (i64, i64) {
    let sql = "SELECT count(*) FILTER (WHERE finished_at IS NULL),
                      count(*) FILTER (WHERE outcome = 'interrupted' AND error = $1)
               FROM sync_runs";
    let ended = callsync::warehouse::PROCESS_ENDED;
    if let Some(db) = &env.pg {
        let n = pg::query(db, &sql.replace("$1", &format!("'{ended}'")));
        let count = |i: usize| n[0][i].as_deref().unwrap().parse().unwrap();
        return (count(0), count(1));
    }
    let conn = rusqlite::Connection::open(env.warehouse_path()).expect("open");
    conn.query_row(&sql.replace("$1", "?1"), [ended], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })
    .expect("sync_runs")
}

/// The latest `sync_runs` id (0 before any pass, or before the warehouse exists).
fn latest_run(env: &TestEnv) -> i64 {
    if let Some(db) = &env.pg {
        return crate::pg::admin(
            crate::pg::server(),
            &db.name,
            "SELECT coalesce(max(id), 0) FROM sync_runs",
        )
        .ok()
        .and_then(|rows| rows.first()?.first()?.clone())
        .map_or(0, |n| n.parse().unwrap());
    }
    rusqlite::Connection::open(env.warehouse_path())
        .and_then(|conn| {
            conn.query_row("SELECT coalesce(max(id), 0) FROM sync_runs", [], |row| {
                row.get(0)
            })
        })
        .unwrap_or(0)
}

conformance!(
    sigkill_inside_a_pass_never_leaves_the_checkpoint_ahead,
    sigkill_inside_a_pass_never_leaves_the_checkpoint_ahead
);

async fn sigkill_inside_a_pass_never_leaves_the_checkpoint_ahead(dest: Dest) {
    sigkill_inside_passes(dest, TieOrder::Stable).await;
}

conformance!(
    sigkill_under_a_shuffled_tie_order_never_leaves_the_checkpoint_ahead,
    sigkill_under_a_shuffled_tie_order_never_leaves_the_checkpoint_ahead
);

async fn sigkill_under_a_shuffled_tie_order_never_leaves_the_checkpoint_ahead(dest: Dest) {
    sigkill_inside_passes(dest, TieOrder::Shuffled).await;
}

/// Rounds of: calls changed (250 at one second: a tie group of ten pages), a pass killed at
/// a list request chosen by construction; then a pass reads everything. Under an unstable
/// tie order a group can be proven read only once older than the late-commit window: there
/// the dialer is off, the window 1 s, and each round waits for the service's clock to pass
/// the newest change by 2 s, so that its pass covers the groups instead of failing on them.
async fn sigkill_inside_passes(dest: Dest, tie_order: TieOrder) {
    const ROUNDS: usize = 15;
    /// The kill follows the answer to the k-th list request of the round, k in 1..=MAX_K.
    const MAX_K: usize = 10;
    /// Calls of each schedule changed before each round: every round's pass reads at least
    /// this many pages of 25 per schedule, so it makes more than MAX_K list requests.
    const TOUCHED: usize = 250;
    let env = TestEnv::start_on(
        SimulatorOptions {
            precision: Precision::Seconds,
            schedules: 2,
            calls_per_schedule: 1500,
            seed: 11,
            tie_order,
            dialer: (tie_order == TieOrder::Stable).then(|| DialerOptions {
                tick: Duration::from_millis(10),
                calls_per_tick: 4,
                ..DialerOptions::default()
            }),
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let config = if tie_order == TieOrder::Stable {
        env.write_config("page_size = 25\n")
    } else {
        env.write_config("page_size = 25\nlookback_secs = 1\n")
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    // Passes killed mid-pass: each is marked interrupted by a later process.
    let mut cut_short = 0;
    for round in 0..ROUNDS {
        if round > 0 {
            for schedule in env.schedules() {
                let uids: Vec<Uuid> = env.sim.truth(schedule).iter().map(|c| c.uid).collect();
                let first = rng.random_range(0..uids.len() - TOUCHED);
                env.sim.touch_calls(&uids[first..first + TOUCHED]);
            }
        }
        if tie_order != TieOrder::Stable {
            wait_until_older_than(&env, Duration::from_secs(2)).await;
        }
        let before = latest_run(&env);
        // Where the kill lands, chosen by construction: after the answer to the k-th list
        // request, while the (k+1)-th and every later one is held, so the pass cannot end
        // first; `within` moves it into the page (its write, its commit, its checkpoint).
        let k = rng.random_range(1..=MAX_K);
        let within = Duration::from_millis(rng.random_range(0..30));
        let hold = env.sim.hold_list_requests(k);
        // Its log, so that a pass that ends too early says why.
        let log_path = env.dir.path().join(format!("round-{round}.log"));
        let log = std::fs::File::create(&log_path).expect("a log file in the temp dir");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .arg("--config")
            .arg(&config)
            .arg("sync")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("callsync starts");
        tokio::select! {
            () = hold.arrived(k) => {}
            status = child.wait() => panic!(
                "round {round}: the pass ended ({status:?}) before its list request {k}; its log:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            ),
            () = tokio::time::sleep(PATIENCE) => panic!("round {round}: no list request {k} within {PATIENCE:?}"),
        }
        hold.release(k);
        // Injected delay: how far into page k's handling the kill lands (0–30 ms, seeded).
        tokio::time::sleep(within).await;
        child.kill().await.expect("SIGKILL");
        drop(hold);
        // The next round's process starts once the server has let the killed one's claims
        // go (it notices the connection gone): a claim still held would end that pass on its
        // schedule before any request, and the round would not be the one it says.
        claims_freed(&env).await;
        let cut = open_runs_after(&env, before);
        assert!(
            cut >= 1,
            "round {round}: the kill (after list request {k}, +{within:?}) landed inside a pass"
        );
        cut_short += cut;
        for schedule in env.schedules() {
            assert_checkpoint_not_ahead(&env, schedule);
        }
    }
    env.sim.set_dialer_running(false);
    if tie_order != TieOrder::Stable {
        wait_until_older_than(&env, Duration::from_secs(2)).await;
    }
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
    // No pass is left open for ever: every one killed was marked by a later process.
    assert_eq!(open_and_marked(&env), (0, cut_short));
}

/// Waits until no claim of a killed process is held: at once on SQLite (its claims are the
/// process's file locks, gone with it); on PostgreSQL, until the server, which frees a killed
/// process's claims once it notices its connection gone, holds no advisory lock in the
/// warehouse's database.
async fn claims_freed(env: &TestEnv) {
    let Some(db) = &env.pg else { return };
    let claims = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    crate::harness::wait_for("the killed passes' claims freed", || {
        pg::query(db, claims) == [[Some("0".to_owned())]]
    })
    .await;
}

/// Waits for the service's clock to be `age` past its newest call: only a group older than
/// the late-commit window can be proven read under an unstable tie order.
async fn wait_until_older_than(env: &TestEnv, age: Duration) {
    let newest = env
        .schedules()
        .iter()
        .flat_map(|s| env.sim.truth(*s))
        .map(|c| c.updated_at)
        .max();
    if let Some(newest) = newest {
        let old_enough = newest.saturating_add(age);
        crate::harness::wait_for("the service's clock past the newest call", || {
            env.sim.now() > old_enough
        })
        .await;
    }
}
