//! The command line's definitions (clap): the commands, their arguments and the global
//! options; running them is in the other files of `cli/`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgAction, ArgMatches, Args, CommandFactory, Parser, Subcommand};
use tracing_subscriber::filter::LevelFilter;
use uuid::Uuid;

use super::service_args::ServiceCommand;
use super::simulate::SimulateArgs;
use super::usage::{UsageError, parse_timestamp};
use crate::config::{LogConfig, LogFilter};
use crate::service::Timestamp;

#[derive(Debug, Parser)]
#[command(
    name = "callsync",
    version,
    about = "Sync call results from the Outbound Call Campaign Service into a SQLite or PostgreSQL warehouse",
    long_about = None,
)]
pub struct Cli {
    #[command(flatten)]
    pub(super) verbosity: Verbosity,

    #[command(subcommand)]
    pub(super) command: Command,
}

/// The exit codes of every command: the end of `callsync --help`, and EXIT STATUS in the man
/// pages.
pub(super) const EXIT_CODES: [(&str, &str); 5] = [
    ("0", "success"),
    (
        "1",
        "a runtime failure (a pass failed, the warehouse or the service could not be used)",
    ),
    ("2", "a configuration or usage error"),
    (
        "3",
        "`status` found a schedule whose last pass failed, that is falling behind (2 passes in a \
         row ended behind), whose lag ran past sync.max_lag_secs, of which no pass was recorded \
         for 3 ticks of sync.cron, or whose running pass has not moved its checkpoint for 30 ticks",
    ),
    ("130", "a second SIGINT or SIGTERM"),
];

/// A variable callsync reads: its name, what it does, and whether only the commands that read
/// a configuration read it.
pub(super) struct Variable {
    pub(super) name: &'static str,
    pub(super) meaning: &'static str,
    pub(super) configuration: bool,
}

/// The environment callsync reads: the end of `callsync --help`, and ENVIRONMENT in the man
/// pages.
pub(super) const ENVIRONMENT: [Variable; 9] = [
    Variable {
        name: "CALLSYNC_<SECTION>__<KEY>",
        meaning: "sets any configuration key, over the file (CALLSYNC_SYNC__PAGE_SIZE=50); an \
                  unknown CALLSYNC_ variable is an error",
        configuration: true,
    },
    Variable {
        name: "CALLSYNC_CONFIG",
        meaning: "the configuration file, when --config is not given",
        configuration: true,
    },
    Variable {
        name: "CREDENTIALS_DIRECTORY",
        meaning: "systemd's credentials (LoadCredential=): access_token, client_secret and \
                  warehouse_password are read from it when the configuration gives no other source",
        configuration: true,
    },
    Variable {
        name: "PGPASSFILE",
        meaning: "libpq's password file for a PostgreSQL warehouse, when the URI names none \
                  (else ~/.pgpass, under HOME)",
        configuration: true,
    },
    Variable {
        name: "SQLITE_TMPDIR",
        meaning: "where SQLite keeps its temporary files (else TMPDIR, else /var/tmp or /tmp)",
        configuration: true,
    },
    Variable {
        name: "RUST_LOG",
        meaning: "when set, the log filter, over -q/-v and log.level",
        configuration: false,
    },
    Variable {
        name: "NO_COLOR",
        meaning: "any value but an empty one turns colours off",
        configuration: false,
    },
    Variable {
        name: "JOURNAL_STREAM",
        meaning: "set by systemd: when it names stderr, log lines carry a syslog priority and no \
                  timestamp",
        configuration: false,
    },
    Variable {
        name: "NOTIFY_SOCKET, WATCHDOG_USEC",
        meaning: "set by systemd for `callsync run` (Type=notify, WatchdogSec=): READY, STATUS, \
                  STOPPING and the watchdog's pings go there",
        configuration: true,
    },
];

/// The end of `callsync --help`: what a script needs besides the options.
pub(super) fn after_help() -> String {
    let codes: Vec<String> = EXIT_CODES
        .iter()
        .map(|(code, meaning)| format!("{code} {meaning}"))
        .collect();
    let variables: Vec<String> = ENVIRONMENT
        .iter()
        .map(|variable| format!("{} {}", variable.name, variable.meaning))
        .collect();
    format!(
        "Exit codes: {}.\n\nEnvironment: {}.",
        codes.join("; "),
        variables.join("; ")
    )
}

/// `-q` and `-v`: the log level for this run, over `log.level`; `RUST_LOG` still wins.
#[derive(Debug, Args)]
pub(super) struct Verbosity {
    /// Log errors only, whatever log.level says (RUST_LOG, when set, still wins)
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        display_order = 900
    )]
    pub(super) quiet: bool,
    /// Log more: -v debug, -vv trace, whatever log.level says (RUST_LOG, when set, still wins)
    #[arg(short, long, global = true, action = ArgAction::Count, display_order = 900)]
    pub(super) verbose: u8,
}

impl Verbosity {
    /// The level that replaces `log.level`, if any.
    pub(super) fn level(&self) -> Option<LevelFilter> {
        match (self.quiet, self.verbose) {
            (true, _) => Some(LevelFilter::ERROR),
            (false, 0) => None,
            (false, 1) => Some(LevelFilter::DEBUG),
            (false, _) => Some(LevelFilter::TRACE),
        }
    }

    /// `log` with the level the command line asks for.
    pub(super) fn apply(&self, log: &LogConfig) -> LogConfig {
        LogConfig {
            level: self
                .level()
                .map_or_else(|| log.level.clone(), LogFilter::from),
            ..log.clone()
        }
    }
}

/// The commands that read no configuration file: `--config` is not offered to them, and
/// refused before them (`callsync --config x simulate`) rather than ignored.
pub(super) const READS_NO_CONFIG: [&str; 4] = ["demo", "simulate", "completions", "man"];

/// The id of `--config` given before the subcommand, and after it.
pub(super) const CONFIG_BEFORE: &str = "config_before";

pub(super) const CONFIG: &str = "config";

/// The command line as clap knows it: the derived definition, with `--config` before the
/// subcommand and after every subcommand that reads a configuration (`callsync --config
/// PATH sync`, `callsync sync --config PATH`, `callsync checkpoint show --config PATH`).
/// Completions and the man page are generated from it.
pub fn command() -> clap::Command {
    let mut command = Cli::command().after_long_help(after_help()).arg(config_arg(CONFIG_BEFORE).help(
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

pub(super) fn config_arg(id: &'static str) -> clap::Arg {
    clap::Arg::new(id)
        .long("config")
        .value_name("PATH")
        .value_parser(clap::value_parser!(PathBuf))
        .help("Configuration file [default: ./config/callsync.toml, then /etc/callsync/callsync.toml]")
}

/// The `--config` given, before or after the subcommand (not both); refused before a command
/// that reads no configuration.
pub(super) fn config_path(matches: &ArgMatches) -> Result<Option<PathBuf>, UsageError> {
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
pub(super) enum Command {
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
        /// Print one JSON object per pass on stdout (JSON Lines; see docs/commands.md, "Pass lines")
        #[arg(long)]
        json: bool,
    },
    /// Inspect or move a schedule's checkpoint (where its next pass starts)
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Re-read one schedule from a point in time and upsert what it finds
    Backfill(BackfillArgs),
    /// Show each schedule's checkpoint, last pass, lag and row counts; exit code 3 when a
    /// schedule's last pass failed, it is falling behind, its lag is past sync.max_lag_secs, no
    /// pass of it was recorded lately, or its running pass is late
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
    /// Print the effective configuration: each key's value and where it came from (file,
    /// environment variable, systemd credential, default); secrets redacted
    Config {
        /// Print one JSON object (file; keys: key, value, redacted, source, origin)
        #[arg(long)]
        json: bool,
    },
    /// Apply pending warehouse migrations, then exit
    Migrate {
        /// Print the result as one JSON object (warehouse, from, to)
        #[arg(long)]
        json: bool,
    },
    /// Write a consistent copy of the warehouse to PATH (safe while the daemon runs)
    Backup {
        /// Where to write the copy (one self-contained SQLite file)
        path: PathBuf,
        /// Overwrite PATH if it exists
        #[arg(long)]
        force: bool,
        /// Print the result as one JSON object (warehouse, path, bytes, schema_version, schedules, calls)
        #[arg(long)]
        json: bool,
    },
    /// Replace the warehouse with the backup at PATH (stop the daemon first)
    Restore {
        /// The backup to restore (made by `callsync backup`)
        path: PathBuf,
        /// Print the result as one JSON object (backup, warehouse, bytes, schema_version, schedules, calls, removed)
        #[arg(long)]
        json: bool,
    },
    /// Serve a simulator of the service on loopback (for trying callsync out and for tests)
    Simulate(SimulateArgs),
    #[command(flatten)]
    Service(ServiceCommand),
    /// Print a shell completion script (install it as docs/operate.md's "Shell completions" says)
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
    pub(super) fn talks_to_the_service(&self) -> bool {
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
pub(super) enum CheckpointCommand {
    /// Print the checkpoint of every schedule, or of one
    Show {
        /// Only this schedule; default: every schedule in the warehouse
        #[arg(long, value_name = "UID")]
        schedule: Option<Uuid>,
        /// Show a schedule that is in neither sync.schedules nor the warehouse
        #[arg(long)]
        force: bool,
        /// Print one JSON object per schedule (JSON Lines: schedule_uid, schedule_name,
        /// cursor, written)
        #[arg(long)]
        json: bool,
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
        /// Print the move as one JSON object (schedule_uid, schedule_name, from, to)
        #[arg(long)]
        json: bool,
    },
    /// Delete a schedule's checkpoint: its next pass reads everything again
    Reset {
        /// The schedule whose checkpoint is deleted
        #[arg(long, value_name = "UID")]
        schedule: Uuid,
        /// Reset a schedule that is in neither sync.schedules nor the warehouse
        #[arg(long)]
        force: bool,
        /// Print the reset as one JSON object (schedule_uid, schedule_name, from, to: null)
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(super) struct BackfillArgs {
    /// The schedule to re-read
    #[arg(long, value_name = "UID")]
    pub(super) schedule: Uuid,
    /// Re-read calls updated at or after this instant (RFC 3339, any offset) [default: the beginning]
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub(super) since: Option<Timestamp>,
    /// Stop after calls updated at this instant (RFC 3339, any offset) [default: now]
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub(super) until: Option<Timestamp>,
    /// Print the pass as one JSON object on stdout (see docs/commands.md, "Pass lines"); a progress bar,
    /// on a terminal, stays on stderr
    #[arg(long)]
    pub(super) json: bool,
}

#[cfg(test)]
mod tests {
    use clap::FromArgMatches;

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

    /// The help says all four reasons for `status`'s exit 3 (`status::needing_attention`),
    /// with the thresholds the warehouse decides them by.
    #[test]
    fn the_help_gives_every_reason_for_exit_code_3() {
        use crate::warehouse::{FALLING_BEHIND_PASSES, LATE_PASS_TICKS, STALE_TICKS};
        let footer = after_help()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for reason in [
            "3 `status` found a schedule whose last pass failed,".to_string(),
            format!("falling behind ({FALLING_BEHIND_PASSES} passes in a row ended behind)"),
            "whose lag ran past sync.max_lag_secs,".to_string(),
            format!("no pass was recorded for {STALE_TICKS} ticks of sync.cron"),
            format!("running pass has not moved its checkpoint for {LATE_PASS_TICKS} ticks;"),
        ] {
            assert!(footer.contains(&reason), "{reason:?} not in {footer:?}");
        }
        let status = command().find_subcommand("status").unwrap().clone();
        let about = status.get_about().unwrap().to_string();
        assert!(
            about.ends_with(
                "exit code 3 when a schedule's last pass failed, it is falling behind, its lag is past sync.max_lag_secs, no pass of it was recorded lately, or its running pass is late"
            ),
            "{about}"
        );
    }

    /// `--help` and the man page say what callsync writes into: either warehouse.
    #[test]
    fn the_help_names_both_warehouses() {
        let about = command().get_about().expect("an about").to_string();
        assert!(
            about.ends_with("into a SQLite or PostgreSQL warehouse"),
            "{about}"
        );
        let footer = after_help();
        for variable in [
            "CALLSYNC_CONFIG",
            "CREDENTIALS_DIRECTORY",
            "RUST_LOG",
            "NO_COLOR",
        ] {
            assert!(footer.contains(variable), "{variable} not in {footer}");
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
        let level = |level| Ok(Some(level));
        assert_eq!(
            parse(&["callsync", "-q", "status"]),
            level(LevelFilter::ERROR)
        );
        assert_eq!(
            parse(&["callsync", "status", "--quiet"]),
            level(LevelFilter::ERROR)
        );
        assert_eq!(
            parse(&["callsync", "-v", "sync"]),
            level(LevelFilter::DEBUG)
        );
        assert_eq!(
            parse(&["callsync", "sync", "-vv"]),
            level(LevelFilter::TRACE)
        );
        assert_eq!(
            parse(&["callsync", "-v", "sync", "-vv"]),
            level(LevelFilter::TRACE)
        );
        assert_eq!(
            parse(&["callsync", "-q", "-v", "sync"]),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
        let configured = LogConfig {
            level: LogFilter::parse("warn,callsync::sync=debug").unwrap(),
            format: crate::config::LogFormat::Json,
        };
        let quiet = Verbosity {
            quiet: true,
            verbose: 0,
        };
        assert_eq!(quiet.apply(&configured).level.as_str(), "error");
        assert!(matches!(
            quiet.apply(&configured).format,
            crate::config::LogFormat::Json
        ));
        let neither = Verbosity {
            quiet: false,
            verbose: 0,
        };
        assert_eq!(
            neither.apply(&configured).level.as_str(),
            "warn,callsync::sync=debug"
        );
    }
}
