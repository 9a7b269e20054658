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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::serve::ListenerExt as _;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::scheduler::{STALL_GRACE, TickClock};
use crate::api::Timestamp;
use crate::sync::{PassReport, PassResult, WarehousePlace};
use crate::warehouse::{FALLING_BEHIND_PASSES, STALE_TICKS};

/// Sync ticks without progress after which a schedule is unhealthy.
pub const STALE_INTERVALS: u32 = STALE_TICKS;

#[derive(Default)]
struct Figures {
    passes: BTreeMap<(&'static str, &'static str), u64>,
    pages: u64,
    calls_written: u64,
    requests: BTreeMap<u16, u64>,
    retries: u64,
    throttled_ms: u64,
    last_success: BTreeMap<Uuid, Timestamp>,
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
    schedules: Vec<Uuid>,
}

impl Metrics {
    pub fn new(schedules: Vec<Uuid>) -> Self {
        Metrics {
            figures: Mutex::default(),
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

    pub fn record(&self, report: &PassReport) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        let result = match report.result {
            PassResult::Completed => "completed",
            PassResult::Behind => "behind",
            PassResult::Interrupted => "interrupted",
            PassResult::Skipped(_) => "skipped",
            PassResult::Failed(_) => "failed",
        };
        *f.passes.entry((report.kind.as_str(), result)).or_default() += 1;
        f.pages += report.stats.pages;
        f.calls_written += report.stats.calls_written;
        f.retries += report.stats.retries;
        f.throttled_ms += report.stats.throttled_ms;
        for (status, n) in &report.statuses {
            *f.requests.entry(*status).or_default() += n;
        }
        if report.succeeded() {
            f.last_success.insert(report.schedule, Timestamp::now());
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

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from(
            "# HELP callsync_passes_total Passes by kind and result.\n# TYPE callsync_passes_total counter\n",
        );
        for ((kind, result), n) in &f.passes {
            let _ = writeln!(
                out,
                "callsync_passes_total{{kind=\"{kind}\",result=\"{result}\"}} {n}"
            );
        }
        let counters = [
            ("callsync_pages_total", "Pages of calls read.", f.pages),
            (
                "callsync_calls_written_total",
                "Calls written (new or changed).",
                f.calls_written,
            ),
            ("callsync_retries_total", "Requests retried.", f.retries),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP callsync_throttled_seconds_total Time requests waited for the shared limiter (which slows down when the service answers 429).\n# TYPE callsync_throttled_seconds_total counter\ncallsync_throttled_seconds_total {:.3}",
            f.throttled_ms as f64 / 1000.0
        );
        let _ = writeln!(
            out,
            "# HELP callsync_requests_total Responses from the service by HTTP status.\n# TYPE callsync_requests_total counter"
        );
        for (status, n) in &f.requests {
            let _ = writeln!(out, "callsync_requests_total{{status=\"{status}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP callsync_last_success_timestamp_seconds When the schedule last completed a pass.\n# TYPE callsync_last_success_timestamp_seconds gauge"
        );
        for (schedule, at) in &f.last_success {
            let _ = writeln!(
                out,
                "callsync_last_success_timestamp_seconds{{schedule=\"{schedule}\"}} {}",
                seconds(*at)
            );
        }
        let _ = writeln!(
            out,
            "# HELP callsync_lag_seconds How far the schedule's cursor is behind the service's clock (negative: ahead of it).\n# TYPE callsync_lag_seconds gauge"
        );
        for (schedule, (lag, at)) in &f.lag {
            // The lag the pass ended with, grown by the time since: measured on the
            // service's clock, so skew between the two machines does not show.
            let _ = writeln!(
                out,
                "callsync_lag_seconds{{schedule=\"{schedule}\"}} {:.3}",
                lag + at.elapsed().as_secs_f64()
            );
        }
        let _ = writeln!(
            out,
            "# HELP callsync_behind_passes Passes in a row that ended behind the service's clock with changes waiting.\n# TYPE callsync_behind_passes gauge"
        );
        for schedule in &self.schedules {
            let n = f.behind.get(schedule).map_or(0, |b| b.0);
            let _ = writeln!(out, "callsync_behind_passes{{schedule=\"{schedule}\"}} {n}");
        }
        out
    }

    /// Schedules without progress for `STALE_INTERVALS` sync ticks.
    /// Schedules falling behind, each with what slowed its latest pass down.
    pub fn falling_behind(&self) -> Vec<(Uuid, Vec<&'static str>)> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        f.behind
            .iter()
            .filter(|(_, (n, _))| *n >= FALLING_BEHIND_PASSES)
            .map(|(s, (_, why))| (*s, why.clone()))
            .collect()
    }

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

fn seconds(t: Timestamp) -> String {
    format!("{:.3}", t.unix_nanos() as f64 / 1e9)
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
    // TCP_NODELAY: a response written in two parts must not wait for the scraper's ACK.
    let listener = tokio::net::TcpListener::bind(listen)
        .await?
        .tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
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
    let stopped = stop.clone().cancelled_owned();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await;
    });
    Ok(Server { stop, task })
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    clock: TickClock,
    warehouse: WarehousePlace,
}

async fn metrics_page(State(health): State<Health>) -> String {
    health.metrics.render()
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
            metrics: Arc::new(Metrics::new(vec![Uuid::from_u128(1)])),
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
