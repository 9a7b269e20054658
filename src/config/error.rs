//! `ConfigError`: what is wrong with the configuration, naming the key, file or variable, and
//! the [`ConfigErrorKind`] of the problem (what callers and tests match; the message says it
//! in words).

use std::path::PathBuf;

/// A configuration problem: one line naming the key (or file) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "config: no configuration file found (looked for {searched}) and no CALLSYNC_* variables set; pass --config PATH or set CALLSYNC_CONFIG"
    )]
    NotFound { searched: String },
    /// The cause is in the message, so it is not also a `source()` (see ARCHITECTURE.md, Errors).
    #[error("config: cannot read {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A problem with the file as a whole: its syntax, or a key it should not have (`key`).
    #[error("config: {}: {problem}", path.display())]
    File {
        path: PathBuf,
        key: Option<String>,
        kind: ConfigErrorKind,
        problem: String,
    },
    #[error("config: {key}: {problem}")]
    Invalid {
        key: String,
        kind: ConfigErrorKind,
        problem: String,
    },
    /// A `CALLSYNC_*` variable is wrong: an unknown key, or a bad value for its key (`key`,
    /// which `problem` names too).
    #[error("config: {var}: {problem}")]
    Env {
        var: String,
        key: Option<String>,
        kind: ConfigErrorKind,
        problem: String,
    },
}

/// What kind of problem a [`ConfigError`] is, whatever its words: one kind for many keys (a
/// number out of range is `OutOfRange` on every key that has a range). `cli` maps every
/// `ConfigError` to exit code 2 alike; the kind is for callers and tests that must tell them
/// apart without reading the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// No configuration file found and no `CALLSYNC_*` variable set.
    NoConfiguration,
    /// A file cannot be read (missing, a directory, no permission): the configuration file, a
    /// secret's, or the PostgreSQL password file `warehouse.url` leads to.
    Unreadable,
    /// The file is not valid TOML, or holds a number no key could hold.
    Syntax,
    /// A key callsync does not have, in the file or as a variable.
    UnknownKey,
    /// A value of another type than its key's (`0.5` or `"fifty"` for an integer, a string
    /// for a table).
    WrongType,
    /// A key that must be set is not (alone, or because another key is set).
    Missing,
    /// A key set to nothing: an empty or blank value, or a secret file with nothing in it.
    Empty,
    /// A number outside its key's range, or a duration longer than allowed.
    OutOfRange,
    /// A word that is not one of those its key takes (`sync.details`, `log.format`).
    NotOneOf,
    /// Not a URL callsync can use: unparsable, not http(s) with a host, a query, a fragment,
    /// or its own `/api/v1`; a `warehouse.url` libpq would not take, or holding a password.
    BadUrl,
    /// Not a UUID where a schedule's uid goes.
    NotAUuid,
    /// Not a duration such as `90s`, `15m`, `12h`, `7d`.
    NotADuration,
    /// Not a socket address such as `127.0.0.1:29610`.
    NotASocketAddress,
    /// Not an IANA time zone name.
    NotATimeZone,
    /// Not a 6-field cron expression.
    BadCron,
    /// A cron expression that does not fire within a year.
    CronNeverFires,
    /// A log filter `config::LogFilter` refuses (`log.level`).
    BadLogFilter,
    /// A name that is empty, too long or not printable (`sync.instance`).
    BadName,
    /// A schedule listed twice.
    Duplicate,
    /// Keys that do not go together as set: two that exclude each other, or one set without
    /// the key it belongs with.
    Conflict,
    /// A placeholder (`replace-me`, `<token>`) where a secret goes.
    Placeholder,
    /// A variable's value that is not UTF-8 text.
    NotText,
    /// A problem the `config` crate reported in words callsync does not know.
    Other,
}

impl ConfigError {
    /// `key`'s value is wrong in the way `kind` says; `problem` says it to the user.
    pub fn new(kind: ConfigErrorKind, key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            kind,
            problem: problem.into(),
        }
    }

    /// What kind of problem this is.
    pub fn kind(&self) -> ConfigErrorKind {
        match self {
            ConfigError::NotFound { .. } => ConfigErrorKind::NoConfiguration,
            ConfigError::Read { .. } => ConfigErrorKind::Unreadable,
            ConfigError::File { kind, .. }
            | ConfigError::Invalid { kind, .. }
            | ConfigError::Env { kind, .. } => *kind,
        }
    }

    /// The key the problem is with (`sync.page_size`; an unknown key as written, with its
    /// table: `sync.pagesize`), if it is with one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::File { key, .. } | ConfigError::Env { key, .. } => key.as_deref(),
            ConfigError::NotFound { .. } | ConfigError::Read { .. } => None,
        }
    }
}
