//! Throughput figures (not a test): seeding the simulator, and a first sync of one schedule
//! from it over loopback HTTP into a fresh warehouse.
//!
//! `cargo bench --bench throughput` (CALLS=1000000 to change the size). Prints calls per
//! second for each step and the warehouse size.

use std::time::{Duration, Instant};

use callsync::config::{
    ApiConfig, AuthConfig, Config, DetailsMode, LogConfig, MetricsConfig, RetryConfig, Secret,
    SyncConfig, WarehouseConfig,
};
use callsync::simulator::{Simulator, SimulatorOptions};
use callsync::sync::{Engine, PassPlan};
use tokio_util::sync::CancellationToken;

fn main() {
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(calls));
}

async fn run(calls: usize) {
    let started = Instant::now();
    let sim = Simulator::start(
        "127.0.0.1:0".parse().unwrap(),
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: calls,
            ..SimulatorOptions::default()
        },
    )
    .await
    .expect("simulator");
    let seeded = started.elapsed();
    println!(
        "seed:  {calls} calls in {:.2} s ({:.0} calls/s)",
        seeded.as_secs_f64(),
        calls as f64 / seeded.as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let config = Config {
        api: ApiConfig {
            base_url: sim.base_url().clone(),
            auth: Some(AuthConfig::Static(Secret::new(sim.access_token())).into()),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            requests_per_second: None,
            detail_concurrency: 4,
            max_response_bytes: 32 * 1024 * 1024,
            retry: RetryConfig::default(),
        },
        warehouse: WarehouseConfig {
            path: dir.path().join("bench.db"),
            busy_timeout: Duration::from_secs(30),
            keep_runs: None,
        },
        sync: SyncConfig {
            schedules: sim.schedule_uids(),
            schedule_names: Default::default(),
            lookback: Duration::from_secs(5),
            cron: "0 */5 * * * *".into(),
            page_size: 100,
            details: DetailsMode::Auto,
            concurrency: 1,
            filter: Default::default(),
            reconcile_cron: None,
            reconcile_window: Duration::from_secs(86_400),
            shutdown_timeout: Duration::from_secs(30),
            behind_after: Duration::from_secs(120),
        },
        log: LogConfig::default(),
        metrics: MetricsConfig::default(),
        source: None,
    };
    let engine = Engine::start(&config).expect("engine");
    let plan = PassPlan::incremental(engine.settings());
    let started = Instant::now();
    let reports = engine
        .sync_all(&sim.schedule_uids(), &plan, &CancellationToken::new())
        .await;
    let took = started.elapsed();
    engine.close().await;
    let r = &reports[0];
    assert!(r.succeeded(), "{:?}", r.result);
    let size = std::fs::metadata(&config.warehouse.path)
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "sync:  {} calls written, {} pages, {} requests in {:.2} s ({:.0} calls/s); warehouse {:.1} MiB",
        r.stats.calls_written,
        r.stats.pages,
        r.stats.requests,
        took.as_secs_f64(),
        r.stats.calls_written as f64 / took.as_secs_f64(),
        size as f64 / 1_048_576.0
    );
    let started = Instant::now();
    let engine = Engine::start(&config).expect("engine");
    let again = engine
        .sync_all(&sim.schedule_uids(), &plan, &CancellationToken::new())
        .await;
    engine.close().await;
    println!(
        "again: {} calls written, {} seen in {:.2} s (an idle pass re-reads the lookback only)",
        again[0].stats.calls_written,
        again[0].stats.calls_seen,
        started.elapsed().as_secs_f64()
    );
    sim.shutdown().await;
}
