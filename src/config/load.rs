//! Loading: the TOML file and `CALLSYNC_` environment into the raw serde mirror, then one
//! conversion into the typed [`Config`].

use std::path::{Path, PathBuf};

use super::env::{CONFIG_VAR, Env, PREFIX};
use super::error::{ConfigError, ConfigErrorKind};
use super::messages::{blame_variable, describe};
use super::raw::RawConfig;
use super::types::Config;
use super::validate::convert;

/// The default search path when no `--config` is given, in order.
pub const DEFAULT_PATHS: [&str; 2] = ["config/callsync.toml", "/etc/callsync/callsync.toml"];

pub(super) fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    load_from(path, &Env::from_process()?)
}

/// What a configuration made of `CALLSYNC_*` variables alone is called in messages.
pub(super) const ENVIRONMENT_ONLY: &str = "(CALLSYNC_* environment)";

/// Loads `path` (or `$CALLSYNC_CONFIG`, or the first default path that exists) with `env`'s
/// overrides. Without any file, the `CALLSYNC_*` variables alone make the configuration, if
/// there are any.
pub fn load_from(path: Option<&Path>, env: &Env) -> Result<Config, ConfigError> {
    let named = path.map(Path::to_owned).or_else(|| {
        env.vars
            .get(CONFIG_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let file = match named {
        Some(path) if path.is_dir() => {
            return Err(ConfigError::File {
                path: path.clone(),
                key: None,
                kind: ConfigErrorKind::Unreadable,
                problem: format!(
                    "is a directory; pass the configuration file itself (e.g. --config {})",
                    path.join("callsync.toml").display()
                ),
            });
        }
        Some(path) => {
            if !path.is_file() {
                return Err(ConfigError::Read {
                    path,
                    cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                });
            }
            Some(path)
        }
        None => DEFAULT_PATHS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file()),
    };
    let Some(file) = file else {
        if !env.vars.keys().any(|k| k != CONFIG_VAR) {
            return Err(ConfigError::NotFound {
                searched: DEFAULT_PATHS.join(", "),
            });
        }
        let raw = parse("", Path::new(ENVIRONMENT_ONLY), env)?;
        return convert(raw, env).map_err(|e| blame_variable(e, env));
    };
    let text = std::fs::read_to_string(&file).map_err(|cause| ConfigError::Read {
        path: file.clone(),
        cause,
    })?;
    let raw = parse(&text, &file, env)?;
    let mut config = convert(raw, env).map_err(|e| blame_variable(e, env))?;
    config.source = Some(file);
    Ok(config)
}

/// A `CALLSYNC_*` variable, whatever the case of its prefix (as the `config` crate takes it).
fn is_ours(var: &str) -> bool {
    var.get(..PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
}

pub(super) fn parse(text: &str, file: &Path, env: &Env) -> Result<RawConfig, ConfigError> {
    // Values stay strings: `config`'s `try_parsing` would turn a token "007" into 7. Keys
    // that are numbers, booleans or lists parse their own string (`strict`, `StringList`).
    let variables = || (env.vars.iter()).filter(|(var, _)| *var != CONFIG_VAR && is_ours(var));
    let environment = config::Environment::with_prefix("CALLSYNC")
        .prefix_separator("_")
        .separator("__")
        .source(Some(
            variables()
                .filter(|(_, value)| !value.is_empty())
                .map(|(var, value)| (var.clone(), value.clone()))
                .collect(),
        ));
    let mut builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .add_source(environment);
    // A variable set to nothing (`CALLSYNC_METRICS__LISTEN=`) switches the file's key off:
    // the key is as if not set, so its default applies (or none, for a key without one).
    for (var, _) in variables().filter(|(_, value)| value.is_empty()) {
        let key = var[PREFIX.len()..].to_lowercase().replace("__", ".");
        builder = builder
            .set_override(key, config::ValueKind::Nil)
            .map_err(|e| describe(e, file, text, env))?;
    }
    let built = builder.build().map_err(|e| describe(e, file, text, env))?;
    built
        .try_deserialize()
        .map_err(|e| describe(e, file, text, env))
}
