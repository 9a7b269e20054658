//! `callsync checkpoint show|set|reset`: a schedule's checkpoint read or moved by hand,
//! under the schedule's lock.

use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use uuid::Uuid;

use super::args::CheckpointCommand;
use super::output::print_out;
use super::usage::UsageError;
use crate::config::Config;
use crate::service::Timestamp;

pub(super) fn checkpoint(config: &Config, command: CheckpointCommand) -> Result<ExitCode> {
    let describe = |c: Option<Timestamp>| c.map_or("none".to_owned(), |c| c.to_rfc3339());
    match command {
        CheckpointCommand::Show {
            schedule,
            force,
            json,
        } => {
            if let Some(schedule) = schedule {
                refuse_unknown_schedule(config, schedule, force)?;
            }
            let warehouse = super::destination::read_only(config)?;
            // Every error reading the warehouse names it already.
            let reading = || "cannot read the checkpoints";
            let schedules = match schedule {
                Some(s) => vec![s],
                None => warehouse
                    .status_at(Timestamp::now())
                    .with_context(reading)?
                    .iter()
                    .map(|s| s.schedule_uid)
                    .collect(),
            };
            for s in schedules {
                let c = warehouse.checkpoint(s).with_context(reading)?;
                let cursor = c.as_ref().map(|c| c.cursor);
                let written = c.as_ref().map(|c| c.updated_at.to_rfc3339());
                if json {
                    print_json_line(&serde_json::json!({
                        "schedule_uid": s,
                        "schedule_name": config.sync.schedule_names.get(&s),
                        "cursor": cursor.map(|c| c.to_rfc3339()),
                        "written": written,
                    }))?;
                    continue;
                }
                print_out(format_args!(
                    "schedule {s}: cursor {} (written {})\n",
                    describe(cursor),
                    written.as_deref().unwrap_or("never")
                ))?;
            }
        }
        CheckpointCommand::Set {
            schedule,
            cursor,
            force,
            json,
        } => {
            if !force {
                check_cursor(cursor, Timestamp::now())?;
            }
            refuse_unknown_schedule(config, schedule, force)?;
            let before = replace_checkpoint(config, schedule, Some(cursor))?.map(|c| c.cursor);
            let line = format!(
                "schedule {schedule}: cursor was {}, now {}",
                describe(before),
                cursor.to_rfc3339()
            );
            print_move(config, schedule, before, Some(cursor), &line, json)?;
        }
        CheckpointCommand::Reset {
            schedule,
            force,
            json,
        } => {
            refuse_unknown_schedule(config, schedule, force)?;
            let before = replace_checkpoint(config, schedule, None)?.map(|c| c.cursor);
            let line = format!(
                "schedule {schedule}: cursor was {}, now none (the next pass reads everything)",
                describe(before)
            );
            print_move(config, schedule, before, None, &line, json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One JSON object on a line of stdout (`--json`), as `migrate --json` prints its result.
fn print_json_line(value: &serde_json::Value) -> Result<()> {
    let line = crate::untrusted::json_safe(&value.to_string());
    print_out(format_args!("{line}\n"))
}

/// A moved checkpoint as its undo line, or with `json` as one object whose `from` and `to`
/// are the cursors (null: none), as `migrate --json`'s are the versions. The undo line goes to
/// stderr too when stdout is not a terminal, JSON or not: the move is committed already.
fn print_move(
    config: &Config,
    schedule: Uuid,
    from: Option<Timestamp>,
    to: Option<Timestamp>,
    line: &str,
    json: bool,
) -> Result<()> {
    if !json {
        return print_undo_line(line);
    }
    if !std::io::stdout().is_terminal() {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    print_json_line(&serde_json::json!({
        "schedule_uid": schedule,
        "schedule_name": config.sync.schedule_names.get(&schedule),
        "from": from.map(|c| c.to_rfc3339()),
        "to": to.map(|c| c.to_rfc3339()),
    }))
}

/// The line that says where a moved checkpoint was, the only way to undo the move. The move
/// is committed already, so when stdout is not a terminal (a pipe may drop the line,
/// `| true`) it goes to stderr too.
pub(super) fn print_undo_line(line: &str) -> Result<()> {
    if !std::io::stdout().is_terminal() {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    print_out(format_args!("{line}\n"))
}

/// How far past this machine's clock `checkpoint set` takes a cursor without `--force`: the
/// service's clock cannot be read offline, and a few minutes cover a clock that is slow.
pub(super) const CURSOR_CLOCK_ALLOWANCE: Duration = Duration::from_secs(5 * 60);

/// A cursor an operator most likely did not mean: past the service's clock every change
/// until then would be skipped; before the year 1 every pass asks for `-001-12-31…` and the
/// service refuses it.
pub(super) fn check_cursor(cursor: Timestamp, now: Timestamp) -> Result<(), UsageError> {
    let force = "pass --force to set it anyway";
    if cursor > now.saturating_add(CURSOR_CLOCK_ALLOWANCE) {
        let minutes = CURSOR_CLOCK_ALLOWANCE.as_secs() / 60;
        return Err(UsageError(format!(
            "--cursor {cursor} is more than {minutes} minutes ahead of this machine's clock ({now}; the service's clock cannot be read offline): the schedule would skip every change until then; {force}"
        )));
    }
    if cursor.as_offset_date_time().year() < 1 {
        return Err(UsageError(format!(
            "--cursor {cursor} is before the year 1, which the service cannot be asked about; {force}"
        )));
    }
    Ok(())
}

/// A schedule in neither `sync.schedules` nor the warehouse is most likely a typo: refused,
/// or with `force` a warning.
pub(super) fn refuse_unknown_schedule(config: &Config, schedule: Uuid, force: bool) -> Result<()> {
    if config.sync.schedules.contains(&schedule) || warehouse_knows(config, schedule)? {
        return Ok(());
    }
    let name = super::destination::backend(config)?.name();
    let problem = format!(
        "schedule {schedule} is in neither sync.schedules nor the warehouse {name} (a typo?)"
    );
    if !force {
        return Err(UsageError(format!("{problem}; pass --force to use it anyway")).into());
    }
    let _ = writeln!(std::io::stderr(), "warning: {problem}; going on (--force)");
    Ok(())
}

/// Whether the configured warehouse has heard of `schedule`; one not created yet has not.
pub(super) fn warehouse_knows(config: &Config, schedule: Uuid) -> Result<bool> {
    match super::destination::read_only(config) {
        Ok(warehouse) => Ok(warehouse.knows_schedule(schedule)?),
        Err(e) => match e.downcast_ref::<crate::warehouse::WarehouseError>() {
            Some(crate::warehouse::WarehouseError::Missing { .. }) => Ok(false),
            _ => Err(e),
        },
    }
}

/// Moves a checkpoint while holding the schedule's lock, so no pass moves it meanwhile.
pub(super) fn replace_checkpoint(
    config: &Config,
    schedule: Uuid,
    cursor: Option<Timestamp>,
) -> Result<Option<crate::warehouse::Checkpoint>> {
    // Every error opening it names the warehouse already; those of the change do not.
    let mut warehouse = super::destination::writing(config)?;
    super::destination::replace_checkpoint(warehouse.as_mut(), schedule, cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_ahead_of_our_clock_or_before_the_year_1_is_refused() {
        let now = Timestamp::parse("2026-11-24T18:00:00Z").unwrap();
        let at = |text: &str| check_cursor(Timestamp::parse(text).unwrap(), now);
        assert!(at("2026-11-24T18:05:00Z").is_ok(), "within the allowance");
        assert!(at("2020-01-01T00:00:00Z").is_ok());
        assert!(at("0001-01-01T00:00:00Z").is_ok());
        assert_eq!(
            at("2026-11-24T18:05:00.000001Z").unwrap_err().to_string(),
            "--cursor 2026-11-24T18:05:00.000001Z is more than 5 minutes ahead of this machine's clock (2026-11-24T18:00:00Z; the service's clock cannot be read offline): the schedule would skip every change until then; pass --force to set it anyway"
        );
        assert_eq!(
            at("0000-12-31T23:59:59Z").unwrap_err().to_string(),
            "--cursor 0000-12-31T23:59:59Z is before the year 1, which the service cannot be asked about; pass --force to set it anyway"
        );
    }
}
