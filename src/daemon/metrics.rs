//! Prometheus metrics for the daemon: the series `/metrics` serves and the figures `/healthz`
//! judges by (both served by `endpoint.rs`).
//!
//! Figures come from the pass reports the daemon already receives: passes by kind and result,
//! pages, calls written, requests by status, retries, and per schedule only what an alert
//! needs — the last success, the last pass's duration, the lag (how far the cursor is behind
//! the service's clock), how many passes in a row ended behind or failed — plus one
//! `callsync_schedule_info{schedule, name}` series that queries join for the name
//! ([`SERIES_PER_SCHEDULE`]: the count stays flat as schedules grow to ten thousand).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use uuid::Uuid;

use crate::api::RequestObserver;
use crate::service::Timestamp;
use crate::sync::{HeldGroup, PassReport, PassResult};
use crate::warehouse::{FALLING_BEHIND_PASSES, LATE_PASS_TICKS, STALE_TICKS, Walker};

/// Sync ticks without progress after which a schedule is unhealthy.
pub const STALE_INTERVALS: u32 = STALE_TICKS;

/// The most sync ticks a running pass may go without progress, however slow its own cadence
/// has been (`status`'s bound for a running pass, [`LATE_PASS_TICKS`]).
const MOST_QUIET_TICKS: u32 = LATE_PASS_TICKS as u32;

/// Statuses whose request counters exist (at 0) before any request: what alerts and the
/// dashboard select on.
const STATUSES_FROM_START: [u16; 2] = [200, 429];

/// Kinds of failed requests (`callsync_request_errors_total{kind}`).
const ERROR_KINDS: [&str; 3] = ["transport", "client_error", "server_error"];

/// The series each configured schedule adds, once it has run a pass: `schedule_info`,
/// `last_success_timestamp_seconds`, `pass_progress_timestamp_seconds`, `behind_passes`,
/// `failed_passes` (from start-up), `last_pass_duration_seconds` and `lag_seconds` (from its
/// first pass). Counted by a test.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the figure a test and docs/monitor.md state")
)]
pub const SERIES_PER_SCHEDULE: usize = 7;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabels {
    kind: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabel {
    schedule: String,
}

/// `callsync_schedule_info`: the name a person reads, joined in queries
/// (`* on (instance, job, schedule) group_left (name) callsync_schedule_info`) rather than
/// carried by every series. An unnamed schedule's `name` is empty, which Prometheus treats as
/// no label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleInfoLabels {
    schedule: String,
    name: String,
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

/// Upper bounds of the pass-duration buckets: 1 ms to 10 min, 1-2.5-5 steps below a minute.
/// Passes seen in the field took 3 to 558 ms; a longer one lands in `+Inf` and still counts.
const PASS_DURATION_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];

fn pass_duration_histogram() -> Histogram {
    Histogram::new(PASS_DURATION_BUCKETS)
}

fn request_duration_histogram() -> Histogram {
    // 5 ms to about 20 s (`api.request_timeout_secs` is 30 by default).
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// The series `/metrics` shows, registered once with the client library.
struct Series {
    registry: Registry,
    schedule_info: Family<ScheduleInfoLabels, Gauge>,
    passes: Family<PassLabels, Counter>,
    pass_duration: HistogramFamily<KindLabel>,
    pages: Counter,
    calls_written: Counter,
    retries: Counter,
    throttled: FloatCounter,
    requests: Family<StatusLabel, Counter>,
    request_errors: Family<KindLabel, Counter>,
    request_duration: Histogram,
    last_success: Family<ScheduleLabel, FloatGauge>,
    pass_progress: Family<ScheduleLabel, FloatGauge>,
    last_duration: Family<ScheduleLabel, FloatGauge>,
    lag: Family<ScheduleLabel, FloatGauge>,
    behind: Family<ScheduleLabel, Gauge>,
    failed: Family<ScheduleLabel, Gauge>,
    /// Only for schedules that held a tie group since start-up.
    held_calls: Family<ScheduleLabel, Gauge>,
    held_at: Family<ScheduleLabel, FloatGauge>,
    warehouse_size: Gauge,
    wal_size: Gauge,
    backups: BackupSeries,
}

/// `[backup]`'s series, registered only when the daemon makes backups.
#[derive(Default)]
struct BackupSeries {
    last_success: FloatGauge,
    failures: Counter,
    size: Gauge,
}

impl Series {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("callsync");
        let series = Series {
            registry: Registry::default(),
            schedule_info: Family::default(),
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
            pass_progress: Family::default(),
            last_duration: Family::default(),
            lag: Family::default(),
            behind: Family::default(),
            held_calls: Family::default(),
            held_at: Family::default(),
            failed: Family::default(),
            warehouse_size: Gauge::default(),
            wal_size: Gauge::default(),
            backups: BackupSeries::default(),
        };
        series.register_pass_series(&mut registry);
        series.register_schedule_series(&mut registry);
        Series { registry, ..series }
    }

    /// The build, the passes and the requests, as `/metrics` lists them first.
    fn register_pass_series(&self, registry: &mut Registry) {
        registry.register(
            "build",
            "The running callsync's version and the revision it was built from (always 1)",
            Info::new(vec![
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", env!("BUILD_GIT_REVISION")),
            ]),
        );
        registry.register(
            "schedule_info",
            "Each configured schedule's name (always 1): join on schedule for it",
            self.schedule_info.clone(),
        );
        registry.register("passes", "Passes by kind and result", self.passes.clone());
        registry.register_with_unit(
            "pass_duration",
            "How long passes took, by kind",
            Unit::Seconds,
            self.pass_duration.clone(),
        );
        registry.register("pages", "Pages of calls read.", self.pages.clone());
        registry.register(
            "calls_written",
            "Calls written (new or changed)",
            self.calls_written.clone(),
        );
        registry.register("retries", "Requests retried.", self.retries.clone());
        registry.register_with_unit(
            "throttled",
            "Time requests waited for the shared limiter (which slows down when the service answers 429)",
            Unit::Seconds,
            self.throttled.clone(),
        );
        registry.register(
            "requests",
            "Responses from the service by HTTP status",
            self.requests.clone(),
        );
        registry.register(
            "request_errors",
            "Requests that failed: transport (no answer), client_error (4xx, 429 included), server_error (5xx)",
            self.request_errors.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from sending a request to its answer's headers",
            Unit::Seconds,
            self.request_duration.clone(),
        );
    }

    /// Each schedule's state, then the warehouse's files.
    fn register_schedule_series(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "last_success_timestamp",
            "When the schedule last completed a pass (0: not since start-up)",
            Unit::Seconds,
            self.last_success.clone(),
        );
        registry.register_with_unit(
            "pass_progress_timestamp",
            "When the schedule's running pass last had a request answered or a page committed (0: no pass running)",
            Unit::Seconds,
            self.pass_progress.clone(),
        );
        registry.register_with_unit(
            "last_pass_duration",
            "How long the schedule's latest pass took (skipped passes not counted)",
            Unit::Seconds,
            self.last_duration.clone(),
        );
        registry.register_with_unit(
            "lag",
            "How far the schedule's cursor is behind the service's clock (negative: ahead of it)",
            Unit::Seconds,
            self.lag.clone(),
        );
        registry.register(
            "held_tie_group_calls",
            "Calls of the tie group the latest pass could not prove read whole and held its checkpoint at (0: none); only for schedules that held one since start-up",
            self.held_calls.clone(),
        );
        registry.register_with_unit(
            "held_tie_group_timestamp",
            "The updated_at of that group, where the checkpoint stays (0: none): its age is time() minus this",
            Unit::Seconds,
            self.held_at.clone(),
        );
        registry.register(
            "behind_passes",
            "Passes in a row that ended behind the service's clock with changes waiting",
            self.behind.clone(),
        );
        registry.register(
            "failed_passes",
            "Passes in a row that failed (0 after a pass that read everything)",
            self.failed.clone(),
        );
        registry.register_with_unit(
            "warehouse_size",
            "Size of the warehouse file, read at scrape time",
            Unit::Bytes,
            self.warehouse_size.clone(),
        );
        registry.register_with_unit(
            "warehouse_wal_size",
            "Size of the warehouse's write-ahead log (-wal), read at scrape time",
            Unit::Bytes,
            self.wal_size.clone(),
        );
    }

    /// Every series an alert or the dashboard selects on, at 0, before anything happened:
    /// `time() - callsync_last_success_timestamp_seconds` fires for a schedule that never
    /// synced, and a rate over a counter needs the counter.
    fn start_at_zero(&self, schedules: &[Uuid], names: &Names, kinds: &[&'static str]) {
        for schedule in schedules {
            self.schedule_info
                .get_or_create(&ScheduleInfoLabels {
                    schedule: schedule.to_string(),
                    name: names.get(schedule).cloned().unwrap_or_default(),
                })
                .set(1);
            let label = ScheduleLabel {
                schedule: schedule.to_string(),
            };
            let _ = self.last_success.get_or_create(&label);
            let _ = self.pass_progress.get_or_create(&label);
            let _ = self.behind.get_or_create(&label);
            let _ = self.failed.get_or_create(&label);
        }
        for kind in kinds {
            let _ = self.pass_duration.get_or_create(&KindLabel { kind });
            // Every result a pass ends with, so each has a series (at 0) from start-up.
            for result in PassResult::labels() {
                let _ = self.passes.get_or_create(&PassLabels { kind, result });
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
    /// Passes in a row that held a tie group, and the latest's earliest held group; `None`
    /// once a pass held none (its series read 0 at the next scrape, then go).
    held: BTreeMap<Uuid, Option<(i64, HeldGroup)>>,
    freshness: BTreeMap<Uuid, Freshness>,
    /// Schedules whose `freshness` has a `busy` pass: counted as they change, as the status
    /// line after every pass asks for it (counting them there was a walk over every schedule
    /// a pass: at 10,000 schedules, most of the daemon's time in an idle tick).
    busy_passes: usize,
}

impl Figures {
    /// Sets or clears the pass `schedule` runs, keeping [`Figures::busy_passes`].
    fn set_busy(&mut self, schedule: Uuid, busy: Option<Busy>) -> &mut Freshness {
        let fresh = self.freshness.entry(schedule).or_default();
        match (fresh.busy.is_some(), busy.is_some()) {
            (false, true) => self.busy_passes += 1,
            (true, false) => self.busy_passes -= 1,
            _ => {}
        }
        fresh.busy = busy;
        fresh
    }

    fn progressed(&mut self, schedule: Uuid) {
        let fresh = self.freshness.entry(schedule).or_default();
        fresh.progressed = true;
        fresh.slowest = fresh.slowest.max(fresh.idle_ticks);
        fresh.idle_ticks = 0;
    }
}

/// Progress of one schedule between sync ticks.
#[derive(Default)]
struct Freshness {
    /// A pass completed, a page committed or a request answered since the last tick.
    progressed: bool,
    /// Ticks in a row that found no progress.
    idle_ticks: u32,
    /// The running pass's own cadence: the most ticks in a row it went without progress
    /// before moving again (a Retry-After pause, a slow page). 0 between passes.
    slowest: u32,
    /// The pass the daemon has started for the schedule, until it ends.
    busy: Option<Busy>,
}

impl Freshness {
    /// Sync ticks without progress after which the schedule is stale: [`STALE_INTERVALS`];
    /// for a running pass, more than twice its own slowest stretch so far, up to
    /// [`MOST_QUIET_TICKS`] — a slow but moving pass is judged against its own cadence.
    fn allowed_ticks(&self) -> u32 {
        match self.busy {
            Some(busy) if busy.running => {
                (2 * self.slowest + 1).clamp(STALE_INTERVALS, MOST_QUIET_TICKS.max(STALE_INTERVALS))
            }
            _ => STALE_INTERVALS,
        }
    }
}

/// A schedule without progress for more sync ticks than it is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    pub schedule: Uuid,
    /// Sync ticks in a row without progress.
    pub ticks: u32,
    /// The most its running pass had gone without progress before (0: none running).
    pub slowest: u32,
}

/// A pass the daemon started and that has not ended yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub kind: &'static str,
    /// When the daemon started it (its task, which may first wait for a slot).
    pub since: Timestamp,
    /// It holds a pass slot (at most `sync.concurrency`) and reads; `false` while it waits.
    pub running: bool,
}

/// The configuration's names of schedules (`[[sync.schedule]] name`).
pub type Names = BTreeMap<Uuid, String>;

pub struct Metrics {
    figures: Mutex<Figures>,
    series: Series,
    schedules: Vec<Uuid>,
    names: Names,
}

impl Metrics {
    /// Metrics of `schedules`, named by `names` where the configuration names them, whose
    /// passes are of `kinds` (`incremental`, and `reconcile` when a reconcile cron is set),
    /// walked by `walker`: their series exist from now on.
    pub fn new(
        schedules: Vec<Uuid>,
        names: Names,
        kinds: &[&'static str],
        walker: &Walker,
    ) -> Self {
        let mut series = Series::new();
        series.registry.register(
            "daemon",
            "Which daemon this is (always 1): its host and its [daemon] instance name, as sync_runs records its passes (the label is `daemon`: Prometheus owns `instance`)",
            Info::new(vec![
                ("host", walker.host.clone()),
                ("daemon", walker.instance.clone()),
            ]),
        );
        series.start_at_zero(&schedules, &names, kinds);
        Metrics {
            figures: Mutex::default(),
            series,
            schedules,
            names,
        }
    }

    /// The daemon makes scheduled backups (`[backup]`): their series exist from now on,
    /// starting from `newest`, the newest backup already in the directory (its time and size),
    /// so a restart does not look like a missed backup; 0 when there is none.
    pub fn with_backups(mut self, newest: Option<(Timestamp, u64)>) -> Self {
        let backups = &self.series.backups;
        let registry = &mut self.series.registry;
        registry.register_with_unit(
            "backup_last_success_timestamp",
            "When the latest scheduled backup was made and checked (at start-up: the newest in backup.dir; 0: none)",
            Unit::Seconds,
            backups.last_success.clone(),
        );
        registry.register(
            "backup_failures",
            "Scheduled backups that failed (copy, check or directory)",
            backups.failures.clone(),
        );
        registry.register_with_unit(
            "backup_size",
            "Size of the latest scheduled backup made and checked",
            Unit::Bytes,
            backups.size.clone(),
        );
        if newest.is_some() {
            self.backup_ended(newest);
        }
        self
    }

    /// A scheduled backup ended: made and checked at `at` with `bytes`, or failed (`None`).
    pub fn backup_ended(&self, made: Option<(Timestamp, u64)>) {
        let backups = &self.series.backups;
        match made {
            Some((at, bytes)) => {
                backups.last_success.set(seconds(at));
                backups.size.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            None => {
                backups.failures.inc();
            }
        }
    }

    /// `schedule` as a person reads it: `name (uid)`, or the uid of an unnamed schedule.
    pub fn display(&self, schedule: Uuid) -> String {
        display(schedule, self.names.get(&schedule).map(String::as_str))
    }

    /// The configuration's name of `schedule`, if it gives one.
    pub fn name(&self, schedule: Uuid) -> Option<&str> {
        self.names.get(&schedule).map(String::as_str)
    }

    /// A sync tick fired: every schedule without progress since the previous one ages,
    /// except one whose pass waits for a slot (the daemon's own choice, not the schedule's
    /// fault: the passes holding the slots are watched themselves).
    pub fn sync_tick(&self) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        for schedule in &self.schedules {
            let fresh = f.freshness.entry(*schedule).or_default();
            if std::mem::take(&mut fresh.progressed) {
                fresh.idle_ticks = 0;
            } else if fresh.busy.is_none_or(|busy| busy.running) {
                fresh.idle_ticks += 1;
            }
        }
    }

    /// The daemon started a pass of `schedule` (it may wait for a slot first).
    pub fn pass_started(&self, schedule: Uuid, kind: &'static str) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        let busy = Busy {
            kind,
            since: Timestamp::now(),
            running: false,
        };
        f.set_busy(schedule, Some(busy)).slowest = 0;
    }

    /// The pass of `schedule` got its slot and starts reading: from here the ticks without
    /// a committed page count again (starting is no progress: a failing schedule's passes
    /// start too).
    pub fn pass_running(&self, schedule: Uuid) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(busy) = &mut f.freshness.entry(schedule).or_default().busy {
            busy.running = true;
        }
    }

    /// The pass of `schedule` has ended, whether or not it reported (a panicked task).
    pub fn pass_gone(&self, schedule: Uuid) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.not_busy(&mut f, schedule);
    }

    /// `schedule` runs no pass: its cadence and progress series start again at the next.
    fn not_busy(&self, f: &mut Figures, schedule: Uuid) {
        f.set_busy(schedule, None).slowest = 0;
        self.series
            .pass_progress
            .get_or_create(&ScheduleLabel {
                schedule: schedule.to_string(),
            })
            .set(0.0);
    }

    /// The passes running or waiting for a slot, in the configured order.
    pub fn busy(&self) -> Vec<(Uuid, Busy)> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.schedules
            .iter()
            .filter_map(|s| Some((*s, f.freshness.get(s)?.busy?)))
            .collect()
    }

    /// How many passes [`Self::busy`] would list, without listing them.
    pub fn busy_count(&self) -> usize {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        f.busy_passes
    }

    /// A page of `schedule` was committed, or a request of its pass answered.
    pub fn progressed(&self, schedule: Uuid) {
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        f.progressed(schedule);
        if f.freshness.get(&schedule).is_some_and(|h| h.busy.is_some()) {
            self.series
                .pass_progress
                .get_or_create(&ScheduleLabel {
                    schedule: schedule.to_string(),
                })
                .set(seconds(Timestamp::now()));
        }
    }

    /// A pass ended. Its requests were counted as they were answered ([`RequestObserver`]).
    pub fn record(&self, report: &PassReport) {
        let series = &self.series;
        let result = report.result.label();
        let schedule = report.schedule.to_string();
        let label = ScheduleLabel {
            schedule: schedule.clone(),
        };
        let kind = report.kind.as_str();
        series
            .passes
            .get_or_create(&PassLabels { kind, result })
            .inc();
        if !matches!(report.result, PassResult::Skipped(_)) {
            let secs = report.duration.as_secs_f64();
            series
                .pass_duration
                .get_or_create(&KindLabel { kind })
                .observe(secs);
            series.last_duration.get_or_create(&label).set(secs);
        }
        match report.result {
            PassResult::Failed { .. } => {
                series.failed.get_or_create(&label).inc();
            }
            PassResult::Completed | PassResult::Behind => {
                series.failed.get_or_create(&label).set(0);
            }
            PassResult::Interrupted | PassResult::ClaimLost(_) | PassResult::Skipped(_) => {}
        }
        series.pages.inc_by(report.stats.pages);
        series.calls_written.inc_by(report.stats.calls_written);
        series.retries.inc_by(report.stats.retries);
        series
            .throttled
            .inc_by(report.stats.throttled_ms as f64 / 1000.0);
        let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.not_busy(&mut f, report.schedule);
        // Another process held the schedule, or another daemon walked it since the tick: it
        // is being walked, by someone else; this daemon's `/healthz` does not wait for it.
        if matches!(report.result, PassResult::Skipped(_)) {
            f.progressed(report.schedule);
        }
        if report.succeeded() {
            series
                .last_success
                .get_or_create(&label)
                .set(seconds(Timestamp::now()));
            f.progressed(report.schedule);
            let behind = f.behind.entry(report.schedule).or_default();
            *behind = match report.result {
                PassResult::Behind => (behind.0 + 1, report.slowed_by()),
                _ => (0, Vec::new()),
            };
            // Only schedules that held a group have these series (none at 10,000 quiet ones).
            let held = report.held_groups.iter().min_by_key(|h| h.at).copied();
            match (held, f.held.get_mut(&report.schedule)) {
                (Some(group), Some(entry)) => {
                    *entry = Some((entry.map_or(1, |(n, _)| n + 1), group));
                }
                (Some(group), None) => {
                    f.held.insert(report.schedule, Some((1, group)));
                }
                (None, Some(entry)) => *entry = None,
                (None, None) => {}
            }
        }
        if let Some(lag) = report.lag_secs {
            f.lag
                .insert(report.schedule, (lag, std::time::Instant::now()));
        }
    }

    /// The exposition (OpenMetrics text, with the `process_*` series), with the figures read
    /// at scrape time updated first: the lag grown since its pass, the warehouse's and WAL's
    /// sizes.
    pub fn render(&self, warehouse: &Path) -> String {
        let series = &self.series;
        {
            let mut f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
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
            for (schedule, held) in &f.held {
                let label = ScheduleLabel {
                    schedule: schedule.to_string(),
                };
                let (calls, at) =
                    held.map_or((0, 0.0), |(_, h)| (i64::from(h.size), seconds(h.at)));
                series.held_calls.get_or_create(&label).set(calls);
                series.held_at.get_or_create(&label).set(at);
            }
            // Read 0 once: the entry of a schedule that no longer holds a group goes.
            f.held.retain(|_, held| held.is_some());
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
        let encoded =
            prometheus_client::encoding::text::encode_registry(&mut out, &series.registry)
                .and_then(|()| {
                    out.push_str(&super::exposition::process_series());
                    prometheus_client::encoding::text::encode_eof(&mut out)
                });
        if let Err(err) = encoded {
            // Writing into a String does not fail; should the library ever, say so.
            tracing::warn!(error = %err, "cannot encode the metrics");
        }
        out
    }

    /// Schedules whose latest pass held a tie group: how many passes in a row did, and the
    /// latest's earliest group.
    pub fn holding(&self) -> Vec<(Uuid, i64, HeldGroup)> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        f.held
            .iter()
            .filter_map(|(s, held)| held.map(|(n, h)| (*s, n, h)))
            .collect()
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

    /// Schedules without progress for as many sync ticks as they are allowed: `STALE_INTERVALS`,
    /// or a running pass's own cadence ([`Freshness::allowed_ticks`]).
    pub fn stale(&self) -> Vec<Stale> {
        let f = self.figures.lock().unwrap_or_else(|p| p.into_inner());
        self.schedules
            .iter()
            .filter_map(|s| {
                let h = f.freshness.get(s)?;
                (h.idle_ticks >= h.allowed_ticks()).then_some(Stale {
                    schedule: *s,
                    ticks: h.idle_ticks,
                    slowest: h.slowest,
                })
            })
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

/// `name (uid)`, or the uid alone.
pub fn display(schedule: Uuid, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} ({schedule})"),
        None => schedule.to_string(),
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

/// A pass of `schedule` that ended with `result`, as the daemon reports it: for tests here and
/// in `endpoint.rs`.
#[cfg(test)]
pub(super) fn report(schedule: Uuid, result: PassResult) -> PassReport {
    PassReport {
        schedule,
        kind: crate::warehouse::RunKind::Incremental,
        stats: Default::default(),
        statuses: Default::default(),
        result,
        position: None,
        horizon: None,
        lag_secs: Some(1.5),
        clock: None,
        date_skew_secs: None,
        duration: Duration::from_millis(42),
        run: None,
        unstable_tie_order: false,
        held_groups: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample lines of an exposition, and those naming a schedule.
    fn count_series(metrics: &Metrics) -> (usize, usize) {
        let text = metrics.render(Path::new("/nonexistent/w.db"));
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let per_schedule = samples.iter().filter(|l| l.contains("schedule=\"")).count();
        (samples.len(), per_schedule)
    }

    #[test]
    fn series_per_schedule_stay_seven_from_one_to_a_thousand_schedules() {
        let series_of = |n: u128| {
            let schedules: Vec<Uuid> = (1..=n).map(Uuid::from_u128).collect();
            let names = schedules
                .iter()
                .map(|s| (*s, format!("Week {s}")))
                .collect();
            let metrics = Metrics::new(
                schedules.clone(),
                names,
                &["incremental", "reconcile"],
                &Walker::this_process(None),
            );
            let at_start_up = count_series(&metrics);
            for (i, s) in schedules.iter().enumerate() {
                let result = match i % 3 {
                    0 => PassResult::Completed,
                    1 => PassResult::Behind,
                    _ => PassResult::Failed {
                        kind: crate::ErrorKind::Service,
                        error: "HTTP 500".into(),
                    },
                };
                metrics.record(&report(*s, result));
            }
            (at_start_up, count_series(&metrics))
        };
        let ((_, one_at_start), (one_total, one)) = series_of(1);
        assert_eq!((one_at_start, one), (5, SERIES_PER_SCHEDULE));
        let ((_, thousand_at_start), (thousand_total, thousand)) = series_of(1000);
        assert_eq!(thousand_at_start, 5000);
        assert_eq!(thousand, 1000 * SERIES_PER_SCHEDULE);
        // Nothing else grows with the schedules: passes and durations are labelled by kind.
        assert_eq!(thousand_total - thousand, one_total - one);
        // docs/monitor.md, "Series per schedule", states these figures (6 of them `process_*`).
        assert_eq!((one_total - one, thousand_total), (87, 7087));
    }

    /// The count the status line shows follows the passes started and ended, whichever way
    /// they end (reported, then gone; or gone without a report, as a panicked task).
    #[test]
    fn the_busy_count_is_the_passes_started_and_not_ended() {
        let schedules: Vec<Uuid> = (1..=3).map(Uuid::from_u128).collect();
        let metrics = Metrics::new(
            schedules.clone(),
            Names::new(),
            &["incremental"],
            &Walker::this_process(None),
        );
        let counted = |expected: usize| {
            assert_eq!(metrics.busy_count(), expected);
            assert_eq!(metrics.busy().len(), expected);
        };
        counted(0);
        for s in &schedules {
            metrics.pass_started(*s, "incremental");
        }
        // A second start of a running pass (a queued reconciliation) counts it once.
        metrics.pass_started(schedules[0], "reconcile");
        metrics.pass_running(schedules[0]);
        counted(3);
        metrics.record(&report(schedules[0], PassResult::Completed));
        metrics.pass_gone(schedules[0]);
        counted(2);
        metrics.pass_gone(schedules[1]);
        metrics.pass_gone(schedules[1]);
        counted(1);
        metrics.progressed(schedules[1]);
        counted(1);
    }

    #[test]
    fn every_pass_result_has_its_series_from_start_up() {
        let metrics = Metrics::new(
            vec![Uuid::from_u128(1)],
            Names::new(),
            &["incremental"],
            &Walker::this_process(None),
        );
        let text = metrics.render(Path::new("/nonexistent/w.db"));
        let results = [
            PassResult::Completed,
            PassResult::Behind,
            PassResult::Interrupted,
            PassResult::Skipped(crate::sync::Skip::Busy {
                schedule: Uuid::from_u128(1),
                destination: "w.db".into(),
            }),
            PassResult::Failed {
                kind: crate::ErrorKind::Service,
                error: "HTTP 500".into(),
            },
        ];
        for result in results {
            let series = format!(
                "callsync_passes_total{{kind=\"incremental\",result=\"{}\"}} 0\n",
                result.label()
            );
            assert!(text.contains(&series), "{series} missing from:\n{text}");
        }
        assert_eq!(PassResult::labels().count(), 5);
    }

    #[test]
    fn the_pass_duration_buckets_go_from_1_ms_to_10_min_by_kind_only() {
        let metrics = Metrics::new(
            vec![Uuid::from_u128(1)],
            Names::new(),
            &["incremental"],
            &Walker::this_process(None),
        );
        metrics.record(&report(Uuid::from_u128(1), PassResult::Completed));
        let text = metrics.render(Path::new("/nonexistent/w.db"));
        let buckets: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("callsync_pass_duration_seconds_bucket"))
            .collect();
        assert_eq!(buckets.len(), PASS_DURATION_BUCKETS.len() + 1, "{text}");
        assert_eq!(
            buckets[0],
            "callsync_pass_duration_seconds_bucket{le=\"0.001\",kind=\"incremental\"} 0"
        );
        assert!(buckets.contains(
            &"callsync_pass_duration_seconds_bucket{le=\"0.05\",kind=\"incremental\"} 1"
        ));
        assert_eq!(
            buckets[PASS_DURATION_BUCKETS.len() - 1],
            "callsync_pass_duration_seconds_bucket{le=\"600.0\",kind=\"incremental\"} 1"
        );
        assert!(text.contains(&format!(
            "callsync_schedule_info{{schedule=\"{}\",name=\"\"}} 1",
            Uuid::from_u128(1)
        )));
        assert!(text.contains(&format!(
            "callsync_last_pass_duration_seconds{{schedule=\"{}\"}} 0.042",
            Uuid::from_u128(1)
        )));
    }
}
