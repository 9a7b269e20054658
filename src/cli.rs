//! The command line: the only place with clap, anyhow and exit codes.
//!
//! Parses arguments, loads the configuration, sets up logging, runs one command and maps the
//! outcome to an exit code: 0 success, 1 a runtime failure (a schedule failed, the warehouse
//! could not be opened), 2 a configuration or usage error, 3 `status` found a schedule whose
//! last pass failed or that is falling behind. Errors print as one line with their causes
//! (`{:#}`). Output for scripts (`--json`) goes to stdout alone; logs, progress and warnings
//! go to stderr.

use std::io::{IsTerminal, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{
    ArgAction, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{self, Config, ConfigError, LogConfig};
use crate::service::Timestamp;
use crate::simulator::{DialerOptions, FaultPlan, Precision, Simulator, SimulatorOptions};
use crate::sync::{Engine, PassPlan, PassProgress, PassReport, PassResult};
use crate::telemetry::{self, TelemetryError};
use crate::warehouse::Warehouse;

mod campaign;
mod check;
mod generate;
mod pass_json;
mod progress;

use progress::{ProgressBar, ProgressLog};

#[derive(Debug, Parser)]
#[command(
    name = "callsync",
    version,
    about = "Sync call results from the Outbound Call Campaign Service into a SQLite warehouse",
    long_about = None,
    after_long_help = AFTER_HELP,
)]
pub struct Cli {
    #[command(flatten)]
    verbosity: Verbosity,

    #[command(subcommand)]
    command: Command,
}

/// The end of `callsync --help` and of callsync(1): what a script needs besides the options.
const AFTER_HELP: &str = "\
Exit codes: 0 success; 1 a runtime failure (a pass failed, the warehouse or the service could not \
be used); 2 a configuration or usage error; 3 `status` found a schedule whose last pass failed or \
that is falling behind; 130 a second SIGINT or SIGTERM.

Environment: CALLSYNC_<SECTION>__<KEY> sets any configuration key (CALLSYNC_SYNC__PAGE_SIZE=50); \
RUST_LOG, when set, is the log filter, over -q/-v and log.level; NO_COLOR (any value but an \
empty one) turns colours off.";

/// `-q` and `-v`: the log level for this run, over `log.level`; `RUST_LOG` still wins.
#[derive(Debug, Args)]
struct Verbosity {
    /// Log errors only, whatever log.level says (RUST_LOG, when set, still wins)
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        display_order = 900
    )]
    quiet: bool,
    /// Log more: -v debug, -vv trace, whatever log.level says (RUST_LOG, when set, still wins)
    #[arg(short, long, global = true, action = ArgAction::Count, display_order = 900)]
    verbose: u8,
}

impl Verbosity {
    /// The level that replaces `log.level`, if any.
    fn level(&self) -> Option<&'static str> {
        match (self.quiet, self.verbose) {
            (true, _) => Some("error"),
            (false, 0) => None,
            (false, 1) => Some("debug"),
            (false, _) => Some("trace"),
        }
    }

    /// `log` with the level the command line asks for.
    fn apply(&self, log: &LogConfig) -> LogConfig {
        LogConfig {
            level: self
                .level()
                .map_or_else(|| log.level.clone(), str::to_owned),
            ..log.clone()
        }
    }
}

/// The commands that read no configuration file: `--config` is not offered to them, and
/// refused before them (`callsync --config x simulate`) rather than ignored.
const READS_NO_CONFIG: [&str; 4] = ["demo", "simulate", "completions", "man"];

/// The id of `--config` given before the subcommand, and after it.
const CONFIG_BEFORE: &str = "config_before";
const CONFIG: &str = "config";

/// The command line as clap knows it: the derived definition, with `--config` before the
/// subcommand and after every subcommand that reads a configuration (`callsync --config
/// PATH sync`, `callsync sync --config PATH`, `callsync checkpoint show --config PATH`).
/// Completions and the man page are generated from it.
pub fn command() -> clap::Command {
    let mut command = Cli::command().arg(config_arg(CONFIG_BEFORE).help(
        "Configuration file, for the commands that read one [default: ./config/callsync.toml, then /etc/callsync/callsync.toml]",
    ));
    let readers: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .filter(|name| !READS_NO_CONFIG.contains(&name.as_str()))
        .collect();
    for name in readers {
        command = command.mut_subcommand(name, |sub| sub.arg(config_arg(CONFIG).global(true)));
    }
    command
}

fn config_arg(id: &'static str) -> clap::Arg {
    clap::Arg::new(id)
        .long("config")
        .value_name("PATH")
        .value_parser(clap::value_parser!(PathBuf))
        .help("Configuration file [default: ./config/callsync.toml, then /etc/callsync/callsync.toml]")
}

/// The `--config` given, before or after the subcommand (not both); refused before a command
/// that reads no configuration.
fn config_path(matches: &ArgMatches) -> Result<Option<PathBuf>, UsageError> {
    let before = matches.get_one::<PathBuf>(CONFIG_BEFORE).cloned();
    let mut after = None;
    let mut level = matches;
    while let Some((_, sub)) = level.subcommand() {
        if let Ok(Some(path)) = sub.try_get_one::<PathBuf>(CONFIG) {
            after = Some(path.clone());
        }
        level = sub;
    }
    let command = matches.subcommand_name().unwrap_or_default();
    match (before, after) {
        (Some(_), Some(_)) => Err(UsageError(
            "--config is given twice, before and after the command: give it once".into(),
        )),
        (Some(_), None) if READS_NO_CONFIG.contains(&command) => Err(UsageError(format!(
            "callsync {command} reads no configuration file: leave out --config"
        ))),
        (before, after) => Ok(before.or(after)),
    }
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
        /// Print one JSON object per pass on stdout (JSON Lines; see README, "Scripts")
        #[arg(long)]
        json: bool,
    },
    /// Inspect or move a schedule's checkpoint (where its next pass starts)
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Re-read one schedule from a point in time and upsert what it finds
    Backfill(BackfillArgs),
    /// Show each schedule's checkpoint, last pass, lag and row counts; exit code 3 when a
    /// schedule's last pass failed or it is falling behind
    Status {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Check the configuration, the credentials, every schedule and the warehouse, one line
    /// each; exit code 1 when any fails (for systemd's ExecStartPre=)
    Check {
        /// Print one JSON object per check (JSON Lines: check, ok, detail)
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
    /// Print a shell completion script (install it as README's "Shell completions" says)
    Completions {
        /// The shell the script is for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page callsync(1) in roff, or write a page per command into a directory
    Man {
        /// Write callsync.1 and callsync-COMMAND.1 for every command into DIR (created if
        /// needed), printing each path, instead of printing callsync.1
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

impl Command {
    /// Only these need credentials: `status`, `checkpoint` and `migrate` read or change the
    /// warehouse alone, so a BI-group user without the daemon's secret can run them.
    fn talks_to_the_service(&self) -> bool {
        match self {
            Command::Run | Command::Sync { .. } | Command::Backfill(_) | Command::Check { .. } => {
                true
            }
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
    /// Print the pass as one JSON object on stdout (see README, "Scripts"); a progress bar,
    /// on a terminal, stays on stderr
    #[arg(long)]
    json: bool,
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
    /// List items omit their attempts' outcomes and variables (a summary list): a client
    /// must fetch each changed call's detail
    #[arg(long)]
    summary_list: bool,
    /// Lifetime of the tokens /oauth/token issues, in seconds (the static token never
    /// expires)
    #[arg(long, value_name = "SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    token_lifetime: u64,
    /// A change becomes visible this many milliseconds after the instant it is stamped with
    /// (a late commit)
    #[arg(long, value_name = "MS")]
    late_commit_ms: Option<u64>,
    /// With --dialer: also change calls' children (an outcome, a delivered notification)
    /// without bumping the call's updated_at, as the service may
    #[arg(long, requires = "dialer")]
    child_changes_without_bump: bool,
    /// Share of API requests answered 500, 502 (a proxy's HTML page) or 503, in turn (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    fail_rate: f64,
    /// Share of API requests answered 429 with Retry-After: --retry-after (0 to 1)
    #[arg(long = "429-rate", value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    too_many_rate: f64,
    /// The Retry-After of the 429s of --429-rate, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 1)]
    retry_after: u64,
    /// A quota, as a real service has: requests beyond this many a second (a second's burst)
    /// are answered 429 without Retry-After; 0 for none
    #[arg(long, value_name = "REQ_PER_SEC", default_value_t = 0)]
    rate_limit: u32,
    /// Share of API requests answered correctly, but only after --slow-ms (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    slow_rate: f64,
    /// How late the answers of --slow-rate come, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    slow_ms: u64,
    /// Share of API responses whose connection closes half way through the body (0 to 1)
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = parse_rate)]
    truncate_rate: f64,
}

impl SimulateArgs {
    fn options(&self) -> SimulatorOptions {
        SimulatorOptions {
            schedules: self.schedules,
            calls_per_schedule: self.calls,
            precision: match self.precision {
                PrecisionArg::Seconds => Precision::Seconds,
                PrecisionArg::Millis => Precision::Millis,
                PrecisionArg::Micros => Precision::Micros,
            },
            seed: self.seed,
            summary_list: self.summary_list,
            token_lifetime: Duration::from_secs(self.token_lifetime),
            dialer: self.dialer.then(|| DialerOptions {
                child_changes_without_bump: self.child_changes_without_bump,
                ..DialerOptions::endless(self.time_scale)
            }),
            late_commit: self.late_commit_ms.map(Duration::from_millis),
            faults: FaultPlan {
                error_5xx_rate: self.fail_rate,
                rate_429: self.too_many_rate,
                retry_after_secs: self.retry_after,
                slow_rate: self.slow_rate,
                slow_delay: Duration::from_millis(self.slow_ms),
                truncate_rate: self.truncate_rate,
                quota_per_second: self.rate_limit,
                ..FaultPlan::default()
            },
            ..SimulatorOptions::default()
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PrecisionArg {
    Seconds,
    Millis,
    Micros,
}

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
                level: "warn".into(),
                ..LogConfig::default()
            }))?;
            runtime.block_on(crate::demo::run(&dir, force))?;
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let config = config::load(config_path.as_deref())?;
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
        Command::Migrate => migrate(&config),
        Command::Service(command) => campaign::run(&config, command).await,
        Command::Backup { path, force } => backup(&config, &path, force),
        Command::Restore { path } => restore(&config, &path),
        Command::Simulate(_)
        | Command::Demo { .. }
        | Command::Completions { .. }
        | Command::Man { .. } => {
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

async fn sync(config: Config, only: Vec<Uuid>, dry_run: bool, json: bool) -> Result<ExitCode> {
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

fn print_dry_run(r: &PassReport) -> Result<()> {
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
    if args.json {
        pass_json::print(&report, false)?;
    }
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
    add_never_synced(&mut rows, &config.sync.schedules);
    let since = configured_since(config, &warehouse)?;
    count_ticks_since_last_pass(config, &mut rows, now, since)?;
    warn_if_read_only(path);
    if json {
        let json = serde_json::to_string_pretty(&rows)?;
        print_out(format_args!("{}\n", crate::untrusted::json_safe(&json)))?;
    } else {
        print_out(crate::warehouse::render_status(&rows, now))?;
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
/// behind, or no pass was recorded for several ticks of `sync.cron`. Not 1, which says `status` itself could not run.
const EXIT_ATTENTION: u8 = 3;

/// What is wrong with the schedules `status` watches: those in `sync.schedules`, or every
/// schedule in the warehouse when the list is empty. A schedule removed from the
/// configuration (after a 404, say) keeps its last failure in the warehouse, and must not
/// fail every check afterwards.
fn needing_attention(
    rows: &[crate::warehouse::ScheduleStatus],
    configured: &[Uuid],
) -> Vec<String> {
    let watched =
        |uid: &str| configured.is_empty() || configured.iter().any(|c| c.to_string() == uid);
    let mut problems = Vec::new();
    for row in rows.iter().filter(|row| watched(&row.schedule_uid)) {
        if row.last_result == Some(crate::warehouse::PassOutcome::Failed) {
            problems.push(format!(
                "schedule {}: its last pass failed",
                row.schedule_uid
            ));
        }
        if row.falling_behind {
            problems.push(format!(
                "schedule {}: falling behind ({} passes in a row ended behind)",
                row.schedule_uid, row.behind_passes
            ));
        }
        if row.no_recent_pass && row.never_synced {
            problems.push(format!(
                "schedule {}: never synced, though configured {} ticks of sync.cron ago",
                row.schedule_uid,
                row.ticks_since_last_pass.unwrap_or_default()
            ));
        } else if row.no_recent_pass {
            problems.push(format!(
                "schedule {}: no pass recorded for {} ticks of sync.cron",
                row.schedule_uid,
                row.ticks_since_last_pass.unwrap_or_default()
            ));
        }
    }
    problems
}

/// A row for every configured schedule the warehouse knows nothing of, in uid order with
/// the rest: `status` shows what it watches, not only what has synced.
fn add_never_synced(rows: &mut Vec<crate::warehouse::ScheduleStatus>, configured: &[Uuid]) {
    for uid in configured {
        if !rows.iter().any(|row| row.schedule_uid == uid.to_string()) {
            rows.push(crate::warehouse::ScheduleStatus::never_synced(*uid));
        }
    }
    rows.sort_by(|a, b| a.schedule_uid.cmp(&b.schedule_uid));
}

/// Since when the daemon should have synced every configured schedule: the configuration
/// file's last change (a schedule added to it is due from then, and the daemon reads the file
/// only when it starts), or, for a configuration of `CALLSYNC_*` variables alone, the oldest
/// pass the warehouse remembers (the daemon ran then); `None` when neither is known.
fn configured_since(config: &Config, warehouse: &Warehouse) -> Result<Option<Timestamp>> {
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
fn count_ticks_since_last_pass(
    config: &Config,
    rows: &mut [crate::warehouse::ScheduleStatus],
    now: Timestamp,
    configured_since: Option<Timestamp>,
) -> Result<()> {
    for row in rows {
        let configured = row
            .schedule_uid
            .parse()
            .is_ok_and(|uid| config.sync.schedules.contains(&uid));
        let since = if row.never_synced {
            configured_since
        } else {
            row.last_recorded_at()
        };
        let Some(last) = since.filter(|_| configured) else {
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
    let _lock = crate::sync::lock_schedule(path, schedule)?;
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
    let simulator = Simulator::start(args.listen, args.options())
        .await
        .map_err(|err| cannot_listen(args.listen, err))?;
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

/// The simulator's address cannot be listened on: what to do, for the usual reasons.
fn cannot_listen(addr: SocketAddr, err: crate::simulator::SimulatorError) -> anyhow::Error {
    use std::io::ErrorKind;
    let kind = std::error::Error::source(&err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let what_to_do = match kind {
        Some(ErrorKind::AddrInUse) => {
            "is in use (another simulator, or another program, listens there): stop it, or choose another address with --listen (127.0.0.1:0 takes any free port)"
        }
        Some(ErrorKind::AddrNotAvailable) => {
            "is not an address of this machine: listen on loopback, e.g. --listen 127.0.0.1:8080"
        }
        Some(ErrorKind::PermissionDenied) => {
            "needs privileges this user lacks (a port below 1024): choose a port above 1023 with --listen"
        }
        _ => return anyhow::Error::new(err).context("cannot start the simulator"),
    };
    anyhow::anyhow!("cannot start the simulator: {addr} {what_to_do}")
}

/// A share of requests: a number from 0 to 1.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a share from 0 to 1 (0.05 is one request in 20)"
        )),
    }
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
        progress::clear_and_exit(130);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent_and_config_is_offered_where_it_is_read() {
        let command = command();
        command.clone().debug_assert();
        for sub in command.get_subcommands() {
            let offers = sub.get_arguments().any(|a| a.get_long() == Some("config"));
            let reads = !READS_NO_CONFIG.contains(&sub.get_name());
            assert_eq!(offers, reads, "{}", sub.get_name());
        }
    }

    #[test]
    fn quiet_and_verbose_replace_the_configured_level() {
        let parse = |args: &[&str]| {
            let matches = command().try_get_matches_from(args).map_err(|e| e.kind())?;
            let cli = Cli::from_arg_matches(&matches).map_err(|e| e.kind())?;
            Ok::<_, clap::error::ErrorKind>(cli.verbosity.level())
        };
        assert_eq!(parse(&["callsync", "status"]), Ok(None));
        assert_eq!(parse(&["callsync", "-q", "status"]), Ok(Some("error")));
        assert_eq!(parse(&["callsync", "status", "--quiet"]), Ok(Some("error")));
        assert_eq!(parse(&["callsync", "-v", "sync"]), Ok(Some("debug")));
        assert_eq!(parse(&["callsync", "sync", "-vv"]), Ok(Some("trace")));
        assert_eq!(parse(&["callsync", "-v", "sync", "-vv"]), Ok(Some("trace")));
        assert_eq!(
            parse(&["callsync", "-q", "-v", "sync"]),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
        let configured = LogConfig {
            level: "warn,callsync::sync=debug".into(),
            format: config::LogFormat::Json,
        };
        let quiet = Verbosity {
            quiet: true,
            verbose: 0,
        };
        assert_eq!(quiet.apply(&configured).level, "error");
        assert!(matches!(
            quiet.apply(&configured).format,
            config::LogFormat::Json
        ));
        let neither = Verbosity {
            quiet: false,
            verbose: 0,
        };
        assert_eq!(neither.apply(&configured).level, configured.level);
    }

    #[test]
    fn status_watches_the_configured_schedules_for_failures_and_falling_behind() {
        let row = |uid: &str, last: Option<crate::warehouse::PassOutcome>, behind: i64| {
            crate::warehouse::ScheduleStatus {
                schedule_uid: uid.to_owned(),
                cursor: None,
                lag_secs: None,
                last_run: None,
                last_result: last,
                last_success_at: None,
                behind_passes: behind,
                falling_behind: behind >= crate::warehouse::FALLING_BEHIND_PASSES,
                slowed_by: Vec::new(),
                ticks_since_last_pass: None,
                no_recent_pass: false,
                never_synced: false,
                calls: 0,
                attempts: 0,
                outcomes: 0,
                variables: 0,
                notifications: 0,
            }
        };
        use crate::warehouse::PassOutcome::*;
        let [a, b, c, d] = [1u128, 2, 3, 4].map(Uuid::from_u128);
        let rows = [
            row(&a.to_string(), Some(Completed), 0),
            row(&b.to_string(), Some(Failed), 0),
            row(&c.to_string(), Some(Behind), 2),
            row(&d.to_string(), Some(Behind), 1),
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
        for fine in [Interrupted, Running] {
            assert!(needing_attention(&[row(&a.to_string(), Some(fine), 0)], &[]).is_empty());
        }
        let mut stopped = row(&a.to_string(), Some(Completed), 0);
        stopped.ticks_since_last_pass = Some(5);
        stopped.no_recent_pass = true;
        assert_eq!(
            needing_attention(&[stopped], &[]),
            [format!(
                "schedule {a}: no pass recorded for 5 ticks of sync.cron"
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

    #[test]
    fn a_rate_is_a_share_from_0_to_1() {
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert_eq!(parse_rate("0.05"), Ok(0.05));
        assert_eq!(parse_rate("1"), Ok(1.0));
        for bad in ["-0.1", "1.5", "NaN", "inf", "5%", ""] {
            assert_eq!(
                parse_rate(bad),
                Err(format!(
                    "{bad:?} is not a share from 0 to 1 (0.05 is one request in 20)"
                )),
                "{bad}"
            );
        }
    }

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
