//! `callsync status`: every configured schedule's state, and exit code 3 when one needs
//! attention.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result};
use uuid::Uuid;

mod render;

use render::render_status;

use super::output::print_out;
use crate::config::Config;
use crate::service::Timestamp;
use crate::warehouse::Destination;

pub(super) fn status(config: &Config, json: bool) -> Result<ExitCode> {
    // Every error opening it names the file or the database already.
    let warehouse = super::destination::read_only(config)?;
    let now = Timestamp::now();
    let mut rows = warehouse
        .status_at(now)
        .with_context(|| format!("cannot read the status from {}", warehouse.name()))?;
    add_never_synced(&mut rows, &config.sync.schedules);
    // The configuration's names win, as in the warehouse's views: also for a schedule never
    // synced, and for a name changed since the last pass.
    for row in &mut rows {
        if let Some(name) = config.sync.schedule_names.get(&row.schedule_uid) {
            row.schedule_name = Some(name.clone());
        }
    }
    let since = configured_since(config, warehouse.as_ref())?;
    count_ticks_since_last_pass(config, &mut rows, now, since)?;
    for row in &mut rows {
        row.set_staleness(now, &config.sync.cron, config.sync.max_lag);
    }
    warn_if_read_only(warehouse.as_ref());
    if json {
        let json = serde_json::to_string_pretty(&rows)?;
        print_out(format_args!("{}\n", crate::untrusted::json_safe(&json)))?;
    } else {
        print_out(render_status(&rows, now))?;
    }
    let problems = needing_attention(&rows, &config.sync.schedules);
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    // On stderr, so that `--json` stays parseable; a cron job mails it.
    let _ = writeln!(
        std::io::stderr(),
        "attention: {} (exit code {EXIT_ATTENTION})",
        problems.join("; ")
    );
    Ok(ExitCode::from(EXIT_ATTENTION))
}

/// `status`'s exit code when a schedule needs someone: its last pass failed, it is falling
/// behind, its warehouse copy is staler than `sync.max_lag_secs` allows, no pass was recorded
/// for several ticks of `sync.cron`, or its running pass has not moved the checkpoint for
/// many ticks ([`needing_attention`]). Not 1, which says `status`
/// itself could not run.
pub(super) const EXIT_ATTENTION: u8 = 3;

/// What is wrong with the schedules `status` watches: those in `sync.schedules`, or every
/// schedule in the warehouse when the list is empty. A schedule removed from the
/// configuration (after a 404, say) keeps its last failure in the warehouse, and must not
/// fail every check afterwards.
pub(super) fn needing_attention(
    rows: &[crate::warehouse::ScheduleStatus],
    configured: &[Uuid],
) -> Vec<String> {
    let watched = |uid: &Uuid| configured.is_empty() || configured.contains(uid);
    let mut problems = Vec::new();
    for row in rows.iter().filter(|row| watched(&row.schedule_uid)) {
        let schedule = match &row.schedule_name {
            Some(name) => format!("{} \"{name}\"", row.schedule_uid),
            None => row.schedule_uid.to_string(),
        };
        if row.last_result.flatten() == Some(crate::warehouse::RunOutcome::Failed) {
            let kind = (row.last_run.as_ref())
                .and_then(|run| run.error_kind.as_ref())
                .map(|kind| format!(" ({kind})"))
                .unwrap_or_default();
            let backing_off = match &row.backing_off {
                Some(b) if row.is_backing_off() => {
                    format!(
                        "; the daemon backs off until {}",
                        b.next_try_at.to_warehouse_text()
                    )
                }
                _ => String::new(),
            };
            problems.push(format!(
                "schedule {schedule}: its last pass failed{kind}{backing_off}"
            ));
        }
        if row.falling_behind {
            problems.push(format!(
                "schedule {schedule}: falling behind ({} passes in a row ended behind)",
                row.behind_passes
            ));
        }
        if let Some(stale) = row.stale_secs.filter(|_| row.over_max_lag) {
            problems.push(format!(
                "schedule {schedule}: lag {stale:.0}s, more than sync.max_lag_secs past the sync.cron tick due to catch up"
            ));
        }
        if row.no_recent_pass && row.never_synced {
            problems.push(format!(
                "schedule {schedule}: never synced, though configured {} ticks of sync.cron ago",
                row.ticks_since_last_pass.unwrap_or_default()
            ));
        } else if row.no_recent_pass && row.busy_since.is_some() {
            problems.push(format!(
                "schedule {schedule}: its running pass has not moved the checkpoint for {} ticks of sync.cron",
                row.ticks_since_last_pass.unwrap_or_default()
            ));
        } else if row.no_recent_pass {
            problems.push(format!(
                "schedule {schedule}: no pass recorded for {} ticks of sync.cron",
                row.ticks_since_last_pass.unwrap_or_default()
            ));
        }
    }
    problems
}

/// A row for every configured schedule the warehouse knows nothing of, in uid order with
/// the rest: `status` shows what it watches, not only what has synced.
pub(super) fn add_never_synced(
    rows: &mut Vec<crate::warehouse::ScheduleStatus>,
    configured: &[Uuid],
) {
    for uid in configured {
        if !rows.iter().any(|row| row.schedule_uid == *uid) {
            rows.push(crate::warehouse::ScheduleStatus::never_synced(*uid));
        }
    }
    rows.sort_by_key(|row| row.schedule_uid);
}

/// Since when the daemon should have synced every configured schedule: the configuration
/// file's last change (a schedule added to it is due from then, and the daemon reads the file
/// only when it starts), or, for a configuration of `CALLSYNC_*` variables alone, the oldest
/// pass the warehouse remembers (the daemon ran then); `None` when neither is known.
pub(super) fn configured_since(
    config: &Config,
    warehouse: &dyn Destination,
) -> Result<Option<Timestamp>> {
    let Some(file) = &config.source else {
        return Ok(warehouse.first_pass_at()?);
    };
    let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok();
    Ok(modified
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|since| Timestamp::from_unix_nanos(i128::try_from(since.as_nanos()).ok()?)))
}

/// How many `sync.cron` ticks each configured schedule has gone without a recorded pass (a
/// schedule never synced: since `configured_since`): a daemon that has stopped, or cannot
/// record its failures, otherwise looks healthy here.
pub(super) fn count_ticks_since_last_pass(
    config: &Config,
    rows: &mut [crate::warehouse::ScheduleStatus],
    now: Timestamp,
    configured_since: Option<Timestamp>,
) -> Result<()> {
    for row in rows {
        let configured = config.sync.schedules.contains(&row.schedule_uid);
        let since = if row.never_synced {
            configured_since
        } else {
            row.last_recorded_at()
        };
        let Some(last) = since.filter(|_| configured) else {
            continue;
        };
        note_backing_off(config, row, last);
        let ticks = crate::daemon::firings_between(
            &config.sync.cron,
            last,
            now,
            crate::warehouse::TICKS_COUNTED,
        );
        row.set_ticks_since_last_pass(ticks);
    }
    Ok(())
}

/// A schedule whose latest passes failed, `failed_passes` in a row, is sat out by the daemon
/// for `backoff_ticks` ticks of `sync.cron` after the last (`last`): `status` says so, with the
/// next try's tick, rather than that no pass was recorded.
fn note_backing_off(config: &Config, row: &mut crate::warehouse::ScheduleStatus, last: Timestamp) {
    if row.busy_since.is_some() || row.failed_passes == 0 {
        return;
    }
    let failures = u32::try_from(row.failed_passes).unwrap_or(u32::MAX);
    let ticks = u64::from(crate::daemon::backoff_ticks(failures));
    if ticks == 0 {
        return;
    }
    let Some(next) = crate::daemon::nth_firing_after(&config.sync.cron, last, ticks + 1) else {
        return;
    };
    row.backing_off = Some(crate::warehouse::BackingOff {
        failures: row.failed_passes,
        ticks,
        next_try_at: next,
    });
}

/// A warehouse its owner cannot write: the daemon (running as the owner) cannot record its
/// passes either, so the last pass shown may be older than failures it could not record.
/// On stderr, so that `--json` stays parseable.
pub(super) fn warn_if_read_only(warehouse: &dyn Destination) {
    if let Some(why) = warehouse.unwritable_for_owner() {
        eprintln!(
            "warning: {why}: callsync cannot record its passes there, so passes since then may have failed unrecorded and those below be out of date; make it writable again and see the daemon's log (journalctl -u callsync)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_watches_the_configured_schedules_for_failures_and_falling_behind() {
        // A schedule whose latest pass ended `last` (`None`: it has not ended).
        let row = |uid: &Uuid, last: Option<crate::warehouse::RunOutcome>, behind: i64| {
            crate::warehouse::ScheduleStatus {
                last_result: Some(last),
                behind_passes: behind,
                falling_behind: behind >= crate::warehouse::FALLING_BEHIND_PASSES,
                never_synced: false,
                ..crate::warehouse::ScheduleStatus::never_synced(*uid)
            }
        };
        use crate::warehouse::RunOutcome::*;
        let [a, b, c, d] = [1u128, 2, 3, 4].map(Uuid::from_u128);
        let rows = [
            row(&a, Some(Completed), 0),
            row(&b, Some(Failed), 0),
            row(&c, Some(Behind), 2),
            row(&d, Some(Behind), 1),
        ];
        assert_eq!(
            needing_attention(&rows, &[]),
            [
                format!("schedule {b}: its last pass failed"),
                format!("schedule {c}: falling behind (2 passes in a row ended behind)"),
            ]
        );
        assert_eq!(
            needing_attention(&rows, &[a, c, d]),
            [format!(
                "schedule {c}: falling behind (2 passes in a row ended behind)"
            )]
        );
        assert!(needing_attention(&rows, &[a, d]).is_empty());
        for fine in [Some(Interrupted), None] {
            assert!(needing_attention(&[row(&a, fine, 0)], &[]).is_empty());
        }
        let mut stopped = row(&a, Some(Completed), 0);
        stopped.ticks_since_last_pass = Some(5);
        stopped.no_recent_pass = true;
        assert_eq!(
            needing_attention(&[stopped], &[]),
            [format!(
                "schedule {a}: no pass recorded for 5 ticks of sync.cron"
            )]
        );
        // A running pass (a long reconciliation) is busy, not missing: bad only once late,
        // and named.
        let mut busy = row(&c, None, 0);
        busy.schedule_name = Some("Renewals".into());
        busy.busy_since = Some(crate::service::Timestamp::parse("2026-11-25T03:30:00Z").unwrap());
        busy.set_ticks_since_last_pass(crate::warehouse::LATE_PASS_TICKS - 1);
        assert!(needing_attention(&[busy.clone()], &[c]).is_empty());
        busy.set_ticks_since_last_pass(crate::warehouse::LATE_PASS_TICKS);
        assert_eq!(
            needing_attention(&[busy], &[c]),
            [format!(
                "schedule {c} \"Renewals\": its running pass has not moved the checkpoint for 30 ticks of sync.cron"
            )]
        );
        let mut lagging = row(&d, Some(Completed), 0);
        lagging.stale_secs = Some(7200.4);
        assert!(needing_attention(&[lagging.clone()], &[]).is_empty());
        lagging.over_max_lag = true;
        assert_eq!(
            needing_attention(&[lagging], &[]),
            [format!(
                "schedule {d}: lag 7200s, more than sync.max_lag_secs past the sync.cron tick due to catch up"
            )]
        );
        let mut never = crate::warehouse::ScheduleStatus::never_synced(b);
        assert!(needing_attention(&[never.clone()], &[b]).is_empty());
        never.set_ticks_since_last_pass(2);
        assert!(needing_attention(&[never.clone()], &[b]).is_empty());
        never.set_ticks_since_last_pass(3);
        assert_eq!(
            needing_attention(&[never], &[b]),
            [format!(
                "schedule {b}: never synced, though configured 3 ticks of sync.cron ago"
            )]
        );
    }
}
