//! `callsync status` as text for a terminal: the warehouse returns the schedules' state
//! ([`ScheduleStatus`]), this renders it.

use std::fmt::Write as _;

use crate::service::Timestamp;
use crate::warehouse::{
    LATE_PASS_TICKS, PROCESS_ENDED, RunOutcome, RunSummary, ScheduleStatus, TICKS_COUNTED,
};

/// `callsync status` as a table for a terminal.
pub(super) fn render_status(rows: &[ScheduleStatus], now: Timestamp) -> String {
    if rows.is_empty() {
        return "no schedule has been synced into this warehouse yet\n".to_owned();
    }
    let mut out = String::new();
    for s in rows {
        render_where(&mut out, s, now);
        render_last_pass(&mut out, s);
        render_attention(&mut out, s);
        let _ = writeln!(
            out,
            "  rows         {} calls, {} attempts, {} outcomes, {} variables, {} notifications",
            s.calls, s.attempts, s.outcomes, s.variables, s.notifications
        );
        if s.set_aside > 0 {
            let _ = writeln!(
                out,
                "  set aside    {} listed calls did not fit, or conflict with another schedule's: kept in set_aside_calls, written once a read of them fits",
                s.set_aside
            );
        }
    }
    out
}

/// The schedule, whether its pass runs, and its cursor with its lag at `now`.
fn render_where(out: &mut String, s: &ScheduleStatus, now: Timestamp) {
    let lag = s
        .cursor
        .map(|c| format!("{:.0}s", now.secs_since(c)))
        .unwrap_or_else(|| "-".into());
    match &s.schedule_name {
        Some(name) => {
            let _ = writeln!(out, "schedule {}  \"{name}\"", s.schedule_uid);
        }
        None => {
            let _ = writeln!(out, "schedule {}", s.schedule_uid);
        }
    }
    if let Some(since) = s.busy_since.map(Timestamp::to_warehouse_text) {
        let _ = writeln!(
            out,
            "  busy since   {since}: its pass is running (late, and exit 3, after {LATE_PASS_TICKS} ticks of sync.cron without its checkpoint moving)"
        );
    }
    let _ = writeln!(
        out,
        "  cursor       {}  (lag {lag})",
        s.cursor.map_or("none".into(), Timestamp::to_warehouse_text)
    );
}

/// The latest pass and the latest success.
fn render_last_pass(out: &mut String, s: &ScheduleStatus) {
    match &s.last_run {
        Some(run) => {
            let result = pass_result(run);
            let _ = writeln!(
                out,
                "  last pass    {} (run {}) started {}{}: {result}; {} pages, {} calls seen, {} written, {} requests, {} retries",
                run.kind,
                run.figures.run_id,
                run.figures.started_at.to_warehouse_text(),
                run.walked_by()
                    .map(|by| format!(" by {by}"))
                    .unwrap_or_default(),
                run.figures.pages,
                run.figures.calls_seen,
                run.figures.calls_written,
                run.figures.requests,
                run.figures.retries
            );
        }
        None if s.never_synced => {
            let _ = writeln!(
                out,
                "  last pass    never synced (in sync.schedules; the warehouse holds no pass of it)"
            );
        }
        None => {
            let _ = writeln!(out, "  last pass    none");
        }
    }
    let _ = writeln!(
        out,
        "  last success {}",
        s.last_success_at
            .map_or("never".into(), Timestamp::to_warehouse_text)
    );
}

/// How the latest pass ended, in words.
fn pass_result(run: &RunSummary) -> String {
    match run.outcome {
        Some(RunOutcome::Behind) => format!(
            "BEHIND the service by {:.0}s{}{}",
            run.figures.lag_secs.unwrap_or_default(),
            slowed_by_text(&run.slowed_by()),
            run.error
                .as_deref()
                .map_or(String::new(), |held| format!("; {held}"))
        ),
        None => "running, or the process died".to_owned(),
        Some(RunOutcome::Interrupted) if run.error.as_deref() == Some(PROCESS_ENDED) => {
            PROCESS_ENDED.to_owned()
        }
        Some(RunOutcome::Interrupted) => {
            "interrupted by shutdown (the next pass resumes)".to_owned()
        }
        Some(RunOutcome::Failed) => match &run.error_kind {
            Some(kind) => format!(
                "FAILED ({kind}): {}",
                run.error.as_deref().unwrap_or_default()
            ),
            None => format!("FAILED: {}", run.error.as_deref().unwrap_or_default()),
        },
        // A completed pass that held a tie group keeps why in `error`.
        Some(RunOutcome::Completed) => match run.error.as_deref() {
            Some(held) => format!("ok, but {held}"),
            None => "ok".to_owned(),
        },
    }
}

/// What needs someone: backing off, no recent pass, falling behind, lagging, future rows.
fn render_attention(out: &mut String, s: &ScheduleStatus) {
    if let Some(b) = s.backing_off.as_ref().filter(|_| s.is_backing_off()) {
        let _ = writeln!(
            out,
            "  BACKING OFF  after {} failed passes in a row the daemon sits out {} of sync.cron: next try at {}",
            b.failures,
            crate::counted(b.ticks, "tick", "ticks"),
            b.next_try_at.to_warehouse_text()
        );
    }
    if let Some(ticks) = s.ticks_since_last_pass.filter(|_| s.no_recent_pass) {
        let ticks = if ticks >= TICKS_COUNTED {
            format!("{TICKS_COUNTED} or more")
        } else {
            ticks.to_string()
        };
        if s.never_synced {
            let _ = writeln!(
                out,
                "  NEVER SYNCED though configured {ticks} ticks of sync.cron ago: the daemon is not running, was not restarted since the schedule was added, or cannot record its passes; see its log (journalctl -u callsync)"
            );
        } else if let Some(since) = s.busy_since.map(Timestamp::to_warehouse_text) {
            let last = s.last_recorded_at().map(Timestamp::to_warehouse_text);
            let _ = writeln!(
                out,
                "  LATE: the pass running since {since} has not moved the checkpoint for {ticks} ticks of sync.cron (last at {}): it is stuck, or its process died; see its log (journalctl -u callsync)",
                last.as_deref().unwrap_or("?")
            );
        } else {
            let last = s.last_recorded_at().map(Timestamp::to_warehouse_text);
            let _ = writeln!(
                out,
                "  NO PASS RECORDED for {ticks} ticks of sync.cron (last at {}): the daemon has stopped, cannot record its passes, or is in one long pass; see its log (journalctl -u callsync)",
                last.as_deref().unwrap_or("?")
            );
        }
    }
    if s.falling_behind {
        let _ = writeln!(
            out,
            "  FALLING BEHIND: the last {} passes ended behind the service{}; see docs/monitor.md, \"Falling behind\"",
            s.behind_passes,
            slowed_by_text(&s.slowed_by)
        );
    }
    if let Some(stale) = s.stale_secs.filter(|_| s.over_max_lag) {
        let _ = writeln!(
            out,
            "  LAGGING: the warehouse last held every change of this schedule {stale:.0}s ago (lag {stale:.0}s), more than sync.max_lag_secs past the sync.cron tick due to catch up: its passes fail, end behind, or run long; see the last pass and the daemon's log (journalctl -u callsync)"
        );
    }
    if let Some(run) = s.last_run.as_ref().filter(|r| r.figures.future_rows > 0) {
        let _ = writeln!(
            out,
            "  future rows  {} calls stamped later than the service's clock: read again until it catches up",
            run.figures.future_rows
        );
    }
}

fn slowed_by_text(reasons: &[String]) -> String {
    if reasons.is_empty() {
        String::new()
    } else {
        format!(" (slowed by {})", reasons.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::{PassFigures, RunId, RunKind, RunSummary, Stored};

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    fn status(cursor: Option<&str>) -> ScheduleStatus {
        ScheduleStatus {
            cursor: cursor.map(ts),
            never_synced: false,
            ..ScheduleStatus::never_synced(uuid::Uuid::nil())
        }
    }

    fn run(outcome: Option<RunOutcome>, error: Option<&str>) -> RunSummary {
        RunSummary {
            kind: Stored::Known(RunKind::Backfill),
            figures: PassFigures {
                started_at: ts("2026-01-01T02:00:00Z"),
                finished_at: outcome.map(|_| ts("2026-01-01T02:00:01Z")),
                pages: 3,
                calls_seen: 250,
                calls_written: 240,
                requests: 4,
                retries: 1,
                horizon: None,
                lag_secs: None,
                detail_requests: 0,
                rate_limited: 0,
                throttled_secs: 0.0,
                future_rows: 0,
                pid: Some(4242),
                run_id: RunId(17),
            },
            error: error.map(str::to_owned),
            host: Some("db-host".into()),
            instance: Some("blue".into()),
            error_kind: error.map(|_| Stored::Known(crate::ErrorKind::Service)),
            outcome,
        }
    }

    #[test]
    fn an_empty_warehouse_says_so() {
        assert_eq!(
            render_status(&[], ts("2026-01-01T00:00:00Z")),
            "no schedule has been synced into this warehouse yet\n"
        );
    }

    #[test]
    fn a_completed_pass_that_held_a_tie_group_says_so() {
        let mut s = status(Some("2026-01-01T00:10:00.000000Z"));
        let held = "the 948 calls sharing updated_at 2026-01-01T00:10:00Z are held: not proven read whole (940 read): …";
        s.last_run = Some(run(Some(RunOutcome::Completed), Some(held)));
        let text = render_status(&[s], ts("2026-01-01T00:11:00Z"));
        assert!(
            text.contains(&format!(": ok, but {held}; 3 pages")),
            "{text}"
        );
    }

    #[test]
    fn a_failed_pass_shows_its_lag_walker_and_error() {
        let mut s = status(Some("2026-01-01T00:10:00.000000Z"));
        s.last_run = Some(run(Some(RunOutcome::Failed), Some("HTTP 503")));
        let text = render_status(&[s], ts("2026-01-01T00:11:00Z"));
        assert!(
            text.contains("  cursor       2026-01-01T00:10:00.000000Z  (lag 60s)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  last pass    backfill (run 17) started 2026-01-01T02:00:00.000000Z by blue on db-host pid 4242: FAILED (service): HTTP 503; 3 pages, 250 calls seen, 240 written, 4 requests, 1 retries\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_lag_is_shown_as_it_is_negative_included() {
        let s = status(Some("2026-01-01T00:01:00Z"));
        let text = render_status(&[s], ts("2026-01-01T00:00:30Z"));
        assert!(text.contains("(lag -30s)"), "{text}");
    }

    #[test]
    fn no_pass_recorded_is_said_from_the_stale_tick_on() {
        let now = ts("2026-01-01T03:00:00Z");
        let mut s = status(None);
        s.last_run = Some(run(Some(RunOutcome::Completed), None));
        let says = "NO PASS RECORDED";

        s.set_ticks_since_last_pass(2);
        let text = render_status(std::slice::from_ref(&s), now);
        assert!(!text.contains(says), "{text}");

        s.set_ticks_since_last_pass(3);
        let text = render_status(std::slice::from_ref(&s), now);
        assert!(
            text.contains("  NO PASS RECORDED for 3 ticks of sync.cron (last at 2026-01-01T02:00:01.000000Z): the daemon has stopped, cannot record its passes, or is in one long pass; see its log (journalctl -u callsync)\n"),
            "{text}"
        );

        s.set_ticks_since_last_pass(TICKS_COUNTED);
        let text = render_status(std::slice::from_ref(&s), now);
        assert!(
            text.contains(&format!(
                "NO PASS RECORDED for {TICKS_COUNTED} or more ticks of sync.cron"
            )),
            "{text}"
        );
    }

    #[test]
    fn falling_behind_names_what_slowed_it() {
        let mut s = status(None);
        s.behind_passes = 2;
        s.falling_behind = true;
        s.slowed_by = vec!["rate limit".into(), "detail fetches".into()];
        let text = render_status(&[s], ts("2026-01-01T02:00:00Z"));
        assert!(
            text.contains("  FALLING BEHIND: the last 2 passes ended behind the service (slowed by rate limit, detail fetches); see docs/monitor.md, \"Falling behind\"\n"),
            "{text}"
        );
    }

    #[test]
    fn the_lag_counts_from_the_last_catch_up_and_is_bound_from_the_tick_due_after() {
        let daily = crate::config::CronSchedule::parse("0 0 2 * * *").unwrap();
        let bound = std::time::Duration::from_secs(3600);
        let incremental = |outcome, error| RunSummary {
            kind: Stored::Known(RunKind::Incremental),
            ..run(Some(outcome), error)
        };
        let mut s = status(Some("2026-01-01T01:59:00.000000Z"));
        // Completed: everything changed before it began (02:00:00) is held.
        s.last_run = Some(incremental(RunOutcome::Completed, None));
        s.set_staleness(ts("2026-01-02T02:59:00Z"), &daily, bound);
        assert_eq!(
            (s.stale_secs, s.over_max_lag),
            (Some(89_940.0), false),
            "within an hour of the next day's tick"
        );
        s.set_staleness(ts("2026-01-02T03:00:01Z"), &daily, bound);
        assert_eq!(s.stale_secs, Some(90_001.0));
        assert!(s.over_max_lag);
        let text = render_status(std::slice::from_ref(&s), ts("2026-01-02T03:00:01Z"));
        assert!(
            text.contains("  LAGGING: the warehouse last held every change of this schedule 90001s ago (lag 90001s), more than sync.max_lag_secs past the sync.cron tick due to catch up"),
            "{text}"
        );
        // Behind: held up to its end less its lag; a later failure keeps the last success's
        // end.
        let mut behind = incremental(RunOutcome::Behind, None);
        behind.figures.lag_secs = Some(30.0);
        s.last_run = Some(behind);
        assert_eq!(
            s.caught_up_at(),
            Some(ts("2026-01-01T01:59:31Z")),
            "ended 02:00:01, 30 s behind"
        );
        s.last_run = Some(incremental(RunOutcome::Failed, Some("HTTP 503")));
        s.last_success_at = Some(ts("2025-12-31T02:00:07.000000Z"));
        assert_eq!(s.caught_up_at(), Some(ts("2025-12-31T02:00:07Z")));
        // A backfill read a range, not everything up to its start: the last success's end.
        s.last_run = Some(run(Some(RunOutcome::Completed), None));
        assert_eq!(s.caught_up_at(), Some(ts("2025-12-31T02:00:07Z")));
        // No pass has caught up: no lag, no flag.
        let mut never = status(None);
        never.set_staleness(ts("2026-01-02T03:00:01Z"), &daily, bound);
        assert_eq!((never.stale_secs, never.over_max_lag), (None, false));
    }
}
