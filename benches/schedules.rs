//! Ten thousand schedules held by one daemon (issue 20, item 7; issue 31, item 3), for
//! BENCHMARKS.md (not a test).
//!
//! `cargo bench --locked --bench schedules` runs the release binary's `callsync run`, with the
//! default configuration but for its cron (`0 * * * * *`, every minute, so each tick is one
//! clean pass over every schedule; `CRON` for another) and the log level (`info`, for its tick
//! lines), against the simulator in this process: `SCHEDULES` [10000] schedules of `CALLS`
//! [10] calls, every response `LAT_MS` [50] ms late from the start. It reports the daemon's
//! own tick lines (`tick done … duration_ms`): the start-up tick (the first sync), the next
//! clean tick (an idle pass: nothing changed), and one more idle pass for each latency of
//! `LATENCIES` [0,100] (ms added to every response from then on, side by side in one table);
//! then the daemon's peak RSS (`VmHWM`), and the CPU each tick took (`/proc`, user and
//! system, since the tick before it ended): the daemon's, the simulator's (this process's),
//! and, for a server on this machine, PostgreSQL's (every `postgres` process's: on two cores
//! the server's CPU is what PostgreSQL's times are made of). Reference, same run: the
//! requests each idle pass made × the latency ÷ `sync.concurrency` (the most requests in
//! flight) — the time a pass bound by latency alone would take. `CONCURRENCY` sets
//! `sync.concurrency` (for an older build, whose default differs: `BENCH_BINARY=…
//! CONCURRENCY=16`).
//!
//! Each destination runs in turn, in the same run, against a new simulator of the same seed:
//! a SQLite file, then, when `CALLSYNC_BENCH_POSTGRES` names a server (see
//! benches/postgres.rs), a new database on it; the table ends with PostgreSQL's times over
//! SQLite's. `DESTINATIONS=sqlite` or `postgres` runs one. `PG_RTT_MS` puts the server that
//! many milliseconds (a round trip) away from the daemon, as on another machine: the daemon
//! reaches it over TCP through a port of this process that delays every byte by half of it
//! each way (`common/distant.rs`; by tokio's timers, so to the next millisecond or so).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use callsync::simulator::{FaultPlan, Simulator, SimulatorOptions};

#[path = "common/config.rs"]
mod config;
#[path = "common/distant.rs"]
mod distant;
#[path = "common/pg.rs"]
mod pg;

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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
    /// The daemon's URI, the round trip to the server it adds (`PG_RTT_MS`), and the
    /// database's name (dropped at the end).
    Postgres(String, Duration, String),
}

impl Destination {
    /// A new database on the server `admin` names.
    /// With `PG_RTT_MS`, the daemon reaches it through [`pg::distant`]: a server that many
    /// milliseconds away, as on another machine.
    fn postgres(admin: &str, runtime: &tokio::runtime::Runtime) -> Destination {
        let name = format!("bench_schedules_{}", std::process::id());
        runtime.block_on(pg::admin_sql(admin, &format!("CREATE DATABASE {name}")));
        let url = pg::with_dbname(admin, &name);
        let rtt = Duration::from_micros((env_f64("PG_RTT_MS", 0.0) * 1000.0) as u64);
        if rtt.is_zero() {
            return Destination::Postgres(url, Duration::ZERO, name);
        }
        let port = runtime.block_on(distant::distant(&url, rtt / 2));
        let user = url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .map_or("postgres", |(user, _)| user);
        Destination::Postgres(
            format!("postgresql://{user}@127.0.0.1:{port}/{name}?sslmode=disable"),
            rtt,
            name,
        )
    }

    fn name(&self) -> String {
        match self {
            Destination::Sqlite(_) => "SQLite".into(),
            Destination::Postgres(_, rtt, _) if rtt.is_zero() => {
                "PostgreSQL (local, Unix socket)".into()
            }
            Destination::Postgres(_, rtt, _) => format!(
                "PostgreSQL ({} ms a round trip away)",
                rtt.as_secs_f64() * 1000.0
            ),
        }
    }

    fn config_line(&self) -> String {
        match self {
            Destination::Sqlite(path) => format!("path = \"{}\"", path.display()),
            Destination::Postgres(url, ..) => format!("url = \"{url}\""),
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
            Destination::Postgres(url, ..) => runtime.block_on(async {
                let client = pg::connect(url).await;
                let row = client.query_one(SQL, &[]).await.expect("sync_runs reads");
                row.get(0)
            }),
        }
    }
}

/// CPU seconds (user and system) the daemon, this process (the simulator's) and the local
/// PostgreSQL server's processes had taken, or took over a tick.
#[derive(Debug, Default, Clone, Copy)]
struct Cpu {
    daemon: f64,
    simulator: f64,
    server: f64,
}

impl Cpu {
    /// The totals so far (the daemon's once it runs).
    fn now(daemon: Option<u32>) -> Cpu {
        Cpu {
            daemon: daemon.map_or(0.0, |pid| cpu_secs(&pid.to_string())),
            simulator: cpu_secs("self"),
            server: postgres_cpu_secs(),
        }
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            daemon: self.daemon - before.daemon,
            simulator: self.simulator - before.simulator,
            server: self.server - before.server,
        }
    }
}

/// The CPU seconds process `pid` has taken (`/proc/PID/stat`: utime, stime); 0 for one gone.
fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's `(…)`: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf reads a constant of the system.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / per_sec
}

/// The CPU seconds every `postgres` process of this machine has taken (a server elsewhere:
/// none). Backends that ended take theirs with them; the daemon's stay connected.
fn postgres_cpu_secs() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| cpu_secs(&pid))
        .sum()
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

/// One tick the table reports.
struct Tick {
    /// "first sync" or "idle pass".
    kind: &'static str,
    /// Added to every response during the tick.
    latency: Duration,
    line: TickLine,
    /// The requests of every schedule's latest pass after the tick.
    requests: i64,
    /// CPU seconds since the tick before ended (since the daemon started, for the first).
    cpu: Cpu,
}

/// What one destination's daemon did.
struct Measured {
    destination: String,
    /// From the process's start to the end of the first sync.
    first_wall: Duration,
    /// The first sync, then the idle passes.
    ticks: Vec<Tick>,
    rss_mib: f64,
}

/// What every destination's daemon is given alike.
struct Workload {
    schedules: usize,
    calls: usize,
    /// From the start: the first sync's and the first idle pass's.
    latency: Duration,
    /// Of each further idle pass.
    latencies: Vec<Duration>,
}

fn main() {
    let workload = Workload {
        schedules: env_usize("SCHEDULES", 10_000),
        calls: env_usize("CALLS", 10),
        latency: Duration::from_millis(env_usize("LAT_MS", 50) as u64),
        latencies: std::env::var("LATENCIES")
            .unwrap_or_else(|_| "0,100".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .map(Duration::from_millis)
            .collect(),
    };
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
        let (run, in_flight) = run_daemon(&runtime, dir.path(), &destination, &workload);
        if let (Destination::Postgres(.., database), Some(admin)) = (&destination, &postgres) {
            // The daemon has stopped: its rows would only fill the server run after run.
            let drop = format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)");
            if let Err(err) =
                runtime.block_on(async { pg::connect(admin).await.batch_execute(&drop).await })
            {
                eprintln!(
                    "could not drop the bench's database {database} (drop it by hand): {err}"
                );
            }
        }
        measured.push(run);
        concurrency = in_flight;
    }
    print_table(&measured, &workload, concurrency);
}

/// Every response `latency` late from now on (none for zero).
fn slow_down(sim: &Simulator, latency: Duration) {
    sim.set_faults(FaultPlan {
        slow_rate: if latency.is_zero() { 0.0 } else { 1.0 },
        slow_delay: latency,
        ..FaultPlan::default()
    });
}

/// Runs the daemon into `destination` until its first sync, an idle pass and one more idle
/// pass at each further latency are done, against a new simulator whose every response is
/// `workload.latency` late from the start. Also returns `sync.concurrency`.
fn run_daemon(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    destination: &Destination,
    workload: &Workload,
) -> (Measured, usize) {
    let sim = runtime
        .block_on(Simulator::start(
            "127.0.0.1:0".parse().expect("a loopback address"),
            SimulatorOptions {
                schedules: workload.schedules,
                calls_per_schedule: workload.calls,
                seed: 42,
                ..SimulatorOptions::default()
            },
        ))
        .expect("the simulator starts");
    slow_down(&sim, workload.latency);
    let cron = std::env::var("CRON").unwrap_or_else(|_| "0 * * * * *".into());
    let concurrency_line = std::env::var("CONCURRENCY")
        .map(|n| format!("concurrency = {n}\n"))
        .unwrap_or_default();
    let config = config::write_config(
        dir,
        &sim,
        &destination.config_line(),
        &format!("cron = \"{cron}\"\n{concurrency_line}"),
        "info",
    );
    let defaults = callsync::config::load(Some(&config)).expect("the config loads");
    let binary =
        std::env::var_os("BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_callsync").into());
    let started = Instant::now();
    let mut cpu_before = Cpu::now(None);
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
    let mut cpu_of_tick = || {
        let now = Cpu::now(Some(pid));
        let took = now.since(cpu_before);
        cpu_before = now;
        took
    };
    let mut ticks = vec![Tick {
        kind: "first sync",
        latency: workload.latency,
        line: first,
        cpu: cpu_of_tick(),
        requests: destination.last_pass_requests(runtime),
    }];
    for (i, &latency) in std::iter::once(&workload.latency)
        .chain(&workload.latencies)
        .enumerate()
    {
        if i > 0 {
            slow_down(&sim, latency);
        }
        let line = next_clean_tick();
        let cpu = cpu_of_tick();
        let requests = destination.last_pass_requests(runtime);
        ticks.push(Tick {
            kind: "idle pass",
            latency,
            line,
            requests,
            cpu,
        });
    }
    let rss_mib = peak_rss_mib(pid);
    // SAFETY: a signal to our own child, by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = daemon.wait().expect("the daemon stops");
    eprintln!("{}: the daemon stopped with {status}", destination.name());
    runtime.block_on(sim.shutdown());
    let measured = Measured {
        destination: destination.name(),
        first_wall,
        ticks,
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

fn print_table(measured: &[Measured], workload: &Workload, concurrency: usize) {
    println!(
        "\n## schedules: one daemon, {} schedules × {} calls, {} ms a response from the start, default configuration (sync.concurrency = {concurrency})\n",
        workload.schedules,
        workload.calls,
        workload.latency.as_millis()
    );
    println!(
        "Reference: an idle pass's requests × latency ÷ sync.concurrency, the time a pass bound by latency alone takes.\n"
    );
    println!(
        "| destination | tick | walked | failed | requests | latency ms | tick s | reference s | × reference | CPU s: daemon / simulator / local server | peak RSS MiB |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in measured {
        for (i, tick) in m.ticks.iter().enumerate() {
            let took = tick.line.duration_ms as f64 / 1000.0;
            let (kind, rss) = if i == 0 {
                let kind = format!(
                    "{} ({:.1} s from the process's start)",
                    tick.kind,
                    m.first_wall.as_secs_f64()
                );
                (kind, format!("{:.0}", m.rss_mib))
            } else {
                (tick.kind.to_owned(), String::new())
            };
            // The first sync's requests are not an idle pass's: no reference.
            let reference =
                tick.requests as f64 * tick.latency.as_secs_f64() / concurrency.max(1) as f64;
            let (reference, times) = if i == 0 || reference == 0.0 {
                (String::new(), String::new())
            } else {
                (
                    format!("{reference:.1}"),
                    format!("{:.2}", took / reference),
                )
            };
            let cpu = format!(
                "{:.1} / {:.1} / {:.1}",
                tick.cpu.daemon, tick.cpu.simulator, tick.cpu.server
            );
            println!(
                "| {} | {kind} | {} | {} | {} | {} | {took:.1} | {reference} | {times} | {cpu} | {rss} |",
                m.destination,
                tick.line.walked,
                tick.line.failed,
                tick.requests,
                tick.latency.as_millis(),
            );
        }
    }
    if let [sqlite, postgres] = measured {
        let ratios: Vec<String> = sqlite
            .ticks
            .iter()
            .zip(&postgres.ticks)
            .map(|(s, p)| {
                format!(
                    "{} at {} ms {:.2}×",
                    s.kind,
                    s.latency.as_millis(),
                    p.line.duration_ms as f64 / s.line.duration_ms.max(1) as f64
                )
            })
            .collect();
        println!(
            "\n{} ÷ {}: {}.",
            postgres.destination,
            sqlite.destination,
            ratios.join(", ")
        );
    }
}
