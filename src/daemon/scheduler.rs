//! Ticks: tokio-cron-scheduler fires them (in UTC); we count them and notice when they stop.
//!
//! The scheduler crate only triggers: each firing sends a [`Tick`] on a channel and records
//! the time. It has open reports of jobs that stop firing, so [`TickClock`] knows when the
//! last firing *should* have happened (from the same cron expression, via croner) and
//! reports a stall; the daemon then stops feeding systemd's watchdog, and systemd restarts it.
//!
//! The daemon takes its ticks from a [`TickSource`]: the cron jobs, or a test's
//! [`TickDriver`], which sends ticks by hand, learns which passes each one started and receives
//! every pass's report, so that a daemon test runs without a wall clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio_cron_scheduler::{Job, JobScheduler};
use uuid::Uuid;

use crate::config::CronSchedule;
use crate::service::Timestamp;
use crate::sync::PassReport;

/// How late a firing may be before the scheduler counts as stalled.
pub const STALL_GRACE: Duration = Duration::from_secs(30);

/// What a cron job asks the daemon to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Sync,
    Reconcile,
    /// `[backup] cron`: a scheduled backup of the warehouse, no pass.
    Backup,
}

impl Tick {
    pub fn as_str(self) -> &'static str {
        match self {
            Tick::Sync => "sync",
            Tick::Reconcile => "reconcile",
            Tick::Backup => "backup",
        }
    }

    /// The configuration key of its cron.
    fn key(self) -> &'static str {
        match self {
            Tick::Sync => "sync.cron",
            Tick::Reconcile => "sync.reconcile_cron",
            Tick::Backup => "backup.cron",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("cannot schedule {what} with cron {cron:?}")]
    Job {
        what: &'static str,
        cron: String,
        #[source]
        source: tokio_cron_scheduler::JobSchedulerError,
    },
    #[error("cannot start the scheduler")]
    Start(#[source] tokio_cron_scheduler::JobSchedulerError),
}

/// Remembers when sync ticks fired, to tell a stalled scheduler from a quiet one.
#[derive(Clone)]
pub struct TickClock {
    cron: Arc<CronSchedule>,
    last: Arc<Mutex<DateTime<Utc>>>,
}

impl TickClock {
    pub fn new(cron: &CronSchedule) -> Self {
        TickClock {
            cron: Arc::new(cron.clone()),
            last: Arc::new(Mutex::new(Utc::now())),
        }
    }

    pub fn fired(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Utc::now();
    }

    #[cfg(test)]
    pub fn last_for_tests(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The firing that should have happened more than `grace` ago but did not, if any.
    pub fn missed(&self, grace: Duration) -> Option<DateTime<Utc>> {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        let grace = chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
        let due = self.cron.next_after(&last)?;
        (due + grace < Utc::now()).then_some(due)
    }
}

/// How many times `cron` fired after `since` and up to `now` (UTC, as the daemon runs it),
/// counted up to `cap`: firings, not seconds, so a cron with quiet hours counts none of
/// them. For `status`, which tells a daemon that records no passes from a quiet one.
pub fn firings_between(cron: &CronSchedule, since: Timestamp, now: Timestamp, cap: u64) -> u64 {
    let utc = |t: Timestamp| i64::try_from(t.unix_nanos()).map(DateTime::from_timestamp_nanos);
    // Beyond chrono's range (after 2262): no firing is counted.
    let (Ok(since), Ok(now)) = (utc(since), utc(now)) else {
        return 0;
    };
    let mut count = 0;
    let mut after = since;
    while count < cap {
        match cron.next_after(&after) {
            Some(next) if next <= now => {
                count += 1;
                after = next;
            }
            _ => break,
        }
    }
    count
}

/// The `n`-th firing of `cron` after `since` (the first is `n` = 1); `None` beyond chrono's
/// range or when the cron fires no more.
pub fn nth_firing_after(cron: &CronSchedule, since: Timestamp, n: u64) -> Option<Timestamp> {
    let since = DateTime::from_timestamp_nanos(i64::try_from(since.unix_nanos()).ok()?);
    let mut at = since;
    for _ in 0..n {
        at = cron.next_after(&at)?;
    }
    let nanos = at.timestamp_nanos_opt()?;
    Timestamp::from_unix_nanos(i128::from(nanos))
}

/// Starts the cron jobs; each firing sends its tick on `ticks`.
pub async fn start(
    sync_cron: &CronSchedule,
    reconcile_cron: Option<&CronSchedule>,
    backup_cron: Option<&CronSchedule>,
    ticks: mpsc::Sender<Tick>,
    clock: TickClock,
) -> Result<JobScheduler, SchedulerError> {
    let scheduler = JobScheduler::new().await.map_err(SchedulerError::Start)?;
    let jobs = [
        (Some(sync_cron), Tick::Sync),
        (reconcile_cron, Tick::Reconcile),
        (backup_cron, Tick::Backup),
    ];
    for (cron, tick) in jobs {
        let Some(cron) = cron else { continue };
        let sender = ticks.clone();
        let clock = clock.clone();
        let job = Job::new_async_tz(cron.as_str(), Utc, move |_, _| {
            let sender = sender.clone();
            let clock = clock.clone();
            Box::pin(async move {
                if tick == Tick::Sync {
                    clock.fired();
                }
                // A full channel means the daemon is behind; that tick is dropped, not queued.
                let _ = sender.try_send(tick);
            })
        })
        .map_err(|source| SchedulerError::Job {
            what: tick.key(),
            cron: cron.to_string(),
            source,
        })?;
        scheduler
            .add(job)
            .await
            .map_err(|source| SchedulerError::Job {
                what: "a job",
                cron: cron.to_string(),
                source,
            })?;
    }
    scheduler.start().await.map_err(SchedulerError::Start)?;
    Ok(scheduler)
}

/// Where the daemon's ticks come from.
pub enum TickSource {
    /// `sync.cron` and `sync.reconcile_cron`, fired by tokio-cron-scheduler: `callsync run`.
    Cron,
    /// Ticks sent by hand with the [`TickDriver`] of [`TickSource::manual`] (tests).
    Manual(ManualTicks),
}

/// What the daemon did with a tick: the schedules whose pass it started, and how many pass
/// reports it had sent before (the passes it started report after those).
type Ack = (Vec<Uuid>, usize);

/// The daemon's end of a [`TickDriver`].
pub struct ManualTicks {
    startup: oneshot::Sender<Ack>,
    ticks: mpsc::Receiver<(Tick, oneshot::Sender<Ack>)>,
    reports: mpsc::UnboundedSender<PassReport>,
}

impl TickSource {
    /// A source of ticks sent by hand, and the driver that sends them.
    pub fn manual() -> (TickSource, TickDriver) {
        let (startup_tx, startup) = oneshot::channel();
        let (tick_tx, ticks) = mpsc::channel(1);
        let (report_tx, reports) = mpsc::unbounded_channel();
        let source = TickSource::Manual(ManualTicks {
            startup: startup_tx,
            ticks,
            reports: report_tx,
        });
        let driver = TickDriver {
            startup: Some(startup),
            ticks: tick_tx,
            reports,
            received: 0,
            running: Vec::new(),
        };
        (source, driver)
    }
}

/// Ticks a daemon by hand and hears how its passes end, so that a test waits for passes,
/// never for a clock.
pub struct TickDriver {
    /// What the daemon's start-up tick started, until it is known.
    startup: Option<oneshot::Receiver<Ack>>,
    ticks: mpsc::Sender<(Tick, oneshot::Sender<Ack>)>,
    reports: mpsc::UnboundedReceiver<PassReport>,
    /// Reports received so far.
    received: usize,
    /// Each pass a tick started and has not reported: its schedule, and how many reports
    /// the daemon had sent before the tick (the pass's own report comes after those).
    running: Vec<(Uuid, usize)>,
}

impl TickDriver {
    /// Sends `tick` and waits until the daemon has acted on it; returns the schedules whose
    /// pass it started (none for a busy or backing-off schedule, and none once the daemon
    /// stopped — it may stop on this very tick, if its warehouse is gone).
    pub async fn tick(&mut self, tick: Tick) -> Vec<Uuid> {
        self.started_up().await;
        let (reply, ack) = oneshot::channel();
        if self.ticks.send((tick, reply)).await.is_err() {
            return Vec::new();
        }
        let (started, before) = ack.await.unwrap_or_default();
        self.running.extend(started.iter().map(|s| (*s, before)));
        started
    }

    /// The report of the next pass to end, in the order they end (the start-up passes
    /// first); `None` once the daemon has stopped and every report was taken.
    pub async fn report(&mut self) -> Option<PassReport> {
        self.started_up().await;
        let report = self.reports.recv().await?;
        let sent_before = self.received;
        self.received += 1;
        // Its own pass, not a later one: a pass started by a tick reports after the reports
        // the daemon had sent before it acted on the tick.
        if let Some(at) = self
            .running
            .iter()
            .position(|(s, before)| *s == report.schedule && *before <= sent_before)
        {
            self.running.remove(at);
        }
        Some(report)
    }

    /// How many passes started by the start-up tick or a tick sent have not reported yet
    /// (a reconciliation a busy schedule queued is not among them: it started later).
    pub async fn running(&mut self) -> usize {
        self.started_up().await;
        self.running.len()
    }

    async fn started_up(&mut self) {
        if let Some(startup) = self.startup.take() {
            let (started, before) = startup.await.unwrap_or_default();
            self.running.extend(started.iter().map(|s| (*s, before)));
        }
    }
}

/// The ticks the daemon's loop receives, from whichever source: first the start-up tick (a
/// pass of every schedule), then the source's.
pub(super) struct Ticks {
    source: Source,
    clock: TickClock,
    /// Pass reports sent to a [`TickDriver`].
    reports_sent: usize,
}

enum Source {
    Cron {
        /// The start-up tick is still to come.
        startup: bool,
        scheduler: JobScheduler,
        ticks: mpsc::Receiver<Tick>,
    },
    Manual {
        /// Where to say what the start-up tick started, until it came.
        startup: Option<oneshot::Sender<Ack>>,
        ticks: mpsc::Receiver<(Tick, oneshot::Sender<Ack>)>,
        reports: mpsc::UnboundedSender<PassReport>,
    },
}

/// Where the daemon says which schedules a tick started, when a [`TickDriver`] sent it.
pub(super) struct Started(Option<(oneshot::Sender<Ack>, usize)>);

impl Started {
    pub fn reply(self, schedules: Vec<Uuid>) {
        if let Some((reply, reports_before)) = self.0 {
            let _ = reply.send((schedules, reports_before));
        }
    }
}

impl Ticks {
    pub async fn start(
        source: TickSource,
        sync_cron: &CronSchedule,
        reconcile_cron: Option<&CronSchedule>,
        backup_cron: Option<&CronSchedule>,
        clock: TickClock,
    ) -> Result<Ticks, SchedulerError> {
        let source = match source {
            TickSource::Cron => {
                let (tick_tx, ticks) = mpsc::channel(4);
                let scheduler = start(
                    sync_cron,
                    reconcile_cron,
                    backup_cron,
                    tick_tx,
                    clock.clone(),
                )
                .await?;
                Source::Cron {
                    startup: true,
                    scheduler,
                    ticks,
                }
            }
            TickSource::Manual(manual) => Source::Manual {
                startup: Some(manual.startup),
                ticks: manual.ticks,
                reports: manual.reports,
            },
        };
        Ok(Ticks {
            source,
            clock,
            reports_sent: 0,
        })
    }

    /// The next tick; `None` when the source has closed (a dropped [`TickDriver`]).
    pub async fn next(&mut self) -> Option<(Tick, Started)> {
        let before = self.reports_sent;
        match &mut self.source {
            Source::Cron { startup, ticks, .. } => {
                if std::mem::take(startup) {
                    return Some((Tick::Sync, Started(None)));
                }
                ticks.recv().await.map(|tick| (tick, Started(None)))
            }
            Source::Manual { startup, ticks, .. } => {
                if let Some(reply) = startup.take() {
                    return Some((Tick::Sync, Started(Some((reply, before)))));
                }
                let (tick, reply) = ticks.recv().await?;
                if tick == Tick::Sync {
                    // As a cron firing would: the watchdog is fed while ticks come.
                    self.clock.fired();
                }
                Some((tick, Started(Some((reply, before)))))
            }
        }
    }

    /// A pass ended: a test driving the ticks hears of it.
    pub fn pass_ended(&mut self, report: PassReport) {
        if let Source::Manual { reports, .. } = &self.source {
            self.reports_sent += 1;
            let _ = reports.send(report);
        }
    }

    /// No more ticks: the cron jobs stop.
    pub async fn stop(&mut self) {
        if let Source::Cron { scheduler, .. } = &mut self.source {
            let _ = scheduler.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::RunKind;

    fn ended(schedule: Uuid) -> PassReport {
        crate::daemon::dispatcher::not_started(schedule, RunKind::Incremental)
    }

    /// The daemon's side in order: the start-up pass of `a` ends, then a reconciliation it had
    /// queued (no tick started it), then a tick starts a pass that ends at once.
    #[tokio::test]
    async fn the_driver_waits_for_the_pass_a_tick_started_not_for_one_before() {
        let a = Uuid::from_u128(1);
        let (source, mut driver) = TickSource::manual();
        let clock = TickClock::new(&every_second());
        let mut ticks = Ticks::start(source, &every_second(), None, None, clock)
            .await
            .unwrap();
        let daemon = tokio::spawn(async move {
            let (tick, started) = ticks.next().await.unwrap();
            assert_eq!(tick, Tick::Sync);
            started.reply(vec![a]);
            ticks.pass_ended(ended(a));
            ticks.pass_ended(ended(a));
            let (tick, started) = ticks.next().await.unwrap();
            assert_eq!(tick, Tick::Sync);
            started.reply(vec![a]);
            ticks.pass_ended(ended(a));
        });
        assert_eq!(driver.tick(Tick::Sync).await, [a]);
        daemon.await.unwrap();
        assert_eq!(driver.running().await, 2);
        driver.report().await.unwrap();
        assert_eq!(driver.running().await, 1, "the start-up pass ended");
        driver.report().await.unwrap();
        assert_eq!(driver.running().await, 1, "the tick's pass has not");
        driver.report().await.unwrap();
        assert_eq!(driver.running().await, 0);
        assert!(driver.report().await.is_none(), "the daemon is gone");
    }

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn firings_are_counted_between_two_instants_not_estimated_from_seconds() {
        let every_5_min = &cron("0 */5 * * * *");
        let count = |cron, since, now, cap| firings_between(cron, ts(since), ts(now), cap);
        // 00:05, 00:10, 00:15; `since` itself is not counted, `now` is.
        assert_eq!(
            count(
                every_5_min,
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:15:00Z",
                100
            ),
            3
        );
        assert_eq!(
            count(
                every_5_min,
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:14:59Z",
                100
            ),
            2
        );
        assert_eq!(
            count(
                every_5_min,
                "2026-01-01T00:00:00Z",
                "2026-01-02T00:00:00Z",
                100
            ),
            100
        );
        // Office hours: one firing overnight, not sixteen hours' worth.
        let office_hours = &cron("0 0 9-17 * * *");
        assert_eq!(
            count(
                office_hours,
                "2026-01-01T17:00:00Z",
                "2026-01-02T09:30:00Z",
                100
            ),
            1
        );
    }

    fn cron(text: &str) -> CronSchedule {
        CronSchedule::parse(text).unwrap()
    }

    fn every_second() -> CronSchedule {
        cron("* * * * * *")
    }

    /// The configuration parses a cron once; tokio-cron-scheduler reads its text again for
    /// each firing. Both must fire at the same instants — a day of the month with a day of
    /// the week included, where parsers differ (both must match, or either).
    #[test]
    fn a_cron_fires_when_the_configuration_says_it_does() {
        let from = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        for text in [
            "0 0 0 13 * FRI",
            "0 0 0 1 * MON",
            "0 */5 * * * *",
            "0 15 2 * * *",
            "0 0 9-17 * * MON-FRI",
        ] {
            let ours = cron(text);
            let mut job = Job::new_tz(text, Utc, |_, _| {}).unwrap();
            let theirs = job.job_data().unwrap().schedule().unwrap();
            let mut at = from;
            for _ in 0..5 {
                let next = ours.next_after(&at).unwrap();
                assert_eq!(
                    Some(next),
                    theirs.find_next_occurrence(&at, false).ok(),
                    "{text} after {at}"
                );
                at = next;
            }
        }
        // Friday the 13th, not every Friday and every 13th.
        let friday_13th = cron("0 0 0 13 * FRI").next_after(&from).unwrap();
        assert_eq!(friday_13th.to_rfc3339(), "2026-02-13T00:00:00+00:00");
    }
}
