//! Prometheus metrics and `/healthz` for the daemon (`[metrics] listen`).
//!
//! Figures come from the pass reports the daemon already receives: passes by kind and result,
//! pages, calls written, requests by status, retries, and per schedule the last success and
//! the lag (how far the cursor is behind now). `/healthz` fails (503) when a schedule has not
//! completed a pass for `STALE_INTERVALS` cron intervals.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::Timestamp;
use crate::sync::{PassReport, PassResult};

/// Cron intervals without a completed pass after which a schedule is unhealthy.
pub const STALE_INTERVALS: u32 = 3;

#[derive(Default)]
struct Figures {
    passes: BTreeMap<(&'static str, &'static str), u64>,
    pages: u64,
    calls_written: u64,
    requests: BTreeMap<u16, u64>,
    retries: u64,
    last_success: BTreeMap<Uuid, Timestamp>,
    position: BTreeMap<Uuid, Timestamp>,
}

pub struct Metrics {
    figures: Mutex<Figures>,
    schedules: Vec<Uuid>,
    started: Timestamp,
    /// A schedule is stale after this long without a completed pass.
    stale_after: Duration,
}

impl Metrics {
    pub fn new(schedules: Vec<Uuid>, cron_interval: Duration) -> Self {
        Metrics {
            figures: Mutex::default(),
            schedules,
            started: Timestamp::now(),
            stale_after: cron_interval * STALE_INTERVALS,
        }
    }

    pub fn record(&self, report: &PassReport) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        let result = match report.result {
            PassResult::Completed => "completed",
            PassResult::Interrupted => "interrupted",
            PassResult::Skipped(_) => "skipped",
            PassResult::Failed(_) => "failed",
        };
        *f.passes.entry((report.kind.as_str(), result)).or_default() += 1;
        f.pages += report.stats.pages;
        f.calls_written += report.stats.calls_written;
        f.retries += report.stats.retries;
        for (status, n) in &report.statuses {
            *f.requests.entry(*status).or_default() += n;
        }
        if report.result == PassResult::Completed {
            f.last_success.insert(report.schedule, Timestamp::now());
        }
        if let Some(position) = report.position {
            f.position.insert(report.schedule, position);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self, now: Timestamp) -> String {
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
            "# HELP callsync_lag_seconds How far the schedule's cursor is behind now.\n# TYPE callsync_lag_seconds gauge"
        );
        for (schedule, at) in &f.position {
            let _ = writeln!(
                out,
                "callsync_lag_seconds{{schedule=\"{schedule}\"}} {:.3}",
                now.since(*at).as_secs_f64()
            );
        }
        out
    }

    /// Schedules without a completed pass for too long.
    pub fn stale(&self, now: Timestamp) -> Vec<Uuid> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.schedules
            .iter()
            .filter(|s| {
                let since = f.last_success.get(s).copied().unwrap_or(self.started);
                now.since(since) > self.stale_after
            })
            .copied()
            .collect()
    }
}

fn seconds(t: Timestamp) -> String {
    format!("{:.3}", t.unix_nanos() as f64 / 1e9)
}

/// Serves `/metrics` and `/healthz` on `listen` until `stop`.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /metrics and /healthz");
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .with_state(metrics);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(())
}

async fn metrics_page(State(metrics): State<Arc<Metrics>>) -> String {
    metrics.render(Timestamp::now())
}

async fn healthz(State(metrics): State<Arc<Metrics>>) -> (StatusCode, String) {
    let stale = metrics.stale(Timestamp::now());
    if stale.is_empty() {
        (StatusCode::OK, "ok\n".into())
    } else {
        let list: Vec<String> = stale.iter().map(Uuid::to_string).collect();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not synced for {} cron intervals: {}\n",
                STALE_INTERVALS,
                list.join(", ")
            ),
        )
    }
}
