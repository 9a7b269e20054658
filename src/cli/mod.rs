//! The command line: the only place with clap, anyhow and exit codes.
//!
//! Parses arguments, loads the configuration, sets up logging, runs one command and maps the
//! outcome to an exit code: 0 success, 1 a runtime failure (a schedule failed, the warehouse
//! could not be opened), 2 a configuration or usage error, 3 `status` found a schedule that
//! needs attention (its last pass failed, it is falling behind, no pass was recorded lately,
//! or its running pass is late), 130 a second SIGINT or SIGTERM. Errors print as one line with their causes
//! (`{:#}`). Output for scripts (`--json`) goes to stdout alone; logs, progress and warnings
//! go to stderr.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{ArgMatches, FromArgMatches};
use tracing_subscriber::filter::LevelFilter;

use crate::config::{Config, ConfigError, LogConfig};
use crate::daemon::DaemonError;
use crate::sync::SyncError;
use crate::telemetry::{self, TelemetryError};
use crate::warehouse::WarehouseError;

mod args;
mod campaign;
mod check;
mod checkpoint;
mod config;
mod demo;
mod destination;
mod generate;
mod output;
mod pass_json;
mod progress;
mod service_args;
mod signals;
mod simulate;
mod status;
mod store;
mod sync;
mod upload;
mod usage;

pub use args::command;
use args::{Cli, Command, config_path};
use checkpoint::checkpoint;
use service_args::ServiceCommand;
use simulate::simulate;
use status::status;
use store::{backup, migrate, restore};
use sync::{backfill, run_daemon, sync};
use usage::UsageError;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match run(cli, &matches) {
        Ok(code) => code,
        Err(err) => {
            // Each cause once, on one line: `{:#}` for errors that follow ARCHITECTURE.md's
            // rule, and a guard for those that still embed their source's message.
            let dyn_err: &(dyn std::error::Error + 'static) = err.as_ref();
            // Not `eprintln!`: it panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "error: {}", crate::error_chain(dyn_err));
            if is_configuration_error(&err) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Exit code 2: the configuration, the environment or the command line is wrong, wherever in
/// the chain of causes that was found (a library error may carry a `ConfigError`, which a
/// transparent variant does not show as a cause of its own, so those are asked).
fn is_configuration_error(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.is::<ConfigError>()
            || cause.is::<UsageError>()
            || cause.is::<TelemetryError>()
            || cause.is::<demo::ForeignDirectory>()
            || (cause.downcast_ref::<SyncError>()).is_some_and(SyncError::is_configuration)
            || (cause.downcast_ref::<WarehouseError>())
                .is_some_and(WarehouseError::is_configuration)
            || (cause.downcast_ref::<DaemonError>()).is_some_and(DaemonError::is_configuration)
    })
}

fn run(cli: Cli, matches: &ArgMatches) -> Result<ExitCode> {
    let config_path = config_path(matches)?;
    let verbosity = cli.verbosity;
    match cli.command {
        Command::Completions { shell } => return generate::completions(shell),
        Command::Man { out } => return generate::man(out.as_deref()),
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Simulate(args) => {
            init_logging(&verbosity.apply(&LogConfig::default()))?;
            runtime.block_on(simulate(args))
        }
        Command::Demo { dir, force } => {
            init_logging(&verbosity.apply(&LogConfig {
                level: LevelFilter::WARN.into(),
                ..LogConfig::default()
            }))?;
            runtime.block_on(demo::run(&dir, force))?;
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let config = crate::config::load(config_path.as_deref())?;
            init_logging(&verbosity.apply(&config.log))?;
            runtime.block_on(dispatch(command, config))
        }
    }
}

fn init_logging(log: &LogConfig) -> Result<()> {
    telemetry::init(log).context("cannot set up logging")
}

async fn dispatch(command: Command, config: Config) -> Result<ExitCode> {
    if command.talks_to_the_service() {
        // Before anything is opened or written; the others run without the service's secret.
        config.api.credentials()?;
    }
    match command {
        Command::Run => run_daemon(config).await,
        Command::Sync {
            schedules,
            dry_run,
            json,
        } => sync(config, schedules, dry_run, json).await,
        Command::Checkpoint(command) => checkpoint(&config, command),
        Command::Backfill(args) => backfill(config, args).await,
        Command::Status { json } => status(&config, json),
        Command::Check { json } => check::run(&config, json).await,
        Command::Config { json } => config::run(&config, json),
        Command::Migrate { json } => migrate(&config, json),
        Command::Service(ServiceCommand::Upload(args)) => upload::run(&config, args).await,
        Command::Service(command) => campaign::run(&config, command).await,
        Command::Backup { path, force, json } => backup(&config, &path, force, json),
        Command::Restore { path, json } => restore(&config, &path, json),
        Command::Simulate(_)
        | Command::Demo { .. }
        | Command::Completions { .. }
        | Command::Man { .. } => {
            unreachable!("handled before the configuration is loaded")
        }
    }
}
