//! `callsync upload`: a contact list checked, then sent in chunks
//! ([`crate::upload`]), its progress shown and what became of every row printed.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use uuid::Uuid;

use super::campaign::{print_line, service_client};
use super::output::print_out;
use super::progress::ProgressBar;
use super::progress::{NoProgress, UploadLog};
use super::service_args::UploadArgs;
use super::usage::UsageError;
use crate::config::Config;
use crate::service::MAX_BULK;
use crate::upload::{self, UploadOptions, UploadProgress};
use crate::warehouse::Capability;

pub(super) async fn run(config: &Config, args: UploadArgs) -> Result<ExitCode> {
    // Declined before anything is read or sent by a warehouse that keeps no ledger.
    let backend = super::destination::backend(config)?;
    backend.offers(Capability::UploadLedger)?;
    let options = UploadOptions {
        schedule: args.schedule,
        path: args.file,
        renames: args.renames,
        force: args.force,
        allow_missing_external_id: args.allow_missing_external_id,
        skip_existing: args.skip_existing,
        settle: config.api.create_settle_window(),
    };
    let shown = options.path.display().to_string();
    let checked = upload::check(&options).map_err(|err| UsageError(format!("{err}")))?;
    refuse_problems(&checked, &shown)?;
    if args.dry_run {
        return print_dry_run(config, &options, &shown, checked.rows, args.json);
    }
    let client = service_client(config)?;
    let mut warehouse = backend.writer().with_context(|| {
        format!(
            "cannot open the warehouse {} for the upload ledger",
            backend.name()
        )
    })?;
    // Held until the upload ends: a second upload into this schedule now could send a
    // contact this one is sending.
    let (_lock, ledger) = upload::ledger(warehouse.as_mut(), options.schedule)?;
    let bar = ProgressBar::for_terminal();
    let log = bar
        .is_none()
        .then(|| UploadLog::start(PROGRESS_EVERY, checked.rows, log_progress));
    let progress: &dyn UploadProgress = match (&bar, &log) {
        (Some(bar), _) => bar,
        (None, Some(log)) => log,
        (None, None) => &NoProgress,
    };
    let sent = upload::send(&client, ledger, &options, &checked, progress).await;
    drop(log);
    if let Some(bar) = bar {
        bar.0.finish_and_clear();
    }
    let summary = match sent {
        Ok(summary) => summary,
        // Each says all there is, the schedule included.
        Err(err @ upload::UploadError::ScheduleNotFound { .. }) => return Err(err.into()),
        Err(upload::UploadError::AlreadyInSchedule {
            schedule,
            problems,
            count,
        }) => return Err(already_in_schedule(&shown, schedule, &problems, count)),
        Err(err) => return Err(upload_failed(err, &shown, options.schedule)),
    };
    for problem in &summary.refusals {
        let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
    }
    if args.json {
        let name = config.sync.schedule_names.get(&options.schedule);
        print_json(&summary_json(&shown, options.schedule, name, &summary))?;
    } else {
        print_line(&format!("{shown}: {}", describe_summary(&summary)))?;
    }
    if summary.rows_refused > 0 {
        bail!(
            "the service refused {} rows of {shown} (the reasons above; a chunk is refused whole, so its other rows were not sent either); the other chunks were sent: fix those rows and run the same upload again — chunks already created are found, not sent twice",
            summary.rows_refused
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The file's bad rows on stderr (the first ones), and the refusal: nothing is sent.
fn refuse_problems(checked: &upload::Checked, shown: &str) -> Result<()> {
    if checked.problem_count > 0 {
        for problem in &checked.problems {
            let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
        }
        let unlisted = checked.problem_count - checked.problems.len() as u64;
        if unlisted > 0 {
            let _ = writeln!(std::io::stderr(), "{shown}: … and {unlisted} more problems");
        }
        bail!(UsageError(format!(
            "{shown}: {} problems in {} rows; nothing was sent: fix them and run the upload again",
            checked.problem_count, checked.rows
        )));
    }
    Ok(())
}

/// `upload --dry-run`: the file checked, what would be sent, nothing sent.
fn print_dry_run(
    config: &Config,
    options: &UploadOptions,
    shown: &str,
    rows: u64,
    json: bool,
) -> Result<ExitCode> {
    let chunks = rows.div_ceil(MAX_BULK as u64);
    if json {
        print_json(&serde_json::json!({
            "file": shown,
            "schedule_uid": options.schedule,
            "schedule_name": config.sync.schedule_names.get(&options.schedule),
            "dry_run": true,
            "rows": rows,
            "chunks_to_send": chunks,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    print_line(&format!(
        "{shown}: {} rows checked, all valid; would send {} to schedule {} (dry run: nothing sent)",
        rows,
        crate::counted(chunks, "chunk", "chunks"),
        options.schedule
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Rows that would call someone twice: named like the check's bad rows, and refused the
/// same way (exit 2, nothing sent).
fn already_in_schedule(
    shown: &str,
    schedule: Uuid,
    problems: &[upload::RowProblem],
    count: u64,
) -> anyhow::Error {
    for problem in problems {
        let _ = writeln!(std::io::stderr(), "{shown}: {problem}");
    }
    let unlisted = count - problems.len() as u64;
    if unlisted > 0 {
        let _ = writeln!(std::io::stderr(), "{shown}: … and {unlisted} more");
    }
    UsageError(format!(
        "{shown}: {count} rows have an external_id schedule {schedule} already has; nothing was sent: remove those rows, or pass --skip-existing to send only the others"
    ))
    .into()
}

/// A failed upload with a context naming what its error does not: the schedule, and the file
/// unless the error names it already.
fn upload_failed(err: upload::UploadError, shown: &str, schedule: Uuid) -> anyhow::Error {
    let context = if err.names_the_file() {
        format!("upload to schedule {schedule}")
    } else {
        format!("upload of {shown} to schedule {schedule}")
    };
    anyhow::Error::new(err).context(context)
}

/// What became of every row: `2500 rows: 1500 calls created (2 chunks), 0 found already
/// created (0 chunks), 0 skipped (already in the schedule), 1000 refused by the service (1
/// chunk)`.
fn describe_summary(s: &upload::UploadSummary) -> String {
    let chunks = |n: u64| crate::counted(n, "chunk", "chunks");
    format!(
        "{} rows: {} calls created ({}), {} found already created ({}), {} skipped (already in the schedule), {} refused by the service ({})",
        s.rows,
        s.calls_created,
        chunks(s.chunks_created),
        s.rows_found,
        chunks(s.chunks_found),
        s.rows_skipped,
        s.rows_refused,
        chunks(s.chunks_refused),
    )
}

/// `--json`: what became of every row, as one object with the text summary's counts; a
/// refused chunk's reasons (also on stderr) in `refusals`, `column` `null` for a whole row's.
fn summary_json(
    shown: &str,
    schedule: Uuid,
    schedule_name: Option<&String>,
    s: &upload::UploadSummary,
) -> serde_json::Value {
    let refusals: Vec<_> = s
        .refusals
        .iter()
        .map(|p| serde_json::json!({"line": p.line, "column": p.column, "reason": p.reason}))
        .collect();
    serde_json::json!({
        "file": shown,
        "schedule_uid": schedule,
        "schedule_name": schedule_name,
        "dry_run": false,
        "rows": s.rows,
        "calls_created": s.calls_created,
        "chunks_created": s.chunks_created,
        "rows_found": s.rows_found,
        "chunks_found": s.chunks_found,
        "rows_skipped": s.rows_skipped,
        "rows_refused": s.rows_refused,
        "chunks_refused": s.chunks_refused,
        "refusals": refusals,
    })
}

/// One JSON object on a line of stdout, as `migrate --json` prints its result; the file's
/// name and the service's reasons made safe for a terminal.
fn print_json(value: &serde_json::Value) -> Result<()> {
    print_out(format_args!(
        "{}\n",
        crate::untrusted::json_safe(&value.to_string())
    ))
}

/// How often an upload without a terminal logs where it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

fn log_progress(rows_done: u64, rows: u64, waiting: Option<&str>) {
    match waiting {
        Some(what) => tracing::info!(rows_done, rows, "upload progress: {what}"),
        None => tracing::info!(rows_done, rows, "upload progress"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(err: upload::UploadError) -> String {
        let err = upload_failed(err, "contacts.csv", Uuid::nil());
        crate::assert_each_cause_once(err.as_ref());
        crate::error_chain(err.as_ref())
    }

    #[test]
    fn a_failed_upload_names_its_file_once() {
        let changed = chain(upload::UploadError::FileChanged {
            path: "contacts.csv".into(),
            first_line: 1002,
        });
        assert_eq!(changed.matches("contacts.csv").count(), 1, "{changed}");
        assert!(
            changed.starts_with(
                "upload to schedule 00000000-0000-0000-0000-000000000000: contacts.csv changed after it was checked"
            ),
            "{changed}"
        );
        let not_the_file = chain(upload::UploadError::PartlyThere {
            first_line: 2,
            last_line: 1001,
            problem: "external_id \"a\" (line 2) has 2 calls in the schedule".into(),
        });
        assert_eq!(
            not_the_file.matches("contacts.csv").count(),
            1,
            "{not_the_file}"
        );
        assert!(
            not_the_file.starts_with(
                "upload of contacts.csv to schedule 00000000-0000-0000-0000-000000000000: the chunk of lines 2–1001 is partly in the service already"
            ),
            "{not_the_file}"
        );
    }
}
