//! Prometheus metrics and `/healthz` for the daemon (`[metrics] listen`).
//!
//! Figures come from the pass reports the daemon already receives: passes by kind and result,
//! pages, calls written, requests by status, retries, and per schedule the last success,
//! the lag (how far the cursor is behind the service's clock) and how many passes in a row
//! ended behind. `/healthz` fails (503) when a schedule has neither completed a pass nor
//! committed a page for `STALE_INTERVALS` sync ticks in a row — counted in ticks, not
//! seconds, so a cron with long quiet hours is not flagged overnight —, when a schedule is
//! falling behind (`FALLING_BEHIND_PASSES` passes in a row ended behind), when the
//! scheduler itself has stopped firing, or when the warehouse was deleted, replaced or made read-only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::listener;
use super::scheduler::{STALL_GRACE, TickClock};
use crate::api::RequestObserver;
use crate::service::Timestamp;
use crate::sync::{PassReport, PassResult, WarehousePlace};
use crate::warehouse::{FALLING_BEHIND_PASSES, STALE_TICKS};

/// Sync ticks without progress after which a schedule is unhealthy.
pub const STALE_INTERVALS: u32 = STALE_TICKS;

/// Every result a pass ends with, so each has a series (at 0) from start-up.
const RESULTS: [&str; 5] = ["completed", "behind", "failed", "interrupted", "skipped"];

/// Statuses whose request counters exist (at 0) before any request: what alerts and the
/// dashboard select on.
const STATUSES_FROM_START: [u16; 2] = [200, 429];

/// Kinds of failed requests (`callsync_request_errors_total{kind}`).
const ERROR_KINDS: [&str; 3] = ["transport", "client_error", "server_error"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabels {
    schedule: String,
    kind: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    schedule: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabel {
    schedule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn pass_duration_histogram() -> Histogram {
    // 0.5 s to about 9 hours: a quiet incremental pass to a long reconciliation.
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
}

fn request_duration_histogram() -> Histogram {
    // 5 ms to about 20 s (`api.request_timeout_secs` is 30 by default).
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// The series `/metrics` shows, registered once with the client library.
struct Series {
    registry: Registry,
    passes: Family<PassLabels, Counter>,
    pass_duration: HistogramFamily<DurationLabels>,
    pages: Counter,
    calls_written: Counter,
    retries: Counter,
    throttled: FloatCounter,
    requests: Family<StatusLabel, Counter>,
    request_errors: Family<KindLabel, Counter>,
    request_duration: Histogram,
    last_success: Family<ScheduleLabel, FloatGauge>,
    lag: Family<ScheduleLabel, FloatGauge>,
    behind: Family<ScheduleLabel, Gauge>,
    warehouse_size: Gauge,
    wal_size: Gauge,
}

impl Series {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("callsync");
        let series = Series {
            registry: Registry::default(),
            passes: Family::default(),
            pass_duration: Family::new_with_constructor(pass_duration_histogram),
            pages: Counter::default(),
            calls_written: Counter::default(),
            retries: Counter::default(),
            throttled: FloatCounter::default(),
            requests: Family::default(),
            request_errors: Family::default(),
            request_duration: request_duration_histogram(),
            last_success: Family::default(),
            lag: Family::default(),
            behind: Family::default(),
            warehouse_size: Gauge::default(),
            wal_size: Gauge::default(),
        };
        registry.register(
            "build",
            "The running callsync's version (always 1)",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        registry.register(
            "passes",
            "Passes by schedule, kind and result",
            series.passes.clone(),
        );
        registry.register_with_unit(
            "pass_duration",
            "How long passes took, by schedule and kind",
            Unit::Seconds,
            series.pass_duration.clone(),
        );
        registry.register("pages", "Pages of calls read.", series.pages.clone());
        registry.register(
            "calls_written",
            "Calls written (new or changed)",
            series.calls_written.clone(),
        );
        registry.register("retries", "Requests retried.", series.retries.clone());
        registry.register_with_unit(
            "throttled",
            "Time requests waited for the shared limiter (which slows down when the service answers 429)",
            Unit::Seconds,
            series.throttled.clone(),
        );
        registry.register(
            "requests",
            "Responses from the service by HTTP status",
            series.requests.clone(),
        );
        registry.register(
            "request_errors",
            "Requests that failed: transport (no answer), client_error (4xx, 429 included), server_error (5xx)",
            series.request_errors.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from sending a request to its answer's headers",
            Unit::Seconds,
            series.request_duration.clone(),
        );
        registry.register_with_unit(
            "last_success_timestamp",
            "When the schedule last completed a pass (0: not since start-up)",
            Unit::Seconds,
            series.last_success.clone(),
        );
        registry.register_with_unit(
            "lag",
            "How far the schedule's cursor is behind the service's clock (negative: ahead of it)",
            Unit::Seconds,
            series.lag.clone(),
        );
        registry.register(
            "behind_passes",
            "Passes in a row that ended behind the service's clock with changes waiting",
            series.behind.clone(),
        );
        registry.register_with_unit(
            "warehouse_size",
            "Size of the warehouse file, read at scrape time",
            Unit::Bytes,
            series.warehouse_size.clone(),
        );
        registry.register_with_unit(
            "warehouse_wal_size",
            "Size of the warehouse's write-ahead log (-wal), read at scrape time",
            Unit::Bytes,
            series.wal_size.clone(),
        );
        Series { registry, ..series }
    }

    /// Every series an alert or the dashboard selects on, at 0, before anything happened:
    /// `time() - callsync_last_success_timestamp_seconds` fires for a schedule that never
    /// synced, and a rate over a counter needs the counter.
    fn start_at_zero(&self, schedules: &[Uuid], kinds: &[&'static str]) {
        for schedule in schedules {
            let schedule = schedule.to_string();
            let label = ScheduleLabel {
                schedule: schedule.clone(),
            };
            let _ = self.last_success.get_or_create(&label);
            let _ = self.behind.get_or_create(&label);
            for kind in kinds {
                let _ = self.pass_duration.get_or_create(&DurationLabels {
                    schedule: schedule.clone(),
                    kind,
                });
                for result in RESULTS {
                    let _ = self.passes.get_or_create(&PassLabels {
                        schedule: schedule.clone(),
                        kind,
                        result,
                    });
                }
            }
        }
        for status in STATUSES_FROM_START {
            let _ = self.requests.get_or_create(&StatusLabel { status });
        }
        for kind in ERROR_KINDS {
            let _ = self.request_errors.get_or_create(&KindLabel { kind });
        }
    }
}

#[derive(Default)]
struct Figures {
    /// The lag a pass ended with (service clock minus checkpoint), and when it ended.
    lag: BTreeMap<Uuid, (f64, std::time::Instant)>,
    /// Passes in a row that ended behind, and what slowed the latest down.
    behind: BTreeMap<Uuid, (i64, Vec<&'static str>)>,
    freshness: BTreeMap<Uuid, Freshness>,
}

impl Figures {
    fn progressed(&mut self, schedule: Uuid) {
        let fresh = self.freshness.entry(schedule).or_default();
        fresh.progressed = true;
        fresh.idle_ticks = 0;
    }
}

/// Progress of one schedule between sync ticks.
#[derive(Default)]
struct Freshness {
    /// A pass completed or a page committed since the last tick.
    progressed: bool,
    /// Ticks in a row that found no progress.
    idle_ticks: u32,
}

pub struct Metrics {
    figures: Mutex<Figures>,
    series: Series,
    schedules: Vec<Uuid>,
}

impl Metrics {
    /// Metrics of `schedules`, whose passes are of `kinds` (`incremental`, and `reconcile`
    /// when a reconcile cron is set): their series exist from now on.
    pub fn new(schedules: Vec<Uuid>, kinds: &[&'static str]) -> Self {
        let series = Series::new();
        series.start_at_zero(&schedules, kinds);
        Metrics {
            figures: Mutex::default(),
            series,
            schedules,
        }
    }

    /// A sync tick fired: every schedule without progress since the previous one ages.
    pub fn sync_tick(&self) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        for schedule in &self.schedules {
            let fresh = f.freshness.entry(*schedule).or_default();
            if std::mem::take(&mut fresh.progressed) {
                fresh.idle_ticks = 0;
            } else {
                fresh.idle_ticks += 1;
            }
        }
    }

    /// A page of `schedule` was committed.
    pub fn progressed(&self, schedule: Uuid) {
        self.figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .progressed(schedule);
    }

    /// A pass ended. Its requests were counted as they were answered ([`RequestObserver`]).
    pub fn record(&self, report: &PassReport) {
        let series = &self.series;
        let result = match report.result {
            PassResult::Completed => "completed",
            PassResult::Behind => "behind",
            PassResult::Interrupted => "interrupted",
            PassResult::Skipped(_) => "skipped",
            PassResult::Failed(_) => "failed",
        };
        let schedule = report.schedule.to_string();
        let kind = report.kind.as_str();
        series
            .passes
            .get_or_create(&PassLabels {
                schedule: schedule.clone(),
                kind,
                result,
            })
            .inc();
        if !matches!(report.result, PassResult::Skipped(_)) {
            series
                .pass_duration
                .get_or_create(&DurationLabels {
                    schedule: schedule.clone(),
                    kind,
                })
                .observe(report.duration.as_secs_f64());
        }
        series.pages.inc_by(report.stats.pages);
        series.calls_written.inc_by(report.stats.calls_written);
        series.retries.inc_by(report.stats.retries);
        series
            .throttled
            .inc_by(report.stats.throttled_ms as f64 / 1000.0);
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        if report.succeeded() {
            series
                .last_success
                .get_or_create(&ScheduleLabel { schedule })
                .set(seconds(Timestamp::now()));
            f.progressed(report.schedule);
            let behind = f.behind.entry(report.schedule).or_default();
            *behind = match report.result {
                PassResult::Behind => (behind.0 + 1, report.slowed_by()),
                _ => (0, Vec::new()),
            };
        }
        if let Some(lag) = report.lag_secs {
            f.lag
                .insert(report.schedule, (lag, std::time::Instant::now()));
        }
    }

    /// The exposition (OpenMetrics text), with the figures read at scrape time updated
    /// first: the lag grown since its pass, the warehouse's and WAL's sizes.
    pub fn render(&self, warehouse: &Path) -> String {
        let series = &self.series;
        {
            let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
            for (schedule, (lag, at)) in &f.lag {
                // The lag the pass ended with, grown by the time since: measured on the
                // service's clock, so skew between the two machines does not show.
                series
                    .lag
                    .get_or_create(&ScheduleLabel {
                        schedule: schedule.to_string(),
                    })
                    .set(lag + at.elapsed().as_secs_f64());
            }
            for (schedule, (n, _)) in &f.behind {
                series
                    .behind
                    .get_or_create(&ScheduleLabel {
                        schedule: schedule.to_string(),
                    })
                    .set(*n);
            }
        }
        series.warehouse_size.set(file_size(warehouse));
        series.wal_size.set(file_size(&wal_of(warehouse)));
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &series.registry) {
            // Writing into a String does not fail; should the library ever, say so.
            tracing::warn!(error = %err, "cannot encode the metrics");
        }
        out
    }

    /// Schedules falling behind, each with what slowed its latest pass down.
    pub fn falling_behind(&self) -> Vec<(Uuid, Vec<&'static str>)> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        f.behind
            .iter()
            .filter(|(_, (n, _))| *n >= FALLING_BEHIND_PASSES)
            .map(|(s, (_, why))| (*s, why.clone()))
            .collect()
    }

    /// Schedules without progress for `STALE_INTERVALS` sync ticks.
    pub fn stale(&self) -> Vec<Uuid> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.schedules
            .iter()
            .filter(|s| {
                f.freshness
                    .get(s)
                    .is_some_and(|h| h.idle_ticks >= STALE_INTERVALS)
            })
            .copied()
            .collect()
    }
}

impl RequestObserver for Metrics {
    fn answered(&self, status: u16, latency: Duration) {
        let series = &self.series;
        series.requests.get_or_create(&StatusLabel { status }).inc();
        series.request_duration.observe(latency.as_secs_f64());
        let kind = match status {
            400..=499 => "client_error",
            500..=599 => "server_error",
            _ => return,
        };
        series
            .request_errors
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    fn unanswered(&self, latency: Duration) {
        let series = &self.series;
        series.request_duration.observe(latency.as_secs_f64());
        series
            .request_errors
            .get_or_create(&KindLabel { kind: "transport" })
            .inc();
    }
}

fn seconds(t: Timestamp) -> f64 {
    t.unix_nanos() as f64 / 1e9
}

/// SQLite's write-ahead log beside `warehouse`.
fn wal_of(warehouse: &Path) -> std::path::PathBuf {
    let mut name = warehouse.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// The file's size; 0 when there is none (no WAL between writers) or it cannot be read.
fn file_size(path: &Path) -> i64 {
    std::fs::metadata(path).map_or(0, |m| i64::try_from(m.len()).unwrap_or(i64::MAX))
}

/// How long a stopping server waits for the responses it is writing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The running `/metrics` and `/healthz` server.
pub struct Server {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Stops taking requests and lets those being answered finish, for `SHUTDOWN_GRACE` at
    /// most.
    pub async fn shut_down(self) {
        self.stop.cancel();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.task)
            .await
            .is_err()
        {
            tracing::debug!("the metrics server did not stop within its grace; leaving it");
        }
    }
}

/// Serves `/metrics` and `/healthz` on `listen` until [`Server::shut_down`]. `/healthz` checks
/// `warehouse` itself on every request, so a deleted, replaced or read-only warehouse shows
/// at once, not only after the next tick.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    clock: TickClock,
    warehouse: WarehousePlace,
) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /metrics and /healthz");
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .with_state(Health {
            metrics,
            clock,
            warehouse,
        });
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(listener::serve(
        listener,
        app,
        listener::Limits::DEFAULT,
        stopped,
    ));
    Ok(Server { stop, task })
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    clock: TickClock,
    warehouse: WarehousePlace,
}

/// OpenMetrics, as the client library writes it (Prometheus asks for it first).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics_page(State(health): State<Health>) -> impl IntoResponse {
    let body = health.metrics.render(health.warehouse.path());
    ([(header::CONTENT_TYPE, OPENMETRICS)], body)
}

async fn healthz(State(health): State<Health>) -> (StatusCode, String) {
    if let Err(lost) = health.warehouse.check() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{lost}\n"));
    }
    if let Some(due) = health.clock.missed(STALL_GRACE) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the scheduler has not fired since {due}: no passes are starting\n"),
        );
    }
    let mut problems = String::new();
    let stale = health.metrics.stale();
    if !stale.is_empty() {
        let list: Vec<String> = stale.iter().map(Uuid::to_string).collect();
        let _ = writeln!(
            problems,
            "no progress for {STALE_INTERVALS} sync ticks: {}",
            list.join(", ")
        );
    }
    for (schedule, why) in health.metrics.falling_behind() {
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" (slowed by {})", why.join(", "))
        };
        let _ = writeln!(
            problems,
            "falling behind: {schedule}: {FALLING_BEHIND_PASSES} or more passes in a row ended behind the service's clock{why}"
        );
    }
    if problems.is_empty() {
        return (StatusCode::OK, "ok\n".into());
    }
    (StatusCode::SERVICE_UNAVAILABLE, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::Warehouse;

    #[tokio::test]
    async fn healthz_checks_the_warehouse_itself_on_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let warehouse = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        let health = Health {
            metrics: Arc::new(Metrics::new(vec![Uuid::from_u128(1)], &["incremental"])),
            clock: TickClock::new("* * * * * *").unwrap(),
            warehouse: WarehousePlace::of(&warehouse),
        };
        assert_eq!(
            healthz(State(health.clone())).await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        // No tick has noticed it yet: the request does.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            healthz(State(health)).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`\n",
                    path.display()
                )
            )
        );
    }
}
