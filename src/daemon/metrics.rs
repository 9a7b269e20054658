//! Prometheus metrics for the daemon: the series `/metrics` serves and the figures `/healthz`
//! judges by (both served by `endpoint.rs`). The series and their labels are `series.rs`'s;
//! the per-schedule states `/healthz` judges are `freshness.rs`'s, pure.
//!
//! The figures come from the pass reports the daemon already receives: passes by kind and
//! result, pages, calls written, requests by status, retries, and per schedule only what an alert
//! needs — the last success, the last pass's duration, the lag (how far the cursor is behind
//! the service's clock), how many passes in a row ended behind or failed — plus one
//! `callsync_schedule_info{schedule, name}` series that queries join for the name
//! (`series::SERIES_PER_SCHEDULE`: the count stays flat as schedules grow to ten thousand).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Unit;
use uuid::Uuid;

use crate::api::RequestObserver;
use crate::service::Timestamp;
use crate::sync::{HeldGroup, PassReport, PassResult};
use crate::warehouse::{FALLING_BEHIND_PASSES, ProcessIdentity};

mod freshness;
mod series;

use freshness::ScheduleStates;
pub use freshness::{Busy, STALE_INTERVALS, Stale};
pub use series::Names;
use series::{KindLabel, PassLabels, ScheduleLabel, Series, StatusLabel};

pub struct Metrics {
    states: Mutex<ScheduleStates>,
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
        walker: &ProcessIdentity,
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
            states: Mutex::default(),
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
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(busy) = &mut f.freshness.entry(schedule).or_default().busy {
            busy.running = true;
        }
    }

    /// The pass of `schedule` has ended, whether or not it reported (a panicked task).
    pub fn pass_gone(&self, schedule: Uuid) {
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        self.not_busy(&mut f, schedule);
    }

    /// `schedule` runs no pass: its cadence and progress series start again at the next.
    fn not_busy(&self, f: &mut ScheduleStates, schedule: Uuid) {
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
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        self.schedules
            .iter()
            .filter_map(|s| Some((*s, f.freshness.get(s)?.busy?)))
            .collect()
    }

    /// How many passes [`Self::busy`] would list, without listing them.
    pub fn busy_count(&self) -> usize {
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f.busy_passes
    }

    /// A page of `schedule` was committed, or a request of its pass answered.
    pub fn progressed(&self, schedule: Uuid) {
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
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
        if let Some(calls) = report.set_aside {
            let calls = i64::try_from(calls).unwrap_or(i64::MAX);
            series.set_aside.get_or_create(&label).set(calls);
        }
        series.pages.inc_by(report.stats.pages);
        series.calls_written.inc_by(report.stats.calls_written);
        series.retries.inc_by(report.stats.retries);
        series
            .throttled
            .inc_by(report.stats.throttled_ms as f64 / 1000.0);
        let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        match report.set_aside {
            Some(0) => drop(f.set_aside.remove(&report.schedule)),
            Some(calls) => drop(f.set_aside.insert(report.schedule, calls)),
            None => {}
        }
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
            let mut f = self.states.lock().unwrap_or_else(|p| p.into_inner());
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
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f.held
            .iter()
            .filter_map(|(s, held)| held.map(|(n, h)| (*s, n, h)))
            .collect()
    }

    /// Schedules with calls set aside, and how many, as their latest pass that counted them
    /// saw.
    pub fn setting_aside(&self) -> Vec<(Uuid, u64)> {
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f.set_aside.iter().map(|(s, n)| (*s, *n)).collect()
    }

    /// Schedules falling behind, each with what slowed its latest pass down.
    pub fn falling_behind(&self) -> Vec<(Uuid, Vec<&'static str>)> {
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f.behind
            .iter()
            .filter(|(_, (n, _))| *n >= FALLING_BEHIND_PASSES)
            .map(|(s, (_, why))| (*s, why.clone()))
            .collect()
    }

    /// Schedules without progress for as many sync ticks as they are allowed: `STALE_INTERVALS`,
    /// or a running pass's own cadence ([`Freshness::allowed_ticks`]).
    pub fn stale(&self) -> Vec<Stale> {
        let f = self.states.lock().unwrap_or_else(|p| p.into_inner());
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
        set_aside: None,
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
                &ProcessIdentity::this_process(None),
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
        assert_eq!((one_at_start, one), (5, series::SERIES_PER_SCHEDULE));
        let ((_, thousand_at_start), (thousand_total, thousand)) = series_of(1000);
        assert_eq!(thousand_at_start, 5000);
        assert_eq!(thousand, 1000 * series::SERIES_PER_SCHEDULE);
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
            &ProcessIdentity::this_process(None),
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
            &ProcessIdentity::this_process(None),
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
            &ProcessIdentity::this_process(None),
        );
        metrics.record(&report(Uuid::from_u128(1), PassResult::Completed));
        let text = metrics.render(Path::new("/nonexistent/w.db"));
        let buckets: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("callsync_pass_duration_seconds_bucket"))
            .collect();
        assert_eq!(
            buckets.len(),
            series::PASS_DURATION_BUCKETS.len() + 1,
            "{text}"
        );
        assert_eq!(
            buckets[0],
            "callsync_pass_duration_seconds_bucket{le=\"0.001\",kind=\"incremental\"} 0"
        );
        assert!(buckets.contains(
            &"callsync_pass_duration_seconds_bucket{le=\"0.05\",kind=\"incremental\"} 1"
        ));
        assert_eq!(
            buckets[series::PASS_DURATION_BUCKETS.len() - 1],
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
