//! The daemon's HTTP endpoints (`[metrics] listen`): `/metrics`, the figures `metrics.rs`
//! keeps, and `/healthz`, a verdict drawn from them. The connections are `listener.rs`'s.
//!
//! `/healthz` fails (503) when a schedule has neither completed a pass nor committed a page
//! for `STALE_INTERVALS` sync ticks in a row — counted in ticks, not seconds, so a cron with
//! long quiet hours is not flagged overnight —, when a schedule is falling behind
//! (`FALLING_BEHIND_PASSES` passes in a row ended behind), when the scheduler itself has
//! stopped firing, or when the warehouse was deleted, replaced or made read-only (or, on
//! PostgreSQL, its server does not answer). Ticks a
//! schedule sits out because the daemon chose to — its previous pass (a long reconciliation,
//! say) still runs, or waits for a pass slot (as many as the limit in flight, at most
//! `sync.concurrency`) — do not count: such a
//! schedule is "busy since …", and turns bad only when its running pass is itself late. A
//! running pass is judged by its progress — requests answered, pages committed — against its
//! own cadence: late when it has gone more sync ticks without either than `STALE_INTERVALS`
//! and than twice its slowest stretch so far (a Retry-After pause, a slow page under a rate
//! limit), at most `LATE_PASS_TICKS` (ticks it waited for a slot not counted). A slow but
//! moving reconciliation is healthy, however long it takes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::exposition;
use super::listener;
use super::metrics::{Busy, Metrics, STALE_INTERVALS, Stale};
use super::scheduler::{STALL_GRACE, TickClock};
use crate::warehouse::{Backend, FALLING_BEHIND_PASSES, Watch};

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
/// at once, not only after the next tick; so is a PostgreSQL server (`postgres`) that does
/// not answer (`Backend::answers`).
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    clock: TickClock,
    warehouse: Arc<dyn Watch>,
    backend: Arc<dyn Backend>,
) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /metrics and /healthz");
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .with_state(EndpointState {
            metrics,
            clock,
            warehouse,
            backend,
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
struct EndpointState {
    metrics: Arc<Metrics>,
    clock: TickClock,
    /// Where the warehouse was opened, checked on every request.
    warehouse: Arc<dyn Watch>,
    /// The warehouse, asked on every request whether it answers.
    backend: Arc<dyn Backend>,
}

/// OpenMetrics when the scrape asks for it (Prometheus does, first), else the text format
/// 0.0.4 (`promtool check metrics`, curl, older scrapers).
async fn metrics_page(
    State(health): State<EndpointState>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let body = health
        .metrics
        .render(std::path::Path::new(&health.backend.name()));
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    if exposition::wants_openmetrics(accept) {
        ([(header::CONTENT_TYPE, exposition::OPENMETRICS)], body)
    } else {
        (
            [(header::CONTENT_TYPE, exposition::TEXT)],
            exposition::to_text_format(&body),
        )
    }
}

/// What `/healthz` says without counting it against the daemon: a tie group held by fewer
/// passes than [`FALLING_BEHIND_PASSES`] (the next pass may prove it), and calls set aside
/// (kept, not lost, and blocking nothing).
fn said_not_counted(
    out: &mut String,
    metrics: &Metrics,
    holding: &[(Uuid, i64, crate::sync::HeldGroup)],
) {
    for (schedule, passes, group) in holding.iter().filter(|h| h.1 < FALLING_BEHIND_PASSES) {
        let _ = writeln!(
            out,
            "holding a tie group for {passes} pass(es): {}: {}",
            metrics.display(*schedule),
            held_group_text(group)
        );
    }
    for (schedule, calls) in metrics.setting_aside() {
        let _ = writeln!(
            out,
            "calls set aside: {}: {calls} listed calls did not fit or conflict with another schedule's (set_aside_calls)",
            metrics.display(schedule)
        );
    }
}

async fn healthz(State(health): State<EndpointState>) -> (StatusCode, String) {
    if let Err(lost) = health.warehouse.check() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{lost}\n"));
    }
    if let Err(unreachable) = health.backend.answers().await {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{unreachable}\n"));
    }
    if let Some(due) = health.clock.missed(STALL_GRACE) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the scheduler has not fired since {due}: no passes are starting\n"),
        );
    }
    let metrics = &health.metrics;
    let mut problems = String::new();
    let busy: BTreeMap<Uuid, Busy> = metrics.busy().into_iter().collect();
    let (late, stale): (Vec<Stale>, Vec<Stale>) = metrics
        .stale()
        .into_iter()
        .partition(|s| busy.contains_key(&s.schedule));
    if !stale.is_empty() {
        let list: Vec<String> = stale.iter().map(|s| metrics.display(s.schedule)).collect();
        let _ = writeln!(
            problems,
            "no progress for {STALE_INTERVALS} sync ticks: {}",
            list.join(", ")
        );
    }
    for stale in late {
        let Some(busy) = busy.get(&stale.schedule) else {
            continue;
        };
        let _ = writeln!(
            problems,
            "late: {}: its {} pass, running since {}, has had no request answered and no page committed for {} sync ticks (its slowest stretch before: {})",
            metrics.display(stale.schedule),
            busy.kind,
            busy.since.truncated(1_000_000_000).to_rfc3339(),
            stale.ticks,
            stale.slowest
        );
    }
    for (schedule, why) in metrics.falling_behind() {
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" (slowed by {})", why.join(", "))
        };
        let _ = writeln!(
            problems,
            "falling behind: {}: {FALLING_BEHIND_PASSES} or more passes in a row ended behind the service's clock{why}",
            metrics.display(schedule)
        );
    }
    let holding = metrics.holding();
    for (schedule, passes, group) in holding.iter().filter(|h| h.1 >= FALLING_BEHIND_PASSES) {
        let _ = writeln!(
            problems,
            "holding a tie group: {}: {passes} passes in a row could not prove {}",
            metrics.display(*schedule),
            held_group_text(group)
        );
    }
    let status = if problems.is_empty() {
        problems.push_str("ok\n");
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    said_not_counted(&mut problems, metrics, &holding);
    // What the daemon chose to do is said, never counted against it.
    for (schedule, busy) in &busy {
        let doing = if busy.running {
            "pass running"
        } else {
            "pass waiting for a slot (sync.concurrency)"
        };
        let _ = writeln!(
            problems,
            "busy since {}: {}: {} {doing}",
            busy.since.truncated(1_000_000_000).to_rfc3339(),
            metrics.display(*schedule),
            busy.kind
        );
    }
    (status, problems)
}

/// A held group's size, instant and age, in words.
fn held_group_text(group: &crate::sync::HeldGroup) -> String {
    let age = crate::service::Timestamp::now()
        .secs_since(group.at)
        .max(0.0);
    format!(
        "the {} calls sharing updated_at {} ({:.0}s old; the checkpoint stays there): {}",
        group.size,
        group.at.to_rfc3339(),
        age,
        group.why
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::metrics::{Names, report};
    use crate::sync::PassResult;
    use crate::warehouse::sqlite::Warehouse;
    use crate::warehouse::{Destination, ProcessIdentity};

    /// The SQLite warehouse at `path`, as configured.
    fn backend(path: &std::path::Path) -> Arc<dyn Backend> {
        crate::warehouse::open(&crate::config::WarehouseConfig {
            destination: crate::config::DestinationConfig::Sqlite {
                path: path.to_owned(),
            },
            busy_timeout: Duration::from_secs(5),
            keep_runs: None,
            timezone: chrono_tz::UTC,
        })
        .unwrap()
    }

    /// A warehouse in a temporary directory, and the metrics of the one schedule it syncs.
    fn one_schedule() -> (tempfile::TempDir, Warehouse, Uuid, Metrics) {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = Warehouse::open(&dir.path().join("w.db"), Duration::from_secs(5)).unwrap();
        let schedule = Uuid::from_u128(7);
        let metrics = Metrics::new(
            vec![schedule],
            Names::new(),
            &["incremental"],
            &ProcessIdentity::this_process(None),
        );
        (dir, warehouse, schedule, metrics)
    }

    fn health_of(metrics: Metrics, warehouse: &Warehouse) -> EndpointState {
        EndpointState {
            metrics: Arc::new(metrics),
            clock: TickClock::new(&crate::config::CronSchedule::parse("* * * * * *").unwrap()),
            warehouse: warehouse.watch(),
            backend: backend(warehouse.path()),
        }
    }

    #[tokio::test]
    async fn a_busy_schedule_is_said_busy_and_bad_only_when_its_running_pass_is_late() {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = Warehouse::open(&dir.path().join("w.db"), Duration::from_secs(5)).unwrap();
        let (long, waiting) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let names = Names::from([(long, "Renewals".to_owned())]);
        let metrics = Metrics::new(
            vec![long, waiting],
            names,
            &["incremental", "reconcile"],
            &ProcessIdentity::this_process(None),
        );
        metrics.pass_started(long, "reconcile");
        metrics.pass_running(long);
        // Waits for the slot `long` holds, for as many ticks as it takes.
        metrics.pass_started(waiting, "incremental");
        let health = health_of(metrics, &warehouse);
        let since = |s: Uuid| {
            let busy: BTreeMap<Uuid, Busy> = health.metrics.busy().into_iter().collect();
            busy[&s].since.truncated(1_000_000_000).to_rfc3339()
        };
        let busy_lines = format!(
            "busy since {}: Renewals ({long}): reconcile pass running\n\
             busy since {}: {waiting}: incremental pass waiting for a slot (sync.concurrency)\n",
            since(long),
            since(waiting)
        );
        // The reconciliation commits a page every tick: healthy, however many ticks it takes.
        for _ in 0..10 {
            health.metrics.progressed(long);
            health.metrics.sync_tick();
        }
        assert_eq!(
            healthz(State(health.clone())).await,
            (StatusCode::OK, format!("ok\n{busy_lines}"))
        );
        // Its pages stop: late once STALE_INTERVALS ticks have passed without one.
        for _ in 0..STALE_INTERVALS - 1 {
            health.metrics.sync_tick();
        }
        assert_eq!(healthz(State(health.clone())).await.0, StatusCode::OK);
        health.metrics.sync_tick();
        assert_eq!(
            healthz(State(health.clone())).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "late: Renewals ({long}): its reconcile pass, running since {}, has had no request answered and no page committed for {STALE_INTERVALS} sync ticks (its slowest stretch before: 0)\n{busy_lines}",
                    since(long)
                )
            )
        );
        // It ends: both schedules are free, the waiting one has not aged meanwhile.
        health.metrics.record(&report(long, PassResult::Completed));
        health.metrics.pass_gone(waiting);
        assert_eq!(
            healthz(State(health)).await,
            (StatusCode::OK, "ok\n".to_owned())
        );
    }

    /// Calls set aside are said in `/healthz` (never a failure: they are kept, and block
    /// nothing) and counted in `/metrics`, as the latest pass that counted them saw; a count
    /// of 0 clears the line, a pass that counted nothing (an idle one) leaves both alone.
    #[tokio::test]
    async fn calls_set_aside_are_said_and_counted_never_a_failure() {
        let (dir, warehouse, schedule, metrics) = one_schedule();
        let counted = |n| {
            let mut r = report(schedule, PassResult::Completed);
            r.set_aside = n;
            r
        };
        let health = health_of(metrics, &warehouse);
        health.metrics.record(&counted(Some(3)));
        health.metrics.record(&counted(None));
        let (status, body) = healthz(State(health.clone())).await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::OK,
                format!("ok\ncalls set aside: {schedule}: 3 listed calls did not fit or conflict with another schedule's (set_aside_calls)\n").as_str()
            )
        );
        let series = format!("callsync_set_aside_calls{{schedule=\"{schedule}\"}}");
        let rendered = health.metrics.render(dir.path());
        assert!(rendered.contains(&format!("{series} 3")), "{rendered}");
        health.metrics.record(&counted(Some(0)));
        assert_eq!(
            healthz(State(health.clone())).await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        let rendered = health.metrics.render(dir.path());
        assert!(rendered.contains(&format!("{series} 0")), "{rendered}");
    }

    /// A schedule whose passes hold a tie group: said from the first, a problem once
    /// `FALLING_BEHIND_PASSES` passes in a row held one, with the group's size and instant
    /// in `/healthz` and in the metrics; a pass that proves it clears both.
    #[tokio::test]
    async fn a_held_tie_group_is_shown_and_fails_healthz_once_held_pass_after_pass() {
        let (dir, warehouse, schedule, metrics) = one_schedule();
        let at = crate::service::Timestamp::parse("2026-03-01T12:00:00Z").unwrap();
        let group = crate::sync::HeldGroup {
            at,
            size: 948,
            read: 940,
            why: crate::sync::cursor::Incomplete::KeptChanging { windows: 4 },
        };
        let holding = || {
            let mut r = report(schedule, PassResult::Completed);
            r.held_groups = vec![group];
            r
        };
        let health = health_of(metrics, &warehouse);
        health.metrics.record(&holding());
        let (status, body) = healthz(State(health.clone())).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body.starts_with("ok\nholding a tie group for 1 pass(es): ")
                && body.contains("the 948 calls sharing updated_at 2026-03-01T12:00:00Z ("),
            "{body}"
        );
        let rendered = health.metrics.render(dir.path());
        assert!(
            rendered.contains(&format!(
                "callsync_held_tie_group_calls{{schedule=\"{schedule}\"}} 948"
            )),
            "{rendered}"
        );
        for _ in 1..FALLING_BEHIND_PASSES {
            health.metrics.record(&holding());
        }
        let (status, body) = healthz(State(health.clone())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            body.starts_with(&format!(
                "holding a tie group: {schedule}: {FALLING_BEHIND_PASSES} passes in a row could not prove the 948 calls"
            )),
            "{body}"
        );
        // The next pass proves it.
        health
            .metrics
            .record(&report(schedule, PassResult::Completed));
        assert_eq!(
            healthz(State(health.clone())).await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        let rendered = health.metrics.render(dir.path());
        assert!(
            rendered.contains(&format!(
                "callsync_held_tie_group_calls{{schedule=\"{schedule}\"}} 0"
            )),
            "{rendered}"
        );
    }

    #[tokio::test]
    async fn healthz_checks_the_warehouse_itself_on_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let warehouse = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        let health = EndpointState {
            metrics: Arc::new(Metrics::new(
                vec![Uuid::from_u128(1)],
                Names::new(),
                &["incremental"],
                &ProcessIdentity::this_process(None),
            )),
            clock: TickClock::new(&crate::config::CronSchedule::parse("* * * * * *").unwrap()),
            warehouse: warehouse.watch(),
            backend: backend(&path),
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
