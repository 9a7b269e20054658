//! `ConfigError`: what is wrong with the configuration, naming the key, file or variable.

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
    /// A problem with the file as a whole: its syntax, or a key it should not have.
    #[error("config: {}: {problem}", path.display())]
    File { path: PathBuf, problem: String },
    #[error("config: {key}: {problem}")]
    Invalid { key: String, problem: String },
    /// A `CALLSYNC_*` variable is wrong: an unknown key, or a bad value for its key.
    #[error("config: {var}: {problem}")]
    Env { var: String, problem: String },
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}
