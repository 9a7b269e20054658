//! Load figures for BENCHMARKS.md (not a test): how callsync behaves under load, each
//! scenario measured against its own reference in the same run.
//!
//! `cargo bench --bench load` runs every scenario; `cargo bench --bench load -- idle latency`
//! runs those named. Sizes come from the environment (defaults in brackets):
//!
//! - `first-sync`: a first sync of one schedule at each of `SIZES` [100000,300000,1000000]
//!   calls by the release binary (`callsync sync`, default configuration) in its own process,
//!   the simulator in this one; then a second pass over the same, unchanged data
//!   (`callsync backfill` from the beginning: every call read again, nothing to write), and an
//!   incremental pass (reads the lookback only). Reference: bare prepared INSERTs of the same
//!   rows into a new file with callsync's schema (`common::reference`). Reports calls/s, the
//!   ratio to the reference, the first sync's requests and calls seen (from `sync_runs`), the
//!   second pass's speed-up and calls written by it, the peak RSS of the callsync process and
//!   warehouse bytes per call. `TIES` [0] lists tie group sizes: with N > 0 the seeded calls
//!   share their `updated_at` in runs of N (`SimulatorOptions::tie_group`), each size a row.
//!   `REF5=0` skips the schema 5 reference (its columns read 0).
//! - `idle`: a pass over `IDLE_SCHEDULES` [1000] schedules where nothing changed.
//!   Reference: requests = schedules.
//! - `incremental`: a pass after 1,000 of `INCR_CALLS` [1000000] calls changed. Reference:
//!   the requests a 1,000-call change needs (1,000 / page size + 1).
//! - `latency`: `LAT_SCHEDULES` [20] schedules × `LAT_CALLS` [5000] changed calls, with full
//!   list items and with summary list items (one detail request per call). Reference:
//!   requests × latency ÷ `sync.concurrency` (the most in flight), beside the average in
//!   flight the pass reached (requests × latency ÷ wall), and the CPU time the pass took
//!   (callsync and the simulator, in this process: on a small machine they share its cores).
//! - `quota`: against a quota (`simulate --rate-limit`): `QUOTA` [50] requests a second (a
//!   second's burst, 429s without `Retry-After`), `QUOTA_SCHEDULES` [16] × `QUOTA_CALLS` [525]
//!   summary list items (a detail request for each call lacking its attempts' children, about
//!   a third of them: about a minute of requests at 50 a second, the walk; the few
//!   429s of the first round trips, before the quota is learnt, weigh three times as much in
//!   a walk of 20 s),
//!   `QUOTA_MS` [50] ms away; `callsync sync` of each build. Reports requests a second
//!   answered (not 429) over the walk, over the quota, and the share answered 429, from the
//!   simulator's own log of requests. Target: ≥ 0.9 × the quota, ≤ 2 % 429.
//!
//! **Latency.** Every scenario but `quota` runs once per latency of `LATENCIES` [0,50,100]
//! (ms the simulator waits before answering every request, `--slow-rate 1 --slow-ms MS`),
//! side by side in one table: the same data and references, one row per latency. The
//! incremental scenario's first sync runs at 0 ms (a million calls 100 ms away is a
//! quarter of an hour); its measured pass at each latency.
//!
//! `first-sync`, `idle` and `incremental` run the release binary as a user would;
//! `BENCH_BINARY` runs them with another build of callsync (an older release, for a before
//! and after as benches/LOG.md records them) against the same simulator and reference.
//! `BENCH_PERF=DIR` records each build's first sync under `perf record -g` into
//! `DIR/BUILD-CALLS.data`.

mod common;
#[path = "common/config.rs"]
mod config;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use callsync::simulator::{CallShape, FaultPlan, Simulator, SimulatorOptions};
use callsync::sync::{Engine, PassPlan, PassReport};
use common::reference::{Layout, insert_rate};
use tokio_util::sync::CancellationToken;

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if runs("first-sync") {
        runtime.block_on(first_sync());
    }
    if runs("idle") {
        runtime.block_on(idle());
    }
    if runs("incremental") {
        runtime.block_on(incremental());
    }
    if runs("latency") {
        runtime.block_on(latency());
    }
    if runs("quota") {
        runtime.block_on(quota());
    }
}

/// The latencies every scenario runs at, side by side (`LATENCIES` [0,50,100], in ms).
fn latencies() -> Vec<Duration> {
    std::env::var("LATENCIES")
        .unwrap_or_else(|_| "0,50,100".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .map(Duration::from_millis)
        .collect()
}

/// The simulator answering every request `latency` late (none at 0).
fn at_latency(latency: Duration) -> FaultPlan {
    if latency.is_zero() {
        return FaultPlan::default();
    }
    FaultPlan {
        slow_rate: 1.0,
        slow_delay: latency,
        ..FaultPlan::default()
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn simulator(schedules: usize, calls: usize, faults: FaultPlan, summary: bool) -> Simulator {
    Simulator::start(
        "127.0.0.1:0".parse().expect("a loopback address"),
        SimulatorOptions {
            schedules,
            calls_per_schedule: calls,
            seed: 42,
            summary_list: summary,
            faults,
            ..SimulatorOptions::default()
        },
    )
    .await
    .expect("the simulator starts")
}

/// A configuration file with callsync's defaults for everything but where to read and write.
fn write_config(dir: &Path, sim: &Simulator, warehouse: &Path) -> std::path::PathBuf {
    let warehouse = format!("path = \"{}\"", warehouse.display());
    config::write_config(dir, sim, &warehouse, "", "warn")
}

/// `callsync ARGS --config CONFIG` in its own process: wall seconds and peak RSS in MiB.
fn run_callsync(config: &Path, args: &[&str]) -> (f64, f64) {
    let binary =
        std::env::var_os("BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_callsync").into());
    run_build(&binary, config, args, None)
}

/// `BINARY ARGS --config CONFIG` in its own process: wall seconds and peak RSS in MiB; under
/// `perf record -F 499 -g -o PROFILE` when a profile is asked for.
fn run_build(
    binary: &std::ffi::OsStr,
    config: &Path,
    args: &[&str],
    profile: Option<&Path>,
) -> (f64, f64) {
    let mut command = Command::new("/usr/bin/time");
    command.args(["-f", "%e %M"]);
    if let Some(out) = profile {
        command
            .args(["perf", "record", "-F", "499", "-g", "-o"])
            .arg(out)
            .arg("--");
    }
    let out = command
        .arg(binary)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("/usr/bin/time runs callsync");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "callsync {args:?} failed: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let mut fields = last
        .split_whitespace()
        .map(|f| f.parse::<f64>().unwrap_or(0.0));
    let wall = fields.next().unwrap_or(0.0);
    let rss_kib = fields.next().unwrap_or(0.0);
    (wall, rss_kib / 1024.0)
}

/// Figures of the latest pass of every schedule, summed, read from `sync_runs` with plain SQL
/// (so a warehouse written by an older build reads the same).
#[derive(Default)]
struct LastPasses {
    requests: i64,
    calls_seen: i64,
    calls_written: i64,
}

fn last_passes(warehouse: &Path) -> LastPasses {
    let conn = rusqlite::Connection::open_with_flags(
        warehouse,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("the warehouse opens");
    conn.query_row(
        "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(calls_seen), 0),
                COALESCE(SUM(calls_written), 0)
         FROM sync_runs WHERE id IN (SELECT MAX(id) FROM sync_runs GROUP BY schedule_uid)",
        [],
        |r| {
            Ok(LastPasses {
                requests: r.get(0)?,
                calls_seen: r.get(1)?,
                calls_written: r.get(2)?,
            })
        },
    )
    .expect("sync_runs reads")
}

/// The callsync builds measured side by side: this one ("after") and, when `BENCH_BEFORE`
/// names another build's binary, that one ("before").
fn builds() -> Vec<(&'static str, std::ffi::OsString)> {
    let mut builds = vec![(
        "after",
        std::env::var_os("BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_callsync").into()),
    )];
    if let Some(before) = std::env::var_os("BENCH_BEFORE") {
        builds.push(("before", before));
    }
    builds
}

/// Where the first sync of `build` at `calls` records its profile, when `BENCH_PERF` names a
/// directory (`perf report -i DIR/after-300000.data`): the write path's profile comes from the
/// same run, data and configuration as the figures beside it (at 499 Hz perf costs a few per
/// cent, so compare a profiled run's times with each other only). Data in tie groups
/// (`TIES`) adds their size: `DIR/after-300000-ties300.data`.
fn profile_path(build: &str, calls: usize, tie_group: usize) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("BENCH_PERF")?;
    let ties = if tie_group > 0 {
        format!("-ties{tie_group}")
    } else {
        String::new()
    };
    Some(Path::new(&dir).join(format!("{build}-{calls}{ties}.data")))
}

/// The data shapes measured (`SHAPES` [eighteen,varied]).
fn shapes() -> Vec<CallShape> {
    std::env::var("SHAPES")
        .unwrap_or_else(|_| "eighteen,varied".into())
        .split(',')
        .filter_map(|s| match s.trim() {
            "eighteen" => Some(CallShape::Eighteen),
            "varied" => Some(CallShape::Varied),
            _ => None,
        })
        .collect()
}

async fn first_sync() {
    let sizes: Vec<usize> = std::env::var("SIZES")
        .unwrap_or_else(|_| "100000,300000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let ties: Vec<usize> = std::env::var("TIES")
        .unwrap_or_else(|_| "0".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!("\n## first-sync: one schedule, release binaries, default configuration\n");
    println!(
        "References: bare prepared INSERTs of the same rows, 100 calls a transaction, into schema 5 (uid-keyed) and schema 6 (insertion-ordered). × ref 6 and × before: calls/s over the schema 6 reference's and over the before build's, same data, same run. × 0 ms: calls/s over the same build's at 0 ms. ties: calls sharing one updated_at (0: none). latency: ms the simulator waits before every answer. requests, calls seen: the first sync's, from sync_runs (a page holds 100 calls).\n"
    );
    println!(
        "| shape | calls | ties | latency ms | build | ref 5 calls/s | ref 6 calls/s | first sync s | calls/s | × ref 6 | × before | × 0 ms | requests | calls seen | second pass (all re-read) s | written again | incremental pass s | peak RSS MiB | bytes/call | bytes ÷ ref 5's |"
    );
    println!(
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for shape in shapes() {
        for &calls in &sizes {
            for &tie_group in &ties {
                first_sync_of(shape, calls, tie_group).await;
            }
        }
    }
}

/// One row per build of the first-sync table: `calls` calls of `shape` in tie groups of
/// `tie_group` (0: none), the references measured on the same data.
async fn first_sync_of(shape: CallShape, calls: usize, tie_group: usize) {
    let sim = simulator_shaped(1, calls, shape, tie_group).await;
    let schedule = sim.schedule_uids()[0];
    let truth = sim.truth(schedule);
    let refs = tempfile::tempdir().expect("a temp dir");
    // `REF5=0` skips the schema 5 reference (half an hour at 1M calls here): its columns
    // then read 0.
    let (ref5, ref5_bytes) = if std::env::var("REF5").is_ok_and(|v| v == "0") {
        (0.0, 0)
    } else {
        let ref5_path = refs.path().join("reference5.db");
        let rate = insert_rate(&ref5_path, &truth, Layout::Uid5);
        let bytes = file_bytes(&ref5_path);
        let _ = std::fs::remove_file(&ref5_path);
        (rate, bytes)
    };
    let ref6_path = refs.path().join("reference6.db");
    let ref6 = insert_rate(&ref6_path, &truth, Layout::Ordered6);
    let _ = std::fs::remove_file(&ref6_path);
    drop(truth);
    // The rate of each build at 0 ms, for the × 0 ms column (when 0 is among the latencies).
    let mut at_zero: Vec<(&str, f64)> = Vec::new();
    for latency in latencies() {
        sim.set_faults(at_latency(latency));
        let rows = first_sync_builds(&sim, schedule, calls, tie_group);
        let before_rate = rows
            .iter()
            .find(|row| row.build == "before")
            .map(|row| row.rate);
        if latency.is_zero() {
            at_zero = rows.iter().map(|row| (row.build, row.rate)).collect();
        }
        for row in rows {
            let ratio =
                |base: Option<f64>| base.map_or(String::new(), |b| format!("{:.2}", row.rate / b));
            let zero = at_zero
                .iter()
                .find(|(b, _)| *b == row.build)
                .map(|(_, r)| *r);
            println!(
                "| {shape:?} | {calls} | {tie_group} | {} | {} | {ref5:.0} | {ref6:.0} | {:.1} | {:.0} | {:.2} | {} | {} | {} | {} | {:.1} | {} | {:.2} | {:.0} | {} | {:.2} |",
                latency.as_millis(),
                row.build,
                row.first,
                row.rate,
                row.rate / ref6,
                ratio(before_rate),
                ratio(zero),
                row.walked.requests,
                row.walked.calls_seen,
                row.second,
                row.again,
                row.incremental,
                row.rss,
                row.bytes / calls.max(1) as u64,
                if ref5_bytes == 0 {
                    0.0
                } else {
                    row.bytes as f64 / ref5_bytes as f64
                },
            );
        }
    }
    sim.shutdown().await;
}

/// One build's first sync, second pass and incremental pass.
struct FirstSyncRow {
    build: &'static str,
    first: f64,
    rate: f64,
    walked: LastPasses,
    second: f64,
    again: i64,
    incremental: f64,
    rss: f64,
    bytes: u64,
}

/// Every build's first sync of `schedule` (`calls` calls) from `sim` as it answers now.
fn first_sync_builds(
    sim: &Simulator,
    schedule: uuid::Uuid,
    calls: usize,
    tie_group: usize,
) -> Vec<FirstSyncRow> {
    let mut rows = Vec::new();
    for (build, binary) in builds() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let warehouse = dir.path().join("callsync.db");
        let config = write_config(dir.path(), sim, &warehouse);
        let profile = profile_path(build, calls, tie_group);
        let (first, rss) = run_build(&binary, &config, &["sync"], profile.as_deref());
        let walked = last_passes(&warehouse);
        let bytes = file_bytes(&warehouse);
        let uid = schedule.to_string();
        let (second, rss2) = run_build(&binary, &config, &["backfill", "--schedule", &uid], None);
        let again = last_passes(&warehouse).calls_written;
        let (incremental, rss3) = run_build(&binary, &config, &["sync"], None);
        rows.push(FirstSyncRow {
            build,
            first,
            rate: calls as f64 / first,
            walked,
            second,
            again,
            incremental,
            rss: rss.max(rss2).max(rss3),
            bytes,
        });
    }
    rows
}

fn file_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

async fn simulator_shaped(
    schedules: usize,
    calls: usize,
    shape: CallShape,
    tie_group: usize,
) -> Simulator {
    Simulator::start(
        "127.0.0.1:0".parse().expect("a loopback address"),
        SimulatorOptions {
            schedules,
            calls_per_schedule: calls,
            seed: 42,
            shape,
            tie_group,
            ..SimulatorOptions::default()
        },
    )
    .await
    .expect("the simulator starts")
}

/// An engine over `sim` with the default configuration but for the warehouse path.
fn config_for(sim: &Simulator, warehouse: &Path) -> callsync::config::Config {
    let dir = warehouse.parent().expect("a warehouse directory");
    let path = write_config(dir, sim, warehouse);
    callsync::config::load(Some(&path)).expect("the config loads")
}

async fn pass(config: &callsync::config::Config) -> (Vec<PassReport>, Duration) {
    let backend =
        callsync::warehouse::open(&config.warehouse).expect("the warehouse is configured");
    let engine = Engine::start(config, backend.as_ref(), callsync::sync::Mode::Write)
        .expect("the engine starts");
    let plan = PassPlan::incremental(engine.settings());
    let started = Instant::now();
    let reports = engine
        .sync_all(&config.sync.schedules, &plan, &CancellationToken::new())
        .await;
    let took = started.elapsed();
    engine.close().await;
    assert!(reports.iter().all(PassReport::succeeded), "a pass failed");
    (reports, took)
}

fn requests(reports: &[PassReport]) -> u64 {
    reports.iter().map(|r| r.stats.requests).sum()
}

async fn idle() {
    let schedules = env_usize("IDLE_SCHEDULES", 1000);
    let sim = simulator(schedules, 1, FaultPlan::default(), false).await;
    println!("\n## idle: {schedules} schedules, nothing changed\n");
    println!(
        "Reference: requests = schedules; at a latency, requests × latency ÷ sync.concurrency (the most in flight). Both passes at the latency.\n"
    );
    println!(
        "| latency ms | schedules | requests | wall s | first pass s | requests × latency ÷ sync.concurrency, s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for latency in latencies() {
        sim.set_faults(at_latency(latency));
        let dir = tempfile::tempdir().expect("a temp dir");
        let warehouse = dir.path().join("callsync.db");
        let config = write_config(dir.path(), &sim, &warehouse);
        let concurrency = config_for(&sim, &warehouse).sync.concurrency;
        let (first, _) = run_callsync(&config, &["sync"]);
        let (took, _) = run_callsync(&config, &["sync"]);
        let idle = last_passes(&warehouse);
        let ideal = idle.requests as f64 * latency.as_secs_f64() / concurrency as f64;
        println!(
            "| {} | {schedules} | {} | {took:.2} | {first:.2} | {ideal:.2} |",
            latency.as_millis(),
            idle.requests
        );
    }
    sim.shutdown().await;
}

async fn incremental() {
    const CHANGED: usize = 1000;
    let calls = env_usize("INCR_CALLS", 1_000_000);
    let shape = shapes().first().copied().unwrap_or_default();
    println!("\n## incremental: {CHANGED} of {calls} calls changed ({shape:?} calls)\n");
    println!(
        "The first sync at 0 ms; then, at each latency, {CHANGED} calls changed and an incremental pass.\n"
    );
    println!(
        "| build | latency ms | calls | changed | requests | expected requests | calls seen | written | wall s | first sync s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (build, binary) in builds() {
        // A simulator of its own for each build: both see the same seeded calls and changes.
        let sim = simulator_shaped(1, calls, shape, 0).await;
        let schedule = sim.schedule_uids()[0];
        let dir = tempfile::tempdir().expect("a temp dir");
        let warehouse = dir.path().join("callsync.db");
        let config = write_config(dir.path(), &sim, &warehouse);
        let (first, _) = run_build(&binary, &config, &["sync"], None);
        let truth = sim.truth(schedule);
        for (round, latency) in latencies().into_iter().enumerate() {
            // Past the lookback (5 s) of the pass before, so that each pass reads its own
            // round's changes only.
            tokio::time::sleep(Duration::from_secs(6)).await;
            // Different calls each round, the same for every build.
            let uids: Vec<_> = truth
                .iter()
                .skip(round)
                .step_by((calls / CHANGED).max(1))
                .take(CHANGED)
                .map(|c| c.uid)
                .collect();
            sim.touch_calls(&uids);
            sim.set_faults(at_latency(latency));
            let (took, _) = run_build(&binary, &config, &["sync"], None);
            sim.set_faults(FaultPlan::default());
            let pass = last_passes(&warehouse);
            let page = callsync::service::MAX_PAGE_SIZE as usize;
            println!(
                "| {build} | {} | {calls} | {} | {} | {} | {} | {} | {took:.2} | {first:.1} |",
                latency.as_millis(),
                uids.len(),
                pass.requests,
                uids.len() / page + 1,
                pass.calls_seen,
                pass.calls_written,
            );
        }
        sim.shutdown().await;
    }
}

async fn latency() {
    let schedules = env_usize("LAT_SCHEDULES", 20);
    let calls = env_usize("LAT_CALLS", 5000);
    println!("\n## latency: {schedules} schedules × {calls} changed calls\n");
    println!(
        "Reference: requests × latency ÷ sync.concurrency (the most in flight); in flight on average: requests × latency ÷ wall.\n"
    );
    println!(
        "| list items | latency ms | requests | wall s | in flight on average | requests × latency ÷ sync.concurrency, s | × that | CPU s (callsync and the simulator) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for summary in [false, true] {
        for latency in latencies() {
            let sim = simulator(schedules, calls, at_latency(latency), summary).await;
            let dir = tempfile::tempdir().expect("a temp dir");
            let config = config_for(&sim, &dir.path().join("callsync.db"));
            let cpu_before = process_cpu();
            let (reports, took) = pass(&config).await;
            let cpu = process_cpu().saturating_sub(cpu_before);
            let n = requests(&reports);
            let busy = n as f64 * latency.as_secs_f64();
            let ideal = busy / config.sync.concurrency as f64;
            let vs_ideal = if ideal > 0.0 {
                format!("{:.2}", took.as_secs_f64() / ideal)
            } else {
                String::new()
            };
            println!(
                "| {} | {} | {n} | {:.1} | {:.1} | {ideal:.1} | {vs_ideal} | {:.1} |",
                if summary {
                    "summary (details fetched)"
                } else {
                    "full"
                },
                latency.as_millis(),
                took.as_secs_f64(),
                busy / took.as_secs_f64(),
                cpu.as_secs_f64(),
            );
            sim.shutdown().await;
        }
    }
}

/// The CPU time this process has used, user and system: callsync's engine and the
/// simulator together, which share the machine's cores in these scenarios.
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// A walk against a quota: requests a second answered and the share answered 429, per build.
async fn quota() {
    let quota = env_usize("QUOTA", 50);
    let schedules = env_usize("QUOTA_SCHEDULES", 16);
    let calls = env_usize("QUOTA_CALLS", 525);
    let latency = Duration::from_millis(env_usize("QUOTA_MS", 50) as u64);
    println!(
        "\n## quota: {quota} requests a second (a second's burst, 429 without Retry-After), {schedules} schedules × {calls} summary list items (a detail request a call), {} ms away\n",
        latency.as_millis()
    );
    println!("Target: answered ≥ 0.9 × the quota, ≤ 2 % answered 429.\n");
    println!(
        "| build | requests | answered 429 | wall s | answered a second (not 429) | × quota | % 429 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (build, binary) in builds() {
        let faults = FaultPlan {
            quota_per_second: u32::try_from(quota).unwrap_or(u32::MAX),
            ..at_latency(latency)
        };
        let sim = simulator(schedules, calls, faults, true).await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let warehouse = dir.path().join("callsync.db");
        let config = write_config(dir.path(), &sim, &warehouse);
        let before = api_requests(&sim).len();
        let (took, _) = run_build(&binary, &config, &["sync"], None);
        let statuses: Vec<u16> = api_requests(&sim).into_iter().skip(before).collect();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        let answered = (statuses.len() - refused) as f64 / took;
        println!(
            "| {build} | {} | {refused} | {took:.1} | {answered:.1} | {:.2} | {:.2} |",
            statuses.len(),
            answered / quota as f64,
            100.0 * refused as f64 / statuses.len().max(1) as f64
        );
        sim.shutdown().await;
    }
}

/// The statuses of the API requests the simulator answered so far, in order.
fn api_requests(sim: &Simulator) -> Vec<u16> {
    sim.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/"))
        .map(|r| r.status)
        .collect()
}
