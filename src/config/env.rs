//! The environment callsync reads: `CALLSYNC_*` variables and systemd's credentials
//! directory, captured once so that loading is a function of its inputs.

use std::collections::HashMap;
use std::path::PathBuf;

use super::error::{ConfigError, ConfigErrorKind};

/// The process environment a configuration is read with; injectable so tests never touch
/// the real one.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// Variables (only `CALLSYNC_*` are read).
    pub vars: HashMap<String, String>,
    /// systemd's `$CREDENTIALS_DIRECTORY`, if set.
    pub credentials_dir: Option<PathBuf>,
}

/// The prefix of the variables that override keys.
pub(super) const PREFIX: &str = "CALLSYNC_";

impl Env {
    /// These variables and no credentials directory: the environment a test loads with.
    #[cfg(test)]
    pub fn with_vars(vars: &[(&str, &str)]) -> Env {
        Env {
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            credentials_dir: None,
        }
    }

    /// The `CALLSYNC_*` variables; one that is not UTF-8 is an error naming it.
    pub fn from_process() -> Result<Self, ConfigError> {
        let mut vars = HashMap::new();
        // `vars_os`: `std::env::vars` panics on any variable that is not UTF-8, even one
        // that is none of callsync's business.
        for (key, value) in std::env::vars_os() {
            let Some(key) = key.to_str().filter(|k| is_configuration(k)) else {
                continue;
            };
            let value = value.into_string().map_err(|_| ConfigError::Env {
                var: key.to_owned(),
                key: None,
                kind: ConfigErrorKind::NotText,
                problem: "is not valid UTF-8 text; set it to text or unset it".into(),
            })?;
            vars.insert(key.to_owned(), value);
        }
        Ok(Env {
            vars,
            credentials_dir: std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from),
        })
    }
}

/// `CALLSYNC_*` variables that set no key: switches of callsync's own test suite, CI and
/// benchmarks (docs/development.md). Exported in a shell, they are inherited by every callsync the
/// tests run, which would otherwise refuse them as unknown keys.
const NOT_CONFIGURATION: [&str; 5] = [
    "CALLSYNC_SKIP_POSTGRES",
    "CALLSYNC_REQUIRE_ADVISORIES",
    "CALLSYNC_BENCH_POSTGRES",
    "CALLSYNC_SKIP_DATASETTE",
    "CALLSYNC_CI_CACHE",
];

/// Whether the variable `name` is read as configuration: `CALLSYNC_*`, but for the few that
/// are the test tools' own.
fn is_configuration(name: &str) -> bool {
    name.starts_with(PREFIX) && !NOT_CONFIGURATION.contains(&name)
}

/// The variable naming the configuration file: read as a path, never as a key `config`.
pub const CONFIG_VAR: &str = "CALLSYNC_CONFIG";

/// The variable that sets `key` (`CALLSYNC_SYNC__PAGE_SIZE` for `sync.page_size`), read the
/// way `config::Environment` reads it: case-insensitive, `__` between levels.
pub(super) fn variable_for<'e>(env: &'e Env, key: &str) -> Option<&'e str> {
    env.vars
        .keys()
        .find(|var| {
            var.get(..PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
                && var[PREFIX.len()..].to_lowercase().replace("__", ".") == key
        })
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_tools_switches_are_not_configuration() {
        for tool in NOT_CONFIGURATION {
            assert!(!is_configuration(tool), "{tool}");
        }
        for key in [
            "CALLSYNC_CONFIG",
            "CALLSYNC_WAREHOUSE__PATH",
            "CALLSYNC_WAREHOUSE_PATH",
        ] {
            // A misspelt key (one underscore) is still read, and refused by name.
            assert!(is_configuration(key), "{key}");
        }
        assert!(!is_configuration("PATH"));
    }
}
