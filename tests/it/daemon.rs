//! `callsync run`: no overlapping passes, backoff for a failing schedule, reconciliations
//! queued not lost, metrics, a warehouse that goes away, and a SIGTERM mid-pass that exits 0 in
//! time and loses nothing.
//!
//! The daemon runs in-process with its ticks sent by hand ([`TickSource::manual`]): a test
//! sends a tick, hears which passes it started, and waits for their reports, never for a wall
//! clock. Two tests run the binary: signals and exit codes need the real process, and one of
//! them runs the real crons, every second.

use std::process::Stdio;
use std::time::{Duration, Instant};

use callsync::config::Config;
use callsync::daemon::{DaemonError, Tick, TickDriver, TickSource};
use callsync::service::Timestamp;
use callsync::simulator::{BadBody, DialerOptions, FaultPlan, SimulatorOptions};
use callsync::sync::{PassReport, PassResult};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::harness::{PATIENCE, TestEnv, wait_for, wait_for_value};

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
            started: Timestamp::parse_warehouse_text(&started).expect("timestamp"),
            finished: finished.map(|f| Timestamp::parse_warehouse_text(&f).expect("timestamp")),
            error: r.get(3)?,
        })
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

/// The daemon in-process, its ticks sent by hand: every wait is for pass reports.
struct Daemon {
    driver: TickDriver,
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<Result<(), DaemonError>>,
    /// Every report so far, in the order the passes ended.
    reports: Vec<PassReport>,
}

impl Daemon {
    /// Starts the daemon; its start-up tick starts a pass of every schedule.
    fn start(config: &Config) -> Daemon {
        let (source, driver) = TickSource::manual();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(callsync::daemon::run_with(config.clone(), source, async {
            let _ = stopped.await;
        }));
        Daemon {
            driver,
            stop,
            task,
            reports: Vec::new(),
        }
    }

    /// Sends `tick` without waiting for its passes; returns the schedules it started.
    async fn send(&mut self, tick: Tick) -> Vec<Uuid> {
        self.driver.tick(tick).await
    }

    /// Sends `tick` and waits for the passes it started (and any still running) to end.
    async fn tick(&mut self, tick: Tick) -> Vec<Uuid> {
        let started = self.send(tick).await;
        self.settle().await;
        started
    }

    /// Waits until every pass the ticks started has reported.
    async fn settle(&mut self) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while self.driver.running().await > 0 {
            self.next_report("every pass started to end", deadline)
                .await;
        }
    }

    /// Takes reports until `done` holds for them.
    async fn until(&mut self, what: &str, mut done: impl FnMut(&[PassReport]) -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !done(&self.reports) {
            self.next_report(what, deadline).await;
        }
    }

    /// Takes the next report; panics naming `what` if the daemon stops first, or at
    /// `deadline`.
    async fn next_report(&mut self, what: &str, deadline: tokio::time::Instant) {
        match tokio::time::timeout_at(deadline, self.driver.report()).await {
            Ok(Some(report)) => self.reports.push(report),
            Ok(None) => panic!("the daemon stopped while waiting for {what}"),
            Err(_) => panic!("still waiting after {PATIENCE:?} for {what}"),
        }
    }

    /// The results of `schedule`'s passes, in the order they ended.
    fn results(&self, schedule: Uuid) -> Vec<&PassResult> {
        self.reports
            .iter()
            .filter(|r| r.schedule == schedule)
            .map(|r| &r.result)
            .collect()
    }

    /// Asks the daemon to stop; returns how long it took.
    async fn stop(self) -> Duration {
        let asked = Instant::now();
        self.stop.send(()).expect("daemon alive");
        self.task.await.expect("joined").expect("daemon ran");
        asked.elapsed()
    }

    /// The error the daemon stops with by itself.
    async fn failure(self) -> DaemonError {
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the daemon stops by itself")
            .expect("joined")
            .expect_err("the daemon fails")
    }
}

/// Passes of `schedule` recorded as finished in the warehouse.
fn finished_passes(env: &TestEnv, schedule: Uuid) -> usize {
    runs(env, schedule)
        .iter()
        .filter(|r| r.finished.is_some())
        .count()
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
        // Every answer takes 40 ms, so a tick sent right after another finds its passes
        // still running: it must skip them, not queue or overlap them.
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_millis(40),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.page_size = 50;
    // An hour: a shutdown that waited for it, not for the passes, cannot pass for a slow one.
    env.config.sync.shutdown_timeout = Duration::from_secs(3600);
    let s = env.schedules();
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    for _ in 0..2 {
        assert_eq!(
            daemon.send(Tick::Sync).await,
            s,
            "a tick after the passes ended starts every schedule"
        );
        daemon.send(Tick::Sync).await;
        daemon.settle().await;
    }
    let passes = daemon.reports.len();
    assert!(
        daemon
            .reports
            .iter()
            .all(|r| r.result == PassResult::Completed),
        "every pass completed"
    );
    let took = daemon.stop().await;
    assert!(took < PATIENCE, "shutdown took {took:?}");
    let mut rows = 0;
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
            runs.iter()
                .all(|r| r.finished.is_some() && r.error.is_none()),
            "every run was closed"
        );
        rows += runs.len();
    }
    assert_eq!(rows, passes, "one sync_runs row per pass reported");
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
    env.config.api.retry.max_attempts = 1;
    let s = env.schedules();
    env.sim.break_schedule(s[0], Some(BadBody::InvalidJson));
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    // The start-up tick starts both, then 6 ticks, each sent once the last passes ended.
    let mut broken_started = vec![true];
    for _ in 0..6 {
        let started = daemon.tick(Tick::Sync).await;
        assert!(
            started.contains(&s[1]),
            "the healthy schedule is never held up"
        );
        broken_started.push(started.contains(&s[0]));
    }
    // After failures 1, 2 and 3 the broken schedule sits out 0, 1 and 3 ticks.
    assert_eq!(
        broken_started,
        [true, true, false, true, false, false, false]
    );
    assert!(daemon.results(s[0]).iter().all(|r| matches!(
        r,
        PassResult::Failed {
            kind: callsync::ErrorKind::BadResponse,
            ..
        }
    )));
    assert!(
        daemon
            .results(s[1])
            .iter()
            .all(|r| **r == PassResult::Completed)
    );
    daemon.stop().await;
    let broken = runs(&env, s[0]);
    let healthy = runs(&env, s[1]);
    assert_eq!((broken.len(), healthy.len()), (3, 7));
    assert!(healthy.iter().all(|r| r.error.is_none()));
    assert!(broken.iter().all(|r| r.error.is_some()));
    env.assert_matches_truth(&s[1..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_is_survived_and_sigterm_mid_pass_exits_0_and_loses_nothing() {
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
        env.write_config("page_size = 20\ncron = \"0 0 * * * *\"\nshutdown_timeout_secs = 60\n");
    // Logged at log.level = "warn" (write_config's): what an operator's `-p warning` shows.
    let log_path = env.dir.path().join("run.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(&config)
        .arg("run")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(log)
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
    // SIGHUP does not stop the daemon: had it, the exit below would be by signal (SIGHUP,
    // sent first, is delivered before the SIGTERM), not a clean 0. No wait for time to pass.
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    // Decided by events, not by how long it took: a clean exit, and every pass closed as
    // interrupted (a daemon that waited for its passes would close them completed).
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("exits")
        .expect("exit status");
    assert_eq!(status.code(), Some(0), "a clean shutdown exits 0");
    // A stop asked for is no warning (every restart would show under `journalctl -p
    // warning`); the ignored SIGHUP is one.
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(!logged.contains("shutting down"), "{logged}");
    assert!(logged.contains("SIGHUP ignored"), "{logged}");
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
    env.config.api.retry.max_attempts = 1;
    let s = env.schedules();
    env.sim.break_schedule(s[0], Some(BadBody::InvalidJson));
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    // The start-up tick and 3 more: the broken schedule has gone 3 sync ticks and more
    // without progress, while the healthy one completed a pass in each.
    for _ in 0..3 {
        daemon.tick(Tick::Sync).await;
    }
    // reqwest is built without a default TLS provider: install one before building a client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
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
    let reports = std::mem::take(&mut daemon.reports);
    daemon.stop().await;

    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line_start} missing from:\n{metrics}"))
    };
    let count = |schedule: Uuid, failed: bool| {
        reports
            .iter()
            .filter(|r| {
                r.schedule == schedule && matches!(r.result, PassResult::Failed { .. }) == failed
            })
            .count()
    };
    // Passes at ticks 0 to 3 of the healthy schedule; 0, 1 and 3 of the backing-off one.
    assert_eq!((count(s[1], false), count(s[0], true)), (4, 3));
    let passes = |result: &str| {
        value(&format!(
            "callsync_passes_total{{kind=\"incremental\",result=\"{result}\"}}"
        ))
    };
    assert_eq!(passes("completed"), 4.0);
    assert_eq!(passes("failed"), 3.0);
    // Every pass is timed; per schedule, the latest pass's duration and the failures in a row.
    assert_eq!(
        value("callsync_pass_duration_seconds_count{kind=\"incremental\"}"),
        7.0
    );
    assert!(
        value(&format!(
            "callsync_last_pass_duration_seconds{{schedule=\"{}\"}}",
            s[1]
        )) > 0.0
    );
    let failed = |schedule: Uuid| {
        value(&format!(
            "callsync_failed_passes{{schedule=\"{schedule}\"}}"
        ))
    };
    assert_eq!((failed(s[0]), failed(s[1])), (3.0, 0.0));
    assert_eq!(value("callsync_calls_written_total"), 60.0);
    let ok_requests: u64 = reports.iter().filter_map(|r| r.statuses.get(&200)).sum();
    // One list request a pass: the broken schedule's answers are 200s too, with a body that
    // is not JSON.
    assert_eq!(ok_requests, 7);
    assert_eq!(
        value("callsync_requests_total{status=\"200\"}"),
        ok_requests as f64
    );
    // Every answer is timed.
    assert_eq!(
        value("callsync_request_duration_seconds_count"),
        ok_requests as f64
    );
    assert!(value("callsync_warehouse_size_bytes") > 0.0);
    // The version and the commit built (git's, where the build had git).
    let revision = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or("unknown".to_owned(), |out| {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        });
    assert_eq!(
        value(&format!(
            "callsync_build_info{{version=\"{}\",revision=\"{revision}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    // Which daemon this is, once (an info series), as sync_runs names its passes: no
    // `instance` (Prometheus' own label), no pid (a new series at every restart).
    let walker = callsync::warehouse::ProcessIdentity::this_process(None);
    assert_eq!(
        value(&format!(
            "callsync_daemon_info{{host=\"{}\",daemon=\"{}\"}}",
            walker.host, walker.instance
        )),
        1.0
    );
    assert!(value("process_start_time_seconds") > 1.7e9);
    assert!(value("process_resident_memory_bytes") > 0.0);
    assert!(value("process_open_fds") > 0.0);
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
    // The broken schedule has made no progress for 3 sync ticks.
    assert_eq!(health_status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        health_text.contains(&s[0].to_string()) && !health_text.contains(&s[1].to_string()),
        "{health_text}"
    );
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
async fn a_reconciliation_that_comes_with_a_sync_tick_is_queued_not_lost() {
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
    env.config.sync.reconcile_window = Duration::from_secs(8 * 86_400);
    // `make_child_only_changes` ran as many passes as it needed (at least two): counted
    // here, so the daemon's own passes are counted alone below.
    let passes_before: Vec<usize> = s
        .iter()
        .map(|schedule| runs(&env, *schedule).len())
        .collect();
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    // The two crons fire in the same second: the sync tick first, its passes' first list
    // requests held (by construction, not for a while) until the reconcile tick has found
    // them running.
    let hold = env.sim.hold_list_requests(1);
    assert_eq!(daemon.send(Tick::Sync).await, s);
    tokio::time::timeout(PATIENCE, hold.arrived(s.len()))
        .await
        .expect("every sync pass asks for its first page");
    assert_eq!(
        daemon.send(Tick::Reconcile).await,
        Vec::<Uuid>::new(),
        "both schedules are busy: the reconciliation is queued, not started"
    );
    drop(hold);
    daemon
        .until("a reconciliation of every schedule", |reports| {
            s.iter().all(|schedule| {
                reports
                    .iter()
                    .any(|r| r.schedule == *schedule && r.kind.as_str() == "reconcile")
            })
        })
        .await;
    // Sync ticks keep coming after it.
    for _ in 0..2 {
        assert_eq!(daemon.tick(Tick::Sync).await, s);
    }
    assert!(daemon.reports.iter().all(|r| r.succeeded()));
    let reports = std::mem::take(&mut daemon.reports);
    daemon.stop().await;
    for (schedule, before) in s.iter().zip(passes_before) {
        let count = |kinds: &[&str], kind: &str| kinds.iter().filter(|k| **k == kind).count();
        let passes: Vec<&str> = reports
            .iter()
            .filter(|r| r.schedule == *schedule)
            .map(|r| r.kind.as_str())
            .collect();
        // Start-up, the tick with the reconciliation, and two more.
        assert_eq!(
            (count(&passes, "reconcile"), count(&passes, "incremental")),
            (1, 4),
            "{schedule}: {passes:?}"
        );
        let runs = runs(&env, *schedule);
        let kinds: Vec<&str> = runs.iter().map(|run| run.kind.as_str()).collect();
        // The incremental passes of `make_child_only_changes` come first.
        assert_eq!(
            (count(&kinds, "reconcile"), count(&kinds, "incremental")),
            (1, before + 4),
            "{schedule}: {kinds:?}"
        );
        assert!(runs.iter().all(|run| run.error.is_none()));
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
    env.config.sync.page_size = 20;
    env.config.sync.concurrency = 1;
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    assert_eq!(daemon.tick(Tick::Sync).await, env.schedules());
    daemon.stop().await;
    let all = all_runs(&env);
    assert_eq!(all.len(), 6);
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
async fn passes_at_once_grow_past_the_old_sixteen_while_the_latency_holds() {
    // 120 schedules, each answered 30 ms late: the limit in flight starts at 16 and grows
    // while the service answers as fast, and the passes running at once follow it.
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 120,
        calls_per_schedule: 3,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_millis(30),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    env.config.sync.concurrency = 256;
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    assert_eq!(daemon.tick(Tick::Sync).await, env.schedules());
    daemon.stop().await;
    let all = all_runs(&env);
    // The start-up tick's and this one's.
    assert_eq!(all.len(), 240);
    // The most passes that overlapped: each pass's start against the ends of those before.
    let most = all
        .iter()
        .map(|run| {
            all.iter()
                .filter(|other| {
                    other.started <= run.started && other.finished.expect("finished") > run.started
                })
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(most > 16, "at most {most} passes at once");
    assert!(all.iter().all(|run| run.error.is_none()));
    env.sim.set_faults(FaultPlan::default());
    env.assert_matches_truth(&env.schedules());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_held_by_another_process_is_skipped_not_failed() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 50,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    // A backfill of s[0] in another process holds its lock for the first three ticks.
    env.create_warehouse();
    let held = callsync::warehouse::sqlite::ScheduleLock::acquire(&env.warehouse_path(), s[0])
        .expect("lock");
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    for _ in 0..2 {
        assert_eq!(daemon.tick(Tick::Sync).await, s);
    }
    drop(held);
    let released = Timestamp::now();
    // No backoff: the next ticks after the release pass the schedule.
    for _ in 0..2 {
        assert_eq!(daemon.tick(Tick::Sync).await, s);
    }
    let results: Vec<&str> = daemon
        .results(s[0])
        .iter()
        .map(|r| match r {
            PassResult::Skipped(_) => "skipped",
            PassResult::Completed => "completed",
            _ => "other",
        })
        .collect();
    assert_eq!(
        results,
        ["skipped", "skipped", "skipped", "completed", "completed"]
    );
    daemon.stop().await;
    let held_runs = runs(&env, s[0]);
    assert_eq!(held_runs.len(), 2, "a skipped pass leaves no run");
    assert!(
        held_runs
            .iter()
            .all(|r| r.error.is_none() && r.started >= released),
        "no pass of a held schedule starts"
    );
    assert_eq!(runs(&env, s[1]).len(), 5);
    env.assert_matches_truth(&s);
}

/// Runs the daemon until its start-up passes have ended, does `what` to the warehouse's
/// path, sends a tick, and returns the error the daemon stopped with.
async fn stopped_by(what: impl FnOnce(&std::path::Path)) -> (TestEnv, String) {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 40,
        ..SimulatorOptions::default()
    })
    .await;
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    what(&env.warehouse_path());
    assert!(
        daemon.send(Tick::Sync).await.is_empty(),
        "the tick starts nothing: the daemon stops"
    );
    let err = daemon.failure().await;
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
    let engine = crate::harness::engine_for(&env.config);
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
        callsync::sync::PassResult::Failed {
            kind: callsync::ErrorKind::Warehouse,
            error: format!(
                "the warehouse {} was replaced by another file while callsync had it open; restart callsync (systemctl restart callsync) to use the new file (`callsync restore` does this safely)",
                db.display()
            )
        }
    );
    assert!(env.sim.requests().is_empty(), "nothing was read");
    engine.close().await;
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
    let wal = std::fs::metadata(format!("{}-wal", db.display())).unwrap();
    assert_eq!(wal.len(), 0, "no frame left to replay onto the new file");
}

/// What systemd sees: `callsync run`, on its real crons, exits 1 with one line naming the
/// warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callsync_run_on_its_crons_exits_1_naming_a_deleted_warehouse() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    // Not both every second: a reconcile tick that comes first in the second leaves the sync
    // tick of that second skipped.
    let config = env.write_config("cron = \"* * * * * *\"\nreconcile_cron = \"*/2 * * * * *\"");
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
    // Both crons fire: a reconciliation, and an incremental pass after the start-up one.
    wait_for("passes started by both crons", || {
        let finished: Vec<String> = runs(&env, s)
            .into_iter()
            .filter(|r| r.finished.is_some())
            .map(|r| r.kind)
            .collect();
        finished.iter().filter(|k| *k == "incremental").count() >= 2
            && finished.iter().any(|k| k == "reconcile")
    })
    .await;
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
    // Healthy; a pass the cron started meanwhile is said busy below the "ok".
    let (status, text) = healthz().await.expect("/healthz answers");
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(text.starts_with("ok\n"), "{text}");

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
        // Polling interval under the patience above.
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
    // Unfinished passes: one of a live process of this machine (init's id), which may still
    // be running; one of a process that is gone, which the daemon marks interrupted when it
    // opens the warehouse.
    let here = callsync::warehouse::ProcessIdentity::this_process(None).host;
    conn.execute_batch(&format!(
        "INSERT INTO sync_runs (schedule_uid, kind, started_at, finished_at, outcome, host, pid)
         VALUES
           ('{schedule}', 'incremental', '2020-01-01 00:00:00', '2020-01-01 00:00:01', 'completed', NULL, NULL),
           ('{schedule}', 'incremental', '2020-01-02 00:00:00', '2020-01-02 00:00:01', 'failed', NULL, NULL),
           ('{schedule}', 'backfill',    '2020-01-03 00:00:00', NULL, NULL, '{here}', 1),
           ('{schedule}', 'backfill',    '2020-01-04 00:00:00', NULL, NULL, 'gone-host', 7),
           ('{gone}', 'incremental', '2020-01-01 00:00:00', '2020-01-01 00:00:01', 'completed', NULL, NULL),
           ('{gone}', 'incremental', '2020-01-02 00:00:00', '2020-01-02 00:00:01', 'completed', NULL, NULL);"
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
    // The start-up pass, after which retention runs in its task.
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    wait_for("the old passes to be forgotten", || old_passes().len() < 6).await;
    daemon.stop().await;
    assert_eq!(
        old_passes(),
        [
            // A pass that may still be running is never forgotten; one marked interrupted
            // (its process gone) is, as any finished pass.
            (schedule.to_string(), "2020-01-03 00:00:00".to_owned()),
            (gone.to_string(), "2020-01-02 00:00:00".to_owned()),
        ]
    );
    assert_eq!(finished_passes(&env, schedule), 1, "the new pass stays");
}

/// `[backup]`: a backup tick makes a consistent copy while the daemon runs, checks it, and
/// then removes the oldest of its backups beyond `keep`, leaving other files alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_tick_makes_a_checked_backup_and_keeps_the_newest() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 50,
        ..SimulatorOptions::default()
    })
    .await;
    let dir = env.warehouse_path().parent().unwrap().join("backups");
    std::fs::create_dir(&dir).unwrap();
    // Two older backups (their content does not matter: only the new one is checked) and a
    // file of the operator's.
    for name in [
        "callsync-20200101T000000Z.db",
        "callsync-20200102T000000Z.db",
        "README",
    ] {
        std::fs::write(dir.join(name), "old").unwrap();
    }
    env.config.backup = Some(callsync::config::BackupConfig {
        cron: callsync::config::CronSchedule::parse("0 15 2 * * *").unwrap(),
        dir: dir.clone(),
        keep: 2,
    });
    let listen = free_port();
    env.config.metrics.listen = Some(listen);
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    // From start-up: the newest backup already there (2020-01-02, 3 bytes), no failure.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let scrape = || async {
        let text = (http.get(format!("http://{listen}/metrics")).send().await)
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
                .parse::<f64>()
                .unwrap()
        };
        [
            value("callsync_backup_last_success_timestamp_seconds"),
            value("callsync_backup_size_bytes"),
            value("callsync_backup_failures_total"),
        ]
    };
    assert_eq!(scrape().await, [1_577_923_200.0, 3.0, 0.0]);
    assert_eq!(daemon.send(Tick::Backup).await, Vec::<Uuid>::new());
    let names = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    // Checked first, then the oldest removed: its going is the event.
    wait_for("the oldest backup removed", || {
        !names().contains(&"callsync-20200101T000000Z.db".to_owned())
    })
    .await;
    // The series say it once the backup task has told them (after its removals).
    let seen = wait_for_value("the backup's series", || async {
        Some(scrape().await).filter(|seen| seen[0] > 1.7e9)
    })
    .await;
    // A backup that cannot be made: the directory is now a file.
    std::fs::rename(&dir, dir.with_extension("kept")).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    assert_eq!(daemon.send(Tick::Backup).await, Vec::<Uuid>::new());
    let failed = wait_for_value("the failed backup counted", || async {
        Some(scrape().await).filter(|failed| failed[2] == 1.0)
    })
    .await;
    daemon.stop().await;
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(dir.with_extension("kept"), &dir).unwrap();
    let names = names();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(names[0], "README");
    assert_eq!(names[1], "callsync-20200102T000000Z.db");
    let new = &names[2];
    assert!(
        new.starts_with("callsync-20") && new.ends_with("Z.db"),
        "{new}"
    );
    let contents =
        callsync::warehouse::sqlite::verify_backup(&dir.join(new)).expect("a good backup");
    assert_eq!(contents.calls, 100);
    let size = std::fs::metadata(dir.join(new)).unwrap().len() as f64;
    assert_eq!(seen[1..], [size, 0.0]);
    // A failure leaves the last success and its size as they were.
    assert_eq!(failed, [seen[0], size, 1.0]);
}

/// `/healthz` during a slow reconciliation: its pages commit nothing (nothing changed), but its
/// requests are answered, and a quiet stretch is judged against the pass's own slowest so far.
/// Each step waits for an event — a list request held, then let through —, never an instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_moving_reconciliation_is_healthy_and_late_only_past_its_own_cadence() {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 100,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    env.config.sync.page_size = 10;
    env.config.sync.reconcile_window = Duration::from_secs(3650 * 86_400);
    let listen = free_port();
    env.config.metrics.listen = Some(listen);
    let mut daemon = Daemon::start(&env.config);
    daemon.settle().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let health = || async {
        let answer = http
            .get(format!("http://{listen}/healthz"))
            .send()
            .await
            .unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    };
    let hold = env.sim.hold_list_requests(1);
    let held = &hold;
    let arrived = move |n| async move {
        tokio::time::timeout(PATIENCE, held.arrived(n))
            .await
            .expect("the reconciliation asks for its next page");
    };
    assert_eq!(daemon.send(Tick::Reconcile).await, s);
    arrived(1).await;
    // Its first page held for 3 sync ticks: the first finds the start-up pass's completion
    // (progress since the tick before), the next two nothing: quiet, but not for long.
    for _ in 0..3 {
        assert_eq!(daemon.send(Tick::Sync).await, Vec::<Uuid>::new());
    }
    assert_eq!(health().await.0, 200);
    // Pages answered one a tick, none committed (nothing changed): moving, so healthy, for
    // more ticks than a schedule without progress is given.
    for page in 1..=4 {
        hold.release(page);
        arrived(page + 1).await;
        assert_eq!(daemon.send(Tick::Sync).await, Vec::<Uuid>::new());
        let (status, text) = health().await;
        assert_eq!(status, 200, "page {page}: {text}");
        assert!(text.starts_with("ok\nbusy since "), "{text}");
    }
    // The details of the four pages read (10 each) have all been asked for: from here on
    // nothing of the pass moves while its fifth page is held (their last answers may still
    // count for the first quiet tick).
    // Its fifth page held: quiet from here (once the last details answered have counted).
    // Its slowest stretch was 2 ticks, so it is late only past 2 × 2 + 1 = 5 quiet ticks,
    // not at 3; the first 503 says so.
    let mut late = None;
    for _ in 0..12 {
        assert_eq!(daemon.send(Tick::Sync).await, Vec::<Uuid>::new());
        let (status, text) = health().await;
        if status == 503 {
            late = Some(text);
            break;
        }
        assert_eq!(status, 200, "{text}");
    }
    let text = late.expect("late once quiet for long enough");
    assert!(
        text.starts_with(&format!(
            "late: {}: its reconcile pass, running since ",
            s[0]
        )) && text.contains(
            ", has had no request answered and no page committed for 5 sync ticks (its slowest stretch before: 2)\n"
        ),
        "{text}"
    );
    drop(hold);
    daemon
        .until("the reconciliation", |reports| {
            reports.iter().any(|r| r.kind.as_str() == "reconcile")
        })
        .await;
    assert_eq!(health().await, (200, "ok\n".to_owned()));
    daemon.stop().await;
    env.assert_matches_truth(&s);
}
