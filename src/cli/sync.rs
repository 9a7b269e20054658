//! `callsync run`, `sync` and `backfill`: the commands that run passes.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use uuid::Uuid;

use super::args::BackfillArgs;
use super::output::print_out;
use super::pass_json;
use super::progress::{ProgressBar, ProgressLog};
use super::signals::{cancel_on_signal, refuse_reload_on_sighup};
use super::usage::UsageError;
use crate::config::Config;
use crate::sync::{Engine, Mode, PassPlan, PassProgress, PassReport, PassResult};

pub(super) async fn run_daemon(config: Config) -> Result<ExitCode> {
    if config.sync.schedules.is_empty() {
        return Err(UsageError("no schedules to sync: list them in sync.schedules".into()).into());
    }
    let cancel = cancel_on_signal()?;
    refuse_reload_on_sighup();
    match crate::daemon::run(config, cancel.cancelled_owned()).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // It ran, then stopped: the error names the warehouse and what to do.
        Err(lost @ crate::daemon::DaemonError::WarehouseUnusable(_)) => Err(lost.into()),
        // The warehouse's errors name it; the others (metrics, scheduler) need no path.
        Err(err) => Err(anyhow::Error::new(err).context("the daemon could not start")),
    }
}

pub(super) async fn sync(
    config: Config,
    only: Vec<Uuid>,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode> {
    let schedules = if only.is_empty() {
        config.sync.schedules.clone()
    } else {
        only
    };
    if schedules.is_empty() {
        return Err(UsageError(
            "no schedules to sync: list them in sync.schedules or pass --schedule UID".into(),
        )
        .into());
    }
    // Every error opening the warehouse names it already.
    let backend = super::destination::backend(&config)?;
    let mode = if dry_run { Mode::DryRun } else { Mode::Write };
    let engine = Engine::start(&config, backend.as_ref(), mode)?;
    let cancel = cancel_on_signal()?;
    let plan = PassPlan::incremental(engine.settings());
    let mut reports = Vec::new();
    // Each pass is printed as it ends; an output that fails (a full disk under `> file`)
    // does not stop the passes, which write the warehouse: the error comes after them.
    let mut printed = Ok(());
    {
        let mut passes = std::pin::pin!(engine.passes(&schedules, &plan, &cancel));
        while let Some(report) = futures::StreamExt::next(&mut passes).await {
            if printed.is_ok() {
                printed = if json {
                    pass_json::print(&report, dry_run)
                } else if dry_run {
                    print_dry_run(&report)
                } else {
                    Ok(())
                };
            }
            reports.push(report);
        }
    }
    engine.close().await;
    printed?;
    Ok(exit_code(&reports))
}

pub(super) fn print_dry_run(r: &PassReport) -> Result<()> {
    print_out(format_args!(
        "schedule {}: would write {} of {} calls seen ({} pages, {} requests){}\n",
        r.schedule,
        r.stats.calls_written,
        r.stats.calls_seen,
        r.stats.pages,
        r.stats.requests,
        match &r.result {
            PassResult::Completed => String::new(),
            other => format!("; {other}"),
        }
    ))
}

pub(super) async fn backfill(config: Config, args: BackfillArgs) -> Result<ExitCode> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since > until
    {
        return Err(UsageError(format!("--since {since} is after --until {until}")).into());
    }
    let backend = super::destination::backend(&config)?;
    let engine = Engine::start(&config, backend.as_ref(), Mode::Write)?;
    let cancel = cancel_on_signal()?;
    let plan = PassPlan::backfill(engine.settings(), args.since, args.until);
    let bar = ProgressBar::for_terminal();
    let log = ProgressLog::every(Duration::from_secs(10));
    let progress: &dyn PassProgress = match &bar {
        Some(bar) => bar,
        None => &log,
    };
    let report = engine
        .run_pass(args.schedule, &plan, &cancel, progress)
        .await;
    if let Some(bar) = bar {
        bar.finish(&report);
    }
    engine.close().await;
    if args.json {
        pass_json::print(&report, false)?;
    }
    Ok(exit_code(std::slice::from_ref(&report)))
}

/// 0 when every pass completed, 1 otherwise.
pub(super) fn exit_code(reports: &[PassReport]) -> ExitCode {
    if reports.iter().all(PassReport::succeeded) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
