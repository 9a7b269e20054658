//! Logging set-up: tracing-subscriber to stderr, readable text or JSON lines.
//!
//! The filter comes from `[log] level` (or the command line's `-q`/`-v`, which the CLI puts in
//! its place), a [`LogFilter`] checked already; `RUST_LOG`, when set, wins, checked here by the
//! same parser. ANSI colours only on a terminal, and never with
//! `NO_COLOR`. A progress bar shown with [`show_above`] stays below the log lines. When stderr
//! is the journal (`$JOURNAL_STREAM` names its device and inode, as systemd sets it), text
//! lines start with a syslog priority (`<3>` error … `<7>` debug) that journald takes as the
//! line's level, and carry no timestamp: journald adds its own; JSON lines start with the
//! priority too (journald strips it, leaving the object). Nothing here decides what is
//! logged; modules use `tracing` spans and events.

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, MutexGuard};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{FilterError, LogConfig, LogFilter, LogFormat};

/// A bad `RUST_LOG`: a configuration error (exit code 2). (`log.level` and `-q`/`-v` come
/// as a [`LogFilter`], checked when it was made.)
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("RUST_LOG={level:?} {problem}; fix or unset RUST_LOG")]
    BadRustLog { level: String, problem: FilterError },
}

/// Installs the global subscriber; a second call keeps the first one (tests call it often).
pub fn init(log: &LogConfig) -> Result<(), TelemetryError> {
    let filter = env_filter(log, std::env::var("RUST_LOG").ok())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| AboveProgress)
        // A failed log write is reported with `eprintln!`, which panics when stderr is a
        // closed pipe (`callsync … | head`): the panicking task would be the one that logs
        // "shutting down", and the process would ignore SIGTERM. A lost log line is better.
        .log_internal_errors(false);
    // Ignoring the error is deliberate: it only says a subscriber is already installed.
    let _ = match log.format {
        // journald strips the `<N>` prefix as for text, so the stored message is the JSON
        // object alone, with the event's level as the entry's priority.
        LogFormat::Json if stderr_is_the_journal() => builder
            .json()
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            ))
            .finish()
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .try_init(),
        LogFormat::Text if stderr_is_the_journal() => {
            let lines = tracing_subscriber::fmt::format()
                .without_time()
                .with_ansi(false);
            builder
                .with_ansi(false)
                .event_format(JournalPriority(lines))
                .finish()
                .try_init()
        }
        LogFormat::Text => builder
            .with_ansi(use_ansi(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .finish()
            .try_init(),
    };
    Ok(())
}

/// Colours only for a terminal, and not when `NO_COLOR` holds anything (<https://no-color.org>:
/// set and not empty), so that a pipe, a file or a log collector gets plain text.
fn use_ansi(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// The progress bar log lines are written above, if one is shown.
static PROGRESS: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

fn progress() -> MutexGuard<'static, Option<indicatif::ProgressBar>> {
    PROGRESS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Log lines go above `bar` until [`hide_progress`]: each is written with the bar cleared,
/// which is then drawn again below it. Without this a line would start where the bar ends and
/// leave half a bar on the screen.
pub fn show_above(bar: &indicatif::ProgressBar) {
    *progress() = Some(bar.clone());
}

/// Stops writing log lines around the bar (a finished bar is text like any other); returns it.
pub fn hide_progress() -> Option<indicatif::ProgressBar> {
    progress().take()
}

/// stderr, around the progress bar if one is shown. tracing-subscriber writes each event with
/// one `write_all`, so a line is never split by the bar.
struct AboveProgress;

impl Write for AboveProgress {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // A clone, so that our lock is not held while the bar's is taken.
        let bar = progress().clone();
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf)),
            None => std::io::stderr().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// systemd connects stderr to the journal and says so in `$JOURNAL_STREAM` (`DEVICE:INODE`);
/// a stderr redirected elsewhere by the service (a pipe, a file) keeps the variable but is
/// another file, hence the comparison (see sd_journal_stream_fd(3), systemd.exec(5)).
pub fn stderr_is_the_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    stderr_identity().is_some_and(|(dev, ino)| names_file(&stream, dev, ino))
}

/// `stream` (`DEVICE:INODE`, decimal) names the file `dev`, `ino`.
fn names_file(stream: &str, dev: u64, ino: u64) -> bool {
    stream
        .split_once(':')
        .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)))
        == Some((dev, ino))
}

fn stderr_identity() -> Option<(u64, u64)> {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The sd-daemon(3) priority prefix of `level`.
fn priority(level: Level) -> &'static str {
    match level {
        Level::ERROR => "<3>",
        Level::WARN => "<4>",
        Level::INFO => "<6>",
        Level::DEBUG | Level::TRACE => "<7>",
    }
}

/// Each line prefixed with its event's priority, for journald.
struct JournalPriority<F>(F);

impl<S, N, F> FormatEvent<S, N> for JournalPriority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        writer.write_str(priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// `rust_log` when set and not blank (it wins over the configuration), else `log.level`.
fn env_filter(log: &LogConfig, rust_log: Option<String>) -> Result<EnvFilter, TelemetryError> {
    match rust_log.filter(|level| !level.trim().is_empty()) {
        Some(level) => LogFilter::parse(&level)
            .map(|filter| filter.env_filter())
            .map_err(|problem| TelemetryError::BadRustLog { level, problem }),
        None => Ok(quiet_dependencies(&log.level)),
    }
}

/// Crates whose INFO lines mean nothing to an operator: the cron crate's start-up
/// ("Uninited", "Job creator created"), and the migration crate's "Database migrated to
/// version N" on the first write of a new warehouse (`callsync migrate` says what it did
/// itself). Each speaks at WARN unless `log.level` names it.
const CHATTY: [&str; 2] = ["tokio_cron_scheduler", "rusqlite_migration"];

fn quiet_dependencies(level: &LogFilter) -> EnvFilter {
    let mut filter = level.env_filter();
    for name in CHATTY {
        if let Ok(directive) = format!("{name}=warn").parse()
            && !level.names_crate(name)
        {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_and_never_with_no_color() {
        assert!(use_ansi(true, None));
        assert!(
            use_ansi(true, Some("".into())),
            "an empty NO_COLOR is unset"
        );
        assert!(!use_ansi(true, Some("1".into())));
        assert!(!use_ansi(true, Some("false".into())), "any value counts");
        assert!(!use_ansi(false, None));
        assert!(!use_ansi(false, Some("1".into())));
    }

    #[test]
    fn journal_stream_names_a_file_by_device_and_inode() {
        assert!(names_file("64769:1234", 64769, 1234));
        assert!(!names_file("64769:1234", 64769, 1235));
        assert!(!names_file("64769", 64769, 1234));
        assert!(!names_file("x:1234", 64769, 1234));
    }

    #[test]
    fn the_cron_and_migration_crates_are_quiet_unless_named() {
        let log = |level: &str| LogConfig {
            level: LogFilter::parse(level).unwrap(),
            format: LogFormat::Text,
        };
        assert_eq!(
            env_filter(&log("info"), None).unwrap().to_string(),
            "tokio_cron_scheduler=warn,rusqlite_migration=warn,info"
        );
        assert_eq!(
            env_filter(&log("info,tokio_cron_scheduler=debug"), None)
                .unwrap()
                .to_string(),
            "tokio_cron_scheduler=debug,rusqlite_migration=warn,info"
        );
        assert_eq!(
            env_filter(&log("info,rusqlite_migration=info"), None)
                .unwrap()
                .to_string(),
            "tokio_cron_scheduler=warn,rusqlite_migration=info,info"
        );
        assert_eq!(
            env_filter(&log("info"), Some("debug".into()))
                .unwrap()
                .to_string(),
            "debug"
        );
    }

    #[test]
    fn a_target_must_be_callsync_one_of_its_modules_or_a_crate_it_is_built_with() {
        for good in [
            "info",
            "callsync=debug",
            "warn,callsync::sync=trace,callsync::api::client=debug",
            "callsync[pass]=debug",
            "[pass{schedule=x}]=debug",
            "reqwest=debug,hyper_util=trace,rustls=warn",
            "tokio_cron_scheduler=info,rusqlite_migration=info",
        ] {
            assert!(LogFilter::parse(good).is_ok(), "{good}");
        }
        for (bad, target) in [
            ("calsync=info", "calsync"),
            ("info,callsync::snyc=debug", "callsync::snyc"),
            ("callsink[pass]=debug", "callsink"),
            ("tokio-cron-scheduler=info", "tokio-cron-scheduler"),
        ] {
            assert_eq!(
                LogFilter::parse(bad).unwrap_err().to_string(),
                format!(
                    "names the log target {target:?}, which nothing logs under: a target is callsync, callsync::MODULE (MODULE one of api, cli, config, daemon, service, simulator, sync, telemetry, untrusted, upload, warehouse), or a crate callsync is built with (e.g. reqwest, rusqlite, hyper)"
                ),
                "{bad}"
            );
        }
        let err = env_filter(&LogConfig::default(), Some("calsync=info".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("RUST_LOG=\"calsync=info\" names the log target \"calsync\""),
            "{err}"
        );
    }

    #[test]
    fn a_bad_rust_log_names_it_and_init_twice_is_fine() {
        let configured = LogConfig {
            level: LogFilter::parse("warn,callsync::sync=debug").unwrap(),
            format: LogFormat::Text,
        };
        // RUST_LOG wins, so its mistake is its own, not log.level's.
        let err = env_filter(&LogConfig::default(), Some("foo=[".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("RUST_LOG=\"foo=[\" is not a valid filter"),
            "{err}"
        );
        assert!(err.ends_with("; fix or unset RUST_LOG"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(
            env_filter(&configured, Some("debug".into()))
                .unwrap()
                .to_string(),
            "debug"
        );
        assert_eq!(
            env_filter(&LogConfig::default(), Some(" ".into()))
                .unwrap()
                .to_string(),
            "tokio_cron_scheduler=warn,rusqlite_migration=warn,info"
        );
        init(&LogConfig::default()).unwrap();
        init(&LogConfig::default()).unwrap();
    }

    #[test]
    fn a_bare_word_that_is_not_a_level_is_refused_not_taken_as_a_target() {
        for typo in [
            "warnings",
            "eror",
            "warn,eror",
            "callsync",
            "INFO,callsync=debug,inof",
        ] {
            let word = typo.rsplit(',').next().unwrap();
            let expected = format!(
                "is not a log level: {word:?} is not one of off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug)"
            );
            assert_eq!(
                LogFilter::parse(typo).unwrap_err().to_string(),
                expected,
                "{typo}"
            );
        }
        let err = env_filter(&LogConfig::default(), Some("eror".into()))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "RUST_LOG=\"eror\" is not a log level: \"eror\" is not one of off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug); fix or unset RUST_LOG"
        );
        for good in [
            "warn",
            "WARN",
            "callsync=debug",
            "warn,callsync::sync=trace",
            "3",
            "[pass]=debug",
            "",
        ] {
            assert!(LogFilter::parse(good).is_ok(), "{good}");
        }
        assert!(matches!(
            LogFilter::parse("callsync=eror"),
            Err(FilterError::Syntax { .. })
        ));
    }
}
