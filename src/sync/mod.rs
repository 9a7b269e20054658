//! The sync engine: walks each schedule's calls page by page into a destination (the
//! warehouse, whichever back end it is, or a dry run: `crate::warehouse::Destination`).
//!
//! [`Engine`] holds the API client and the writer thread that owns the destination;
//! [`Engine::run_pass`] runs one pass of one schedule (`pass.rs`), [`Engine::sync_all`] runs
//! several concurrently. The paging decisions are pure (`cursor.rs`); the checkpoint is
//! committed with each write, so a crash at any instant replays at most the pages not yet
//! committed: the write in flight and the pages read behind it (about 1,000 calls), or in
//! tie groups one quiet run of at most 64 pages, whose checkpoint moves at its end. Every pass
//! ends: it reads what had changed by the service's clock when it began. The engine knows
//! neither clap nor cron: the CLI and the daemon decide when passes run.

mod ahead;
mod bookkeeping;
mod checkpoint_rule;
pub mod cursor;
mod details;
mod error;
mod misfits;
mod pass;
mod recent;
mod service_clock;
mod walk_writes;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::ApiClient;
use crate::config::{Config, DetailsMode, SyncConfig};
use crate::service::Timestamp;
use crate::warehouse::{
    Backend, Destination, INTERRUPTED, Prepared, ProcessIdentity, RunKind, RunOutcome, RunStats,
    WarehouseError, Watch,
};
use crate::{ErrorKind, error_chain};

pub use cursor::HeldGroup;
pub use error::SyncError;
pub use service_clock::ClockTaken;
pub use writer::Writer;

/// The client, the writer and the settings every pass shares.
pub struct Engine {
    client: ApiClient,
    writer: Writer,
    settings: SyncConfig,
    detail_concurrency: usize,
    /// The destination's name (its file or database), for messages.
    name: String,
    /// Where the destination was opened, checked apart from the writer thread.
    watch: Arc<dyn Watch>,
    /// The pass line says `would_write` instead of `calls_written`.
    counts_only: bool,
    /// This process, as `sync_runs` records the passes it walks.
    walker: ProcessIdentity,
    /// The passes' openings and ends, each kind gathered into one job of the writer.
    openings: Arc<bookkeeping::Openings>,
    endings: Arc<bookkeeping::Endings>,
    quiet_pages: Arc<bookkeeping::QuietPages>,
    pages: Arc<bookkeeping::Pages>,
}

/// How an engine opens its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// For writing: created and migrated as needed.
    Write,
    /// A dry run: passes fetch and count what they would write, and write nothing.
    DryRun,
}

/// What one pass reads and what it may do to the checkpoint.
#[derive(Debug, Clone)]
pub struct PassPlan {
    pub kind: RunKind,
    /// Read from here; `None` = the checkpoint minus the lookback (the incremental pass).
    pub since: Option<Timestamp>,
    /// Stop once the walk is past this instant.
    pub until: Option<Timestamp>,
    pub details: DetailsMode,
    /// Skip the schedule (`Skipped`) if a pass of this kind began at or after this instant
    /// and finished: the daemon's tick, when several daemons share the schedules.
    pub unless_walked_since: Option<Timestamp>,
}

impl PassPlan {
    pub fn incremental(config: &SyncConfig) -> Self {
        PassPlan {
            kind: RunKind::Incremental,
            since: None,
            until: None,
            details: config.details,
            unless_walked_since: None,
        }
    }

    pub fn backfill(
        config: &SyncConfig,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
    ) -> Self {
        PassPlan {
            kind: RunKind::Backfill,
            since: Some(since.unwrap_or(Timestamp::EPOCH)),
            until,
            details: config.details,
            unless_walked_since: None,
        }
    }

    /// Re-reads a trailing window through the detail endpoint, for changes that did not
    /// bump a call's `updated_at`.
    pub fn reconcile(window: Duration) -> Self {
        PassPlan {
            kind: RunKind::Reconcile,
            since: Some(Timestamp::now().saturating_sub(window)),
            until: None,
            details: DetailsMode::Always,
            unless_walked_since: None,
        }
    }

    pub(crate) fn start(&self, checkpoint: Option<Timestamp>, lookback: Duration) -> Timestamp {
        match (self.since, checkpoint) {
            (Some(since), _) => since,
            (None, Some(cursor)) => cursor.saturating_sub(lookback),
            (None, None) => Timestamp::EPOCH,
        }
    }
}

/// Told about each page as a pass goes (a progress bar, the daemon's health, or nothing).
pub trait PassProgress: Send + Sync {
    /// A page was read and handed to the writer (or waits for the write before it).
    fn page(&self, pages: u64, calls_seen: u64, total: Option<u64>);
    /// A write of `schedule`'s pages and their checkpoint was committed.
    fn committed(&self, _schedule: Uuid) {}
    /// A request of the pass of `schedule` was answered (a list page, or a call's detail):
    /// the pass is moving, even while it commits nothing (a reconciliation finding nothing
    /// new, detail fetches under a rate limit).
    fn answered(&self, _schedule: Uuid) {}
}

/// No progress display.
pub struct Quiet;

impl PassProgress for Quiet {
    fn page(&self, _pages: u64, _calls_seen: u64, _total: Option<u64>) {}
}

/// The label of a pass that never started ([`PassResult::Skipped`]).
const SKIPPED: &str = "skipped";

/// How a pass ended: the one name for it. Written out only at the edges: the pass's log
/// line, its `sync_runs` row ([`Self::outcome`], [`Self::stored_error`]), the metrics' and
/// `--json`'s `outcome` ([`Self::label`]), the status line ([`Display`](std::fmt::Display)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassResult {
    /// Read everything that had changed (by the service's clock) when the pass began.
    Completed,
    /// Read what had changed when it began, but ended further than `sync.behind_after`
    /// behind the service's clock with changes already waiting.
    Behind,
    Interrupted,
    /// Stopped because this process's claim on the schedule no longer held on the server (its
    /// lock connection was cut, and another process may have claimed the schedule since): the
    /// page in hand was refused, not written. No failure of the schedule, nor any loss: the
    /// pages committed before stand, and whoever holds the claim next goes on from the
    /// checkpoint. Recorded as `interrupted`, with why in `sync_runs.error`.
    ClaimLost(String),
    /// Not started: another process holds the schedule's lock (a backfill, say), or another
    /// daemon walked it since the tick. Nothing was read or written, and nothing is wrong
    /// with the schedule.
    Skipped(Skip),
    /// Stopped by a failure: what kind, and the error with its causes on one line.
    Failed {
        kind: ErrorKind,
        error: String,
    },
}

impl PassResult {
    /// The result of a pass that `err` stopped.
    pub fn failed(err: &SyncError) -> Self {
        PassResult::Failed {
            kind: err.kind(),
            error: error_chain(err),
        }
    }

    /// How `sync_runs` stores the result; `None` for a pass that never started.
    pub fn outcome(&self) -> Option<RunOutcome> {
        match self {
            PassResult::Completed => Some(RunOutcome::Completed),
            PassResult::Behind => Some(RunOutcome::Behind),
            PassResult::Interrupted | PassResult::ClaimLost(_) => Some(RunOutcome::Interrupted),
            PassResult::Failed { .. } => Some(RunOutcome::Failed),
            PassResult::Skipped(_) => None,
        }
    }

    /// The result's one-word name, as the metrics label it and `--json` has it in `outcome`:
    /// the stored outcome's, or `skipped`.
    pub fn label(&self) -> &'static str {
        self.outcome().map_or(SKIPPED, RunOutcome::as_str)
    }

    /// Every name [`Self::label`] gives, for the metrics' series that exist from start-up.
    pub fn labels() -> impl Iterator<Item = &'static str> {
        RunOutcome::ALL
            .into_iter()
            .map(RunOutcome::as_str)
            .chain([SKIPPED])
    }

    /// What `sync_runs.error` keeps: why it failed, or what interrupted it.
    pub fn stored_error(&self) -> Option<String> {
        match self {
            PassResult::Failed { error, .. } | PassResult::ClaimLost(error) => Some(error.clone()),
            PassResult::Interrupted => Some(INTERRUPTED.to_owned()),
            PassResult::Completed | PassResult::Behind | PassResult::Skipped(_) => None,
        }
    }

    /// What kind of failure stopped the pass (`busy` for a skipped one, and for one whose
    /// claim was lost); `None` otherwise.
    pub fn error_kind(&self) -> Option<ErrorKind> {
        match self {
            PassResult::Failed { kind, .. } => Some(*kind),
            PassResult::Skipped(_) | PassResult::ClaimLost(_) => Some(ErrorKind::Busy),
            PassResult::Completed | PassResult::Behind | PassResult::Interrupted => None,
        }
    }

    /// The pass read everything up to its horizon (it may still have ended behind).
    pub fn succeeded(&self) -> bool {
        matches!(self, PassResult::Completed | PassResult::Behind)
    }
}

impl std::fmt::Display for PassResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassResult::Completed => f.write_str("completed"),
            PassResult::Behind => f.write_str("behind"),
            PassResult::Interrupted => f.write_str(INTERRUPTED),
            PassResult::ClaimLost(reason) => write!(f, "interrupted: {reason}"),
            PassResult::Skipped(reason) => write!(f, "skipped: {reason}"),
            PassResult::Failed { error, .. } => write!(f, "failed: {error}"),
        }
    }
}

/// Why a pass did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Another process holds the schedule's claim on `destination`.
    Busy { schedule: Uuid, destination: String },
    /// Another process walked the schedule since this tick (daemons sharing the schedules).
    WalkedSince {
        schedule: Uuid,
        walker: ProcessIdentity,
    },
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Busy {
                schedule,
                destination,
            } => write!(
                f,
                "{}",
                WarehouseError::Busy {
                    schedule: *schedule,
                    name: destination.clone(),
                }
            ),
            Skip::WalkedSince { schedule, walker } => {
                write!(
                    f,
                    "schedule {schedule} was walked by {walker} since this tick"
                )
            }
        }
    }
}

/// The outcome of one pass of one schedule.
#[derive(Debug, Clone)]
pub struct PassReport {
    pub schedule: Uuid,
    pub kind: RunKind,
    pub stats: RunStats,
    /// Responses by HTTP status, for metrics.
    pub statuses: std::collections::BTreeMap<u16, u64>,
    pub result: PassResult,
    /// Where the walk got to (the next pass starts here, minus the lookback).
    pub position: Option<Timestamp>,
    /// The service's clock when the pass began: it read what had changed by then.
    pub horizon: Option<Timestamp>,
    /// The service's clock at the end minus `position`, in seconds; negative when the
    /// position is ahead of it. Never clamped.
    pub lag_secs: Option<f64>,
    /// The clock that stood for the service's at the pass's latest response; `None` before
    /// any.
    pub clock: Option<ClockTaken>,
    /// The service's `Date` minus callsync's clock, in seconds, when further apart than
    /// `sync.max_clock_skew_secs` in this pass (the `Date` was not trusted); `None` otherwise.
    pub date_skew_secs: Option<f64>,
    pub duration: Duration,
    /// `sync_runs.id` of the pass's row; `None` when it has none (a dry run, a pass that
    /// never started).
    pub run: Option<i64>,
    /// Whether the walk found, by evidence no stable order can produce, that the service
    /// orders calls sharing an `updated_at` differently from one request to the next (its
    /// tie groups were then covered, `sync/cursor/cover.rs`).
    pub unstable_tie_order: bool,
    /// Tie groups the walk could not prove read whole and read past, its checkpoint held at
    /// the earliest (`sync/cursor/cover.rs`); the next pass reads them again.
    pub held_groups: Vec<HeldGroup>,
    /// The schedule's calls in `set_aside_calls` after the pass's last write, when a write
    /// counted them (`None`: the pass wrote nothing that counts them, as an idle pass).
    pub set_aside: Option<u64>,
}

impl PassReport {
    /// The pass read everything up to its horizon (it may still have ended behind).
    pub fn succeeded(&self) -> bool {
        self.result.succeeded()
    }

    /// What held the pass back (`rate limit`, `detail fetches`, `errors and retries`).
    pub fn slowed_by(&self) -> Vec<&'static str> {
        self.stats.slowed_by(self.duration.as_millis() as u64)
    }

    /// One line per pass per schedule: pages, calls seen and written, retries, duration, lag;
    /// a skipped pass at DEBUG when `quiet_skip` (the daemon's, counted on its tick line), at
    /// WARN otherwise.
    fn log(&self, counts_only: bool, quiet_skip: bool) {
        let s = &self.stats;
        let lag_secs = self.lag_secs;
        let slowed_by = self.slowed_by().join(",");
        let duration_ms = self.duration.as_millis() as u64;
        // In a dry run nothing is written: the same figure is what *would* be.
        let (calls_written, would_write) = if counts_only {
            (None, Some(s.calls_written))
        } else {
            (Some(s.calls_written), None)
        };
        macro_rules! pass_line {
            ($level:ident, $($rest:tt)+) => {
                tracing::$level!(
                    pages = s.pages, calls_seen = s.calls_seen, calls_written, would_write,
                    requests = s.requests, retries = s.retries, details = s.detail_requests,
                    rate_limited = s.rate_limited, throttled_ms = s.throttled_ms,
                    future_rows = s.future_rows, duration_ms, lag_secs, $($rest)+
                )
            };
        }
        match &self.result {
            PassResult::Completed => pass_line!(info, "pass completed"),
            PassResult::Behind => pass_line!(
                warn, %slowed_by,
                "pass ended behind the service's clock with changes waiting; the next pass goes on from here"
            ),
            // Shutdown's doing, and the next pass resumes: nothing for a person to do.
            PassResult::Interrupted => pass_line!(
                info,
                "pass interrupted by shutdown; the next pass resumes from the last committed page"
            ),
            // The network's doing (the lock connection was cut), worth a look if it recurs;
            // nothing for the schedule: it goes on from its checkpoint.
            PassResult::ClaimLost(reason) => pass_line!(
                warn, %reason,
                "pass interrupted: the schedule's claim no longer held; the page in hand was not written"
            ),
            // A daemon sharing the schedules skips every schedule another walks: its tick
            // line counts them, each alone is a detail.
            PassResult::Skipped(reason) if quiet_skip => pass_line!(debug, %reason, "pass skipped"),
            // A command's (`sync`, `backfill`): what it was asked to do was not done.
            PassResult::Skipped(reason) => pass_line!(warn, %reason, "pass skipped"),
            PassResult::Failed { kind, error } => pass_line!(
                error, error = %error, error_kind = kind.as_str(),
                "pass failed; the checkpoint stays at the last committed page"
            ),
        }
    }
}

impl Engine {
    /// Builds the API client, then opens `backend` as `mode` says (for writing: created and
    /// migrated as needed, and given what the configuration says of schedules and days) and
    /// starts its writer. The client first: a configuration it refuses (no credentials)
    /// creates no warehouse.
    pub fn start(config: &Config, backend: &dyn Backend, mode: Mode) -> Result<Engine, SyncError> {
        let client = Self::client(config)?;
        let mut destination = match mode {
            Mode::Write => backend.writer()?,
            Mode::DryRun => backend.dry_run()?,
        };
        // Before any pass, so BI shows a schedule's name from its first call on.
        let sync = &config.sync;
        let names: Vec<(Uuid, Option<&str>)> = sync
            .schedules
            .iter()
            .map(|uid| (*uid, sync.schedule_names.get(uid).map(String::as_str)))
            .collect();
        destination.prepare(Prepared {
            names: &names,
            campaigns: &sync.schedule_campaigns,
            timezone: config.warehouse.timezone,
        })?;
        Self::with_destination(config, client, destination, mode == Mode::DryRun)
    }

    /// The service's client, its credentials read first (a missing or empty secret file is
    /// the configuration's error, not the API's).
    fn client(config: &Config) -> Result<ApiClient, SyncError> {
        let credentials = config.api.credentials()?;
        Ok(ApiClient::with_concurrency(
            &config.api,
            &credentials,
            config.sync.concurrency,
        )?)
    }

    /// An engine writing into `destination` (opened); `counts_only` when it writes nothing.
    pub fn with_destination(
        config: &Config,
        client: ApiClient,
        destination: Box<dyn Destination>,
        counts_only: bool,
    ) -> Result<Engine, SyncError> {
        let name = destination.name();
        let watch = destination.watch();
        let writer = Writer::start(destination).map_err(SyncError::WriterStart)?;
        Ok(Engine {
            client,
            writer,
            settings: config.sync.clone(),
            detail_concurrency: config.api.detail_concurrency.max(1),
            name,
            watch,
            counts_only,
            walker: ProcessIdentity::this_process(config.sync.instance.as_deref()),
            openings: bookkeeping::openings(),
            endings: bookkeeping::endings(),
            quiet_pages: bookkeeping::quiet_pages(),
            pages: bookkeeping::pages(),
        })
    }

    /// This process, as `sync_runs` records the passes it walks.
    pub fn walker(&self) -> &ProcessIdentity {
        &self.walker
    }

    /// The destination's name (its file or database), for messages.
    pub fn warehouse_name(&self) -> &str {
        &self.name
    }

    /// Fails when the destination can no longer be written where it was opened (see
    /// [`Watch::check`]).
    pub fn check_warehouse(&self) -> Result<(), WarehouseError> {
        self.watch.check()
    }

    /// A watch on where the destination was opened, to check it without the engine.
    pub fn warehouse_watch(&self) -> Arc<dyn Watch> {
        self.watch.clone()
    }

    /// Tells `observer` of every request the engine's passes send, as it is answered.
    pub fn observe_requests(&self, observer: std::sync::Arc<dyn crate::api::RequestObserver>) {
        self.client.observe_requests(observer);
    }

    pub fn settings(&self) -> &SyncConfig {
        &self.settings
    }

    /// Waits until one more pass may run ([`ApiClient::pass_slot`]): passes run as many at
    /// once as requests may be in flight, a limit that adapts to the service, at most
    /// `sync.concurrency`. `None` never comes, but a caller need not trust that.
    pub async fn pass_slot(&self) -> Option<crate::api::PassSlot> {
        self.client.pass_slot().await
    }

    /// Runs `plan` for every schedule, as many at a time as [`Self::pass_slot`] lets; one
    /// schedule's failure does not stop the others. Reports come back in the order given.
    pub async fn sync_all(
        &self,
        schedules: &[Uuid],
        plan: &PassPlan,
        cancel: &CancellationToken,
    ) -> Vec<PassReport> {
        self.passes(schedules, plan, cancel).collect().await
    }

    /// [`Engine::sync_all`] report by report: each comes as soon as its pass and those of
    /// the schedules before it have ended (`callsync sync --json` prints them so).
    pub fn passes<'a>(
        &'a self,
        schedules: &'a [Uuid],
        plan: &'a PassPlan,
        cancel: &'a CancellationToken,
    ) -> impl futures::Stream<Item = PassReport> + 'a {
        futures::stream::iter(schedules)
            .map(move |schedule| async move {
                let _slot = self.pass_slot().await;
                // Boxed: a pass waiting for its slot holds no pass state (see the daemon's).
                Box::pin(self.run_pass(*schedule, plan, cancel, &Quiet)).await
            })
            // The slots bound the passes running; this bounds the reports held back for the
            // order (no more than the slots can ever be).
            .buffered(self.settings.concurrency.max(1))
    }

    /// Forgets the `sync_runs` rows of passes that finished more than `keep` ago (see
    /// [`Destination::forget_runs_before`]); returns how many went.
    pub async fn forget_runs_older_than(&self, keep: Duration) -> Result<u64, SyncError> {
        let cutoff = Timestamp::now().saturating_sub(keep);
        self.writer
            .call(move |sink| sink.forget_runs_before(cutoff))
            .await
    }

    /// Waits for queued writes and closes the warehouse.
    pub async fn close(self) {
        self.writer.close().await;
    }
}
