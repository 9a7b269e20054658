//! The status read side every destination shares: what `callsync status` shows of a schedule
//! (`ScheduleStatus`, `RunSummary`), the facts a back end gathers for it (`StatusFacts`) and
//! the one derivation from those facts to the status (`ScheduleStatus::of`, with
//! `RunSummary::from_stored` for each pass). Both back ends read the same facts — the latest
//! [`RECENT_PASSES`] passes as stored ([`StoredRun`]) — so they cannot disagree on a status.

use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::records::{ProcessIdentity, RunId, RunKind, RunOutcome, RunStats, Stored, WALKER_CHARS};
use crate::ErrorKind;
use crate::config::CronSchedule;
use crate::service::Timestamp;
use crate::untrusted::untrusted_text;

/// The most characters of a schedule's name `status` shows.
pub(crate) const NAME_CHARS: usize = 200;

/// The most characters of a pass's stored error `status` shows.
pub(crate) const STORED_ERROR_CHARS: usize = 4000;

/// What `callsync status` shows for one schedule. Field names are a contract (`--json`):
/// add, never rename.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleStatus {
    pub schedule_uid: Uuid,
    /// The next incremental pass reads from here (minus the lookback); written as the
    /// warehouse writes instants (RFC 3339, six fraction digits, `Z`), as are the others.
    #[serde(serialize_with = "warehouse_form_or_null")]
    pub cursor: Option<Timestamp>,
    /// Seconds from the cursor to the time of the status: the age of the newest change
    /// synced. Negative when the cursor is ahead of this machine's clock (never clamped).
    /// `None` without a cursor.
    pub lag_secs: Option<f64>,
    pub last_run: Option<RunSummary>,
    /// The latest pass's outcome: `None` when there has been none; `Some(None)` while it has
    /// not ended (running, or its process died), which `--json` writes as `running`.
    #[serde(serialize_with = "outcome_or_running")]
    pub last_result: Option<Option<RunOutcome>>,
    /// When the latest pass that read everything up to its horizon finished (RFC 3339):
    /// `completed` or `behind`.
    #[serde(serialize_with = "warehouse_form_or_null")]
    pub last_success_at: Option<Timestamp>,
    /// The latest passes ended `behind`, this many in a row (0: the latest did not).
    pub behind_passes: i64,
    /// Two passes or more in a row ended behind: one alone may be a burst, two say that
    /// calls change faster than callsync may read them.
    pub falling_behind: bool,
    /// What held the latest pass back (`rate limit`, `detail fetches`, `errors and
    /// retries`); empty when nothing stands out.
    pub slowed_by: Vec<String>,
    /// The latest passes failed, this many in a row (interrupted ones between them not
    /// counted; 0: the latest that ended did not fail).
    pub failed_passes: i64,
    /// The daemon is deliberately sitting the schedule out after failures (it backs off 1, 3,
    /// 7 … up to 31 ticks of `sync.cron`), and when it tries again: set by `callsync status`,
    /// which knows the cron; `None` when it is not backing off.
    pub backing_off: Option<BackingOff>,
    /// Ticks of `sync.cron` since the latest recorded pass (its end, or its start while it
    /// runs), counted by `callsync status` from the configuration, at most [`TICKS_COUNTED`];
    /// for a schedule [`never_synced`](Self::never_synced), since it was configured (see
    /// `cli::configured_since`); `None` when neither is known.
    pub ticks_since_last_pass: Option<u64>,
    /// [`STALE_TICKS`] ticks or more without a recorded pass: the daemon has stopped, runs
    /// but cannot record its passes (an unwritable warehouse), or is in one long pass; what
    /// this status shows may be out of date.
    pub no_recent_pass: bool,
    /// In the configuration's `sync.schedules`, but the warehouse holds nothing of it: no
    /// pass, no checkpoint, no call.
    pub never_synced: bool,
    pub calls: i64,
    pub attempts: i64,
    pub outcomes: i64,
    pub variables: i64,
    pub notifications: i64,
    /// Calls of the schedule set aside (`set_aside_calls`): listed, but not taken as sent.
    pub set_aside: i64,
    /// The schedule's name: the configuration's (`[[sync.schedule]] name`), else the one the
    /// service answered to `callsync schedule create/enable/disable`; `None` when neither.
    pub schedule_name: Option<String>,
    /// While its latest pass runs (RFC 3339): when it started. Ticks the daemon sits the
    /// schedule out for meanwhile are its own choice, not a missing pass: see
    /// [`LATE_PASS_TICKS`].
    #[serde(serialize_with = "warehouse_form_or_null")]
    pub busy_since: Option<Timestamp>,
    /// When its checkpoint last moved (a page committed), for a running pass's bound.
    #[serde(skip)]
    pub checkpoint_moved_at: Option<Timestamp>,
    /// Seconds from the moment the warehouse last held every change of the schedule (see
    /// [`Self::caught_up_at`]) to the time of the status, by this machine's clock: how much
    /// of the service's recent history it may miss. Unlike `lag_secs` it does not grow while
    /// nothing changes and passes complete. `None` before such a pass.
    pub stale_secs: Option<f64>,
    /// `stale_secs` ran more than `sync.max_lag_secs` past the tick of `sync.cron` due after
    /// that moment: the passes since fail, end behind or run long. `status` exits 3.
    pub over_max_lag: bool,
}

/// How a daemon backs a failing schedule off, as `status` works it out from the passes
/// recorded and `sync.cron`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackingOff {
    /// Failed passes in a row.
    pub failures: i64,
    /// Ticks of `sync.cron` the daemon sits out after the latest failure.
    pub ticks: u64,
    /// The tick of the next try (RFC 3339): the first after those sat out. A daemon started
    /// since tries at its start.
    #[serde(serialize_with = "warehouse_form")]
    pub next_try_at: Timestamp,
}

/// A running pass is late — and `status` exits 3 — once this many ticks of `sync.cron` have
/// fired since it started and since its checkpoint last moved: a long reconciliation or first
/// sync is busy, not missing, until then.
pub const LATE_PASS_TICKS: u64 = 30;

/// Passes in a row ended behind before a schedule is said to be falling behind.
pub const FALLING_BEHIND_PASSES: i64 = 2;

/// Sync ticks without progress (`/healthz`) or without a recorded pass (`status`) after which
/// a schedule is flagged.
pub const STALE_TICKS: u32 = 3;

/// `status` counts the ticks since the latest pass up to this many (the time of that pass says
/// the rest; counting a 1-second cron over a month would take a while).
pub const TICKS_COUNTED: u64 = 100;

impl ScheduleStatus {
    /// A configured schedule the warehouse knows nothing of.
    pub fn never_synced(schedule: Uuid) -> Self {
        ScheduleStatus {
            schedule_uid: schedule,
            cursor: None,
            lag_secs: None,
            last_run: None,
            last_result: None,
            last_success_at: None,
            behind_passes: 0,
            falling_behind: false,
            slowed_by: Vec::new(),
            failed_passes: 0,
            backing_off: None,
            ticks_since_last_pass: None,
            no_recent_pass: false,
            never_synced: true,
            calls: 0,
            attempts: 0,
            outcomes: 0,
            variables: 0,
            notifications: 0,
            set_aside: 0,
            schedule_name: None,
            busy_since: None,
            checkpoint_moved_at: None,
            stale_secs: None,
            over_max_lag: false,
        }
    }

    /// When the latest recorded pass ended; while it runs, the later of its start and its
    /// checkpoint's last move.
    pub fn last_recorded_at(&self) -> Option<Timestamp> {
        let run = self.last_run.as_ref()?;
        let at = run.figures.finished_at.unwrap_or(run.figures.started_at);
        match (&self.busy_since, self.checkpoint_moved_at) {
            (Some(_), Some(moved)) => Some(at.max(moved)),
            _ => Some(at),
        }
    }

    /// When the warehouse last held every change of the schedule the service had made, by
    /// this machine's clock: the start of its latest pass if that was an incremental pass
    /// that completed (it read what had changed when it began), the end of one that ended
    /// behind less how far behind; else (the latest failed, was interrupted, still runs, or
    /// was a backfill or reconciliation, which read a range) the end of the latest pass that
    /// succeeded, a bound that forgives that pass's own length.
    pub fn caught_up_at(&self) -> Option<Timestamp> {
        let latest = self
            .last_run
            .as_ref()
            .filter(|run| run.kind.known() == Some(RunKind::Incremental));
        let caught_up = match latest.and_then(|run| Some((run, run.outcome?))) {
            Some((run, RunOutcome::Completed)) => Some(run.figures.started_at),
            Some((run, RunOutcome::Behind)) => run.figures.finished_at.map(|end| {
                let behind = run
                    .figures
                    .lag_secs
                    .filter(|lag| *lag > 0.0)
                    .unwrap_or_default();
                end.saturating_sub(Duration::try_from_secs_f64(behind).unwrap_or_default())
            }),
            _ => None,
        };
        caught_up.or(self.last_success_at)
    }

    /// Notes how stale the warehouse's copy is at `now`, and whether more than `max_lag` past
    /// the first tick of `cron` after it caught up (the tick whose pass should have caught
    /// up again): a cron with long gaps is not flagged between its ticks.
    pub fn set_staleness(&mut self, now: Timestamp, cron: &CronSchedule, max_lag: Duration) {
        let Some(caught_up) = self.caught_up_at() else {
            return;
        };
        self.stale_secs = Some(now.secs_since(caught_up));
        let due = cron.first_after(caught_up).unwrap_or(caught_up);
        self.over_max_lag = now > due.saturating_add(max_lag);
    }

    /// Notes how many ticks of `sync.cron` have fired since [`Self::last_recorded_at`]: from
    /// [`STALE_TICKS`] on a schedule has no recent pass — counted after the ticks a daemon
    /// backing off sits out ([`Self::backing_off`], set first) —; while a pass runs, from
    /// [`LATE_PASS_TICKS`] on.
    pub fn set_ticks_since_last_pass(&mut self, ticks: u64) {
        self.ticks_since_last_pass = Some(ticks);
        let bound = if self.busy_since.is_some() {
            LATE_PASS_TICKS
        } else {
            u64::from(STALE_TICKS) + self.backing_off.as_ref().map_or(0, |b| b.ticks)
        };
        self.no_recent_pass = ticks >= bound;
    }

    /// Backing off now: its latest pass failed and the next try's tick has not fired yet.
    pub fn is_backing_off(&self) -> bool {
        let within = |b: &BackingOff| self.ticks_since_last_pass.is_none_or(|t| t <= b.ticks);
        self.busy_since.is_none() && self.backing_off.as_ref().is_some_and(within)
    }
}

/// A pass's figures, alike in what `sync_runs` stores ([`StoredRun`]) and what `status` shows
/// ([`RunSummary`]): numbers and instants, nothing a reader must make safe first.
#[derive(Debug, Clone, PartialEq)]
pub struct PassFigures {
    pub started_at: Timestamp,
    /// `None` while running, or when the process died mid-pass.
    pub finished_at: Option<Timestamp>,
    pub pages: i64,
    pub calls_seen: i64,
    pub calls_written: i64,
    pub requests: i64,
    pub retries: i64,
    /// The service's clock when the pass began: it read what had changed by then.
    pub horizon: Option<Timestamp>,
    /// The service's clock at the pass's end minus its checkpoint, in seconds.
    pub lag_secs: Option<f64>,
    pub detail_requests: i64,
    /// 429 responses.
    pub rate_limited: i64,
    /// Seconds spent waiting for the request rate limiter.
    pub throttled_secs: f64,
    /// Calls stamped later than the service's own clock.
    pub future_rows: i64,
    /// The process that walked it (schema 8); `None` for passes recorded before.
    pub pid: Option<i64>,
    /// `sync_runs.id`: what `sync --json`'s `run_id` and the pass's log lines name it by.
    pub run_id: RunId,
}

/// A stored pass as `status` shows it; `--json` writes it as [`RunSummary::serialize`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub kind: Stored<RunKind>,
    pub figures: PassFigures,
    pub error: Option<String>,
    /// Who walked it (schema 8): the machine's host name, the daemon's `[daemon] instance`
    /// (its process id is `figures.pid`); `None` for passes recorded before.
    pub host: Option<String>,
    pub instance: Option<String>,
    /// What kind of failure stopped it (`network`, `auth`, `service` …, as `sync --json` and
    /// the logs spell them: match these, not `error`'s words); `None` unless it failed, and
    /// for passes recorded before schema 10.
    pub error_kind: Option<Stored<ErrorKind>>,
    /// How it ended; `None` while it has not: running, or its process died.
    pub outcome: Option<RunOutcome>,
}

/// `status --json`'s pass: its keys in the order it has always written them, the figures among
/// the text made safe, and its instants in the warehouse's form (RFC 3339, six fraction
/// digits), so that a value copied from `status` compares as text with the column it came
/// from. How it ended is `status`'s `last_result`, not repeated here.
impl Serialize for RunSummary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// An instant, or `null`, in the warehouse's form.
        struct Instant(Option<Timestamp>);
        impl Serialize for Instant {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                warehouse_form_or_null(&self.0, s)
            }
        }
        let f = &self.figures;
        let mut out = serializer.serialize_struct("RunSummary", 20)?;
        out.serialize_field("kind", &self.kind)?;
        out.serialize_field("started_at", &Instant(Some(f.started_at)))?;
        out.serialize_field("finished_at", &Instant(f.finished_at))?;
        out.serialize_field("pages", &f.pages)?;
        out.serialize_field("calls_seen", &f.calls_seen)?;
        out.serialize_field("calls_written", &f.calls_written)?;
        out.serialize_field("requests", &f.requests)?;
        out.serialize_field("retries", &f.retries)?;
        out.serialize_field("error", &self.error)?;
        out.serialize_field("horizon", &Instant(f.horizon))?;
        out.serialize_field("lag_secs", &f.lag_secs)?;
        out.serialize_field("detail_requests", &f.detail_requests)?;
        out.serialize_field("rate_limited", &f.rate_limited)?;
        out.serialize_field("throttled_secs", &f.throttled_secs)?;
        out.serialize_field("future_rows", &f.future_rows)?;
        out.serialize_field("host", &self.host)?;
        out.serialize_field("instance", &self.instance)?;
        out.serialize_field("pid", &f.pid)?;
        out.serialize_field("run_id", &f.run_id)?;
        out.serialize_field("error_kind", &self.error_kind)?;
        out.end()
    }
}

/// An instant in `status --json`: the warehouse's form ([`Timestamp::to_warehouse_text`]).
fn warehouse_form<S: serde::Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.to_warehouse_text())
}

/// An instant in `status --json` that may be missing: the warehouse's form, or `null`.
fn warehouse_form_or_null<S: serde::Serializer>(
    at: &Option<Timestamp>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => warehouse_form(at, serializer),
        None => serializer.serialize_none(),
    }
}

/// `last_result` in `status --json`: the outcome's stored name, `running` for a pass that has
/// not ended, `null` for none.
fn outcome_or_running<S: serde::Serializer>(
    last_result: &Option<Option<RunOutcome>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match last_result {
        None => serializer.serialize_none(),
        Some(ended) => serializer.serialize_str(ended.map_or("running", RunOutcome::as_str)),
    }
}

/// What an analyst looks at first, read from the BI views.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Overview {
    /// `(status, progress, calls)`, most first.
    pub by_status: Vec<(String, String, i64)>,
    /// `(outcome name, count)`, most first, at most 10.
    pub top_outcomes: Vec<(String, i64)>,
    /// `(schedule name, or its uid without one; dialled calls, answered calls)`, test calls
    /// left out.
    pub answer_rates: Vec<(String, i64, i64)>,
}

/// How many of a schedule's latest passes `status` reads (both back ends bind it in their
/// query): `behind_passes` and `failed_passes` count at most this many.
pub(crate) const RECENT_PASSES: i64 = 100;

/// A pass as `sync_runs` stores it, its instants read into [`Timestamp`]s and nothing else
/// changed: its text is still the file's or the server's, unsafe to show until
/// [`RunSummary::from_stored`] makes it so.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredRun {
    pub kind: String,
    pub figures: PassFigures,
    pub error: Option<String>,
    /// `sync_runs.outcome`, the stored name.
    pub outcome: Option<String>,
    pub host: Option<String>,
    pub instance: Option<String>,
    pub error_kind: Option<String>,
}

impl StoredRun {
    /// How it ended; `None` while it has not.
    fn outcome(&self) -> Option<RunOutcome> {
        RunOutcome::of_stored_run(self.figures.finished_at.is_some(), self.outcome.as_deref())
    }
}

/// What a warehouse holds of one schedule, read by either destination (`sqlite/queries.rs`,
/// `postgres/runs.rs`): [`ScheduleStatus::of`] makes the status from it, one derivation for
/// both.
pub(crate) struct StatusFacts {
    pub schedule_uid: Uuid,
    /// As stored: made safe by [`ScheduleStatus::of`].
    pub schedule_name: Option<String>,
    pub cursor: Option<Timestamp>,
    pub checkpoint_moved_at: Option<Timestamp>,
    /// The latest passes, newest first, at most [`RECENT_PASSES`].
    pub recent_runs: Vec<StoredRun>,
    pub last_success_at: Option<Timestamp>,
    /// Rows of the schedule: calls, attempts, outcomes, variables, notifications, calls set
    /// aside.
    pub counts: [i64; 6],
}

impl ScheduleStatus {
    /// The status `facts` make, with lags measured at `now`; the configuration's part
    /// (ticks since the last pass, never synced) is left to the caller that knows it.
    pub(crate) fn of(facts: StatusFacts, now: Timestamp) -> ScheduleStatus {
        let StatusFacts {
            schedule_uid,
            schedule_name,
            cursor,
            checkpoint_moved_at,
            recent_runs,
            last_success_at,
            counts:
                [
                    calls,
                    attempts,
                    outcomes,
                    variables,
                    notifications,
                    set_aside,
                ],
        } = facts;
        let (behind_passes, failed_passes) = in_a_row(recent_runs.iter().map(StoredRun::outcome));
        let last_run = recent_runs.into_iter().next().map(RunSummary::from_stored);
        let busy_since = last_run
            .as_ref()
            .filter(|run| run.outcome.is_none())
            .map(|run| run.figures.started_at);
        ScheduleStatus {
            schedule_uid,
            schedule_name: schedule_name.map(|n| untrusted_text(&n, NAME_CHARS)),
            busy_since,
            checkpoint_moved_at,
            cursor,
            lag_secs: cursor.map(|c| now.secs_since(c)),
            last_result: last_run.as_ref().map(|run| run.outcome),
            slowed_by: last_run
                .as_ref()
                .map(RunSummary::slowed_by)
                .unwrap_or_default(),
            behind_passes,
            failed_passes,
            backing_off: None,
            falling_behind: behind_passes >= FALLING_BEHIND_PASSES,
            ticks_since_last_pass: None,
            no_recent_pass: false,
            never_synced: false,
            last_run,
            last_success_at,
            stale_secs: None,
            over_max_lag: false,
            calls,
            attempts,
            outcomes,
            variables,
            notifications,
            set_aside,
        }
    }
}

/// The latest passes (newest first, by outcome) that ended behind, and that failed, in a row:
/// one derivation for both destinations. Interrupted passes between failures are skipped (a
/// restart does not make a failing schedule well); a pass still running ends both counts.
fn in_a_row(outcomes: impl Iterator<Item = Option<RunOutcome>> + Clone) -> (i64, i64) {
    let behind = outcomes
        .clone()
        .take_while(|o| *o == Some(RunOutcome::Behind))
        .count();
    let failed = outcomes
        .filter(|o| *o != Some(RunOutcome::Interrupted))
        .take_while(|o| *o == Some(RunOutcome::Failed))
        .count();
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    (count(behind), count(failed))
}

impl RunSummary {
    /// The summary `status` shows of a stored pass: its outcome worked out from the stored
    /// name, and its text made safe to show (an older callsync stored the service's words
    /// unescaped, and the file or the server may hold anything).
    pub(crate) fn from_stored(run: StoredRun) -> RunSummary {
        let outcome = run.outcome();
        let safe = |text: Option<String>, chars| text.map(|t| untrusted_text(&t, chars));
        RunSummary {
            kind: Stored::read(&run.kind),
            figures: run.figures,
            error: safe(run.error, STORED_ERROR_CHARS),
            host: safe(run.host, WALKER_CHARS),
            instance: safe(run.instance, WALKER_CHARS),
            error_kind: run.error_kind.as_deref().map(Stored::read),
            outcome,
        }
    }

    /// Who walked it, as the daemon's log names itself (`instance on host pid N`, or `host
    /// pid N` when the instance is the host); `None` for a pass recorded before schema 8.
    pub fn walked_by(&self) -> Option<String> {
        let host = self.host.clone()?;
        let walker = ProcessIdentity {
            instance: self.instance.clone().unwrap_or_else(|| host.clone()),
            host,
            pid: self
                .figures
                .pid
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or_default(),
        };
        Some(walker.to_string())
    }

    /// What held the pass back (`rate limit`, `detail fetches`, `errors and retries`).
    pub fn slowed_by(&self) -> Vec<String> {
        let n = |v: i64| u64::try_from(v).unwrap_or_default();
        let stats = RunStats {
            pages: n(self.figures.pages),
            retries: n(self.figures.retries),
            detail_requests: n(self.figures.detail_requests),
            rate_limited: n(self.figures.rate_limited),
            throttled_ms: (self.figures.throttled_secs * 1000.0) as u64,
            ..RunStats::default()
        };
        let duration_ms = self.figures.finished_at.map_or(0, |end| {
            end.since(self.figures.started_at).as_millis() as u64
        });
        stats
            .slowed_by(duration_ms)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed pass of `kind` as a warehouse stores it: one page, one request, a second
    /// long, nothing else.
    fn stored_run(kind: &str) -> StoredRun {
        let at = |text| Timestamp::parse(text).unwrap();
        StoredRun {
            kind: kind.into(),
            figures: PassFigures {
                started_at: at("2026-01-01T02:00:00Z"),
                finished_at: Some(at("2026-01-01T02:00:01Z")),
                pages: 1,
                calls_seen: 0,
                calls_written: 0,
                requests: 1,
                retries: 0,
                horizon: None,
                lag_secs: None,
                detail_requests: 0,
                rate_limited: 0,
                throttled_secs: 0.0,
                future_rows: 0,
                pid: None,
                run_id: RunId(3),
            },
            error: None,
            outcome: Some("completed".into()),
            host: None,
            instance: None,
            error_kind: None,
        }
    }

    /// `status --json` writes the typed uid and instants exactly as it wrote their text
    /// before: the uid hyphenated, the instants in the warehouse's form (six digits).
    #[test]
    fn the_json_writes_uids_and_instants_as_the_warehouse_stores_them() {
        let at = |text| Timestamp::parse(text).unwrap();
        let base = stored_run("incremental");
        let run = RunSummary::from_stored(StoredRun {
            figures: PassFigures {
                finished_at: Some(at("2026-01-01T02:00:01.5Z")),
                calls_seen: 2,
                calls_written: 3,
                requests: 4,
                retries: 5,
                lag_secs: Some(0.5),
                detail_requests: 6,
                rate_limited: 7,
                throttled_secs: 0.25,
                future_rows: 8,
                pid: Some(9),
                run_id: RunId(10),
                ..base.figures
            },
            host: Some("h\u{1b}".into()),
            ..base
        });
        assert_eq!(
            serde_json::to_string(&run).unwrap(),
            r#"{"kind":"incremental","started_at":"2026-01-01T02:00:00.000000Z","finished_at":"2026-01-01T02:00:01.500000Z","pages":1,"calls_seen":2,"calls_written":3,"requests":4,"retries":5,"error":null,"horizon":null,"lag_secs":0.5,"detail_requests":6,"rate_limited":7,"throttled_secs":0.25,"future_rows":8,"host":"h\\u{1b}","instance":null,"pid":9,"run_id":10,"error_kind":null}"#
        );
        let status = ScheduleStatus {
            last_run: Some(run),
            cursor: Some(at("2026-01-01T01:59:00.25Z")),
            last_success_at: Some(at("2026-01-01T02:00:01.5Z")),
            busy_since: Some(at("2026-01-01T03:00:00Z")),
            backing_off: Some(BackingOff {
                failures: 2,
                ticks: 3,
                next_try_at: at("2026-01-01T03:04:00.123456789Z"),
            }),
            ..ScheduleStatus::never_synced(Uuid::from_u128(0xab))
        };
        let json: serde_json::Value = serde_json::to_value(&status).unwrap();
        assert_eq!(json["schedule_uid"], "00000000-0000-0000-0000-0000000000ab");
        assert_eq!(json["cursor"], "2026-01-01T01:59:00.250000Z");
        assert_eq!(json["last_success_at"], "2026-01-01T02:00:01.500000Z");
        assert_eq!(json["busy_since"], "2026-01-01T03:00:00.000000Z");
        assert_eq!(
            json["backing_off"]["next_try_at"],
            "2026-01-01T03:04:00.123456Z"
        );
        let none = serde_json::to_value(ScheduleStatus::never_synced(Uuid::nil())).unwrap();
        for field in ["cursor", "last_success_at", "busy_since", "backing_off"] {
            assert!(none[field].is_null(), "{field}: {}", none[field]);
        }
    }

    /// A pass whose kind or failure's kind this callsync does not know (stored by a newer
    /// one sharing the warehouse, or by hand) reads as stored, made safe, not as an error;
    /// and it is not taken for an incremental pass that caught up.
    #[test]
    fn kinds_this_callsync_does_not_know_read_as_stored_and_made_safe() {
        let at = |text| Timestamp::parse(text).unwrap();
        let stored = |kind: &str, error_kind: Option<&str>| StoredRun {
            error: error_kind.map(|_| "it failed".into()),
            outcome: Some(error_kind.map_or("completed", |_| "failed").into()),
            error_kind: error_kind.map(str::to_owned),
            ..stored_run(kind)
        };
        let known = RunSummary::from_stored(stored("incremental", Some("rate_limited")));
        assert_eq!(known.kind, Stored::Known(RunKind::Incremental));
        assert_eq!(
            known.error_kind,
            Some(Stored::Known(ErrorKind::RateLimited))
        );

        let newer = RunSummary::from_stored(stored("resync\u{1b}[2J", Some("quota\u{7}")));
        assert_eq!(newer.kind, Stored::Unknown("resync\\u{1b}[2J".into()));
        assert_eq!(
            newer.error_kind,
            Some(Stored::Unknown("quota\\u{7}".into()))
        );
        let json = serde_json::to_value(&newer).unwrap();
        assert_eq!(json["kind"], "resync\\u{1b}[2J");
        assert_eq!(json["error_kind"], "quota\\u{7}");
        assert_eq!(json["run_id"], 3);

        let caught_up = |run: StoredRun| {
            let status = ScheduleStatus {
                last_run: Some(RunSummary::from_stored(run)),
                ..ScheduleStatus::never_synced(Uuid::nil())
            };
            status.caught_up_at()
        };
        assert_eq!(
            caught_up(stored("incremental", None)),
            Some(at("2026-01-01T02:00:00Z"))
        );
        assert_eq!(caught_up(stored("resync", None)), None);
    }
}
