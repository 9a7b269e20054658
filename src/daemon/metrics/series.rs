//! The series `/metrics` serves, registered once with the client library: their labels, their
//! buckets, and which exist from start-up (at 0) so that alerts and the dashboard find them.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use uuid::Uuid;

use crate::sync::PassResult;

/// The configuration's names of schedules (`[[sync.schedule]] name`).
pub type Names = BTreeMap<Uuid, String>;

/// Statuses whose request counters exist (at 0) before any request: what alerts and the
/// dashboard select on.
pub(super) const STATUSES_FROM_START: [u16; 2] = [200, 429];

/// Kinds of failed requests (`callsync_request_errors_total{kind}`).
pub(super) const ERROR_KINDS: [&str; 3] = ["transport", "client_error", "server_error"];

/// The series each configured schedule adds, once it has run a pass: `schedule_info`,
/// `last_success_timestamp_seconds`, `pass_progress_timestamp_seconds`, `behind_passes`,
/// `failed_passes` (from start-up), `last_pass_duration_seconds` and `lag_seconds` (from its
/// first pass). Counted by a test.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the figure a test and docs/monitor.md state")
)]
pub(super) const SERIES_PER_SCHEDULE: usize = 7;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PassLabels {
    pub(super) kind: &'static str,
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScheduleLabel {
    pub(super) schedule: String,
}

/// `callsync_schedule_info`: the name a person reads, joined in queries
/// (`* on (instance, job, schedule) group_left (name) callsync_schedule_info`) rather than
/// carried by every series. An unnamed schedule's `name` is empty, which Prometheus treats as
/// no label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScheduleInfoLabels {
    pub(super) schedule: String,
    pub(super) name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StatusLabel {
    pub(super) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: &'static str,
}

pub(super) type FloatGauge = Gauge<f64, AtomicU64>;
pub(super) type FloatCounter = Counter<f64, AtomicU64>;
pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Upper bounds of the pass-duration buckets: 1 ms to 10 min, 1-2.5-5 steps below a minute.
/// Passes seen in the field took 3 to 558 ms; a longer one lands in `+Inf` and still counts.
pub(super) const PASS_DURATION_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];

pub(super) fn pass_duration_histogram() -> Histogram {
    Histogram::new(PASS_DURATION_BUCKETS)
}

pub(super) fn request_duration_histogram() -> Histogram {
    // 5 ms to about 20 s (`api.request_timeout_secs` is 30 by default).
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// The series `/metrics` shows, registered once with the client library.
pub(super) struct Series {
    pub(super) registry: Registry,
    pub(super) schedule_info: Family<ScheduleInfoLabels, Gauge>,
    pub(super) passes: Family<PassLabels, Counter>,
    pub(super) pass_duration: HistogramFamily<KindLabel>,
    pub(super) pages: Counter,
    pub(super) calls_written: Counter,
    pub(super) retries: Counter,
    pub(super) throttled: FloatCounter,
    pub(super) requests: Family<StatusLabel, Counter>,
    pub(super) request_errors: Family<KindLabel, Counter>,
    pub(super) request_duration: Histogram,
    pub(super) last_success: Family<ScheduleLabel, FloatGauge>,
    pub(super) pass_progress: Family<ScheduleLabel, FloatGauge>,
    pub(super) last_duration: Family<ScheduleLabel, FloatGauge>,
    pub(super) lag: Family<ScheduleLabel, FloatGauge>,
    pub(super) behind: Family<ScheduleLabel, Gauge>,
    pub(super) failed: Family<ScheduleLabel, Gauge>,
    /// Only for schedules that held a tie group since start-up.
    pub(super) held_calls: Family<ScheduleLabel, Gauge>,
    pub(super) set_aside: Family<ScheduleLabel, Gauge>,
    pub(super) held_at: Family<ScheduleLabel, FloatGauge>,
    pub(super) warehouse_size: Gauge,
    pub(super) wal_size: Gauge,
    pub(super) backups: BackupSeries,
}

/// `[backup]`'s series, registered only when the daemon makes backups.
#[derive(Default)]
pub(super) struct BackupSeries {
    pub(super) last_success: FloatGauge,
    pub(super) failures: Counter,
    pub(super) size: Gauge,
}

impl Series {
    pub(super) fn new() -> Self {
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
            set_aside: Family::default(),
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
    pub(super) fn register_pass_series(&self, registry: &mut Registry) {
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
    pub(super) fn register_schedule_series(&self, registry: &mut Registry) {
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
        registry.register(
            "set_aside_calls",
            "Calls the service listed that callsync set aside (set_aside_calls: a field that does not fit, or a uid another schedule's call has), as the latest pass that wrote counted them",
            self.set_aside.clone(),
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
    pub(super) fn start_at_zero(&self, schedules: &[Uuid], names: &Names, kinds: &[&'static str]) {
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
