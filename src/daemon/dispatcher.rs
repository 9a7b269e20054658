//! The daemon's dispatcher: starts passes on ticks, as many at a time as the limit in flight
//! lets (at most `sync.concurrency`: `api/limiter/in_flight.rs`), takes their
//! reports (slots freed, metrics, systemd's status, one line per tick), and applies
//! `warehouse.keep_runs` after passes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::metrics;
use super::notify;
use super::scheduler::{self, Tick};
use super::slot::{Slot, TickDecision};
use crate::ErrorKind;
use crate::config::Config;
use crate::service::Timestamp;
use crate::sync::{Engine, PassPlan, PassProgress, PassReport, PassResult};
use crate::warehouse::RunKind;

/// A pass task's end, as the `JoinSet` gives it.
pub(super) type PassJoin = Result<(tokio::task::Id, PassReport), tokio::task::JoinError>;

/// Starts passes on ticks and takes their reports: the only owner of the slots.
pub(super) struct Dispatcher {
    engine: Arc<Engine>,
    incremental: PassPlan,
    reconcile_window: Duration,
    /// Schedules in the configured order (a `BTreeMap` would reorder them).
    slots: Vec<(Uuid, Slot)>,
    pub(super) passes: JoinSet<PassReport>,
    /// Which schedule each task runs (its index in `slots`) and the tick that started it, to
    /// free its slot even if the task panicked.
    tasks: HashMap<tokio::task::Id, (usize, Option<u64>)>,
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
    pub(super) fn new(
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
    pub(super) fn on_tick(&mut self, tick: Tick) -> Vec<Uuid> {
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
    pub(super) fn pass_ended(&mut self, done: PassJoin, ticks: &mut scheduler::Ticks) {
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
        let Some((i, tick)) = self.tasks.remove(&id) else {
            return;
        };
        let schedule = self.slots[i].0;
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
        let cancel = self.cancel.clone();
        let progress = FreshnessProgress(self.metrics.clone());
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
                // Waiting for a pass slot holds the schedule's slot, so a busy daemon skips
                // ticks rather than queueing passes; shutdown does not wait for a pass that
                // never started. Pass slots follow the limit in flight: passes start as the
                // service's answers let requests through.
                let _pass_slot = tokio::select! {
                    slot = engine.pass_slot() => slot,
                    () = cancel.cancelled() => None,
                };
                if cancel.is_cancelled() {
                    return not_started(schedule, plan.kind);
                }
                progress.0.pass_running(schedule);
                // Boxed: every schedule's task is spawned at its tick and waits for a permit,
                // and a task holds its future's largest state from the start; inline, the
                // pass's state made every waiting task as large as a running pass (BENCHMARKS.md,
                // "Memory"); boxed it is allocated once the pass runs.
                let report = Box::pin(engine.run_pass(schedule, &plan, &cancel, &progress)).await;
                // In the pass's task, so the daemon's loop never waits for the writer, and
                // shutdown drains it like a pass.
                if let Some(retention) = retention.filter(|r| !cancel.is_cancelled() && r.due()) {
                    Box::pin(retention.apply(&engine)).await;
                }
                report
            }
            .instrument(span),
        );
        self.tasks
            .insert(task.id(), (i, tick.map(|(number, _)| number)));
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
            PassResult::Interrupted | PassResult::ClaimLost(_) => self.interrupted += 1,
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
    let busy = metrics.busy_count();
    let under_way = match busy {
        0 => String::new(),
        n => format!("; {} under way", crate::counted(n as u64, "pass", "passes")),
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
pub(super) fn not_started(schedule: Uuid, kind: RunKind) -> PassReport {
    PassReport {
        schedule,
        kind,
        stats: Default::default(),
        statuses: Default::default(),
        result: PassResult::Interrupted,
        position: None,
        horizon: None,
        lag_secs: None,
        clock: None,
        date_skew_secs: None,
        duration: Duration::ZERO,
        run: None,
        unstable_tie_order: false,
        held_groups: Vec::new(),
        set_aside: None,
    }
}

/// Tells `/healthz` a schedule is making progress each time one of its pages commits or one of
/// its requests is answered, so a long pass (a week-long reconciliation, detail fetches under
/// a rate limit) is not mistaken for a stalled schedule.
struct FreshnessProgress(Arc<metrics::Metrics>);

impl PassProgress for FreshnessProgress {
    fn page(&self, _pages: u64, _calls_seen: u64, _total: Option<u64>) {}

    fn committed(&self, schedule: Uuid) {
        self.0.progressed(schedule);
    }

    fn answered(&self, schedule: Uuid) {
        self.0.progressed(schedule);
    }
}
