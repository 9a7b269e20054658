//! Fencing on PostgreSQL (issue 29): a page commits only while its schedule's claim holds on
//! the server. A proxy (`proxy.rs`) between callsync and the server silences callsync's lock
//! session without closing it, as a partition, a NAT's timeout or a failover leave a
//! connection; the server then ends that session (`pg_terminate_backend`, as its keepalives
//! would), its advisory locks go, and another process claims the schedule. The first process
//! hears nothing: it must still commit no page after the takeover, end its pass, and stop
//! within 10 s of SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use callsync::service::{OutboundCall, Timestamp};
use callsync::simulator::SimulatorOptions;
use callsync::warehouse::postgres::{LOCK_PATIENCE, LOCK_SESSION_NAME, PgTarget, PgWarehouse};
use callsync::warehouse::{Destination, PageBatch, PageWrite, WarehouseError};
use uuid::Uuid;

use crate::harness::{Dest, PATIENCE, TestEnv, wait_for};
use crate::pg::{self, Database};
use crate::proxy::Proxy;
use crate::sharing::{Daemon, nix_term};

/// What the issue allows a daemon between SIGTERM and its exit when its lock session is cut.
const EXIT_BOUND: Duration = Duration::from_secs(10);

fn target(url: &str) -> PgTarget {
    PgTarget::parse(url, None).expect("the URL parses")
}

/// `calls` as one page of `schedule`, its checkpoint their latest stamp.
fn write(
    warehouse: &mut PgWarehouse,
    schedule: Uuid,
    calls: &[OutboundCall],
) -> Result<PageWrite, WarehouseError> {
    warehouse.write_hashed_page(&PageBatch {
        schedule,
        calls: calls.to_vec(),
        content_hashes: calls.iter().map(OutboundCall::content_hash).collect(),
        checkpoint: calls.iter().map(|c| c.updated_at).max(),
        synced_at: Timestamp::now(),
        set_aside: Vec::new(),
        run: None,
    })
}

/// The server ends `db`'s lock sessions, as its keepalives end a connection the network cut,
/// and waits until they are gone (`pg_terminate_backend`'s second argument: a patience only a
/// hang reaches), so that their advisory locks are free.
fn end_lock_sessions(db: &Database) {
    let ended = pg::query(
        db,
        &format!(
            "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = '{LOCK_SESSION_NAME}'"
        ),
    );
    assert_eq!(ended, [[Some("t".to_owned())]], "one lock session, ended");
}

/// A page written under a claim that was lost is refused in its own transaction once another
/// process has claimed the schedule — though the writer's lock session looks alive to it (it
/// is silent, not closed), so nothing on the client can tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_under_a_lost_claim_is_refused_once_another_process_claimed_the_schedule() {
    if !pg::available("fence::a_page_under_a_lost_claim_is_refused") {
        return;
    }
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 20,
            ..SimulatorOptions::default()
        },
        Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let s = env.schedules()[0];
    let proxy = Proxy::start(pg::server());
    let mut first = PgWarehouse::open(&target(&proxy.url(&db))).expect("opens via the proxy");
    let _first_claim = first.claim(s).expect("claims").expect("free");
    // The page the first process read before the cut, and writes after it.
    let stale = env.sim.truth(s);
    assert_eq!(
        proxy.silence(LOCK_SESSION_NAME),
        1,
        "the first's lock session"
    );
    end_lock_sessions(&db);
    // The calls change; a second process claims the schedule and writes them.
    let uids: Vec<Uuid> = stale.iter().map(|c| c.uid).collect();
    env.sim.touch_calls(&uids);
    let fresh = env.sim.truth(s);
    let mut second = PgWarehouse::open(&db.target()).expect("opens");
    let second_claim = second
        .claim(s)
        .expect("claims")
        .expect("the server freed the first's lock");
    write(&mut second, s, &fresh).expect("the second writes under its claim");
    let checkpoint = second.checkpoint(s).expect("reads").expect("a checkpoint");

    let refused = write(&mut first, s, &stale).expect_err("a page under a lost claim");
    assert!(
        matches!(refused, WarehouseError::ClaimLost { schedule, taken: true, .. } if schedule == s),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("was claimed by another callsync process"),
        "{refused}"
    );
    // A later page under the same claim (as a refused group's pages, each written alone) is
    // refused for the same reason, though its session was given up with the takeover.
    let again = write(&mut first, s, &stale).expect_err("still under the lost claim");
    assert!(
        matches!(again, WarehouseError::ClaimLost { schedule, taken: true, .. } if schedule == s),
        "{again}"
    );
    // Nothing of the stale page: the rows and the checkpoint are the second's.
    env.assert_holds(s, &fresh);
    assert_eq!(
        second.checkpoint(s).expect("reads").map(|c| c.cursor),
        Some(checkpoint.cursor)
    );
    // The first's next claim is taken on a new session, and finds the schedule held; once
    // the second lets it go, it is the first's again, and its pages are written.
    assert!(
        first.claim(s).expect("claims").is_none(),
        "the second holds it"
    );
    drop(second_claim);
    let _again = first
        .claim(s)
        .expect("claims")
        .expect("free once the second let it go");
    write(&mut first, s, &fresh).expect("the first writes under its new claim");
    env.assert_holds(s, &fresh);
}

/// A lock session that stops answering is given up after `LOCK_PATIENCE`: the claim asked
/// on it is taken on a new session instead, and the claims it held count as lost — a page
/// under one is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_lock_session_is_given_up_and_the_next_claim_opens_another() {
    if !pg::available("fence::a_silent_lock_session_is_given_up") {
        return;
    }
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 10,
            ..SimulatorOptions::default()
        },
        Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let s = env.schedules();
    let proxy = Proxy::start(pg::server());
    let mut first = PgWarehouse::open(&target(&proxy.url(&db))).expect("opens via the proxy");
    let _lost = first.claim(s[0]).expect("claims").expect("free");
    assert_eq!(proxy.silence(LOCK_SESSION_NAME), 1);
    let other = first
        .claim(s[1])
        .expect("claimed on a new session once the silent one was given up")
        .expect("free");
    let lost = write(&mut first, s[0], &env.sim.truth(s[0])).expect_err("its session is gone");
    assert!(
        matches!(lost, WarehouseError::ClaimLost { schedule, taken: false, .. } if schedule == s[0]),
        "{lost}"
    );
    assert_eq!(env.snapshot(s[0]).calls.len(), 0, "nothing written");
    drop(other);
}

/// A `callsync run` configuration for `env`'s schedules into the warehouse at `url`; its cron
/// fires once a year, so that it walks each schedule once, at start.
fn daemon_config(env: &TestEnv, url: &str, name: &str) -> PathBuf {
    let schedules: Vec<String> = env.schedules().iter().map(|s| format!("\"{s}\"")).collect();
    let path = env.dir.path().join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[api]\nbase_url = \"{base}\"\naccess_token = \"{token}\"\n\n\
             [api.retry]\ninitial_interval_ms = 5\nmax_interval_secs = 1\n\n\
             [warehouse]\nurl = \"{url}\"\n\n\
             [sync]\nschedules = [{list}]\ncron = \"0 0 0 1 1 *\"\npage_size = 10\n\n\
             [log]\nlevel = \"info,callsync::sync=debug\"\n",
            base = env.sim.base_url(),
            token = env.sim.access_token(),
            list = schedules.join(", "),
        ),
    )
    .expect("config written");
    path
}

/// `sync_runs` of the daemon `pid`: `(outcome, error)` of each finished pass.
fn finished_runs(db: &Database, pid: u32) -> Vec<(Option<String>, Option<String>)> {
    let sql = format!(
        "SELECT outcome, error FROM sync_runs WHERE pid = {pid} AND finished_at IS NOT NULL"
    );
    // Before the first daemon has migrated the database, there is no such table.
    pg::admin(pg::server(), &db.name, &sql)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect()
}

fn count(db: &Database, sql: &str) -> i64 {
    pg::admin(pg::server(), &db.name, sql)
        .ok()
        .and_then(|rows| rows.first()?.first()?.as_deref()?.parse().ok())
        .unwrap_or(0)
}

/// Waits for `daemon` to exit after SIGTERM, within `bound`, with status 0.
async fn stops_within(daemon: &mut Daemon, bound: Duration) {
    nix_term(daemon.pid);
    let status = tokio::time::timeout(bound, daemon.child.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the daemon did not exit within {bound:?} of SIGTERM:\n{}",
                daemon.log_lines().join("\n")
            )
        })
        .expect("wait");
    assert_eq!(status.code(), Some(0), "{}", daemon.log_lines().join("\n"));
}

/// Two daemons, the first through the proxy. The first's pass is held inside (its third list
/// request waits in the simulator, so it holds page 2, read, not yet written); its lock
/// session goes silent and the server ends it; the calls change; a second daemon claims the
/// schedule and walks it. Then the first's page 2 — older than what the second wrote — goes
/// to its writer, whose connection still works: it is refused, the first's pass ends
/// `interrupted` saying the schedule was claimed by another, no row is written after the
/// second's pass, the warehouse equals the truth, and the first exits within 10 s of SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_lock_session_was_cut_commits_nothing_after_the_takeover() {
    if !pg::available("fence::a_daemon_whose_lock_session_was_cut") {
        return;
    }
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 50,
            ..SimulatorOptions::default()
        },
        Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let s = env.schedules()[0];
    let proxy = Proxy::start(pg::server());
    let hold = env.sim.hold_list_requests(3);
    let mut first = Daemon::spawn(
        &daemon_config(&env, &proxy.url(&db), "first"),
        env.dir.path().join("first.log"),
        "first",
    );
    tokio::select! {
        () = hold.arrived(3) => {}
        () = tokio::time::sleep(PATIENCE) => panic!("no third list request within {PATIENCE:?}"),
    }
    // The two pages answered before the held one are written (a page's write does not wait
    // for the next page), and nothing after them until the third answers: 19 calls, page 2
    // starting at page 1's last call (keyset paging is inclusive).
    wait_for("the first's pages 1 and 2 committed", || {
        count(&db, "SELECT count(*) FROM calls") == 19
    })
    .await;

    // The first's request stays held on the hold set so far; the second's go through.
    let _second_goes = env.sim.hold_list_requests(usize::MAX);
    let uids: Vec<Uuid> = env.sim.truth(s).iter().map(|c| c.uid).collect();
    env.sim.touch_calls(&uids);
    assert_eq!(
        proxy.silence(LOCK_SESSION_NAME),
        1,
        "the first's lock session"
    );
    end_lock_sessions(&db);
    let mut second = Daemon::spawn(
        &daemon_config(&env, &db.url, "second"),
        env.dir.path().join("second.log"),
        "second",
    );
    wait_for("the second's pass completed", || {
        !finished_runs(&db, second.pid).is_empty()
    })
    .await;
    assert_eq!(
        finished_runs(&db, second.pid),
        [(Some("completed".to_owned()), None)],
        "{}",
        second.log_lines().join("\n")
    );

    drop(hold);
    wait_for("the first's pass ended", || {
        !finished_runs(&db, first.pid).is_empty()
    })
    .await;
    let runs = finished_runs(&db, first.pid);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        runs[0].0.as_deref(),
        Some("interrupted"),
        "{}",
        first.log_lines().join("\n")
    );
    let error = runs[0].1.clone().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "schedule {s} was claimed by another callsync process"
        )),
        "{error}"
    );
    let after_second = format!(
        "SELECT count(*) FROM calls WHERE synced_at >
           (SELECT finished_at FROM sync_runs WHERE pid = {})",
        second.pid
    );
    assert_eq!(
        count(&db, &after_second),
        0,
        "a row written after the takeover"
    );
    env.assert_matches_truth(&[s]);

    stops_within(&mut first, EXIT_BOUND).await;
    stops_within(&mut second, PATIENCE).await;
    env.assert_matches_truth(&[s]);
}

/// SIGTERM while the daemon's lock session is silent and the daemon does not know it yet (its
/// pass is held inside, the server has not ended the session): the pass is interrupted, its
/// claim's release waits at most `LOCK_PATIENCE` on the silent session, and the daemon exits
/// within 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_exits_within_10_s_of_sigterm_while_its_lock_session_is_silent() {
    if !pg::available("fence::a_daemon_exits_within_10_s_of_sigterm") {
        return;
    }
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 50,
            ..SimulatorOptions::default()
        },
        Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let proxy = Proxy::start(pg::server());
    let hold = env.sim.hold_list_requests(3);
    let mut daemon = Daemon::spawn(
        &daemon_config(&env, &proxy.url(&db), "silent"),
        env.dir.path().join("silent.log"),
        "silent",
    );
    tokio::select! {
        () = hold.arrived(3) => {}
        () = tokio::time::sleep(PATIENCE) => panic!("no third list request within {PATIENCE:?}"),
    }
    assert_eq!(proxy.silence(LOCK_SESSION_NAME), 1);
    stops_within(&mut daemon, EXIT_BOUND).await;
    assert_eq!(
        finished_runs(&db, daemon.pid),
        [(
            Some("interrupted".to_owned()),
            Some(callsync::warehouse::INTERRUPTED.to_owned())
        )]
    );
    let log = daemon.log_lines().join("\n");
    assert!(
        log.contains(&format!(
            "the lock session did not answer within {} s",
            LOCK_PATIENCE.as_secs()
        )),
        "{log}"
    );
    drop(hold);
}

/// `callsync check`'s question to the server (`PgWarehouse::check`): a role that may write
/// the calls, checkpoints and passes but not bump the fencing tokens could claim no schedule;
/// it is told so before the daemon starts.
#[test]
fn a_role_that_may_not_bump_the_fence_is_refused_by_check() {
    if !pg::available("fence::a_role_that_may_not_bump_the_fence") {
        return;
    }
    let db = pg::database();
    drop(PgWarehouse::open(&db.target()).expect("migrated"));
    let role = format!("{}_no_fence", db.name);
    pg::query(
        &db,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT SELECT ON callsync_schema TO {role};
             GRANT INSERT, UPDATE, DELETE ON calls, sync_checkpoints, sync_runs TO {role}"
        ),
    );
    let url = db.url.replacen(
        &format!("{}@", pg::server().superuser),
        &format!("{role}@"),
        1,
    );
    let refused = PgWarehouse::check(&target(&url)).expect_err("no right to the fence");
    assert!(
        refused
            .to_string()
            .contains("may not write callsync's tables"),
        "{refused}"
    );
    pg::query(
        &db,
        &format!("GRANT SELECT, INSERT, UPDATE ON schedule_claims TO {role}"),
    );
    assert_eq!(
        PgWarehouse::check(&target(&url)).expect("may write all"),
        Some(callsync::warehouse::postgres::latest_version())
    );
}

/// A schedule of five calls on the simulator, its warehouse migrated (by the test server's
/// superuser, the tables' owner) and empty: its calls are a page of new calls.
async fn five_new_calls() -> (TestEnv, Database, Uuid, Vec<OutboundCall>) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 5,
            ..SimulatorOptions::default()
        },
        Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let s = env.schedules()[0];
    let calls = env.sim.truth(s);
    drop(PgWarehouse::open(&db.target()).expect("the warehouse migrates"));
    (env, db, s, calls)
}

/// A page of new calls is inserted, not upserted (`postgres/write.rs`). A call of it that
/// another transaction stores after the page read its stored calls (a call moved between two
/// schedules written at once) makes that insert fail: the page is rolled back and written
/// again at once, upserted, and nothing of it is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stored_meanwhile_by_another_transaction_turns_a_page_of_new_calls_into_an_upsert() {
    if !pg::available("fence::a_call_stored_meanwhile_by_another_transaction") {
        return;
    }
    let (env, db, s, calls) = five_new_calls().await;
    // Another transaction stores the page's third call (of the same schedule: one of another
    // would be a conflict, set aside), and holds its commit.
    let (other, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    other
        .batch_execute(&format!(
            "BEGIN; INSERT INTO calls (uid, schedule_uid, status, created_at, updated_at,
               synced_at, content_hash)
             VALUES ('{}', '{}', 'queued', now(), now(), now(), 0)",
            calls[2].uid, s
        ))
        .await
        .expect("the other transaction stores the call");
    // The page reads its stored calls without it (not committed), inserts its calls as new,
    // and waits on the other transaction's row.
    let writer = std::thread::spawn({
        let (target, calls) = (db.target(), calls.clone());
        move || {
            let mut warehouse = PgWarehouse::open(&target).expect("opens");
            let _claim = warehouse.claim(s).expect("claims").expect("free");
            write(&mut warehouse, s, &calls)
        }
    });
    wait_for("the page's insert to wait on the other transaction", || {
        pg::query(
            &db,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        ) == [[Some("1".to_owned())]]
    })
    .await;
    other.batch_execute("COMMIT").await.expect("commits");
    let written = writer
        .join()
        .expect("the writer thread")
        .expect("the page is written");
    assert_eq!(
        written.calls_written, 5,
        "all five, the stored one rewritten"
    );
    env.assert_holds(s, &calls);
}

/// A role that may write the tables but not take ids from their sequences itself (their owner
/// granted it table privileges only, which an insert's own identity default needs no more than)
/// still writes a page of new calls: upserted, the ids the tables' defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_the_sequences_privileges_still_writes_a_page_of_new_calls() {
    if !pg::available("fence::a_role_without_the_sequences_privileges") {
        return;
    }
    let (env, db, s, calls) = five_new_calls().await;
    let role = format!("writer_{}", db.name);
    pg::query(
        &db,
        &format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        ),
    );
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let written = tokio::task::spawn_blocking({
        let calls = calls.clone();
        move || {
            let mut warehouse = PgWarehouse::open(&target(&url)).expect("opens as the role");
            let _claim = warehouse.claim(s).expect("claims").expect("free");
            write(&mut warehouse, s, &calls)
        }
    })
    .await
    .expect("the writer")
    .expect("the page is written");
    assert_eq!(written.calls_written, 5);
    env.assert_holds(s, &calls);
    // Taken one by one by the inserts, not reserved ahead: ids 1 to 5 in page order.
    let ids = pg::query(
        &db,
        "SELECT string_agg(id::text, ',' ORDER BY id) FROM calls",
    );
    assert_eq!(ids, [[Some("1,2,3,4,5".to_owned())]]);
}
