//! Ten thousand schedules held by one daemon (issue 20, item 7), for BENCHMARKS.md (not a
//! test).
//!
//! `cargo bench --locked --bench schedules` runs the release binary's `callsync run`, with the
//! default configuration but for its cron (`0 * * * * *`, every minute, so each tick is one
//! clean pass over every schedule; `CRON` for another) and the log level (`info`, for its tick lines), against the
//! simulator in this process: `SCHEDULES` [10000] schedules of `CALLS` [10] calls. It reports
//! the daemon's own tick lines (`tick done … duration_ms`): the start-up tick (the first sync),
//! the next clean tick (an idle pass: nothing changed), and one more for each latency of
//! `LATENCIES` [0,50,100] above 0 (ms added to every response, side by side in one table);
//! then the daemon's peak RSS (`VmHWM`). Reference, same run: the requests each idle pass
//! made × the latency ÷ `sync.concurrency` (the most requests in flight) — the time a pass
//! bound by latency alone would take. `CONCURRENCY` sets `sync.concurrency` (for an older
//! build, whose default differs: `BENCH_BINARY=… CONCURRENCY=16`).
//!
//! With `CALLSYNC_BENCH_POSTGRES` (a server's URI, see benches/postgres.rs) the daemon writes
//! into a new database on that server instead of a SQLite file.

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
    fn new(dir: &Path, runtime: &tokio::runtime::Runtime) -> Destination {
        match std::env::var("CALLSYNC_BENCH_POSTGRES") {
            Ok(admin) => {
                let name = format!("bench_schedules_{}", std::process::id());
                runtime.block_on(pg::admin_sql(&admin, &format!("CREATE DATABASE {name}")));
                Destination::Postgres(pg::with_dbname(&admin, &name))
            }
            Err(_) => Destination::Sqlite(dir.join("callsync.db")),
        }
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

fn main() {
    let schedules = env_usize("SCHEDULES", 10_000);
    let calls = env_usize("CALLS", 10);
    let latencies: Vec<Duration> = std::env::var("LATENCIES")
        .unwrap_or_else(|_| "0,50,100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .map(Duration::from_millis)
        .filter(|latency| !latency.is_zero())
        .collect();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
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
    let dir = tempfile::tempdir().expect("a temp dir");
    let destination = Destination::new(dir.path(), &runtime);
    let cron = std::env::var("CRON").unwrap_or_else(|_| "0 * * * * *".into());
    let concurrency_line = std::env::var("CONCURRENCY")
        .map(|n| format!("concurrency = {n}\n"))
        .unwrap_or_default();
    let config = config::write_config(
        dir.path(),
        &sim,
        &destination.config_line(),
        &format!("cron = \"{cron}\"\n{concurrency_line}"),
        "info",
    );
    let defaults = callsync::config::load(Some(&config)).expect("the config loads");
    let concurrency = defaults.sync.concurrency;

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
    let (ticks, tick_lines) = mpsc::channel();
    let stderr = daemon.stderr.take().expect("stderr piped");
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
    let patience = Duration::from_secs(900);
    let next_tick = || tick_lines.recv_timeout(patience).expect("a tick line");
    // A clean tick: every schedule's pass started by it (none still running from before).
    let next_clean_tick = || loop {
        let tick = next_tick();
        if tick.still_running == 0 {
            return tick;
        }
    };
    // The start-up tick's line. A tick that fired while it ran (its first sync crossed the
    // cron's minute) may end first, having started only the schedules already done; it is
    // not clean, so the idle pass is a later one.
    let first = loop {
        let tick = next_tick();
        if tick.number == 1 {
            break tick;
        }
    };
    let first_wall = started.elapsed();
    let idle = next_clean_tick();
    let idle_requests = destination.last_pass_requests(&runtime);
    let mut slow = Vec::new();
    for &latency in &latencies {
        sim.set_faults(FaultPlan {
            slow_rate: 1.0,
            slow_delay: latency,
            ..FaultPlan::default()
        });
        let tick = next_clean_tick();
        slow.push((latency, tick, destination.last_pass_requests(&runtime)));
    }
    let rss = peak_rss_mib(pid);
    // SAFETY: a signal to our own child, by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = daemon.wait().expect("the daemon stops");

    println!(
        "\n## schedules: one daemon, {schedules} schedules × {calls} calls, into {}, default configuration (sync.concurrency = {concurrency})\n",
        destination.name()
    );
    println!(
        "Reference: requests × latency ÷ sync.concurrency, the time a pass bound by latency alone takes.\n"
    );
    println!(
        "| tick | walked | failed | requests | added latency | tick s | reference s | × reference |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| first sync (start-up tick; {:.1} s from the process's start) | {} | {} | | 0 | {:.1} | | |",
        first_wall.as_secs_f64(),
        first.walked,
        first.failed,
        first.duration_ms as f64 / 1000.0
    );
    println!(
        "| idle pass | {} | {} | {idle_requests} | 0 | {:.1} | | |",
        idle.walked,
        idle.failed,
        idle.duration_ms as f64 / 1000.0
    );
    for (latency, tick, requests) in slow {
        let reference = requests as f64 * latency.as_secs_f64() / concurrency as f64;
        let took = tick.duration_ms as f64 / 1000.0;
        println!(
            "| idle pass | {} | {} | {requests} | {} ms | {took:.1} | {reference:.1} | {:.2} |",
            tick.walked,
            tick.failed,
            latency.as_millis(),
            took / reference
        );
    }
    println!("\nPeak RSS of the daemon: {rss:.0} MiB; it stopped with {status}.");
    runtime.block_on(sim.shutdown());
}
