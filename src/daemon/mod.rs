//! The daemon behind `callsync run`: passes on a cron, never overlapping, until shutdown.
//!
//! [`run`] takes the shutdown signal as a future (the binary passes SIGTERM/SIGINT, tests a
//! channel). It opens the engine, tells systemd READY, runs a pass of every schedule, then
//! one per `sync.cron` tick (and a reconciliation per `sync.reconcile_cron` tick). A tick
//! that finds a schedule's previous pass still running skips it; a failing schedule backs
//! off (after 2, 3, 4 … failures in a row it sits out 1, 3, 7 … up to 31 ticks) without
//! slowing the others. On shutdown it takes no new ticks, lets each running pass commit the
//! page it is writing, and returns within `sync.shutdown_timeout`. The configuration is read
//! once; restart to change it (SIGHUP is logged and ignored, see `cli::run_daemon`).

mod metrics;
mod notify;
mod scheduler;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::Config;
use crate::sync::{Engine, PassPlan, PassReport, Quiet, SyncError};

pub use scheduler::{SchedulerError, Tick};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    #[error("cannot serve metrics on {listen}: {source}; check [metrics] listen")]
    Metrics {
        listen: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Ticks a failing schedule sits out at most.
const MAX_BACKOFF_TICKS: u32 = 32;

/// Each schedule's place in the daemon: running now, and how long it sits out.
#[derive(Debug, Default)]
struct Slot {
    running: bool,
    failures: u32,
    skip_ticks: u32,
}

type Slots = Arc<Mutex<HashMap<Uuid, Slot>>>;

/// Runs until `shutdown` completes. Errors only when it cannot start at all.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let engine = Arc::new(Engine::start(&config)?);
    let clock = scheduler::TickClock::new(&config.sync.cron)?;
    let (tick_tx, mut ticks) = mpsc::channel(4);
    let mut cron = scheduler::start(
        &config.sync.cron,
        config.sync.reconcile_cron.as_deref(),
        tick_tx.clone(),
        clock.clone(),
    )
    .await?;
    let metrics = Arc::new(metrics::Metrics::new(
        config.sync.schedules.clone(),
        clock.interval(),
    ));
    let cancel = CancellationToken::new();
    if let Some(listen) = config.metrics.listen {
        metrics::serve(listen, metrics.clone(), cancel.clone())
            .await
            .map_err(|source| DaemonError::Metrics { listen, source })?;
    }
    notify::ready();
    tracing::info!(
        schedules = config.sync.schedules.len(),
        cron = %config.sync.cron,
        reconcile_cron = config.sync.reconcile_cron.as_deref().unwrap_or("off"),
        "callsync daemon started"
    );
    let slots: Slots = Arc::new(Mutex::new(
        config
            .sync
            .schedules
            .iter()
            .map(|s| (*s, Slot::default()))
            .collect(),
    ));
    let mut passes = JoinSet::new();
    // A pass of every schedule at start-up.
    let _ = tick_tx.try_send(Tick::Sync);
    let watchdog_every = notify::watchdog_interval().map(|d| d / 2);
    let mut heartbeat = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(30)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(tick) = ticks.recv() => {
                let plan = match tick {
                    Tick::Sync => PassPlan::incremental(&config.sync),
                    Tick::Reconcile => PassPlan::reconcile(config.sync.reconcile_window),
                };
                start_due_passes(&engine, &slots, &plan, &cancel, &mut passes);
            }
            Some(done) = passes.join_next(), if !passes.is_empty() => {
                if let Ok(report) = done {
                    settle(&slots, &report);
                    metrics.record(&report);
                }
            }
            _ = heartbeat.tick() => match clock.missed(Duration::from_secs(30)) {
                // Fed only while ticks really fire: a stalled scheduler gets us restarted.
                None => if watchdog_every.is_some() { notify::watchdog() },
                Some(due) => tracing::error!(%due, "the scheduler missed a tick; not feeding the watchdog"),
            },
        }
    }
    tracing::info!(
        running = passes.len(),
        "shutting down: letting running passes commit their page"
    );
    notify::stopping();
    let _ = cron.shutdown().await;
    cancel.cancel();
    let drained = tokio::time::timeout(config.sync.shutdown_timeout, async {
        while let Some(done) = passes.join_next().await {
            if let Ok(report) = done {
                settle(&slots, &report);
                metrics.record(&report);
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "shutdown timeout reached with passes still running; their last committed page stands"
        );
        passes.abort_all();
    }
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.close().await;
    }
    Ok(())
}

/// Starts a pass for every schedule that is neither running nor backing off.
fn start_due_passes(
    engine: &Arc<Engine>,
    slots: &Slots,
    plan: &PassPlan,
    cancel: &CancellationToken,
    passes: &mut JoinSet<PassReport>,
) {
    let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
    for (schedule, slot) in slots.iter_mut() {
        if slot.running {
            tracing::warn!(%schedule, kind = plan.kind.as_str(), "tick skipped: the previous pass is still running");
            continue;
        }
        if slot.skip_ticks > 0 {
            slot.skip_ticks -= 1;
            tracing::info!(%schedule, failures = slot.failures, ticks_left = slot.skip_ticks, "tick skipped: backing off after failures");
            continue;
        }
        slot.running = true;
        let engine = engine.clone();
        let plan = plan.clone();
        let cancel = cancel.clone();
        let schedule = *schedule;
        passes.spawn(async move { engine.run_pass(schedule, &plan, &cancel, &Quiet).await });
    }
}

/// Records a finished pass: frees the slot, and sets or clears the backoff.
fn settle(slots: &Slots, report: &PassReport) {
    let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slot) = slots.get_mut(&report.schedule) else {
        return;
    };
    slot.running = false;
    match &report.result {
        crate::sync::PassResult::Failed(_) => {
            slot.failures += 1;
            slot.skip_ticks = backoff_ticks(slot.failures);
        }
        crate::sync::PassResult::Completed => {
            if slot.failures > 0 {
                tracing::info!(schedule = %report.schedule, "schedule recovered; back to the normal cadence");
            }
            slot.failures = 0;
            slot.skip_ticks = 0;
        }
        crate::sync::PassResult::Interrupted | crate::sync::PassResult::Skipped(_) => {}
    }
    notify::status(&format!(
        "last pass: {} {} {}, {} calls written",
        report.schedule,
        report.kind.as_str(),
        report.result,
        report.stats.calls_written
    ));
}

/// Ticks to sit out after `failures` failures in a row: 0, 1, 3, 7 … capped.
fn backoff_ticks(failures: u32) -> u32 {
    (1u32 << failures.saturating_sub(1).min(5))
        .saturating_sub(1)
        .min(MAX_BACKOFF_TICKS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let ticks: Vec<u32> = (1..=8).map(backoff_ticks).collect();
        assert_eq!(ticks, vec![0, 1, 3, 7, 15, 31, 31, 31]);
    }

    #[test]
    fn a_stalled_clock_is_noticed() {
        let clock = scheduler::TickClock::new("* * * * * *").unwrap();
        assert_eq!(clock.missed(Duration::from_secs(5)), None);
        *clock_last(&clock) = chrono::Utc::now() - chrono::Duration::seconds(30);
        assert!(clock.missed(Duration::from_secs(5)).is_some());
        clock.fired();
        assert_eq!(clock.missed(Duration::from_secs(5)), None);
    }

    fn clock_last(
        clock: &scheduler::TickClock,
    ) -> std::sync::MutexGuard<'_, chrono::DateTime<chrono::Utc>> {
        clock.last_for_tests()
    }
}
