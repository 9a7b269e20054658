//! The daemon behind `callsync run`: passes on a cron, never overlapping, until shutdown.
//!
//! [`run`] takes the shutdown signal as a future (the binary passes SIGTERM/SIGINT, tests a
//! channel); [`run_with`] also takes where its ticks come from (the cron, or a test's
//! [`TickDriver`]). It opens the engine, tells systemd READY, logs its start (with a warning
//! for each credential that would cross the network unencrypted), runs a pass of every schedule,
//! then one per `sync.cron` tick (and a reconciliation per `sync.reconcile_cron` tick). A tick
//! that finds a schedule's previous pass still running skips it; a failing schedule backs
//! off (after 2, 3, 4 … failures in a row it sits out 1, 3, 7 … up to 31 ticks) without
//! slowing the others. On shutdown it takes no new ticks, lets each running pass commit the
//! page it is writing, and returns within `sync.shutdown_timeout`. Each tick first checks
//! that the warehouse's path still names the file it writes into and that it can write it:
//! if it was deleted, replaced or made read-only, the daemon stops the same way, then
//! returns an error (`/healthz`, which checks it on every request, answers 503 until then). The configuration is read once; restart to change
//! it (SIGHUP is logged and ignored: `cli/signals.rs`).

mod backup;
mod dispatcher;
mod endpoint;
mod exposition;
mod listener;
mod metrics;
mod notify;
mod scheduler;
mod slot;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, CronSchedule};
use crate::sync::{Engine, Mode, SyncError};
use crate::warehouse::WarehouseError;

use backup::Backups;
use dispatcher::Dispatcher;

pub use backup::{BackupError, check_dir as check_backup_dir};
pub use scheduler::{
    SchedulerError, Tick, TickDriver, TickSource, firings_between, nth_firing_after,
};
pub use slot::backoff_ticks;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// The warehouse was deleted, replaced or made read-only while the daemon ran: it exits
    /// non-zero, so systemd restarts it on whatever file the path names now (and a start-up
    /// on a read-only warehouse fails naming it).
    #[error(transparent)]
    WarehouseUnusable(WarehouseError),
    /// The cause is in the message, before the advice, so it is not also a `source()`.
    #[error("cannot serve metrics on {listen}: {cause}; check [metrics] listen")]
    Metrics {
        listen: std::net::SocketAddr,
        cause: std::io::Error,
    },
}

impl DaemonError {
    /// The daemon could not start because the configuration is wrong: exit code 2, which
    /// systemd does not restart (`RestartPreventExitStatus=2`).
    pub fn is_configuration(&self) -> bool {
        match self {
            DaemonError::Sync(err) => err.is_configuration(),
            _ => false,
        }
    }
}

/// The kinds of pass the daemon runs: their metrics series exist from start-up.
fn pass_kinds(config: &Config) -> &'static [&'static str] {
    if config.sync.reconcile_cron.is_some() {
        &["incremental", "reconcile"]
    } else {
        &["incremental"]
    }
}

/// Runs on the configured crons until `shutdown` completes. Errors only when it cannot start
/// at all, or when its warehouse becomes unusable.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    run_with(config, TickSource::Cron, shutdown).await
}

/// [`run`], with its ticks from `source`.
pub async fn run_with(
    config: Config,
    source: TickSource,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    // The one place the daemon chooses its back end.
    let backend = crate::warehouse::open(&config.warehouse).map_err(SyncError::from)?;
    let engine = Arc::new(Engine::start(&config, backend.as_ref(), Mode::Write)?);
    let clock = scheduler::TickClock::new(&config.sync.cron);
    let mut ticks = scheduler::Ticks::start(
        source,
        &config.sync.cron,
        config.sync.reconcile_cron.as_ref(),
        config.backup.as_ref().map(|b| &b.cron),
        clock.clone(),
    )
    .await?;
    let metrics = daemon_metrics(&config, &engine);
    engine.observe_requests(metrics.clone());
    let cancel = CancellationToken::new();
    // Stopped last, once passes have stopped: `/healthz` answers (503 when the warehouse is
    // lost) until `run` returns.
    let server = match config.metrics.listen {
        Some(listen) => Some(
            endpoint::serve(
                listen,
                metrics.clone(),
                clock.clone(),
                engine.warehouse_watch(),
                backend.clone(),
            )
            .await
            .map_err(|cause| DaemonError::Metrics { listen, cause })?,
        ),
        None => None,
    };
    notify::ready();
    log_started(&config, &engine);
    let mut dispatcher = Dispatcher::new(engine.clone(), &config, metrics.clone(), cancel.clone());
    let mut backups = Backups::new(config.backup.clone(), metrics.clone());
    let watchdog_every = notify::watchdog_interval().map(|d| d / 2);
    let mut heartbeat = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(30)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    let lost = loop {
        tokio::select! {
            () = &mut shutdown => break None,
            // Before any pass starts: the warehouse is still the file opened, and writable.
            Some((tick, started)) = ticks.next() => match engine.check_warehouse() {
                Ok(()) if tick == Tick::Backup => {
                    backups.on_tick(&backend);
                    started.reply(Vec::new());
                }
                Ok(()) => started.reply(dispatcher.on_tick(tick)),
                Err(err) => break Some(err),
            },
            Some(done) = dispatcher.passes.join_next_with_id(), if !dispatcher.passes.is_empty() => {
                dispatcher.pass_ended(done, &mut ticks);
                // A pass that failed because the warehouse went stops the daemon now, not at
                // the next tick.
                if let Err(err) = engine.check_warehouse() {
                    break Some(err);
                }
            }
            _ = heartbeat.tick() => match clock.missed(scheduler::STALL_GRACE) {
                // Fed only while ticks really fire: a stalled scheduler gets us restarted.
                None => if watchdog_every.is_some() { notify::watchdog() },
                Some(due) => tracing::error!(%due, "the scheduler missed a tick; not feeding the watchdog"),
            },
        }
    };
    if let Some(err) = &lost {
        tracing::error!(error = %err, "stopping: the warehouse cannot be used any more");
    }
    tracing::info!(
        running = dispatcher.passes.len(),
        "shutting down: letting running passes commit their page"
    );
    notify::stopping();
    ticks.stop().await;
    cancel.cancel();
    drain(&mut dispatcher, &mut ticks, config.sync.shutdown_timeout).await;
    backups.finish(config.sync.shutdown_timeout).await;
    drop(dispatcher);
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.close().await;
    }
    if let Some(server) = server {
        server.shut_down().await;
    }
    match lost {
        Some(err) => Err(DaemonError::WarehouseUnusable(err)),
        None => Ok(()),
    }
}

/// The daemon's metrics: its schedules, pass kinds and walker, and the newest backup.
fn daemon_metrics(config: &Config, engine: &Engine) -> Arc<metrics::Metrics> {
    let metrics = metrics::Metrics::new(
        config.sync.schedules.clone(),
        config.sync.schedule_names.clone(),
        pass_kinds(config),
        engine.walker(),
    );
    Arc::new(match &config.backup {
        Some(backup) => metrics.with_backups(backup::newest(&backup.dir)),
        None => metrics,
    })
}

fn log_started(config: &Config, engine: &Engine) {
    tracing::info!(
        schedules = config.sync.schedules.len(),
        cron = %config.sync.cron,
        reconcile_cron = config
            .sync
            .reconcile_cron
            .as_ref()
            .map_or("off", CronSchedule::as_str),
        concurrency = config.sync.concurrency,
        walker = %engine.walker(),
        "callsync daemon started"
    );
    for in_clear in config.api.credentials_in_clear() {
        tracing::warn!("{in_clear}");
    }
}

/// Lets the running passes commit their page, for at most `patience`; aborts those still
/// running then (their last committed page stands).
async fn drain(dispatcher: &mut Dispatcher, ticks: &mut scheduler::Ticks, patience: Duration) {
    let drained = tokio::time::timeout(patience, async {
        while let Some(done) = dispatcher.passes.join_next_with_id().await {
            dispatcher.pass_ended(done, ticks);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "shutdown timeout reached with passes still running; their last committed page stands"
        );
        dispatcher.passes.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_clock_is_noticed() {
        let clock = scheduler::TickClock::new(&CronSchedule::parse("* * * * * *").unwrap());
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
