//! callsync: an incremental sync daemon that exports the call results of the Outbound Call
//! Campaign Service into a SQLite warehouse (or a PostgreSQL one).
//!
//! Layout, top to bottom (dependencies point down only; ARCHITECTURE.md, "Layers"):
//! - `cli`: the command line — the only place with clap, anyhow and exit codes;
//! - `upload`: a contact list (CSV) to calls, checked first, resumable without duplicates;
//!   `daemon`: `callsync run` — cron ticks, no overlapping passes, backoff, shutdown, systemd;
//! - `sync`: the engine — page walker, pass loop, single writer;
//! - `api`: the service over HTTP — client, auth, rate limit and retries; `warehouse`: every
//!   SQL statement, behind one contract (`Backend`, `Destination`; `warehouse::open` chooses)
//!   that `warehouse::sqlite` and `warehouse::postgres` each fulfil; `telemetry`: logging set-up; `simulator`: a faithful
//!   in-process implementation of the service (tests, demo, benches), which product modules
//!   never import;
//! - `config`: the validated, typed configuration;
//! - `service`: what the service's interface says — models, timestamps, filters, limits;
//! - `untrusted`: text from the service or a file, made safe to show (control characters
//!   escaped, length capped); and this root: [`error_chain`], [`ErrorKind`].

pub mod api;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod service;
pub mod simulator;
pub mod sync;
pub mod telemetry;
pub mod untrusted;
pub mod upload;
pub mod warehouse;

/// `n` and its noun, singular for 1: "1 chunk", "2 chunks", "0 passes".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An error and its causes on one line, `a: b: c`, each cause once: for logs, `sync_runs.error`
/// and the CLI's error line. Lives at the root because every layer uses it.
///
/// One line whatever the causes say: a cause written on several lines (a third-party error
/// quoting a snippet, a path with a line break) has its lines joined by spaces, and anything
/// else a terminal would act on is escaped ([`untrusted::untrusted_text`]; what the service
/// said was escaped already, where it was read, and stays as it is).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = lines_joined(&err.to_string());
    let mut source = err.source();
    while let Some(cause) = source {
        let line = lines_joined(&cause.to_string());
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    untrusted::untrusted_text(&text, ERROR_CHAIN_CHARS)
}

/// Tests of the error rule (ARCHITECTURE.md, "One rule for causes"): no link of `err`'s chain
/// holds the text of the cause it also returns as its source. `error_chain` skips such a
/// repeat, so a test of its text alone would not see one.
#[cfg(test)]
pub(crate) fn assert_each_cause_once(err: &dyn std::error::Error) {
    let mut link: &dyn std::error::Error = err;
    while let Some(cause) = link.source() {
        let (text, cause_text) = (link.to_string(), cause.to_string());
        assert!(
            !text.contains(&cause_text),
            "`{text}` prints its source `{cause_text}` and returns it too"
        );
        link = cause;
    }
}

/// What kind of failure ended something, for scripts and alerts (`error_kind` on pass lines
/// and in `--json`): one name per kind, written out only where it is shown ([`Self::as_str`]).
/// Lives at the root because the API, the engine and the daemon each contribute kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// callsync's own settings.
    Config,
    /// No answer: connection, TLS, timeout.
    Network,
    /// 401, 403: a credential refused.
    Auth,
    /// 404: a schedule or call the service does not know.
    NotFound,
    /// 429, or a `Retry-After` beyond the retry budget.
    RateLimited,
    /// 5xx, 408.
    Service,
    /// An answer callsync cannot use, pages that break the walk's rules, or a request the
    /// service refused as malformed.
    Protocol,
    /// A response that arrived whole but cannot be read (not JSON, nested too deep, a value
    /// of the wrong type or shape): asking again brings the same, so it is not retried.
    BadResponse,
    /// The warehouse (the SQLite file or database, the writer thread).
    Warehouse,
    /// Another process holds the schedule.
    Busy,
    /// The service's clock, as a pass takes it, is behind the calls it stamps: the walk
    /// cannot move its checkpoint past them.
    Clock,
    /// A pass that panicked: a bug in callsync.
    Panic,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Config,
        ErrorKind::Network,
        ErrorKind::Auth,
        ErrorKind::NotFound,
        ErrorKind::RateLimited,
        ErrorKind::Service,
        ErrorKind::Protocol,
        ErrorKind::BadResponse,
        ErrorKind::Warehouse,
        ErrorKind::Busy,
        ErrorKind::Clock,
        ErrorKind::Panic,
    ];

    /// The kind as logs, `--json` and scripts spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Network => "network",
            ErrorKind::Auth => "auth",
            ErrorKind::NotFound => "not_found",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Service => "service",
            ErrorKind::Protocol => "protocol",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::Warehouse => "warehouse",
            ErrorKind::Busy => "busy",
            ErrorKind::Clock => "clock",
            ErrorKind::Panic => "panic",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest error line: far beyond any of callsync's own, short of a flood.
const ERROR_CHAIN_CHARS: usize = 20_000;

/// `text`'s lines, trimmed, joined by a space.
fn lines_joined(text: &str) -> String {
    if !text.contains(['\n', '\r']) {
        return text.to_owned();
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    /// `ALL` lists every kind once, under its own name: a kind added to the enum and not to
    /// `ALL` stops this match compiling, and a warehouse's stored name would not read back.
    #[test]
    fn every_error_kind_is_in_all_under_a_name_of_its_own() {
        for (position, kind) in ErrorKind::ALL.into_iter().enumerate() {
            let listed_at = match kind {
                ErrorKind::Config => 0,
                ErrorKind::Network => 1,
                ErrorKind::Auth => 2,
                ErrorKind::NotFound => 3,
                ErrorKind::RateLimited => 4,
                ErrorKind::Service => 5,
                ErrorKind::Protocol => 6,
                ErrorKind::BadResponse => 7,
                ErrorKind::Warehouse => 8,
                ErrorKind::Busy => 9,
                ErrorKind::Clock => 10,
                ErrorKind::Panic => 11,
            };
            assert_eq!(listed_at, position, "{kind}");
        }
        let names: std::collections::HashSet<_> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn counts_are_singular_for_one_only() {
        assert_eq!(super::counted(1, "chunk", "chunks"), "1 chunk");
        assert_eq!(super::counted(0, "pass", "passes"), "0 passes");
        assert_eq!(super::counted(2, "pass", "passes"), "2 passes");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read the thing at\n  /tmp/a\u{1b}[2Jb\r\n")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("TOML parse error at line 1, column 5\n  |\n1 | x = \n  |     ^\nexpected a value")]
    struct Inner;

    #[test]
    fn an_error_chain_is_one_line_without_control_characters() {
        assert_eq!(
            super::error_chain(&Outer(Inner)),
            "cannot read the thing at /tmp/a\\u{1b}[2Jb: TOML parse error at line 1, column 5 | 1 | x = |     ^ expected a value"
        );
    }
}
