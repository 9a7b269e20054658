//! Ticks: tokio-cron-scheduler fires them (in UTC); we count them and notice when they stop.
//!
//! The scheduler crate only triggers: each firing sends a [`Tick`] on a channel and records
//! the time. It has open reports of jobs that stop firing, so [`TickClock`] knows when the
//! last firing *should* have happened (from the same cron expression, via croner) and
//! reports a stall; the daemon then stops feeding systemd's watchdog, and systemd restarts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::api::Timestamp;

/// How late a firing may be before the scheduler counts as stalled.
pub const STALL_GRACE: Duration = Duration::from_secs(30);

/// What a cron job asks the daemon to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Sync,
    Reconcile,
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
    #[error("cron {cron:?} cannot be parsed: {reason}")]
    Cron { cron: String, reason: String },
}

/// Remembers when sync ticks fired, to tell a stalled scheduler from a quiet one.
#[derive(Clone)]
pub struct TickClock {
    cron: Arc<Cron>,
    last: Arc<Mutex<DateTime<Utc>>>,
}

impl TickClock {
    pub fn new(cron: &str) -> Result<Self, SchedulerError> {
        Ok(TickClock {
            cron: Arc::new(parse(cron)?),
            last: Arc::new(Mutex::new(Utc::now())),
        })
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
        let due = self.cron.find_next_occurrence(&last, false).ok()?;
        (due + grace < Utc::now()).then_some(due)
    }
}

/// A cron expression as the daemon reads it: six fields, seconds first.
fn parse(cron: &str) -> Result<Cron, SchedulerError> {
    CronParser::builder()
        .seconds(Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(cron)
        .map_err(|e| SchedulerError::Cron {
            cron: cron.to_owned(),
            reason: e.to_string(),
        })
}

/// How many times `cron` fired after `since` and up to `now` (UTC, as the daemon runs it),
/// counted up to `cap`: firings, not seconds, so a cron with quiet hours counts none of
/// them. For `status`, which tells a daemon that records no passes from a quiet one.
pub fn firings_between(
    cron: &str,
    since: Timestamp,
    now: Timestamp,
    cap: u64,
) -> Result<u64, SchedulerError> {
    let cron = parse(cron)?;
    let utc = |t: Timestamp| i64::try_from(t.unix_nanos()).map(DateTime::from_timestamp_nanos);
    // Beyond chrono's range (after 2262): no firing is counted.
    let (Ok(since), Ok(now)) = (utc(since), utc(now)) else {
        return Ok(0);
    };
    let mut count = 0;
    let mut after = since;
    while count < cap {
        match cron.find_next_occurrence(&after, false) {
            Ok(next) if next <= now => {
                count += 1;
                after = next;
            }
            _ => break,
        }
    }
    Ok(count)
}

/// Starts the cron jobs; each firing sends its tick on `ticks`.
pub async fn start(
    sync_cron: &str,
    reconcile_cron: Option<&str>,
    ticks: mpsc::Sender<Tick>,
    clock: TickClock,
) -> Result<JobScheduler, SchedulerError> {
    let scheduler = JobScheduler::new().await.map_err(SchedulerError::Start)?;
    let jobs = [
        (Some(sync_cron), Tick::Sync),
        (reconcile_cron, Tick::Reconcile),
    ];
    for (cron, tick) in jobs {
        let Some(cron) = cron else { continue };
        let sender = ticks.clone();
        let clock = clock.clone();
        let job = Job::new_async_tz(cron, Utc, move |_, _| {
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
            what: if tick == Tick::Sync {
                "sync.cron"
            } else {
                "sync.reconcile_cron"
            },
            cron: cron.to_owned(),
            source,
        })?;
        scheduler
            .add(job)
            .await
            .map_err(|source| SchedulerError::Job {
                what: "a job",
                cron: cron.to_owned(),
                source,
            })?;
    }
    scheduler.start().await.map_err(SchedulerError::Start)?;
    Ok(scheduler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn firings_are_counted_between_two_instants_not_estimated_from_seconds() {
        let every_5_min = "0 */5 * * * *";
        let count = |cron, since, now, cap| firings_between(cron, ts(since), ts(now), cap).unwrap();
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
        let office_hours = "0 0 9-17 * * *";
        assert_eq!(
            count(
                office_hours,
                "2026-01-01T17:00:00Z",
                "2026-01-02T09:30:00Z",
                100
            ),
            1
        );
        assert!(
            firings_between(
                "not a cron",
                ts("2026-01-01T00:00:00Z"),
                ts("2026-01-01T00:00:00Z"),
                1
            )
            .is_err()
        );
    }
}
