//! `sync --json` and `backfill --json`: one JSON object per pass, one per line (JSON Lines).
//! The field names are a contract documented in docs/commands.md ("Pass lines"): fields may be added,
//! none renamed or removed.

use anyhow::{Context, Result};
use serde::Serialize;
use uuid::Uuid;

use crate::ErrorKind;
use crate::sync::{ClockTaken, PassReport, PassResult};
use crate::warehouse::RunKind;

/// One pass, as a script reads it.
#[derive(Debug, Serialize)]
struct PassLine {
    schedule_uid: Uuid,
    kind: RunKind,
    /// `completed`, `behind`, `interrupted`, `failed`, or `skipped` (another process held
    /// the schedule).
    outcome: &'static str,
    /// Why it failed or was skipped; null otherwise.
    error: Option<String>,
    dry_run: bool,
    pages: u64,
    calls_seen: u64,
    /// Null in a dry run, which writes nothing.
    calls_written: Option<u64>,
    /// What a dry run would have written; null otherwise.
    would_write: Option<u64>,
    requests: u64,
    retries: u64,
    detail_requests: u64,
    rate_limited: u64,
    throttled_secs: f64,
    future_rows: u64,
    duration_secs: f64,
    /// The service's clock when the pass began (RFC 3339).
    horizon: Option<String>,
    /// Where the walk got to (RFC 3339): the next pass starts here, minus the lookback.
    position: Option<String>,
    /// How far behind the service's clock the pass ended, in seconds (signed).
    lag_secs: Option<f64>,
    slowed_by: Vec<&'static str>,
    /// What kind of failure (`auth`, `rate_limited`, `service`, `network`, `not_found`,
    /// `protocol`, `warehouse`, `config`, `busy`); null for a pass that did not fail.
    error_kind: Option<&'static str>,
    /// The pass's `sync_runs.id`; null in a dry run or for a pass that never started.
    run_id: Option<i64>,
    /// Which clock stood for the service's: `date` (its `Date` header) or `local`
    /// (callsync's own: no `Date`, or one not trusted); null before any response.
    clock: Option<&'static str>,
    /// The service's `Date` minus callsync's clock, in seconds, when they were further apart
    /// than `sync.max_clock_skew_secs` (the `Date` was not trusted); null otherwise.
    date_skew_secs: Option<f64>,
    /// Tie groups the pass could not prove read whole and read past, its checkpoint held at
    /// the earliest (the next pass reads them again): each `{at, calls, read, why}`.
    held_groups: Vec<HeldLine>,
}

/// A held tie group, in a pass's JSON line.
#[derive(Debug, Serialize)]
struct HeldLine {
    /// The group's `updated_at` (RFC 3339).
    at: String,
    /// Its size when last measured.
    calls: u32,
    /// Distinct calls read in the last window.
    read: u32,
    why: String,
}

impl PassLine {
    fn new(report: &PassReport, dry_run: bool) -> Self {
        let s = &report.stats;
        let error = match &report.result {
            PassResult::Failed { error: why, .. } | PassResult::ClaimLost(why) => Some(why.clone()),
            PassResult::Skipped(why) => Some(why.to_string()),
            PassResult::Completed | PassResult::Behind | PassResult::Interrupted => None,
        };
        PassLine {
            schedule_uid: report.schedule,
            kind: report.kind,
            outcome: report.result.label(),
            error,
            dry_run,
            pages: s.pages,
            calls_seen: s.calls_seen,
            calls_written: (!dry_run).then_some(s.calls_written),
            would_write: dry_run.then_some(s.calls_written),
            requests: s.requests,
            retries: s.retries,
            detail_requests: s.detail_requests,
            rate_limited: s.rate_limited,
            throttled_secs: s.throttled_ms as f64 / 1000.0,
            future_rows: s.future_rows,
            duration_secs: report.duration.as_secs_f64(),
            horizon: report.horizon.map(|t| t.to_rfc3339()),
            position: report.position.map(|t| t.to_rfc3339()),
            lag_secs: report.lag_secs,
            slowed_by: report.slowed_by(),
            error_kind: report.result.error_kind().map(ErrorKind::as_str),
            run_id: report.run,
            clock: report.clock.map(ClockTaken::as_str),
            date_skew_secs: report.date_skew_secs,
            held_groups: report
                .held_groups
                .iter()
                .map(|h| HeldLine {
                    at: h.at.to_rfc3339(),
                    calls: h.size,
                    read: h.read,
                    why: h.why.to_string(),
                })
                .collect(),
        }
    }
}

/// Prints `report` as one line of JSON on stdout.
pub(super) fn print(report: &PassReport, dry_run: bool) -> Result<()> {
    let line = serde_json::to_string(&PassLine::new(report, dry_run))
        .context("cannot write a pass as JSON")?;
    super::output::print_out(format_args!("{line}\n"))
}
