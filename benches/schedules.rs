//! Ten thousand schedules held by one daemon (issue 20, item 7; issue 31, item 3), for
//! BENCHMARKS.md (not a test).
//!
//! `cargo bench --locked --bench schedules` runs the release binary's `callsync run`, with the
//! default configuration but for its cron (`0 * * * * *`, every minute, so each tick is one
//! clean pass over every schedule; `CRON` for another) and the log level (`info`, for its tick
//! lines), against the simulator in this process: `SCHEDULES` [10000] schedules of `CALLS`
//! [10] calls, every response `LAT_MS` [50] ms late from the start. It reports the daemon's
//! own tick lines (`tick done … duration_ms`): the start-up tick (the first sync) and the next
//! clean tick (an idle pass: nothing changed); then the daemon's peak RSS (`VmHWM`).
//! Reference, same run: the requests the idle pass made × the latency ÷ `sync.concurrency` —
//! the time a pass bound by latency alone would take.
//!
//! Each destination runs in turn, in the same run, against a new simulator of the same seed:
//! a SQLite file, then, when `CALLSYNC_BENCH_POSTGRES` names a server (see
//! benches/postgres.rs), a new database on it; the table ends with PostgreSQL's times over
//! SQLite's. `DESTINATIONS=sqlite` or `postgres` runs one.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use callsync::simulator::{FaultPlan, Simulator, SimulatorOptions};

#[path = "common/config.rs"]
mod config;
#[path = "common/pg.rs"]
mod pg;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One `tick done` line of the daemon's log.
#[derive(Debug, Default, Clone)]
struct TickLine {
    number: u64,
    walked: u64,
    failed: u64,
    still_running: u64,
    duration_ms: u64,
}

impl TickLine {
    fn parse(line: &str) -> Option<TickLine> {
        if !line.contains("tick done") {
            return None;
        }
        let field = |name: &str| -> u64 {
            line.split(&format!(" {name}="))
                .nth(1)
                .and_then(|rest| {
                    rest.split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or(0)
        };
        Some(TickLine {
            number: field("number"),
            walked: field("walked"),
            failed: field("failed"),
            still_running: field("still_running"),
            duration_ms: field("duration_ms"),
        })
    }
}

/// Where the daemon writes: a SQLite file in the temp dir, or a new PostgreSQL database.
enum Destination {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Destination {
    /// A new database on the server `admin` names.
    fn postgres(admin: &str, runtime: &tokio::runtime::Runtime) -> Destination {
        let name = format!("bench_schedules_{}", std::process::id());
        runtime.block_on(pg::admin_sql(admin, &format!("CREATE DATABASE {name}")));
        Destination::Postgres(pg::with_dbname(admin, &name))
    }

    fn name(&self) -> &'static str {
        match self {
            Destination::Sqlite(_) => "SQLite",
            Destination::Postgres(_) => "PostgreSQL (local, Unix socket)",
        }
    }

    fn config_line(&self) -> String {
        match self {
            Destination::Sqlite(path) => format!("path = \"{}\"", path.display()),
            Destination::Postgres(url) => format!("url = \"{url}\""),
        }
    }

    /// The requests of every schedule's latest pass, summed (plain SQL on `sync_runs`).
    fn last_pass_requests(&self, runtime: &tokio::runtime::Runtime) -> i64 {
        const SQL: &str = "SELECT COALESCE(SUM(requests), 0)::bigint FROM sync_runs
             WHERE id IN (SELECT MAX(id) FROM sync_runs GROUP BY schedule_uid)";
        match self {
            Destination::Sqlite(path) => {
                let conn = rusqlite::Connection::open_with_flags(
                    path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                )
                .expect("the warehouse opens");
                conn.query_row(&SQL.replace("::bigint", ""), [], |r| r.get(0))
                    .expect("sync_runs reads")
            }
            Destination::Postgres(url) => runtime.block_on(async {
                let client = pg::connect(url).await;
                let row = client.query_one(SQL, &[]).await.expect("sync_runs reads");
                row.get(0)
            }),
        }
    }
}

/// The peak resident set of process `pid`, in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// What one destination's daemon did.
struct Measured {
    destination: &'static str,
    first_wall: Duration,
    first: TickLine,
    idle: TickLine,
    idle_requests: i64,
    rss_mib: f64,
}

fn main() {
    let schedules = env_usize("SCHEDULES", 10_000);
    let calls = env_usize("CALLS", 10);
    let latency = Duration::from_millis(env_usize("LAT_MS", 50) as u64);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let postgres = std::env::var("CALLSYNC_BENCH_POSTGRES").ok();
    let wanted = std::env::var("DESTINATIONS").unwrap_or_else(|_| "sqlite,postgres".into());
    let mut measured = Vec::new();
    let mut concurrency = 0;
    for name in wanted.split(',') {
        let dir = tempfile::tempdir().expect("a temp dir");
        let destination = match (name, &postgres) {
            ("sqlite", _) => Destination::Sqlite(dir.path().join("callsync.db")),
            ("postgres", Some(admin)) => Destination::postgres(admin, &runtime),
            ("postgres", None) => {
                eprintln!("PostgreSQL left out: CALLSYNC_BENCH_POSTGRES is not set");
                continue;
            }
            (other, _) => panic!("DESTINATIONS: unknown destination {other}"),
        };
        let (run, in_flight) = run_daemon(
            &runtime,
            dir.path(),
            &destination,
            schedules,
            calls,
            latency,
        );
        measured.push(run);
        concurrency = in_flight;
    }
    print_table(&measured, schedules, calls, latency, concurrency);
}

/// Runs the daemon into `destination` until its first sync and an idle pass are done, against
/// a new simulator whose every response is `latency` late. Also returns `sync.concurrency`.
fn run_daemon(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    destination: &Destination,
    schedules: usize,
    calls: usize,
    latency: Duration,
) -> (Measured, usize) {
    let sim = runtime
        .block_on(Simulator::start(
            "127.0.0.1:0".parse().expect("a loopback address"),
            SimulatorOptions {
                schedules,
                calls_per_schedule: calls,
                seed: 42,
                ..SimulatorOptions::default()
            },
        ))
        .expect("the simulator starts");
    sim.set_faults(FaultPlan {
        slow_rate: 1.0,
        slow_delay: latency,
        ..FaultPlan::default()
    });
    let cron = std::env::var("CRON").unwrap_or_else(|_| "0 * * * * *".into());
    let config = config::write_config(
        dir,
        &sim,
        &destination.config_line(),
        &format!("cron = \"{cron}\"\n"),
        "info",
    );
    let defaults = callsync::config::load(Some(&config)).expect("the config loads");
    let binary =
        std::env::var_os("BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_callsync").into());
    let started = Instant::now();
    let mut daemon = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("run")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("callsync run starts");
    let pid = daemon.id();
    let tick_lines = tick_lines(daemon.stderr.take().expect("stderr piped"));
    let patience = Duration::from_secs(900);
    let next_tick = || tick_lines.recv_timeout(patience).expect("a tick line");
    let first = next_tick();
    let first_wall = started.elapsed();
    assert_eq!(first.number, 1, "the start-up tick comes first");
    // A clean tick: every schedule's pass started by it (none still running from before).
    let idle = loop {
        let tick = next_tick();
        if tick.still_running == 0 {
            break tick;
        }
    };
    let idle_requests = destination.last_pass_requests(runtime);
    let rss_mib = peak_rss_mib(pid);
    // SAFETY: a signal to our own child, by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = daemon.wait().expect("the daemon stops");
    eprintln!("{}: the daemon stopped with {status}", destination.name());
    runtime.block_on(sim.shutdown());
    let measured = Measured {
        destination: destination.name(),
        first_wall,
        first,
        idle,
        idle_requests,
        rss_mib,
    };
    (measured, defaults.sync.concurrency)
}

/// The daemon's `tick done` lines, as they come (its errors echoed).
fn tick_lines(stderr: std::process::ChildStderr) -> mpsc::Receiver<TickLine> {
    let (ticks, tick_lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" ERROR ") {
                eprintln!("{line}");
            }
            if let Some(tick) = TickLine::parse(&line) {
                eprintln!("{line}");
                if ticks.send(tick).is_err() {
                    return;
                }
            }
        }
    });
    tick_lines
}

fn print_table(
    measured: &[Measured],
    schedules: usize,
    calls: usize,
    latency: Duration,
    concurrency: usize,
) {
    println!(
        "\n## schedules: one daemon, {schedules} schedules × {calls} calls, {} ms a response, default configuration (sync.concurrency = {concurrency})\n",
        latency.as_millis()
    );
    println!(
        "Reference: the idle pass's requests × latency ÷ sync.concurrency, the time a pass bound by latency alone takes.\n"
    );
    println!(
        "| destination | first sync s (from the process's start) | walked | failed | idle pass s | walked | failed | requests | reference s | × reference | peak RSS MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in measured {
        let idle = m.idle.duration_ms as f64 / 1000.0;
        let reference = m.idle_requests as f64 * latency.as_secs_f64() / concurrency.max(1) as f64;
        println!(
            "| {} | {:.1} ({:.1}) | {} | {} | {idle:.1} | {} | {} | {} | {reference:.1} | {:.2} | {:.0} |",
            m.destination,
            m.first.duration_ms as f64 / 1000.0,
            m.first_wall.as_secs_f64(),
            m.first.walked,
            m.first.failed,
            m.idle.walked,
            m.idle.failed,
            m.idle_requests,
            idle / reference,
            m.rss_mib,
        );
    }
    if let [sqlite, postgres] = measured {
        let ratio = |a: &TickLine, b: &TickLine| a.duration_ms as f64 / b.duration_ms as f64;
        println!(
            "\n{} ÷ {}: first sync {:.2}×, idle pass {:.2}×.",
            postgres.destination,
            sqlite.destination,
            ratio(&postgres.first, &sqlite.first),
            ratio(&postgres.idle, &sqlite.idle),
        );
    }
}
