//! The command line: the only place with clap, anyhow and exit codes.
//!
//! Parses arguments, loads the configuration, sets up logging, runs one command and maps the
//! outcome to an exit code: 0 success, 1 a runtime failure (a schedule failed, the warehouse
//! could not be opened), 2 a configuration or usage error. Errors print as one line with
//! their causes (`{:#}`).

use std::io::{IsTerminal, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::Timestamp;
use crate::config::{self, Config, ConfigError, LogConfig};
use crate::simulator::{DialerOptions, Precision, Simulator, SimulatorOptions};
use crate::sync::{Engine, PassPlan, PassProgress, PassReport, PassResult};
use crate::telemetry::{self, TelemetryError};
use crate::warehouse::Warehouse;

mod campaign;

#[derive(Debug, Parser)]
#[command(
    name = "callsync",
    version,
    about = "Sync call results from the Outbound Call Campaign Service into a SQLite warehouse",
    long_about = None,
)]
pub struct Cli {
    /// Configuration file [default: ./config/callsync.toml, then /etc/callsync/callsync.toml]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Try it: a simulator, the daemon against it for a few seconds, then what an analyst sees
    Demo {
        /// Where to write the demo's config and warehouse: a new or empty directory, or an
        /// earlier demo's
        #[arg(long, default_value = "demo")]
        dir: PathBuf,
        /// Use DIR even when it holds other files (its callsync.toml is overwritten, its
        /// callsync.db deleted)
        #[arg(long)]
        force: bool,
    },
    /// Run as a daemon: a pass of every schedule now, then on sync.cron, until SIGTERM
    Run,
    /// Run one incremental pass of every configured schedule (or those given), then exit
    Sync {
        /// Sync only this schedule (repeatable); default: every schedule in sync.schedules
        #[arg(long = "schedule", value_name = "UID")]
        schedules: Vec<Uuid>,
        /// Fetch and report what would be written; write nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Inspect or move a schedule's checkpoint (where its next pass starts)
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Re-read one schedule from a point in time and upsert what it finds
    Backfill(BackfillArgs),
    /// Show each schedule's checkpoint, last pass, lag and row counts
    Status {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Apply pending warehouse migrations, then exit
    Migrate,
    /// Write a consistent copy of the warehouse to PATH (safe while the daemon runs)
    Backup {
        /// Where to write the copy (one self-contained SQLite file)
        path: PathBuf,
        /// Overwrite PATH if it exists
        #[arg(long)]
        force: bool,
    },
    /// Replace the warehouse with the backup at PATH (stop the daemon first)
    Restore {
        /// The backup to restore (made by `callsync backup`)
        path: PathBuf,
    },
    /// Serve a simulator of the service on loopback (for trying callsync out and for tests)
    Simulate(SimulateArgs),
    #[command(flatten)]
    Service(campaign::ServiceCommand),
}

impl Command {
    /// Only these need credentials: `status`, `checkpoint` and `migrate` read or change the
    /// warehouse alone, so a BI-group user without the daemon's secret can run them.
    fn talks_to_the_service(&self) -> bool {
        match self {
            Command::Run | Command::Sync { .. } | Command::Backfill(_) => true,
            Command::Service(command) => command.talks_to_the_service(),
            _ => false,
        }
    }
}

#[derive(Debug, Subcommand)]
enum CheckpointCommand {
    /// Print the checkpoint of every schedule, or of one
    Show {
        /// Only this schedule; default: every schedule in the warehouse
        #[arg(long, value_name = "UID")]
        schedule: Option<Uuid>,
        /// Show a schedule that is in neither sync.schedules nor the warehouse
        #[arg(long)]
        force: bool,
    },
    /// Move a schedule's cursor (backwards too), printing what was there before
    Set {
        /// The schedule whose checkpoint moves
        #[arg(long, value_name = "UID")]
        schedule: Uuid,
        /// The new cursor (RFC 3339, any offset)
        #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
        cursor: Timestamp,
        /// Set a cursor in the future or before the year 1, or of a schedule that is in
        /// neither sync.schedules nor the warehouse
        #[arg(long)]
        force: bool,
    },
    /// Delete a schedule's checkpoint: its next pass reads everything again
    Reset {
        /// The schedule whose checkpoint is deleted
        #[arg(long, value_name = "UID")]
        schedule: Uuid,
        /// Reset a schedule that is in neither sync.schedules nor the warehouse
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
struct BackfillArgs {
    /// The schedule to re-read
    #[arg(long, value_name = "UID")]
    schedule: Uuid,
    /// Re-read calls updated at or after this instant (RFC 3339, any offset) [default: the beginning]
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    since: Option<Timestamp>,
    /// Stop after calls updated at this instant (RFC 3339, any offset) [default: now]
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    until: Option<Timestamp>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Address to listen on (loopback only is sensible: it has no real security)
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Number of schedules to create
    #[arg(long, default_value_t = 3)]
    schedules: usize,
    /// Calls per schedule to seed
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Precision of the service's timestamps
    #[arg(long, value_enum, default_value_t = PrecisionArg::Micros)]
    precision: PrecisionArg,
    /// Work the calls over time: attempts, outcomes, notifications, retries after each
    /// schedule's intervals, new calls now and then
    #[arg(long)]
    dialer: bool,
    /// Real seconds per second of the dialer's time (ringing, talk, retry intervals, new
    /// calls): 1 is real time, 0.01 runs 100 times faster
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0, value_parser = parse_time_scale)]
    time_scale: f64,
    /// Seed for the generated data
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PrecisionArg {
    Seconds,
    Millis,
    Micros,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // Each cause once, on one line: `{:#}` for errors that follow ARCHITECTURE.md's
            // rule, and a guard for those that still embed their source's message.
            let dyn_err: &(dyn std::error::Error + 'static) = err.as_ref();
            // Not `eprintln!`: it panics when stderr is a closed pipe.
            let _ = writeln!(
                std::io::stderr(),
                "error: {}",
                crate::sync::error_chain(dyn_err)
            );
            if is_configuration_error(&err) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Exit code 2: the configuration, the environment or the command line is wrong, wherever in
/// the chain of causes that was found (a library error may carry a `ConfigError`).
fn is_configuration_error(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.is::<ConfigError>()
            || cause.is::<UsageError>()
            || cause.is::<TelemetryError>()
            || cause.is::<crate::demo::ForeignDirectory>()
    })
}

/// A usage problem found after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn run(cli: Cli) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Simulate(args) => {
            init_logging(&LogConfig::default())?;
            runtime.block_on(simulate(args))
        }
        Command::Demo { dir, force } => {
            init_logging(&LogConfig {
                level: "warn".into(),
                ..LogConfig::default()
            })?;
            runtime.block_on(crate::demo::run(&dir, force))?;
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let config = config::load(cli.config.as_deref())?;
            init_logging(&config.log)?;
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
        Command::Sync { schedules, dry_run } => sync(config, schedules, dry_run).await,
        Command::Checkpoint(command) => checkpoint(&config, command),
        Command::Backfill(args) => backfill(config, args).await,
        Command::Status { json } => status(&config, json),
        Command::Migrate => migrate(&config),
        Command::Service(command) => campaign::run(&config, command).await,
        Command::Backup { path, force } => backup(&config, &path, force),
        Command::Restore { path } => restore(&config, &path),
        Command::Simulate(_) | Command::Demo { .. } => {
            unreachable!("handled before the configuration is loaded")
        }
    }
}

async fn run_daemon(config: Config) -> Result<ExitCode> {
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

async fn sync(config: Config, only: Vec<Uuid>, dry_run: bool) -> Result<ExitCode> {
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
    let engine = if dry_run {
        Engine::start_dry_run(&config)?
    } else {
        Engine::start(&config)?
    };
    let cancel = cancel_on_signal()?;
    let plan = PassPlan::incremental(engine.settings());
    let reports = engine.sync_all(&schedules, &plan, &cancel).await;
    engine.close().await;
    if dry_run {
        for r in &reports {
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
            ))?;
        }
    }
    Ok(exit_code(&reports))
}

async fn backfill(config: Config, args: BackfillArgs) -> Result<ExitCode> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since > until
    {
        return Err(UsageError(format!("--since {since} is after --until {until}")).into());
    }
    let engine = Engine::start(&config)?;
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
    Ok(exit_code(std::slice::from_ref(&report)))
}

fn status(config: &Config, json: bool) -> Result<ExitCode> {
    let path = &config.warehouse.path;
    // Every error opening it names the path already.
    let warehouse = Warehouse::open_read_only(path)?;
    let now = Timestamp::now();
    let mut rows = warehouse
        .status_at(now)
        .with_context(|| format!("cannot read the status from {}", path.display()))?;
    count_ticks_since_last_pass(config, &mut rows, now)?;
    warn_if_read_only(path);
    if json {
        print_out(format_args!("{}\n", serde_json::to_string_pretty(&rows)?))?;
    } else {
        print_out(crate::warehouse::render_status(&rows, now))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How many `sync.cron` ticks each configured schedule has gone without a recorded pass: a
/// daemon that has stopped, or cannot record its failures, otherwise looks healthy here.
fn count_ticks_since_last_pass(
    config: &Config,
    rows: &mut [crate::warehouse::ScheduleStatus],
    now: Timestamp,
) -> Result<()> {
    for row in rows {
        let configured = row
            .schedule_uid
            .parse()
            .is_ok_and(|uid| config.sync.schedules.contains(&uid));
        let Some(last) = row.last_recorded_at().filter(|_| configured) else {
            continue;
        };
        let ticks = crate::daemon::firings_between(
            &config.sync.cron,
            last,
            now,
            crate::warehouse::TICKS_COUNTED,
        )?;
        row.set_ticks_since_last_pass(ticks);
    }
    Ok(())
}

/// A warehouse its owner cannot write: the daemon (running as the owner) cannot record its
/// passes either, so the last pass shown may be older than failures it could not record.
/// On stderr, so that `--json` stays parseable.
fn warn_if_read_only(path: &std::path::Path) {
    if let Some(why) = crate::warehouse::unwritable_for_owner(path) {
        eprintln!(
            "warning: {why}: callsync cannot record its passes there, so passes since then may have failed unrecorded and those below be out of date; make it writable again and see the daemon's log (journalctl -u callsync)"
        );
    }
}

fn checkpoint(config: &Config, command: CheckpointCommand) -> Result<ExitCode> {
    let path = &config.warehouse.path;
    let describe = |c: Option<crate::warehouse::Checkpoint>| {
        c.map_or("none".to_owned(), |c| c.cursor.to_rfc3339())
    };
    match command {
        CheckpointCommand::Show { schedule, force } => {
            if let Some(schedule) = schedule {
                refuse_unknown_schedule(config, schedule, force)?;
            }
            let warehouse = Warehouse::open_read_only(path)?;
            // Every error reading the warehouse names its path already.
            let reading = || "cannot read the checkpoints";
            let schedules = match schedule {
                Some(s) => vec![s],
                None => warehouse
                    .status()
                    .with_context(reading)?
                    .iter()
                    .filter_map(|s| s.schedule_uid.parse().ok())
                    .collect(),
            };
            for s in schedules {
                let c = warehouse.checkpoint(s).with_context(reading)?;
                let written = c.as_ref().map(|c| c.updated_at.to_rfc3339());
                print_out(format_args!(
                    "schedule {s}: cursor {} (written {})\n",
                    describe(c),
                    written.as_deref().unwrap_or("never")
                ))?;
            }
        }
        CheckpointCommand::Set {
            schedule,
            cursor,
            force,
        } => {
            if !force {
                check_cursor(cursor, Timestamp::now())?;
            }
            refuse_unknown_schedule(config, schedule, force)?;
            let before = replace_checkpoint(config, schedule, Some(cursor))?;
            print_undo_line(&format!(
                "schedule {schedule}: cursor was {}, now {}",
                describe(before),
                cursor.to_rfc3339()
            ))?;
        }
        CheckpointCommand::Reset { schedule, force } => {
            refuse_unknown_schedule(config, schedule, force)?;
            let before = replace_checkpoint(config, schedule, None)?;
            print_undo_line(&format!(
                "schedule {schedule}: cursor was {}, now none (the next pass reads everything)",
                describe(before)
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to stdout. A reader that has gone (`| head -1`, `| true`) is no error: what
/// it did not read is dropped and the command ends with its own outcome (`println!` would
/// panic). Any other failure to write (a full disk under `> file`) is an error.
pub(crate) fn print_out(text: impl std::fmt::Display) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match write!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}

/// The line that says where a moved checkpoint was, the only way to undo the move. The move
/// is committed already, so when stdout is not a terminal (a pipe may drop the line,
/// `| true`) it goes to stderr too.
fn print_undo_line(line: &str) -> Result<()> {
    if !std::io::stdout().is_terminal() {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
    print_out(format_args!("{line}\n"))
}

/// How far past this machine's clock `checkpoint set` takes a cursor without `--force`: the
/// service's clock cannot be read offline, and a few minutes cover a clock that is slow.
const CURSOR_CLOCK_ALLOWANCE: Duration = Duration::from_secs(5 * 60);

/// A cursor an operator most likely did not mean: past the service's clock every change
/// until then would be skipped; before the year 1 every pass asks for `-001-12-31…` and the
/// service refuses it.
fn check_cursor(cursor: Timestamp, now: Timestamp) -> Result<(), UsageError> {
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
fn refuse_unknown_schedule(config: &Config, schedule: Uuid, force: bool) -> Result<()> {
    let path = &config.warehouse.path;
    if config.sync.schedules.contains(&schedule) || warehouse_knows(path, schedule)? {
        return Ok(());
    }
    let problem = format!(
        "schedule {schedule} is in neither sync.schedules nor the warehouse {} (a typo?)",
        path.display()
    );
    if !force {
        return Err(UsageError(format!("{problem}; pass --force to use it anyway")).into());
    }
    let _ = writeln!(std::io::stderr(), "warning: {problem}; going on (--force)");
    Ok(())
}

/// Whether the warehouse at `path` has heard of `schedule`; a warehouse not created yet has not.
fn warehouse_knows(path: &std::path::Path, schedule: Uuid) -> Result<bool> {
    match Warehouse::open_read_only(path) {
        Ok(warehouse) => Ok(warehouse.knows_schedule(schedule)?),
        Err(crate::warehouse::WarehouseError::Missing { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Moves a checkpoint while holding the schedule's lock, so no pass moves it meanwhile.
fn replace_checkpoint(
    config: &Config,
    schedule: Uuid,
    cursor: Option<Timestamp>,
) -> Result<Option<crate::warehouse::Checkpoint>> {
    let path = &config.warehouse.path;
    // Every error opening it names the path already; those of the change do not.
    let mut warehouse = Warehouse::open(path, config.warehouse.busy_timeout)?;
    // The lock is on the warehouse file itself, which exists once it is open.
    let _lock = crate::sync::ScheduleLock::acquire(path, schedule)?;
    warehouse
        .replace_checkpoint(schedule, cursor)
        .with_context(|| format!("cannot change the checkpoint in {}", path.display()))
}

fn migrate(config: &Config) -> Result<ExitCode> {
    let path = &config.warehouse.path;
    // Every error it returns names the path already.
    let report = Warehouse::migrate(path, config.warehouse.busy_timeout)?;
    print_out(format_args!(
        "warehouse {}: schema version {} -> {}\n",
        path.display(),
        report.from,
        report.to
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn backup(config: &Config, dest: &std::path::Path, force: bool) -> Result<ExitCode> {
    let path = &config.warehouse.path;
    // Every error opening it names the path already.
    let warehouse = Warehouse::open_read_only(path)?;
    let report = warehouse
        .backup_to(dest, force)
        .with_context(|| format!("cannot back up the warehouse {}", path.display()))?;
    // Not `println!`: the copy is made, and a closed stdout must not turn that into a panic.
    let _ = writeln!(
        std::io::stdout(),
        "backed up {} to {}: {} bytes, {}",
        path.display(),
        report.path.display(),
        report.bytes,
        report.contents
    );
    Ok(ExitCode::SUCCESS)
}

fn restore(config: &Config, backup: &std::path::Path) -> Result<ExitCode> {
    let path = &config.warehouse.path;
    let report = crate::warehouse::restore(backup, path, config.warehouse.busy_timeout)?;
    let removed: Vec<String> = report
        .removed
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    // Not `println!`: the restore is done, and a closed stdout must not turn that into a panic.
    let _ = writeln!(
        std::io::stdout(),
        "restored {} into {}: {} bytes, {}; {}",
        backup.display(),
        path.display(),
        report.bytes,
        report.contents,
        if removed.is_empty() {
            "no old WAL files to remove".to_owned()
        } else {
            format!("removed the old {}", removed.join(" and "))
        }
    );
    Ok(ExitCode::SUCCESS)
}

async fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    let options = SimulatorOptions {
        schedules: args.schedules,
        calls_per_schedule: args.calls,
        precision: match args.precision {
            PrecisionArg::Seconds => Precision::Seconds,
            PrecisionArg::Millis => Precision::Millis,
            PrecisionArg::Micros => Precision::Micros,
        },
        seed: args.seed,
        dialer: args.dialer.then(|| DialerOptions::endless(args.time_scale)),
        ..SimulatorOptions::default()
    };
    let simulator = Simulator::start(args.listen, options)
        .await
        .with_context(|| format!("cannot start the simulator on {}", args.listen))?;
    let stop = cancel_on_signal()?;
    // `callsync simulate | head -1` (to grab the base URL) closes stdout; the simulator
    // goes on serving.
    print_out(format_args!(
        "{}\nPress Ctrl-C to stop.\n\n# A callsync.toml for this simulator: everything from [api] on\n{}",
        simulator.summary(),
        config_for_simulator(&simulator)
    ))?;
    stop.cancelled().await;
    simulator.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// A configuration that works with the simulator as it is, ready to paste (or to cut out of
/// the output with `sed -n '/^\[api\]/,$p'`): its URL and token, a warehouse in the working
/// directory, its schedules.
fn config_for_simulator(simulator: &Simulator) -> String {
    let schedules: Vec<String> = simulator
        .schedule_uids()
        .iter()
        .map(|uid| format!("\"{uid}\""))
        .collect();
    format!(
        "[api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n\n[warehouse]\npath = \"callsync.db\"\n\n[sync]\nschedules = [{}]\n",
        simulator.base_url(),
        simulator.access_token(),
        schedules.join(", ")
    )
}

/// `--time-scale`: a positive, finite factor.
fn parse_time_scale(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "{text:?} is not a positive number (1 is real time, 0.01 is 100 times faster)"
        )),
    }
}

/// 0 when every pass completed, 1 otherwise.
fn exit_code(reports: &[PassReport]) -> ExitCode {
    if reports.iter().all(PassReport::succeeded) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Cancelled on the first SIGINT or SIGTERM; a second one exits at once (the checkpoint is
/// committed with each page, so that is safe).
pub fn cancel_on_signal() -> Result<CancellationToken> {
    // Registered now, not in the task: a signal that arrives before the task first runs
    // (right after a banner is printed, say) must not meet the default action and kill us.
    let mut signals = ShutdownSignals::install().context("cannot listen for SIGTERM and SIGINT")?;
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        signals.recv().await;
        tracing::warn!(
            "shutting down: finishing the pages being written (signal again to exit now)"
        );
        token.cancel();
        signals.recv().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    Ok(cancel)
}

/// The configuration is read once: a reload would have to re-plan running passes, and a
/// restart is already safe at any instant. Without this handler SIGHUP would kill the
/// daemon mid-page, so it is caught and answered with the way to apply a new configuration.
fn refuse_reload_on_sighup() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut hangup) = signal(SignalKind::hangup()) {
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    tracing::warn!(
                        "SIGHUP ignored: callsync does not reload its configuration; \
                         restart it to apply changes (systemctl restart callsync; safe at any time)"
                    );
                }
            });
        }
    }
}

/// SIGTERM and SIGINT, caught from the moment this value is made.
struct ShutdownSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse(text).map_err(|e| e.to_string())
}

/// A progress bar on a terminal: calls read of the service's total, and pages.
struct ProgressBar(indicatif::ProgressBar);

impl ProgressBar {
    fn for_terminal() -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} calls ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(200));
        Some(ProgressBar(bar))
    }

    fn finish(self, report: &PassReport) {
        let hint = match report.result {
            PassResult::Completed => "",
            _ => "; run it again to finish",
        };
        self.0.finish_with_message(format!(
            "{} pages, {}{hint}",
            report.stats.pages, report.result
        ));
    }
}

/// Without a terminal (systemd, cron, a pipe): a log line now and then, so a long backfill
/// shows it is moving.
struct ProgressLog {
    every: Duration,
    last: std::sync::Mutex<Instant>,
}

impl ProgressLog {
    fn every(every: Duration) -> Self {
        ProgressLog {
            every,
            last: std::sync::Mutex::new(Instant::now()),
        }
    }
}

impl PassProgress for ProgressLog {
    fn page(&self, pages: u64, calls_seen: u64, total: Option<u64>) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.elapsed() >= self.every {
            *last = Instant::now();
            tracing::info!(pages, calls_seen, total, "progress");
        }
    }
}

impl PassProgress for ProgressBar {
    fn page(&self, pages: u64, calls_seen: u64, total: Option<u64>) {
        if let Some(total) = total {
            self.0.set_length(calls_seen.max(total));
        }
        self.0.set_position(calls_seen);
        self.0.set_message(format!("{pages} pages"));
    }
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
