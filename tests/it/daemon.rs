//! `callsync run`: ticks on a 1-second cron, no overlapping passes, backoff for a failing
//! schedule, and a SIGTERM mid-pass that exits 0 in time and loses nothing.

use std::process::Stdio;
use std::time::{Duration, Instant};

use callsync::api::Timestamp;
use callsync::simulator::{BadBody, DialerOptions, FaultPlan, SimulatorOptions};
use uuid::Uuid;

use crate::harness::TestEnv;

struct Run {
    kind: String,
    started: Timestamp,
    finished: Option<Timestamp>,
    error: Option<String>,
}

/// The schedule's passes so far (none while the daemon has not created the warehouse yet).
fn runs(env: &TestEnv, schedule: Uuid) -> Vec<Run> {
    let read_only = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let Ok(conn) = rusqlite::Connection::open_with_flags(env.warehouse_path(), read_only) else {
        return Vec::new();
    };
    let Ok(mut stmt) = conn.prepare(
        "SELECT kind, started_at, finished_at, error FROM sync_runs WHERE schedule_uid = ?1 ORDER BY id",
    ) else {
        return Vec::new();
    };
    stmt.query_map([schedule.to_string()], |r| {
        let started: String = r.get(1)?;
        let finished: Option<String> = r.get(2)?;
        Ok(Run {
            kind: r.get(0)?,
            started: Timestamp::parse_sqlite(&started).expect("timestamp"),
            finished: finished.map(|f| Timestamp::parse_sqlite(&f).expect("timestamp")),
            error: r.get(3)?,
        })
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

/// How long a daemon test waits for what it expects before failing. Only a bound against a
/// hang: every wait ends as soon as its condition holds, so a slow machine is not a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` until it holds; panics naming `what` after [`PATIENCE`].
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "still waiting after {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the daemon in-process until `done` holds, then shuts it down; returns how long
/// shutdown took.
async fn run_until(env: &TestEnv, what: &str, done: impl FnMut() -> bool) -> Duration {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = env.config.clone();
    let daemon = tokio::spawn(callsync::daemon::run(config, async {
        let _ = stopped.await;
    }));
    wait_for(what, done).await;
    let asked = Instant::now();
    stop.send(()).expect("daemon alive");
    daemon.await.expect("joined").expect("daemon ran");
    asked.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_arrives_tick_after_tick_and_passes_never_overlap() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 150,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(20),
            calls_per_tick: 2,
            ..DialerOptions::default()
        }),
        // Some passes take longer than a tick, so ticks must be skipped.
        faults: FaultPlan {
            slow_rate: 0.3,
            slow_delay: Duration::from_millis(700),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.cron = "* * * * * *".into();
    env.config.sync.page_size = 50;
    let took = run_until(&env, "3 passes of every schedule", || {
        env.schedules()
            .iter()
            .all(|s| finished_passes(&env, *s) >= 3)
    })
    .await;
    assert!(
        took < env.config.sync.shutdown_timeout,
        "shutdown took {took:?}"
    );
    for schedule in env.schedules() {
        let runs = runs(&env, schedule);
        for pair in runs.windows(2) {
            let previous_end = pair[0].finished.expect("finished");
            assert!(
                pair[1].started >= previous_end,
                "passes of one schedule overlapped"
            );
        }
        assert!(
            runs.iter().all(|r| r.finished.is_some()),
            "every run was closed"
        );
    }
    env.sim.set_dialer_running(false);
    env.sim.set_faults(FaultPlan::default());
    env.pass_ok(&env.schedules()).await;
    env.assert_matches_truth(&env.schedules());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_schedule_backs_off_without_holding_up_the_others() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 50,
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.cron = "* * * * * *".into();
    env.config.api.retry.max_attempts = 1;
    let s = env.schedules();
    env.sim.break_schedule(s[0], Some(BadBody::InvalidJson));
    run_until(&env, "6 passes of the healthy schedule", || {
        finished_passes(&env, s[1]) >= 6
    })
    .await;
    let broken = runs(&env, s[0]);
    let healthy = runs(&env, s[1]);
    assert!(healthy.iter().all(|r| r.error.is_none()));
    assert!(broken.iter().all(|r| r.error.is_some()));
    assert!(
        broken.len() < healthy.len() - 1,
        "the failing schedule backed off: {} vs {} passes",
        broken.len(),
        healthy.len()
    );
    env.assert_matches_truth(&s[1..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_is_survived_and_sigterm_mid_pass_exits_0_in_time_and_loses_nothing() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 3000,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_millis(50),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    let config =
        env.write_config("page_size = 20\ncron = \"0 0 * * * *\"\nshutdown_timeout_secs = 10\n");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(&config)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("callsync starts");
    wait_for("a pass of every schedule to be under way", || {
        env.schedules()
            .iter()
            .all(|s| runs(&env, *s).last().is_some_and(|r| r.finished.is_none()))
    })
    .await;
    let pid = child.id().expect("running").to_string();
    let hangup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(hangup.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        child.try_wait().expect("wait").is_none(),
        "SIGHUP does not stop the daemon"
    );
    let asked = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits within shutdown_timeout_secs")
        .expect("exit status");
    assert_eq!(status.code(), Some(0), "a clean shutdown exits 0");
    assert!(asked.elapsed() < Duration::from_secs(10));
    for schedule in env.schedules() {
        let runs = runs(&env, schedule);
        let last = runs.last().expect("a pass ran");
        assert!(last.finished.is_some(), "the interrupted pass was closed");
        assert_eq!(last.error.as_deref(), Some("interrupted by shutdown"));
    }
    env.sim.set_faults(FaultPlan::default());
    env.pass_ok(&env.schedules()).await;
    env.assert_matches_truth(&env.schedules());
}

fn free_port() -> std::net::SocketAddr {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    socket.local_addr().expect("address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_healthz_serve_the_right_figures() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 60,
        ..SimulatorOptions::default()
    })
    .await;
    let listen = free_port();
    env.config.metrics.listen = Some(listen);
    env.config.sync.cron = "* * * * * *".into();
    env.config.api.retry.max_attempts = 1;
    let s = env.schedules();
    env.sim.break_schedule(s[0], Some(BadBody::InvalidJson));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(callsync::daemon::run(env.config.clone(), async {
        let _ = stopped.await;
    }));
    // Before the daemon's client installs it: reqwest is built without a default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    // Until the broken schedule has gone 3 ticks without progress and the healthy one has
    // completed 3 passes.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = http.get(format!("http://{listen}/healthz")).send().await;
        let unhealthy =
            health.is_ok_and(|h| h.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE);
        let completed = runs(&env, s[1])
            .iter()
            .filter(|r| r.finished.is_some() && r.error.is_none())
            .count();
        if unhealthy && completed >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "/healthz never turned 503");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = http
        .get(format!("http://{listen}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let health = http
        .get(format!("http://{listen}/healthz"))
        .send()
        .await
        .unwrap();
    let health_status = health.status();
    let health_text = health.text().await.unwrap();
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();

    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line_start} missing from:\n{metrics}"))
    };
    let completed = runs(&env, s[1])
        .iter()
        .filter(|r| r.error.is_none() && r.finished.is_some())
        .count();
    let metric_completed = value(&format!(
        "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"completed\"}}",
        s[1]
    ));
    assert!(
        metric_completed >= 3.0 && metric_completed <= completed as f64,
        "{metric_completed} vs {completed}"
    );
    assert!(
        value(&format!(
            "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"failed\"}}",
            s[0]
        )) >= 1.0
    );
    assert_eq!(
        value(&format!(
            "callsync_pass_duration_seconds_count{{schedule=\"{}\",kind=\"incremental\"}}",
            s[1]
        )),
        value(&format!(
            "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"completed\"}}",
            s[1]
        )) + value(&format!(
            "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"behind\"}}",
            s[1]
        )) + value(&format!(
            "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"failed\"}}",
            s[1]
        )) + value(&format!(
            "callsync_passes_total{{schedule=\"{}\",kind=\"incremental\",result=\"interrupted\"}}",
            s[1]
        ))
    );
    assert!(value("callsync_calls_written_total") >= 60.0);
    let ok_requests = value("callsync_requests_total{status=\"200\"}");
    assert!(ok_requests >= 3.0);
    // Every answer is timed: the histogram counts at least the 200s (the broken
    // schedule's answers are 200s with a bad body).
    assert!(value("callsync_request_duration_seconds_count") >= ok_requests);
    assert!(value("callsync_warehouse_size_bytes") > 0.0);
    assert_eq!(
        value(&format!(
            "callsync_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    assert!(
        value(&format!(
            "callsync_last_success_timestamp_seconds{{schedule=\"{}\"}}",
            s[1]
        )) > 1.7e9
    );
    // Never synced: present from start-up, at 0, so `time() - x` alerts on it.
    assert_eq!(
        value(&format!(
            "callsync_last_success_timestamp_seconds{{schedule=\"{}\"}}",
            s[0]
        )),
        0.0
    );
    // The broken schedule has not synced for 3 one-second intervals.
    assert_eq!(health_status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        health_text.contains(&s[0].to_string()) && !health_text.contains(&s[1].to_string()),
        "{health_text}"
    );
}

/// How many passes of `schedule` have ended.
fn finished_passes(env: &TestEnv, schedule: Uuid) -> usize {
    runs(env, schedule)
        .iter()
        .filter(|r| r.finished.is_some())
        .count()
}

/// The passes of every schedule, in the order they started.
fn all_runs(env: &TestEnv) -> Vec<Run> {
    let mut all: Vec<Run> = env
        .schedules()
        .into_iter()
        .flat_map(|schedule| runs(env, schedule))
        .collect();
    all.sort_by_key(|run| run.started);
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconcile_cron_runs_even_when_it_fires_with_the_sync_cron() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 100,
        summary_list: true,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(5),
            calls_per_tick: 5,
            child_changes_without_bump: true,
            ..DialerOptions::default()
        }),
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    env.make_child_only_changes(&s).await;

    // Every reconcile tick coincides with a sync tick.
    env.config.sync.cron = "* * * * * *".into();
    env.config.sync.reconcile_cron = Some("*/2 * * * * *".into());
    env.config.sync.reconcile_window = Duration::from_secs(8 * 86_400);
    run_until(
        &env,
        "a reconciliation and 4 incremental passes of every schedule",
        || {
            s.iter().all(|schedule| {
                let kinds: Vec<String> = runs(&env, *schedule)
                    .into_iter()
                    .filter(|run| run.finished.is_some())
                    .map(|run| run.kind)
                    .collect();
                kinds.iter().any(|k| k == "reconcile")
                    && kinds.iter().filter(|k| *k == "incremental").count() >= 4
            })
        },
    )
    .await;
    for schedule in &s {
        let kinds: Vec<String> = runs(&env, *schedule)
            .into_iter()
            .filter(|run| run.error.is_none())
            .map(|run| run.kind)
            .collect();
        assert!(
            kinds.iter().any(|k| k == "reconcile"),
            "a reconciliation ran for {schedule}: {kinds:?}"
        );
        assert!(
            kinds.iter().filter(|k| *k == "incremental").count() >= 4,
            "sync ticks kept firing for {schedule}: {kinds:?}"
        );
    }
    env.assert_matches_truth(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_concurrency_bounds_the_passes_running_at_once() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 3,
        calls_per_schedule: 100,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_millis(30),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.cron = "* * * * * *".into();
    env.config.sync.page_size = 20;
    env.config.sync.concurrency = 1;
    run_until(&env, "6 passes", || all_runs(&env).len() >= 6).await;
    let all = all_runs(&env);
    for pair in all.windows(2) {
        let (previous, next) = (&pair[0], &pair[1]);
        assert!(
            next.started >= previous.finished.expect("finished"),
            "two passes ran at once with sync.concurrency = 1"
        );
    }
    env.sim.set_faults(FaultPlan::default());
    env.pass_ok(&env.schedules()).await;
    env.assert_matches_truth(&env.schedules());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_held_by_another_process_is_skipped_not_failed() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 50,
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.cron = "* * * * * *".into();
    let s = env.schedules();
    // A backfill of s[0] in another process holds its lock until s[1] has synced three times.
    env.create_warehouse();
    let held = callsync::sync::ScheduleLock::acquire(&env.warehouse_path(), s[0]).expect("lock");
    let mut released = None;
    let mut held = Some(held);
    run_until(
        &env,
        "passes of the held schedule after its release",
        || {
            if held.is_some() && finished_passes(&env, s[1]) >= 3 {
                held = None;
                released = Some(Timestamp::now());
            }
            finished_passes(&env, s[0]) >= 2
        },
    )
    .await;
    let released = released.expect("released");
    let held_runs = runs(&env, s[0]);
    assert!(
        held_runs.iter().all(|r| r.error.is_none()),
        "a skipped pass is not a failure"
    );
    assert!(
        held_runs.iter().all(|r| r.started >= released),
        "no pass of a held schedule starts"
    );
    // No backoff: passes resume on the next ticks after the lock is released.
    assert!(
        held_runs.len() >= 2,
        "{} passes after release",
        held_runs.len()
    );
    env.assert_matches_truth(&s);
}

/// Runs the daemon on a 1-second cron until its first passes are recorded, does `what` to
/// the warehouse's path, and returns the error the daemon stopped with.
async fn stopped_by(what: impl FnOnce(&std::path::Path)) -> (TestEnv, String) {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 40,
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.cron = "* * * * * *".into();
    let daemon = tokio::spawn(callsync::daemon::run(
        env.config.clone(),
        std::future::pending(),
    ));
    wait_for("a pass of every schedule", || {
        env.schedules()
            .iter()
            .all(|s| finished_passes(&env, *s) >= 1)
    })
    .await;
    what(&env.warehouse_path());
    let ended = tokio::time::timeout(PATIENCE, daemon)
        .await
        .expect("the daemon stops by itself")
        .expect("joined");
    let err = ended.expect_err("the daemon fails");
    (env, err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_stops_with_an_error_when_its_warehouse_is_deleted() {
    let (env, err) = stopped_by(|db| std::fs::remove_file(db).expect("rm")).await;
    assert_eq!(
        err,
        format!(
            "the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`",
            env.warehouse_path().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_stops_with_an_error_when_another_file_is_moved_over_its_warehouse() {
    let (env, err) = stopped_by(|db| {
        let other = db.with_file_name("other.db");
        std::fs::write(&other, b"").expect("written");
        std::fs::rename(&other, db).expect("mv");
    })
    .await;
    assert_eq!(
        err,
        format!(
            "the warehouse {} was replaced by another file while callsync had it open; restart callsync (systemctl restart callsync) to use the new file (`callsync restore` does this safely)",
            env.warehouse_path().display()
        )
    );
    // The daemon wrote nothing into the file now at the path.
    assert_eq!(std::fs::metadata(env.warehouse_path()).unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_into_a_replaced_warehouse_fails_naming_it_and_writes_nothing() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 40,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let db = env.warehouse_path();
    let engine = callsync::sync::Engine::start(&env.config).expect("engine");
    let other = db.with_file_name("other.db");
    std::fs::write(&other, b"").expect("written");
    std::fs::rename(&other, &db).expect("mv");
    let plan = callsync::sync::PassPlan::incremental(engine.settings());
    let report = engine
        .run_pass(
            s[0],
            &plan,
            &tokio_util::sync::CancellationToken::new(),
            &callsync::sync::Quiet,
        )
        .await;
    assert_eq!(
        report.result,
        callsync::sync::PassResult::Failed(format!(
            "the warehouse {} was replaced by another file while callsync had it open; restart callsync (systemctl restart callsync) to use the new file (`callsync restore` does this safely)",
            db.display()
        ))
    );
    assert!(env.sim.requests().is_empty(), "nothing was read");
    engine.close().await;
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
    let wal = std::fs::metadata(format!("{}-wal", db.display())).unwrap();
    assert_eq!(wal.len(), 0, "no frame left to replay onto the new file");
}

/// What systemd sees: `callsync run` exits 1 with one line naming the warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callsync_run_exits_1_naming_a_deleted_warehouse() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("cron = \"* * * * * *\"");
    let daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", config.to_str().unwrap(), "run"])
        .env_remove("RUST_LOG")
        .env("CALLSYNC_LOG__LEVEL", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("callsync runs");
    let s = env.schedules()[0];
    wait_for("a pass", || finished_passes(&env, s) >= 1).await;
    std::fs::remove_file(env.warehouse_path()).expect("rm");
    let out = tokio::time::timeout(PATIENCE, daemon.wait_with_output())
        .await
        .expect("the daemon stops by itself")
        .expect("waited");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`\n",
            env.warehouse_path().display()
        )
    );
}

/// What a load balancer or systemd's health check sees when the warehouse is deleted under
/// `callsync run`: `/healthz` answers 503 naming the file from the first request after the
/// `rm` (before any tick has noticed) until the process has exited, and it exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_503_naming_a_deleted_warehouse_until_callsync_run_exits_1() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let listen = free_port();
    let config = env.write_config(&format!(
        "cron = \"*/2 * * * * *\"\n\n[metrics]\nlisten = \"{listen}\"\n"
    ));
    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", config.to_str().unwrap(), "run"])
        .env_remove("RUST_LOG")
        .env("CALLSYNC_LOG__LEVEL", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("callsync runs");
    // The daemon runs in another process: nothing here has installed reqwest's provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let healthz = || async {
        let response = http.get(format!("http://{listen}/healthz")).send().await?;
        Ok::<_, reqwest::Error>((response.status(), response.text().await?))
    };
    let s = env.schedules()[0];
    wait_for("a pass", || finished_passes(&env, s) >= 1).await;
    assert_eq!(
        healthz().await.expect("/healthz answers"),
        (reqwest::StatusCode::OK, "ok\n".to_owned())
    );

    std::fs::remove_file(env.warehouse_path()).expect("rm");
    let deleted = format!(
        "the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`\n",
        env.warehouse_path().display()
    );
    let unavailable = (reqwest::StatusCode::SERVICE_UNAVAILABLE, deleted);
    assert_eq!(
        healthz().await.expect("/healthz answers"),
        unavailable,
        "the first request after the rm already says so"
    );
    // Every answer until the server is gone says so too, and the server goes only as the
    // process ends.
    let deadline = Instant::now() + PATIENCE;
    let mut answers = 1;
    while let Ok(answer) = healthz().await {
        assert_eq!(answer, unavailable);
        answers += 1;
        assert!(Instant::now() < deadline, "the daemon never stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = tokio::time::timeout(PATIENCE, daemon.wait())
        .await
        .expect("the daemon stops by itself")
        .expect("waited");
    assert_eq!(status.code(), Some(1), "after {answers} answers of 503");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_forgets_passes_older_than_keep_runs() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    env.config.warehouse.keep_runs = Some(Duration::from_secs(30 * 86_400));
    let schedule = env.schedules()[0];
    // A schedule no longer configured: its latest pass stays, however old.
    let gone = Uuid::from_u128(0x60e);
    env.create_warehouse();
    let conn = rusqlite::Connection::open(env.warehouse_path()).expect("warehouse opens");
    conn.execute_batch(&format!(
        "INSERT INTO sync_runs (schedule_uid, kind, started_at, finished_at, outcome) VALUES
           ('{schedule}', 'incremental', '2020-01-01 00:00:00', '2020-01-01 00:00:01', 'completed'),
           ('{schedule}', 'incremental', '2020-01-02 00:00:00', '2020-01-02 00:00:01', 'failed'),
           ('{schedule}', 'backfill',    '2020-01-03 00:00:00', NULL, NULL),
           ('{gone}', 'incremental', '2020-01-01 00:00:00', '2020-01-01 00:00:01', 'completed'),
           ('{gone}', 'incremental', '2020-01-02 00:00:00', '2020-01-02 00:00:01', 'completed');"
    ))
    .expect("old passes inserted");
    let old_passes = || -> Vec<(String, String)> {
        let mut stmt = conn
            .prepare(
                "SELECT schedule_uid, started_at FROM sync_runs
                 WHERE started_at < '2021-01-01' ORDER BY id",
            )
            .expect("query");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    run_until(&env, "the old passes to be forgotten", || {
        old_passes().len() < 5
    })
    .await;
    assert_eq!(
        old_passes(),
        [
            // A pass whose process died is never forgotten: it may still be running.
            (schedule.to_string(), "2020-01-03 00:00:00".to_owned()),
            (gone.to_string(), "2020-01-02 00:00:00".to_owned()),
        ]
    );
    assert_eq!(finished_passes(&env, schedule), 1, "the new pass stays");
}
