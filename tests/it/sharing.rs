//! Daemons that share the schedules (issue 20): several `callsync run` with one configuration
//! divide the schedules through their claims; a schedule held by another is skipped, not
//! failed; one killed with SIGKILL mid-pass has its schedules taken over within one tick;
//! no schedule is ever walked by two processes at once; every schedule ends equal to the truth.
//!
//! The destination is a parameter ([`Destination`]): the SQLite warehouse, and PostgreSQL
//! (a database of `tests/it/pg.rs`'s server, its `url` in `[warehouse]`), where the claims
//! are session advisory locks that die with the killed daemon's connection.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use callsync::service::Timestamp;
use callsync::simulator::{DialerOptions, Precision, SimulatorOptions};
use callsync::sync::{PassPlan, PassResult, Quiet, Skip};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::harness::{PATIENCE, TestEnv, wait_for};

/// One `sync_runs` row, as the partition test reads it from any destination.
#[derive(Debug, Clone)]
struct Run {
    schedule: Uuid,
    started_at: Timestamp,
    finished_at: Option<Timestamp>,
    outcome: Option<String>,
    pid: Option<u32>,
    host: Option<String>,
    instance: Option<String>,
}

/// Where the daemons write, as the partition test needs it.
trait Destination {
    /// The `[warehouse]` table of the daemons' configuration.
    fn warehouse_toml(&self) -> String;
    /// Every `sync_runs` row (none before the destination exists).
    fn runs(&self) -> Vec<Run>;
    /// Every schedule's rows equal the simulator's truth.
    fn assert_matches_truth(&self, env: &TestEnv);
}

/// The SQLite warehouse of the test's environment.
struct Sqlite(PathBuf);

impl Destination for Sqlite {
    fn warehouse_toml(&self) -> String {
        format!("[warehouse]\npath = \"{}\"\n", self.0.display())
    }

    fn runs(&self) -> Vec<Run> {
        if !self.0.exists() {
            return Vec::new();
        }
        let read_only = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let Ok(conn) = rusqlite::Connection::open_with_flags(&self.0, read_only) else {
            return Vec::new();
        };
        // Before the first daemon has migrated it, there is no such table: no runs yet.
        let Ok(mut stmt) = conn.prepare(
            "SELECT schedule_uid, started_at, finished_at, outcome, pid, host, instance
             FROM sync_runs ORDER BY id",
        ) else {
            return Vec::new();
        };
        let ts = |t: String| Timestamp::parse_warehouse_text(&t).expect("a stored timestamp");
        stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .expect("sync_runs reads")
        .into_iter()
        .map(
            |(schedule, started, finished, outcome, pid, host, instance)| Run {
                schedule: schedule.parse().expect("a schedule uid"),
                started_at: ts(started),
                finished_at: finished.map(ts),
                outcome,
                pid,
                host,
                instance,
            },
        )
        .collect()
    }

    fn assert_matches_truth(&self, env: &TestEnv) {
        env.assert_matches_truth(&env.schedules());
    }
}

/// A PostgreSQL database of the run's test server.
struct Postgres(crate::pg::Database);

impl Destination for Postgres {
    fn warehouse_toml(&self) -> String {
        format!("[warehouse]\nurl = \"{}\"\n", self.0.url)
    }

    fn runs(&self) -> Vec<Run> {
        // Instants in the warehouse's text form, so they parse as SQLite's do.
        let form = "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'";
        let sql = format!(
            "SELECT schedule_uid::text, to_char(started_at AT TIME ZONE 'UTC', {form}),
               to_char(finished_at AT TIME ZONE 'UTC', {form}), outcome, pid::text, host, instance
             FROM sync_runs ORDER BY id"
        );
        // Before the first daemon has migrated the database, there is no such table.
        let Ok(rows) = crate::pg::admin(crate::pg::server(), &self.0.name, &sql) else {
            return Vec::new();
        };
        let ts = |t: &str| Timestamp::parse_warehouse_text(t).expect("a stored timestamp");
        rows.into_iter()
            .map(|r| Run {
                schedule: r[0].as_deref().expect("a schedule").parse().expect("a uid"),
                started_at: ts(r[1].as_deref().expect("a start")),
                finished_at: r[2].as_deref().map(ts),
                outcome: r[3].clone(),
                pid: r[4].as_deref().map(|p| p.parse().expect("a pid")),
                host: r[5].clone(),
                instance: r[6].clone(),
            })
            .collect()
    }

    fn assert_matches_truth(&self, env: &TestEnv) {
        env.assert_matches_truth(&env.schedules());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_the_schedules_on_postgres() {
    if !crate::pg::available("sharing::three_daemons_share_the_schedules") {
        return;
    }
    let mut env = partition_env().await;
    let database = crate::pg::database();
    env.use_postgres(database.clone());
    let destination = Postgres(database);
    three_daemons_share_the_schedules_and_survive_a_kill(&env, &destination).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_the_schedules_on_sqlite() {
    let env = partition_env().await;
    let destination = Sqlite(env.warehouse_path());
    three_daemons_share_the_schedules_and_survive_a_kill(&env, &destination).await;
}

/// 30 schedules of 40 calls, worked by the simulator's dialer while the daemons run.
async fn partition_env() -> TestEnv {
    TestEnv::start(SimulatorOptions {
        precision: Precision::Seconds,
        schedules: 30,
        calls_per_schedule: 40,
        seed: 20,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(20),
            calls_per_tick: 3,
            ..DialerOptions::default()
        }),
        ..SimulatorOptions::default()
    })
    .await
}

/// A `callsync run` child, its stderr (text log lines) in a file.
pub(crate) struct Daemon {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    log: PathBuf,
}

impl Daemon {
    /// `callsync run` named `instance` (`CALLSYNC_SYNC__INSTANCE`: one configuration file
    /// for all, each machine its own name).
    pub(crate) fn spawn(config: &Path, log: PathBuf, instance: &str) -> Daemon {
        let file = std::fs::File::create(&log).expect("log file");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .arg("--config")
            .arg(config)
            .arg("run")
            .env("NO_COLOR", "1")
            .env("CALLSYNC_SYNC__INSTANCE", instance)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("callsync run starts");
        let pid = child.id().expect("a pid");
        Daemon { child, pid, log }
    }

    pub(crate) fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The number in a line's `tick{number=N}` span, or after `number=` in a tick line.
fn tick_number(line: &str) -> Option<u64> {
    let rest = line.split("tick{number=").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The highest tick a daemon's log says began (`DEBUG … tick tick="sync" number=N`).
fn last_tick_begun(lines: &[String]) -> u64 {
    lines
        .iter()
        .filter(|l| l.contains("callsync::daemon::dispatcher: tick tick="))
        .filter_map(|l| {
            l.split("number=")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// The ticks in which `lines` (from index `from` on) show a pass of `schedule` that walked
/// (ended completed, behind or failed — not skipped).
fn walked_in_ticks(lines: &[String], from: usize, schedule: Uuid) -> Vec<u64> {
    let span = format!(":pass{{schedule={schedule} ");
    lines
        .iter()
        .skip(from)
        .filter(|l| l.contains(&span) && !l.contains("pass skipped"))
        .filter(|l| {
            l.contains("pass completed")
                || l.contains("pass ended behind")
                || l.contains("pass failed")
        })
        .filter_map(|l| tick_number(l))
        .collect()
}

/// The ticks in which a daemon's log (from line `from`) says it skipped `schedule`'s pass
/// (held by another process, or walked by another since the tick).
fn skipped_in_ticks(lines: &[String], from: usize, schedule: Uuid) -> Vec<u64> {
    let span = format!(":pass{{schedule={schedule} ");
    lines
        .iter()
        .skip(from)
        .filter(|l| l.contains(&span) && l.contains("pass skipped"))
        .filter_map(|l| tick_number(l))
        .collect()
}

/// The partition test, on any destination: 3 daemons, 30 schedules with a dialer, one killed
/// with SIGKILL inside a pass (its list request held by the simulator, so the kill lands there
/// by construction).
async fn three_daemons_share_the_schedules_and_survive_a_kill(
    env: &TestEnv,
    destination: &dyn Destination,
) {
    let schedules = env.schedules();
    let list: Vec<String> = schedules.iter().map(|s| format!("\"{s}\"")).collect();
    let config = env.dir.path().join("shared.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"{base}\"\naccess_token = \"{token}\"\n\n\
             [api.retry]\ninitial_interval_ms = 5\nmax_interval_secs = 1\n\n\
             {warehouse}\n\
             [sync]\nschedules = [{list}]\ncron = \"* * * * * *\"\npage_size = 10\n\
             concurrency = 4\nshutdown_timeout_secs = 30\n\n\
             [log]\nlevel = \"info,callsync::daemon=debug,callsync::sync=debug\"\n",
            base = env.sim.base_url(),
            token = env.sim.access_token(),
            warehouse = destination.warehouse_toml(),
            list = list.join(", "),
        ),
    )
    .expect("config written");
    let mut daemons: Vec<Daemon> = (0..3)
        .map(|i| {
            let log = env.dir.path().join(format!("daemon-{i}.log"));
            Daemon::spawn(&config, log, &format!("daemon-{i}"))
        })
        .collect();
    let pids: BTreeSet<u32> = daemons.iter().map(|d| d.pid).collect();
    let daemons_named: Vec<(String, u32)> = daemons
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("daemon-{i}"), d.pid))
        .collect();

    // They divide the work: each of the three walks passes, and every schedule is synced.
    wait_for("every schedule synced, and every daemon walking", || {
        let runs = destination.runs();
        let synced: BTreeSet<Uuid> = runs
            .iter()
            .filter(|r| r.outcome.as_deref() == Some("completed"))
            .map(|r| r.schedule)
            .collect();
        let walkers: BTreeSet<u32> = runs.iter().filter_map(|r| r.pid).collect();
        synced.len() == schedules.len() && walkers == pids
    })
    .await;

    // The kill, by construction: the third list request from now on, and every one after it,
    // waits in the simulator; its sender is inside a pass of the schedule it names (its
    // `sync_runs` row is open) and cannot end it. That process is killed with SIGKILL.
    const K: usize = 3;
    let hold = env.sim.hold_list_requests(K);
    tokio::select! {
        () = hold.arrived(K) => {}
        () = tokio::time::sleep(PATIENCE) => panic!("no list request {K} within {PATIENCE:?}"),
    }
    let held_path = hold.path(K).expect("the held request's path");
    let held_schedule: Uuid = held_path
        .trim_start_matches("/api/v1/schedules/")
        .trim_end_matches("/outbound_calls")
        .parse()
        .expect("a list request names its schedule");
    let open: Vec<Run> = destination
        .runs()
        .into_iter()
        .filter(|r| r.schedule == held_schedule && r.finished_at.is_none())
        .collect();
    assert_eq!(open.len(), 1, "one open pass of {held_schedule}: {open:?}");
    let victim_pid = open[0].pid.expect("the pass names its process");
    let victim = daemons
        .iter()
        .position(|d| d.pid == victim_pid)
        .expect("the walker is one of the three");
    let mut dead = daemons.remove(victim);
    // Taken before the signal: the victim walks nothing after it (SIGKILL), and this test's
    // own clock reading after `kill()` returns can come later than a survivor's takeover on a
    // loaded machine, which would look like an overlap that never was.
    // Where each survivor's log stood before the signal: a takeover (its pass lines) comes
    // after it, however fast.
    let seen: Vec<usize> = daemons.iter().map(|d| d.log_lines().len()).collect();
    let killed_at = Timestamp::now();
    dead.child.kill().await.expect("SIGKILL");
    // The ticks each survivor had begun once the victim was dead: a takeover comes in the
    // next one at the latest.
    let before_kill: Vec<(usize, u64)> = daemons
        .iter()
        .zip(seen)
        .map(|(d, seen)| (seen, last_tick_begun(&d.log_lines())))
        .collect();
    drop(hold);

    // The victim's schedules: those of its passes left open by the kill.
    let orphans: BTreeSet<Uuid> = destination
        .runs()
        .iter()
        .filter(|r| r.pid == Some(victim_pid) && r.finished_at.is_none())
        .map(|r| r.schedule)
        .collect();
    assert!(orphans.contains(&held_schedule), "{orphans:?}");
    // Each is walked again by a survivor, in the first tick that survivor began after the
    // kill at the latest (that tick's claims found the lock gone with the process).
    wait_for("every orphan walked by a survivor", || {
        let runs = destination.runs();
        orphans.iter().all(|s| {
            runs.iter().any(|r| {
                r.schedule == *s
                    && r.pid != Some(victim_pid)
                    && r.started_at >= killed_at
                    && r.finished_at.is_some()
            })
        })
    })
    .await;
    // The pass's row is committed before its line is logged: wait for the lines too.
    wait_for("every orphan's takeover logged by a survivor", || {
        orphans.iter().all(|schedule| {
            daemons
                .iter()
                .zip(&before_kill)
                .any(|(d, (seen, _))| !walked_in_ticks(&d.log_lines(), *seen, *schedule).is_empty())
        })
    })
    .await;
    for schedule in &orphans {
        let takeovers: Vec<(usize, u64)> = daemons
            .iter()
            .zip(&before_kill)
            .enumerate()
            .filter_map(|(i, (d, (seen, _)))| {
                let ticks = walked_in_ticks(&d.log_lines(), *seen, *schedule);
                ticks.into_iter().min().map(|t| (i, t))
            })
            .collect();
        // Within one tick of the lock's release: a survivor's tick that claimed while the
        // victim's lock was still there (a tick begun just before the death, its line written
        // after this test read the log; or, on PostgreSQL, the server not yet done with the
        // dead connection) skips the schedule, saying so; the next one must take it.
        let bounds: Vec<u64> = daemons
            .iter()
            .zip(&before_kill)
            .map(|(d, (seen, begun))| {
                let skipped = skipped_in_ticks(&d.log_lines(), *seen, *schedule);
                skipped.into_iter().max().unwrap_or(0).max(*begun) + 1
            })
            .collect();
        assert!(
            takeovers.iter().any(|(i, tick)| *tick <= bounds[*i]),
            "schedule {schedule}, orphaned by the kill, was taken over in ticks {takeovers:?}; the survivors had begun ticks {before_kill:?} when it died, and skipped it as held up to ticks {bounds:?} - 1"
        );
    }

    // The dialer stops; once every schedule has a pass begun since that completed, the
    // survivors stop and the destination must equal the truth.
    env.sim.set_dialer_running(false);
    let quiet_since = Timestamp::now();
    wait_for(
        "a complete pass of every schedule since the dialer stopped",
        || {
            let runs = destination.runs();
            schedules.iter().all(|s| {
                runs.iter().any(|r| {
                    r.schedule == *s
                        && r.started_at >= quiet_since
                        && r.outcome.as_deref() == Some("completed")
                })
            })
        },
    )
    .await;
    for daemon in &mut daemons {
        nix_term(daemon.pid);
        let status = tokio::time::timeout(PATIENCE, daemon.child.wait())
            .await
            .expect("the daemon stops within the patience")
            .expect("wait");
        assert_eq!(status.code(), Some(0), "{}", daemon.log_lines().join("\n"));
    }
    destination.assert_matches_truth(env);

    // No schedule was ever walked by two processes at once: per schedule, each pass ended
    // (or its process died) before the next began; the victim's open passes end at the kill.
    let runs = destination.runs();
    let mut by_schedule: BTreeMap<Uuid, Vec<&Run>> = BTreeMap::new();
    for run in &runs {
        assert!(
            run.host.is_some() && run.instance.is_some(),
            "every pass names its walker: {run:?}"
        );
        by_schedule.entry(run.schedule).or_default().push(run);
    }
    let instances: BTreeSet<(&str, u32)> = runs
        .iter()
        .filter_map(|r| Some((r.instance.as_deref()?, r.pid?)))
        .collect();
    assert_eq!(
        instances,
        daemons_named
            .iter()
            .map(|(name, pid)| (name.as_str(), *pid))
            .collect(),
        "each pass names the daemon that walked it"
    );
    for (schedule, mut passes) in by_schedule {
        passes.sort_by_key(|r| r.started_at);
        for pair in passes.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let a_end = match a.finished_at {
                Some(end) => end,
                None => {
                    assert_eq!(
                        a.pid,
                        Some(victim_pid),
                        "only the killed one leaves a pass open: {a:?}"
                    );
                    killed_at
                }
            };
            assert!(
                a_end <= b.started_at,
                "schedule {schedule} walked by two processes at once: {a:?} and {b:?}"
            );
        }
    }
    // The survivors' tick lines count what was another's.
    for daemon in &daemons {
        let lines = daemon.log_lines();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("tick done") && !l.contains("elsewhere=0")),
            "daemon {} never counted a schedule held elsewhere:\n{}",
            daemon.pid,
            lines.join("\n")
        );
        assert!(
            !lines.iter().any(|l| l.contains("ERROR")),
            "a held schedule is no error:\n{}",
            lines.join("\n")
        );
    }
    drop(dead);
}

/// SIGTERM: the daemons' clean stop.
pub(crate) fn nix_term(pid: u32) {
    let pid = i32::try_from(pid).expect("a pid");
    // SAFETY: sending a signal to a child of ours, by its pid.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM to {pid}");
}

/// A daemon's pass on a tick leaves alone a schedule another process walked since that tick
/// (`PassPlan::unless_walked_since`), and walks it on a later tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_walked_since_the_tick_is_skipped_not_walked_again() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 30,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules()[0];
    let tick = Timestamp::now();
    // Another daemon (here: another engine) walks it after the tick.
    env.pass_ok(&[s]).await;
    let engine = crate::harness::engine_for(&env.config);
    let mut plan = PassPlan::incremental(&env.config.sync);
    plan.unless_walked_since = Some(tick);
    let report = engine
        .run_pass(s, &plan, &CancellationToken::new(), &Quiet)
        .await;
    assert_eq!(
        report.result,
        PassResult::Skipped(Skip::WalkedSince {
            schedule: s,
            walker: engine.walker().clone(),
        }),
        "walked again"
    );
    assert_eq!(report.stats.requests, 0, "nothing asked of the service");
    // The next tick walks it.
    plan.unless_walked_since = Some(Timestamp::now());
    let report = engine
        .run_pass(s, &plan, &CancellationToken::new(), &Quiet)
        .await;
    assert_eq!(report.result, PassResult::Completed);
    engine.close().await;
    env.assert_matches_truth(&[s]);
}

/// `sync`, `backfill` and `checkpoint set`/`reset` respect a schedule's claim: while another
/// process walks it (holds its lock), each leaves it alone and says why; the other schedule
/// is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_respects_a_schedule_another_process_walks() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let config = env.write_config("");
    env.create_warehouse();
    let held = callsync::warehouse::sqlite::ScheduleLock::acquire(&env.warehouse_path(), s[0])
        .expect("lock");
    let busy = format!(
        "schedule {} is being synced by another callsync process",
        s[0]
    );
    let run = |args: Vec<String>| {
        let config = config.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
                .arg("--config")
                .arg(&config)
                .args(&args)
                .output()
                .await
                .expect("callsync runs")
        }
    };
    let uid = s[0].to_string();
    for args in [
        vec![
            "checkpoint",
            "set",
            "--schedule",
            &uid,
            "--cursor",
            "2026-01-01T00:00:00Z",
            "--force",
        ],
        vec!["checkpoint", "reset", "--schedule", &uid, "--force"],
    ] {
        let out = run(args.iter().map(|a| a.to_string()).collect()).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&busy), "{args:?}: {err}");
    }
    // sync walks the other schedule and skips this one (exit 1: not everything synced).
    let out = run(vec!["sync".into(), "--json".into()]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["outcome"], "skipped", "{}", lines[0]);
    assert_eq!(lines[1]["outcome"], "completed", "{}", lines[1]);
    let out = run(vec!["backfill".into(), "--schedule".into(), uid.clone()]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&busy), "{err}");
    drop(held);
    // Nothing of the held schedule was written; once it is free, all of it is.
    assert_eq!(env.snapshot(s[0]).calls.len(), 0);
    let out = run(vec!["sync".into()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.assert_matches_truth(&s);
}

conformance!(
    a_pass_opens_unless_another_walked_the_schedule_since_the_tick,
    a_pass_opens_unless_walked_since
);

/// `Destination::open_pass` on every back end alike: a pass of the kind that began at or
/// after the tick (to the nanosecond, though stored to the microsecond) and finished means
/// the schedule was walked, by whom it says, and nothing is recorded; one begun before, one
/// not finished (its process died: the caller holds the claim), one the next opener marked
/// interrupted, or one of another kind does not, and the pass's row is recorded beside its
/// checkpoint.
async fn a_pass_opens_unless_walked_since(dest: crate::harness::Dest) {
    use callsync::warehouse::{
        Destination, PROCESS_ENDED, PassOpened, PassStart, ProcessIdentity, RunKind, RunOutcome,
        RunRecord, RunStats,
    };
    let env = TestEnv::start_on(SimulatorOptions::default(), dest).await;
    let warehouse = callsync::warehouse::open(&env.config.warehouse).expect("configured");
    // The destinations' calls block (PostgreSQL's on a runtime of its own).
    tokio::task::spawn_blocking(move || {
        let mut w = warehouse.writer().expect("the warehouse opens");
        let schedule = Uuid::from_u128(0x0_9e9);
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let tick = at("2026-01-01T01:00:00Z");
        let (ours, other) = (
            ProcessIdentity {
                host: "our-host".into(),
                instance: "our-host".into(),
                pid: 1,
            },
            ProcessIdentity {
                host: "other-host".into(),
                instance: "blue".into(),
                pid: 7,
            },
        );
        let open = |w: &mut Box<dyn Destination>, kind, started_at, walker, since| {
            let start = PassStart {
                schedule,
                kind,
                started_at,
                walker,
                unless_walked_since: since,
            };
            w.open_pass(&start).expect("the pass opens")
        };
        let finish = |w: &mut Box<dyn Destination>, run, error: Option<&str>| {
            let record = RunRecord {
                outcome: RunOutcome::Failed,
                stats: RunStats::default(),
                finished_at: tick,
                horizon: None,
                lag_secs: None,
                error: error.map(str::to_owned),
                error_kind: None,
            };
            w.finish_run(run, &record).expect("the end is recorded");
        };
        let started = |opened: PassOpened| match opened {
            PassOpened::Started {
                run: Some(run),
                checkpoint,
            } => (run, checkpoint.expect("the checkpoint reads")),
            other => panic!("started: {other:?}"),
        };
        let incremental = RunKind::Incremental;

        // No pass yet: it opens, with no checkpoint.
        let (run, checkpoint) = started(open(
            &mut w,
            incremental,
            at("2026-01-01T00:59:59.999Z"),
            &other,
            Some(tick),
        ));
        assert_eq!(checkpoint, None);
        finish(&mut w, run, None);
        let cursor = at("2026-01-01T00:30:00.123456Z");
        w.replace_checkpoint(schedule, Some(cursor)).unwrap();
        // The latest began a millisecond before the tick: it opens, with the checkpoint.
        let (run, checkpoint) = started(open(&mut w, incremental, tick, &other, Some(tick)));
        assert_eq!(checkpoint.map(|c| c.cursor), Some(cursor));
        // The latest began at the tick, but the next opener marked it interrupted (its
        // process ended mid-pass): it opens.
        finish(&mut w, run, Some(PROCESS_ENDED));
        let later = at("2026-01-01T01:00:00.000002Z");
        let (run, _) = started(open(&mut w, incremental, later, &other, Some(tick)));
        // The latest began after the tick and finished, whatever its outcome: walked, by
        // whom it says; and nothing is recorded, so the next opening finds it again.
        finish(&mut w, run, Some("HTTP 503"));
        for second in ["05", "06"] {
            let walked = open(
                &mut w,
                incremental,
                at(&format!("2026-01-01T01:00:{second}Z")),
                &ours,
                Some(tick),
            );
            assert!(
                matches!(&walked, PassOpened::WalkedBy(by) if *by == other),
                "{walked:?}"
            );
        }
        // A nanosecond after it began is after it, though it is stored to the microsecond.
        let just_after = later.saturating_add(std::time::Duration::from_nanos(1));
        let (run, _) = started(open(
            &mut w,
            incremental,
            at("2026-01-01T01:00:07Z"),
            &ours,
            Some(just_after),
        ));
        finish(&mut w, run, None);
        // Another kind is another question; a pass with no tick to defer to opens; and
        // then the latest is not finished (its process died, as the claim is ours): it opens.
        let (run, _) = started(open(
            &mut w,
            RunKind::Reconcile,
            at("2026-01-01T01:00:07Z"),
            &ours,
            Some(tick),
        ));
        finish(&mut w, run, None);
        started(open(
            &mut w,
            incremental,
            at("2026-01-01T01:00:08Z"),
            &ours,
            None,
        ));
        let walked = open(
            &mut w,
            incremental,
            at("2026-01-01T01:00:09Z"),
            &other,
            Some(tick),
        );
        assert!(
            matches!(&walked, PassOpened::Started { .. }),
            "the last is unfinished: {walked:?}"
        );
    })
    .await
    .expect("the scenario ran");
}

conformance!(
    a_group_of_passes_opens_and_ends_as_each_would_alone,
    passes_open_and_end_in_a_group
);

/// `Destination::open_passes` and `Destination::finish_runs` on every back end alike (the
/// daemon gathers the passes opening, and those ending, meanwhile): each pass of a group
/// is answered as it would be alone, in order — walked by another since the tick, started
/// with its checkpoint, started with none — and a group's ends record each pass's own
/// figures, nothing of the walked one.
async fn passes_open_and_end_in_a_group(dest: crate::harness::Dest) {
    use callsync::warehouse::{
        PassOpened, PassStart, ProcessIdentity, RunKind, RunOutcome, RunRecord, RunStats,
    };
    let env = TestEnv::start_on(SimulatorOptions::default(), dest).await;
    let warehouse = callsync::warehouse::open(&env.config.warehouse).expect("configured");
    // The destinations' calls block (PostgreSQL's on a runtime of its own).
    tokio::task::spawn_blocking(move || {
        let mut w = warehouse.writer().expect("the warehouse opens");
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let (walked, kept, fresh) = (
            Uuid::from_u128(0xa1),
            Uuid::from_u128(0xa2),
            Uuid::from_u128(0xa3),
        );
        let walker = |host: &str, pid| ProcessIdentity {
            host: host.into(),
            instance: host.into(),
            pid,
        };
        let (ours, other) = (walker("our-host", 1), walker("other-host", 7));
        let tick = at("2026-01-01T01:00:00Z");
        let start = |schedule, started_at, walker, since| PassStart {
            schedule,
            kind: RunKind::Incremental,
            started_at,
            walker,
            unless_walked_since: since,
        };
        let record = |outcome, pages, error: Option<&str>, kind| RunRecord {
            outcome,
            stats: RunStats {
                pages,
                calls_seen: pages * 10,
                calls_written: pages * 3,
                requests: pages + 1,
                retries: pages % 2,
                detail_requests: pages * 4,
                rate_limited: pages % 3,
                throttled_ms: pages * 1_500,
                future_rows: pages % 5,
            },
            finished_at: at("2026-01-01T01:00:30.5Z"),
            horizon: Some(at("2026-01-01T01:00:02Z")),
            lag_secs: Some(pages as f64 / 4.0),
            error: error.map(str::to_owned),
            error_kind: kind,
        };
        // Another walked `walked` since the tick; `kept` has a checkpoint.
        let PassOpened::Started {
            run: Some(theirs), ..
        } = w
            .open_pass(&start(walked, at("2026-01-01T01:00:01Z"), &other, None))
            .unwrap()
        else {
            panic!("the other's pass opens");
        };
        let theirs_ended = record(RunOutcome::Completed, 1, None, None);
        w.finish_run(theirs, &theirs_ended).unwrap();
        let cursor = at("2026-01-01T00:30:00.123456Z");
        w.replace_checkpoint(kept, Some(cursor)).unwrap();

        let begun = at("2026-01-01T01:00:03Z");
        let opened = w.open_passes(&[
            start(walked, begun, &ours, Some(tick)),
            start(kept, begun, &ours, Some(tick)),
            start(fresh, begun, &ours, None),
        ]);
        let mut opened = opened.into_iter().map(|o| o.expect("each opens"));
        let by = opened.next().unwrap();
        assert!(
            matches!(&by, PassOpened::WalkedBy(by) if *by == other),
            "{by:?}"
        );
        let run_of = |opened: Option<PassOpened>| match opened {
            Some(PassOpened::Started {
                run: Some(run),
                checkpoint,
            }) => (
                run,
                checkpoint.expect("the checkpoint reads").map(|c| c.cursor),
            ),
            other => panic!("started: {other:?}"),
        };
        let (kept_run, kept_cursor) = run_of(opened.next());
        let (fresh_run, fresh_cursor) = run_of(opened.next());
        assert!(opened.next().is_none(), "one answer a pass");
        assert_eq!((kept_cursor, fresh_cursor), (Some(cursor), None));
        assert_ne!(kept_run, fresh_run);

        let kept_ended = record(RunOutcome::Completed, 4, None, None);
        let fresh_ended = record(
            RunOutcome::Failed,
            2,
            Some("HTTP 503 from the service"),
            Some(callsync::ErrorKind::Service),
        );
        let ended = w.finish_runs(&[(kept_run, &kept_ended), (fresh_run, &fresh_ended)]);
        assert_eq!(ended.len(), 2);
        assert!(ended.iter().all(Result::is_ok), "{ended:?}");

        let status = w.status_at(at("2026-01-01T02:00:00Z")).unwrap();
        let last = |schedule| {
            status
                .iter()
                .find(|s| s.schedule_uid == schedule)
                .and_then(|s| s.last_run.clone())
                .expect("a pass recorded")
        };
        for (schedule, ended, host) in [
            (walked, &theirs_ended, "other-host"),
            (kept, &kept_ended, "our-host"),
            (fresh, &fresh_ended, "our-host"),
        ] {
            let run = last(schedule);
            let stats = &ended.stats;
            assert_eq!(run.host.as_deref(), Some(host), "{schedule}");
            assert_eq!(
                run.figures.finished_at,
                Some(ended.finished_at),
                "{schedule}"
            );
            assert_eq!(
                (
                    run.figures.pages,
                    run.figures.calls_seen,
                    run.figures.calls_written,
                    run.figures.requests,
                    run.figures.retries
                ),
                (
                    stats.pages as i64,
                    stats.calls_seen as i64,
                    stats.calls_written as i64,
                    stats.requests as i64,
                    stats.retries as i64
                ),
                "{schedule}"
            );
            assert_eq!(
                (
                    run.figures.detail_requests,
                    run.figures.rate_limited,
                    run.figures.future_rows
                ),
                (
                    stats.detail_requests as i64,
                    stats.rate_limited as i64,
                    stats.future_rows as i64
                ),
                "{schedule}"
            );
            assert_eq!(
                run.figures.throttled_secs,
                stats.throttled_ms as f64 / 1000.0,
                "{schedule}"
            );
            assert_eq!(run.error, ended.error, "{schedule}");
            assert_eq!(run.figures.horizon, ended.horizon, "{schedule}");
            assert_eq!(run.figures.lag_secs, ended.lag_secs, "{schedule}");
        }
        let outcome = |schedule| {
            status
                .iter()
                .find(|s| s.schedule_uid == schedule)
                .and_then(|s| s.last_result)
        };
        assert_eq!(outcome(kept), Some(Some(RunOutcome::Completed)));
        assert_eq!(outcome(fresh), Some(Some(RunOutcome::Failed)));
    })
    .await
    .expect("the scenario ran");
}

conformance!(
    quiet_pages_of_several_passes_write_what_changed,
    quiet_pages_write_what_changed
);

/// `Destination::write_quiet_pages` on every back end alike (the daemon gathers the pages of
/// passes that opened with a checkpoint and have changed nothing yet): a page that changes
/// nothing and leaves the checkpoint is answered written, with nothing written; a page with
/// a changed call is written, by the group or handed back and written on its own; and the
/// warehouse then holds each schedule's calls as the service has them.
async fn quiet_pages_write_what_changed(dest: crate::harness::Dest) {
    use callsync::warehouse::{
        PageBatch, ProcessIdentity, QuietRead, RunKind, RunOutcome, RunRecord, RunStats,
    };
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 3,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let (quiet, changed) = (s[0], s[1]);
    let (quiet_calls, mut changed_calls) = (env.sim.truth(quiet), env.sim.truth(changed));
    let warehouse = callsync::warehouse::open(&env.config.warehouse).expect("configured");
    let (kept, moved) = (quiet_calls.clone(), changed_calls.clone());
    changed_calls[0].status = format!("{}-changed", changed_calls[0].status);
    let now_changed = changed_calls.clone();
    // The destinations' calls block (PostgreSQL's on a runtime of its own).
    tokio::task::spawn_blocking(move || {
        let mut w = warehouse.writer().expect("the warehouse opens");
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let checkpoint = at("2026-01-01T00:30:00Z");
        let walker = ProcessIdentity {
            host: "our-host".into(),
            instance: "our-host".into(),
            pid: 1,
        };
        let page = |schedule, calls: Vec<callsync::service::OutboundCall>| PageBatch {
            schedule,
            content_hashes: calls.iter().map(|c| c.content_hash()).collect(),
            calls,
            checkpoint: Some(checkpoint),
            synced_at: at("2026-01-01T01:00:00Z"),
            set_aside: Vec::new(),
            run: None,
        };
        let open = |w: &mut Box<dyn callsync::warehouse::Destination>, schedule| {
            let started = at("2026-01-01T01:00:00Z");
            crate::harness::start_run(w.as_mut(), schedule, RunKind::Incremental, started, &walker)
        };
        let _claims: Vec<_> = [quiet, changed]
            .iter()
            .map(|schedule| w.claim(*schedule).unwrap().expect("free"))
            .collect();
        // The first pass of each writes its calls and the checkpoint.
        for (schedule, calls) in [(quiet, &kept), (changed, &moved)] {
            let run = open(&mut w, schedule);
            let written = w.write_page(&page(schedule, calls.clone())).unwrap();
            assert_eq!(written.calls_written, 3);
            let record = RunRecord {
                outcome: RunOutcome::Completed,
                stats: RunStats::default(),
                finished_at: at("2026-01-01T01:00:01Z"),
                horizon: None,
                lag_secs: None,
                error: None,
                error_kind: None,
            };
            w.finish_run(run, &record).unwrap();
        }
        // The next passes open with the checkpoint; one schedule's call changed meanwhile.
        open(&mut w, quiet);
        open(&mut w, changed);
        let looked = w.write_quiet_pages(vec![page(quiet, kept), page(changed, now_changed)]);
        assert_eq!(looked.len(), 2, "one answer a page");
        let mut written = Vec::new();
        for looked in looked {
            written.push(match looked.expect("each page answers") {
                QuietRead::Written(write) => (write.calls_written, true),
                QuietRead::ToWrite(page) => (w.write_page(&page).unwrap().calls_written, false),
            });
        }
        assert_eq!(written[0], (0, true), "nothing to write, answered at once");
        assert_eq!(written[1].0, 1, "the changed call written: {written:?}");
    })
    .await
    .expect("the scenario ran");
    env.assert_holds(quiet, &quiet_calls);
    env.assert_holds(changed, &changed_calls);
}

conformance!(
    pages_of_several_passes_are_each_written_as_alone,
    pages_written_as_alone
);

/// `Destination::write_pages` on every back end alike (the daemon gathers the pages of
/// passes that are writing): each page is written as `write_page` would write it alone, with
/// its own counts and checkpoint, whether it inserts new calls, lists a call twice, changes a
/// stored call or changes nothing; and a call of one schedule listed in another's page of
/// one group is a conflict: it stays with its schedule, set aside from the other's page.
async fn pages_written_as_alone(dest: crate::harness::Dest) {
    use callsync::service::OutboundCall;
    use callsync::warehouse::{PageBatch, PageWrite, ProcessIdentity, RunKind};
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 4,
            calls_per_schedule: 3,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let truth: Vec<Vec<OutboundCall>> = s.iter().map(|&schedule| env.sim.truth(schedule)).collect();
    let changed = |call: &OutboundCall| {
        let mut call = call.clone();
        call.status = format!("{}-changed", call.status);
        call
    };
    // Schedule 1's first call changed; schedule 2's first call listed twice, changed the
    // second time; schedule 0's last call listed under schedule 3 too.
    let mut expected = truth.clone();
    expected[1][0] = changed(&truth[1][0]);
    expected[2][0] = changed(&truth[2][0]);
    let foreign = expected[0].last().cloned().expect("three calls");
    let under_3 = [truth[3].clone(), vec![foreign]].concat();
    let warehouse = callsync::warehouse::open(&env.config.warehouse).expect("configured");
    let (schedules, pages_truth, group_expected) = (s.clone(), truth.clone(), expected.clone());
    // The destinations' calls block (PostgreSQL's on a runtime of its own).
    tokio::task::spawn_blocking(move || {
        let (s, truth, expected) = (schedules, pages_truth, group_expected);
        let mut w = warehouse.writer().expect("the warehouse opens");
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let walker = ProcessIdentity {
            host: "our-host".into(),
            instance: "our-host".into(),
            pid: 1,
        };
        let page = |schedule, calls: Vec<OutboundCall>, checkpoint: &str| PageBatch {
            schedule,
            content_hashes: calls.iter().map(|c| c.content_hash()).collect(),
            calls,
            checkpoint: Some(at(checkpoint)),
            synced_at: at("2026-01-01T01:00:00Z"),
            set_aside: Vec::new(),
            run: None,
        };
        let _claims: Vec<_> = (s.iter())
            .map(|schedule| w.claim(*schedule).unwrap().expect("free"))
            .collect();
        for &schedule in &s {
            let started = at("2026-01-01T01:00:00Z");
            crate::harness::start_run(w.as_mut(), schedule, RunKind::Incremental, started, &walker);
        }
        let counts = |written: Vec<Result<PageWrite, _>>| -> Vec<(u64, u64)> {
            (written.into_iter())
                .map(|w| w.expect("each page written"))
                .map(|w| (w.calls_written, w.calls_unchanged))
                .collect()
        };
        // New calls only: schedule 1's first two, schedule 2's with its first call twice.
        let twice = [truth[2].clone(), vec![expected[2][0].clone()]].concat();
        let first = crate::harness::write_pages(
            w.as_mut(),
            vec![
                page(s[0], truth[0].clone(), "2026-01-01T00:10:00Z"),
                page(s[1], truth[1][..2].to_vec(), "2026-01-01T00:20:00Z"),
                page(s[2], twice, "2026-01-01T00:30:00Z"),
            ],
        );
        assert_eq!(counts(first), [(3, 0), (2, 0), (4, 0)]);
        // A stored call changed and a new one beside an unchanged one; a page that changes
        // nothing; a checkpoint that stays where it is (never moved back).
        let second = crate::harness::write_pages(
            w.as_mut(),
            vec![
                page(s[1], expected[1].clone(), "2026-01-01T00:40:00Z"),
                page(s[0], truth[0].clone(), "2026-01-01T00:50:00Z"),
                page(s[2], expected[2].clone(), "2026-01-01T00:00:00Z"),
            ],
        );
        assert_eq!(counts(second), [(2, 1), (0, 3), (0, 3)]);
        // Schedule 0's call listed under schedule 3 too, both pages in one group: a conflict,
        // set aside from schedule 3's page (whose checkpoint, earlier, stays put).
        let third = crate::harness::write_pages(
            w.as_mut(),
            vec![
                page(s[0], truth[0].clone(), "2026-01-01T00:55:00Z"),
                page(s[3], under_3, "2026-01-01T00:05:00Z"),
            ],
        );
        assert_eq!(counts(third), [(0, 3), (3, 0)]);
        let cursors: Vec<_> = (s.iter())
            .map(|&schedule| w.checkpoint(schedule).unwrap().map(|c| c.cursor))
            .collect();
        let want: Vec<_> = ["00:55", "00:40", "00:30", "00:05"]
            .iter()
            .map(|hm| Some(at(&format!("2026-01-01T{hm}:00Z"))))
            .collect();
        assert_eq!(cursors, want, "each page's checkpoint, moved forward only");
    })
    .await
    .expect("the scenario ran");
    for (schedule, calls) in s.iter().zip(&expected) {
        env.assert_holds(*schedule, calls);
    }
}
