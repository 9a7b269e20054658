//! The daemon behind `callsync run`: passes on a cron, never overlapping, until shutdown.
//!
//! [`run`] takes the shutdown signal as a future (the binary passes SIGTERM/SIGINT, tests a
//! channel); [`run_with`] also takes where its ticks come from (the cron, or a test's
//! [`TickDriver`]). It opens the engine, tells systemd READY, runs a pass of every schedule,
//! then one per `sync.cron` tick (and a reconciliation per `sync.reconcile_cron` tick). A tick
//! that finds a schedule's previous pass still running skips it; a failing schedule backs
//! off (after 2, 3, 4 … failures in a row it sits out 1, 3, 7 … up to 31 ticks) without
//! slowing the others. On shutdown it takes no new ticks, lets each running pass commit the
//! page it is writing, and returns within `sync.shutdown_timeout`. Each tick first checks
//! that the warehouse's path still names the file it writes into and that it can write it:
//! if it was deleted, replaced or made read-only, the daemon stops the same way, then
//! returns an error (`/healthz`, which checks it on every request, answers 503 until then). The configuration is read once; restart to change
//! it (SIGHUP is logged and ignored, see `cli::run_daemon`).

mod backup;
mod listener;
mod metrics;
mod notify;
mod scheduler;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::ErrorKind;
use crate::config::{Config, CronSchedule};
use crate::service::Timestamp;
use crate::sync::{Engine, PassPlan, PassProgress, PassReport, PassResult, SyncError};
use crate::warehouse::{RunKind, WarehouseError};

pub use scheduler::{SchedulerError, Tick, TickDriver, TickSource, firings_between};

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

/// A pass task's end, as the `JoinSet` gives it.
type PassJoin = Result<(tokio::task::Id, PassReport), tokio::task::JoinError>;

/// Ticks a failing schedule sits out at most.
const MAX_BACKOFF_TICKS: u32 = 32;

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
    let engine = Arc::new(Engine::start(&config)?);
    let clock = scheduler::TickClock::new(&config.sync.cron);
    let mut ticks = scheduler::Ticks::start(
        source,
        &config.sync.cron,
        config.sync.reconcile_cron.as_ref(),
        config.backup.as_ref().map(|b| &b.cron),
        clock.clone(),
    )
    .await?;
    let metrics = Arc::new(metrics::Metrics::new(
        config.sync.schedules.clone(),
        config.sync.schedule_names.clone(),
        pass_kinds(&config),
        engine.walker(),
    ));
    engine.observe_requests(metrics.clone());
    let cancel = CancellationToken::new();
    // Stopped last, once passes have stopped: `/healthz` answers (503 when the warehouse is
    // lost) until `run` returns.
    let server = match config.metrics.listen {
        Some(listen) => Some(
            metrics::serve(
                listen,
                metrics.clone(),
                clock.clone(),
                engine.warehouse_place(),
            )
            .await
            .map_err(|cause| DaemonError::Metrics { listen, cause })?,
        ),
        None => None,
    };
    notify::ready();
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
    let mut dispatcher = Dispatcher::new(engine.clone(), &config, metrics.clone(), cancel.clone());
    let mut backups = Backups::new(config.backup.clone());
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
                    backups.on_tick(engine.warehouse_path());
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
    let drained = tokio::time::timeout(config.sync.shutdown_timeout, async {
        while let Some(done) = dispatcher.passes.join_next_with_id().await {
            dispatcher.pass_ended(done, &mut ticks);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "shutdown timeout reached with passes still running; their last committed page stands"
        );
        dispatcher.passes.abort_all();
    }
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

/// `[backup]`: a backup on each of its ticks, one at a time, off the daemon's loop (SQLite's
/// online backup reads in one transaction while passes go on writing).
struct Backups {
    config: Option<crate::config::BackupConfig>,
    running: Option<tokio::task::JoinHandle<()>>,
}

impl Backups {
    fn new(config: Option<crate::config::BackupConfig>) -> Self {
        Backups {
            config,
            running: None,
        }
    }

    /// Starts a backup of `warehouse`, unless the previous one still runs.
    fn on_tick(&mut self, warehouse: &std::path::Path) {
        let Some(config) = self.config.clone() else {
            return;
        };
        if self.running.as_ref().is_some_and(|r| !r.is_finished()) {
            tracing::info!("backup tick skipped: the previous backup is still being made");
            return;
        }
        let warehouse = warehouse.to_owned();
        self.running = Some(tokio::task::spawn_blocking(move || {
            let at = crate::service::Timestamp::now();
            match backup::take(&warehouse, &config.dir, config.keep, at) {
                Ok(taken) => tracing::info!(
                    path = %taken.path.display(),
                    bytes = taken.bytes,
                    calls = taken.contents.calls,
                    removed = taken.removed.len(),
                    keep = config.keep,
                    "scheduled backup made and checked (integrity_check ok)"
                ),
                // A person must look: backups are not being made.
                Err(err) => {
                    tracing::error!(error = %crate::error_chain(&err), "scheduled backup failed")
                }
            }
        }));
    }

    /// Waits for a backup being made, `timeout` at most (it cannot be cancelled: a copy
    /// left half-made is removed by the next one's start).
    async fn finish(&mut self, timeout: Duration) {
        if let Some(running) = self.running.take()
            && tokio::time::timeout(timeout, running).await.is_err()
        {
            tracing::warn!("shutdown timeout reached while a scheduled backup was being made");
        }
    }
}

/// Each schedule's place in the daemon.
#[derive(Debug, Default)]
struct Slot {
    /// The kind of the pass running now: passes of one schedule never overlap.
    running: Option<RunKind>,
    /// A reconciliation tick found the schedule busy or backing off: it runs as soon as the
    /// schedule is free, rather than being lost (the sync and reconcile crons often fire in
    /// the same second).
    reconcile_due: bool,
    failures: u32,
    skip_ticks: u32,
}

/// What a tick means for one schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TickDecision {
    Start(RunKind),
    /// A sync tick while a pass runs: skipped, never queued behind it.
    StillRunning(RunKind),
    /// A reconcile tick while the schedule is busy or backing off: it runs when it may.
    ReconcileQueued {
        backing_off: bool,
    },
    /// A sync tick sat out after failures.
    BackingOff {
        failures: u32,
        ticks_left: u32,
    },
    /// A tick that starts no pass (a backup's).
    NoPass,
}

impl Slot {
    /// The daemon's decision for this schedule on a tick; pure, so it is tested without a
    /// clock, a cron or a service.
    fn on_tick(&mut self, tick: Tick) -> TickDecision {
        match (tick, self.running) {
            (Tick::Sync, Some(running)) => TickDecision::StillRunning(running),
            (Tick::Reconcile, Some(_)) => {
                self.reconcile_due = true;
                TickDecision::ReconcileQueued { backing_off: false }
            }
            (Tick::Sync, None) if self.skip_ticks > 0 => {
                self.skip_ticks -= 1;
                TickDecision::BackingOff {
                    failures: self.failures,
                    ticks_left: self.skip_ticks,
                }
            }
            (Tick::Reconcile, None) if self.skip_ticks > 0 => {
                self.reconcile_due = true;
                TickDecision::ReconcileQueued { backing_off: true }
            }
            (Tick::Sync, None) => TickDecision::Start(RunKind::Incremental),
            (Tick::Reconcile, None) => TickDecision::Start(RunKind::Reconcile),
            (Tick::Backup, _) => TickDecision::NoPass,
        }
    }

    /// A pass of this schedule ended with `result`; `true` when a queued reconciliation
    /// should start now.
    fn on_done(&mut self, result: &PassResult) -> bool {
        self.running = None;
        match result {
            PassResult::Failed { .. } => {
                self.failures += 1;
                self.skip_ticks = backoff_ticks(self.failures);
            }
            // Behind is no failure: the pass moved the checkpoint as far as it may, and the
            // next one should start as soon as its tick comes.
            PassResult::Completed | PassResult::Behind => {
                self.failures = 0;
                self.skip_ticks = 0;
            }
            PassResult::Interrupted | PassResult::Skipped(_) => {}
        }
        self.reconcile_due && self.skip_ticks == 0
    }
}

/// Starts passes on ticks and takes their reports: the only owner of the slots.
struct Dispatcher {
    engine: Arc<Engine>,
    incremental: PassPlan,
    reconcile_window: Duration,
    /// Schedules in the configured order (a `BTreeMap` would reorder them).
    slots: Vec<(Uuid, Slot)>,
    /// `sync.concurrency` passes at a time, whatever the number of schedules.
    permits: Arc<Semaphore>,
    passes: JoinSet<PassReport>,
    /// Which schedule each task runs (and the tick that started it), to free its slot even
    /// if the task panicked.
    tasks: HashMap<tokio::task::Id, (Uuid, Option<u64>)>,
    /// The ticks whose passes are still running, by number: each logs one line when its
    /// last pass ends.
    ticks: HashMap<u64, TickTally>,
    /// Ticks taken so far.
    ticks_taken: u64,
    metrics: Arc<metrics::Metrics>,
    cancel: CancellationToken,
    /// `warehouse.keep_runs`; `None` keeps every pass.
    retention: Option<Arc<Retention>>,
}

/// How often, at most, old `sync_runs` rows are looked for.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// `warehouse.keep_runs`: after a pass, at most once every [`RETENTION_EVERY`] (the first
/// pass after start-up included), the daemon forgets the passes that finished longer ago.
struct Retention {
    keep: Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Retention {
    /// Whether it is time to look again; if so, the time is taken.
    fn due(&self) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        if last.is_some_and(|at| at.elapsed() < RETENTION_EVERY) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    async fn apply(&self, engine: &Engine) {
        match engine.forget_runs_older_than(self.keep).await {
            Ok(0) => {}
            Ok(forgotten) => tracing::info!(
                forgotten,
                keep_runs_secs = self.keep.as_secs(),
                "forgot passes older than warehouse.keep_runs in sync_runs"
            ),
            Err(err) => tracing::warn!(
                error = %crate::error_chain(&err),
                "cannot forget old passes in sync_runs; trying again in an hour"
            ),
        }
    }
}

impl Dispatcher {
    fn new(
        engine: Arc<Engine>,
        config: &Config,
        metrics: Arc<metrics::Metrics>,
        cancel: CancellationToken,
    ) -> Self {
        Dispatcher {
            engine,
            incremental: PassPlan::incremental(&config.sync),
            reconcile_window: config.sync.reconcile_window,
            slots: config
                .sync
                .schedules
                .iter()
                .map(|s| (*s, Slot::default()))
                .collect(),
            permits: Arc::new(Semaphore::new(config.sync.concurrency.max(1))),
            passes: JoinSet::new(),
            tasks: HashMap::new(),
            ticks: HashMap::new(),
            ticks_taken: 0,
            metrics,
            cancel,
            retention: config.warehouse.keep_runs.map(|keep| {
                Arc::new(Retention {
                    keep,
                    last: std::sync::Mutex::new(None),
                })
            }),
        }
    }

    /// Acts on a tick for every schedule; returns those whose pass it started. What it did
    /// for each schedule is logged at DEBUG; the tick's counts in one INFO line when its last
    /// pass ends (`TickTally`; never WARN: the daemon chose so, nobody needs to act).
    fn on_tick(&mut self, tick: Tick) -> Vec<Uuid> {
        if tick == Tick::Sync {
            self.metrics.sync_tick();
        }
        self.ticks_taken += 1;
        let number = self.ticks_taken;
        // A schedule another daemon walked since this instant is left to the next tick.
        let at = Timestamp::now();
        let mut tally = TickTally::new(tick, number);
        tracing::debug!(tick = tick.as_str(), number, "tick");
        let mut started = Vec::new();
        for i in 0..self.slots.len() {
            let (schedule, slot) = &mut self.slots[i];
            let schedule = *schedule;
            let schedule_name = self.metrics.name(schedule).map(str::to_owned);
            let schedule_name = schedule_name.as_deref();
            match slot.on_tick(tick) {
                TickDecision::Start(kind) => {
                    self.start(i, kind, Some((number, at)));
                    started.push(schedule);
                    tally.running += 1;
                }
                TickDecision::StillRunning(running) => {
                    tally.still_running += 1;
                    tracing::debug!(%schedule, schedule_name, running = running.as_str(), "tick skipped: the previous pass is still running");
                }
                TickDecision::ReconcileQueued { backing_off: false } => {
                    tally.reconcile_queued += 1;
                    tracing::debug!(%schedule, schedule_name, "reconciliation queued: it starts when the running pass ends");
                }
                TickDecision::ReconcileQueued { backing_off: true } => {
                    tally.reconcile_queued += 1;
                    tracing::debug!(%schedule, schedule_name, "reconciliation queued: the schedule is backing off after failures");
                }
                TickDecision::BackingOff {
                    failures,
                    ticks_left,
                } => {
                    tally.backing_off += 1;
                    tracing::debug!(%schedule, schedule_name, failures, ticks_left, "tick skipped: backing off after failures");
                }
                TickDecision::NoPass => {}
            }
        }
        if tally.running == 0 {
            tally.log();
        } else {
            self.ticks.insert(number, tally);
        }
        started
    }

    /// [`Self::on_done`], then the report goes to a test driving the ticks: it hears of a pass
    /// once the daemon has taken it in (slot freed, metrics updated).
    fn pass_ended(&mut self, done: PassJoin, ticks: &mut scheduler::Ticks) {
        let report = done.as_ref().ok().map(|(_, report)| report.clone());
        self.on_done(done);
        if let Some(report) = report {
            ticks.pass_ended(report);
        }
    }

    /// Records a finished (or panicked) pass, frees its slot, and starts a reconciliation
    /// that was waiting for it.
    fn on_done(&mut self, done: PassJoin) {
        let id = match &done {
            Ok((id, _)) => *id,
            Err(err) => err.id(),
        };
        let Some((schedule, tick)) = self.tasks.remove(&id) else {
            return;
        };
        let result = match done {
            Ok((_, report)) => {
                self.metrics.record(&report);
                notify::status(&status_line(&report, &self.metrics));
                report.result
            }
            // A bug (a panic) or the shutdown timeout's abort: either way the slot must not
            // stay taken forever, and a panic counts as a failure.
            Err(err) if err.is_panic() => {
                tracing::error!(%schedule, schedule_name = self.metrics.name(schedule), error = %err, "a pass panicked; this is a bug in callsync, please report it");
                PassResult::Failed {
                    kind: ErrorKind::Panic,
                    error: "the pass panicked".to_owned(),
                }
            }
            Err(_) => PassResult::Interrupted,
        };
        self.metrics.pass_gone(schedule);
        if let Some(number) = tick
            && let Some(tally) = self.ticks.get_mut(&number)
            && tally.ended(&result)
        {
            tally.log();
            self.ticks.remove(&number);
        }
        let Some(i) = self.slots.iter().position(|(s, _)| *s == schedule) else {
            return;
        };
        let slot = &mut self.slots[i].1;
        let recovered =
            slot.failures > 0 && matches!(result, PassResult::Completed | PassResult::Behind);
        if recovered {
            tracing::info!(%schedule, schedule_name = self.metrics.name(schedule), "schedule recovered; back to the normal cadence");
        }
        if slot.on_done(&result) && !self.cancel.is_cancelled() {
            self.start(i, RunKind::Reconcile, None);
        }
    }

    /// Starts a pass of the `i`-th schedule; `tick`: the number and instant of the tick that
    /// started it, if one did (a queued reconciliation starts when a pass ends).
    fn start(&mut self, i: usize, kind: RunKind, tick: Option<(u64, Timestamp)>) {
        let (schedule, slot) = &mut self.slots[i];
        let schedule = *schedule;
        slot.running = Some(kind);
        let plan = match kind {
            RunKind::Reconcile => {
                slot.reconcile_due = false;
                // The window ends now, when the pass starts, not when its tick fired.
                PassPlan::reconcile(self.reconcile_window)
            }
            _ => self.incremental.clone(),
        };
        // Passes started by a tick leave alone a schedule another daemon walked since it;
        // a queued reconciliation, due since its tick, uses the instant it starts.
        let mut plan = plan;
        plan.unless_walked_since = Some(tick.map_or_else(Timestamp::now, |(_, at)| at));
        let engine = self.engine.clone();
        let permits = self.permits.clone();
        let cancel = self.cancel.clone();
        let progress = Health(self.metrics.clone());
        let retention = self.retention.clone();
        // A tick's passes log within its span (`tick{number=N}:pass{…}`), as its tick line
        // is numbered: which tick walked what.
        let span = match tick {
            Some((number, _)) => tracing::info_span!("tick", number),
            None => tracing::Span::none(),
        };
        self.metrics.pass_started(schedule, kind.as_str());
        let task = self.passes.spawn(
            async move {
                // Waiting for a permit holds the slot, so a busy daemon skips ticks rather than
                // queueing passes; shutdown does not wait for a pass that never started.
                let _permit = tokio::select! {
                    permit = permits.acquire_owned() => permit.ok(),
                    () = cancel.cancelled() => None,
                };
                if cancel.is_cancelled() {
                    return not_started(schedule, plan.kind);
                }
                progress.0.pass_running(schedule);
                let report = engine.run_pass(schedule, &plan, &cancel, &progress).await;
                // In the pass's task, so the daemon's loop never waits for the writer, and
                // shutdown drains it like a pass.
                if let Some(retention) = retention.filter(|r| !cancel.is_cancelled() && r.due()) {
                    retention.apply(&engine).await;
                }
                report
            }
            .instrument(span),
        );
        self.tasks
            .insert(task.id(), (schedule, tick.map(|(number, _)| number)));
    }
}

/// What became of one tick's schedules, logged in one line when its last pass ends: with
/// several daemons sharing the schedules, how many this one walked and how many were
/// another's (held by it, or walked by it since the tick).
#[derive(Debug)]
struct TickTally {
    tick: Tick,
    number: u64,
    began: std::time::Instant,
    /// Passes started and not ended yet.
    running: usize,
    walked: usize,
    behind: usize,
    failed: usize,
    interrupted: usize,
    /// Held by another process, or walked by another since the tick: not this daemon's.
    elsewhere: usize,
    still_running: usize,
    backing_off: usize,
    reconcile_queued: usize,
}

impl TickTally {
    fn new(tick: Tick, number: u64) -> Self {
        TickTally {
            tick,
            number,
            began: std::time::Instant::now(),
            running: 0,
            walked: 0,
            behind: 0,
            failed: 0,
            interrupted: 0,
            elsewhere: 0,
            still_running: 0,
            backing_off: 0,
            reconcile_queued: 0,
        }
    }

    /// Counts a pass's end; `true` when it was the tick's last.
    fn ended(&mut self, result: &PassResult) -> bool {
        match result {
            PassResult::Completed => self.walked += 1,
            PassResult::Behind => {
                self.walked += 1;
                self.behind += 1;
            }
            PassResult::Failed { .. } => self.failed += 1,
            PassResult::Interrupted => self.interrupted += 1,
            PassResult::Skipped(_) => self.elsewhere += 1,
        }
        self.running = self.running.saturating_sub(1);
        self.running == 0
    }

    fn log(&self) {
        tracing::info!(
            tick = self.tick.as_str(),
            number = self.number,
            walked = self.walked,
            behind = self.behind,
            failed = self.failed,
            interrupted = self.interrupted,
            elsewhere = self.elsewhere,
            still_running = self.still_running,
            backing_off = self.backing_off,
            reconcile_queued = self.reconcile_queued,
            duration_ms = self.began.elapsed().as_millis() as u64,
            "tick done (elsewhere: held by another process, or walked by another daemon since the tick)"
        );
    }
}

/// systemd's `STATUS=` after a pass: the schedule by name, what the pass did, and how many
/// other passes are under way.
fn status_line(report: &PassReport, metrics: &metrics::Metrics) -> String {
    let busy = metrics.busy().len();
    let under_way = match busy {
        0 => String::new(),
        n => format!("; {n} passes under way"),
    };
    format!(
        "last pass: {} {} {}, {} calls written{under_way}",
        metrics.display(report.schedule),
        report.kind.as_str(),
        report.result,
        report.stats.calls_written
    )
}

/// The report of a pass that shutdown stopped before it began: nothing read, nothing written.
fn not_started(schedule: Uuid, kind: RunKind) -> PassReport {
    PassReport {
        schedule,
        kind,
        stats: Default::default(),
        statuses: Default::default(),
        result: PassResult::Interrupted,
        position: None,
        horizon: None,
        lag_secs: None,
        duration: Duration::ZERO,
        run: None,
    }
}

/// Tells `/healthz` a schedule is making progress each time one of its pages commits, so a
/// long pass (a week-long reconciliation) is not mistaken for a stalled schedule.
struct Health(Arc<metrics::Metrics>);

impl PassProgress for Health {
    fn page(&self, _pages: u64, _calls_seen: u64, _total: Option<u64>) {}

    fn committed(&self, schedule: Uuid) {
        self.0.progressed(schedule);
    }
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

    fn failed() -> PassResult {
        PassResult::Failed {
            kind: ErrorKind::Service,
            error: "HTTP 500".into(),
        }
    }

    /// Runs `result` as the outcome of the pass a sync tick starts, if it starts one.
    fn tick_and_finish(slot: &mut Slot, result: PassResult) -> TickDecision {
        let decision = slot.on_tick(Tick::Sync);
        if let TickDecision::Start(kind) = decision {
            slot.running = Some(kind);
            slot.on_done(&result);
        }
        decision
    }

    #[test]
    fn a_failing_schedule_sits_out_1_3_7_ticks_and_one_good_pass_ends_it() {
        let mut slot = Slot::default();
        let mut started = Vec::new();
        for tick in 0..16 {
            if let TickDecision::Start(_) = tick_and_finish(&mut slot, failed()) {
                started.push(tick);
            }
        }
        // Failures 1, 2, 3, 4 sit out 0, 1, 3, 7 ticks.
        assert_eq!(started, [0, 1, 3, 7, 15]);
        // Behind is no failure: the cadence is back at once.
        slot.skip_ticks = 0;
        assert_eq!(
            tick_and_finish(&mut slot, PassResult::Behind),
            TickDecision::Start(RunKind::Incremental)
        );
        assert_eq!((slot.failures, slot.skip_ticks), (0, 0));
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::Start(RunKind::Incremental)
        );
    }

    #[test]
    fn passes_never_overlap_and_a_reconciliation_is_queued_not_lost() {
        let mut slot = Slot::default();
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::Start(RunKind::Incremental)
        );
        slot.running = Some(RunKind::Incremental);
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::StillRunning(RunKind::Incremental)
        );
        assert_eq!(
            slot.on_tick(Tick::Reconcile),
            TickDecision::ReconcileQueued { backing_off: false }
        );
        // The running pass ends: the queued reconciliation starts now.
        assert!(slot.on_done(&PassResult::Completed));
        // A reconciliation during backoff waits for the backoff to end.
        let mut slot = Slot {
            running: Some(RunKind::Incremental),
            ..Slot::default()
        };
        assert!(!slot.on_done(&failed()));
        assert!(!slot.on_done(&failed()));
        assert_eq!(
            slot.on_tick(Tick::Reconcile),
            TickDecision::ReconcileQueued { backing_off: true }
        );
        assert_eq!(
            slot.on_tick(Tick::Sync),
            TickDecision::BackingOff {
                failures: 2,
                ticks_left: 0
            }
        );
        assert!(slot.on_done(&PassResult::Completed));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let ticks: Vec<u32> = (1..=8).map(backoff_ticks).collect();
        assert_eq!(ticks, vec![0, 1, 3, 7, 15, 31, 31, 31]);
    }

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
