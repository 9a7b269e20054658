//! Loading: the TOML file and `CALLSYNC_` environment into a raw serde mirror, then one
//! conversion into the typed [`Config`], where every check names its key.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use serde::Deserialize;
use url::Url;
use uuid::Uuid;

use super::secret::is_placeholder;
use super::{
    ApiConfig, AuthConfig, Config, ConfigError, DEFAULT_PATHS, DetailsMode, LogConfig, LogFormat,
    MetricsConfig, OAuthConfig, PostgresConfig, RetryConfig, Secret, SecretSource, SyncConfig,
    WarehouseConfig,
};
use crate::service::ListFilter;
use strict::strict;

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
const PREFIX: &str = "CALLSYNC_";

impl Env {
    /// The `CALLSYNC_*` variables; one that is not UTF-8 is an error naming it.
    pub fn from_process() -> Result<Self, ConfigError> {
        let mut vars = HashMap::new();
        // `vars_os`: `std::env::vars` panics on any variable that is not UTF-8, even one
        // that is none of callsync's business.
        for (key, value) in std::env::vars_os() {
            let Some(key) = key.to_str().filter(|k| k.starts_with(PREFIX)) else {
                continue;
            };
            let value = value.into_string().map_err(|_| ConfigError::Env {
                var: key.to_owned(),
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

pub(super) fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    load_from(path, &Env::from_process()?)
}

/// The variable naming the configuration file: read as a path, never as a key `config`.
pub const CONFIG_VAR: &str = "CALLSYNC_CONFIG";

/// What a configuration made of `CALLSYNC_*` variables alone is called in messages.
const ENVIRONMENT_ONLY: &str = "(CALLSYNC_* environment)";

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

fn parse(text: &str, file: &Path, env: &Env) -> Result<RawConfig, ConfigError> {
    // Values stay strings: `config`'s `try_parsing` would turn a token "007" into 7. Keys
    // that are numbers, booleans or lists parse their own string (`strict`, `StringList`).
    let environment = config::Environment::with_prefix("CALLSYNC")
        .prefix_separator("_")
        .separator("__")
        .source(Some(
            env.vars
                .iter()
                .filter(|(key, _)| *key != CONFIG_VAR)
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ));
    let built = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .add_source(environment)
        .build()
        .map_err(|e| describe(e, file, text, env))?;
    built
        .try_deserialize()
        .map_err(|e| describe(e, file, text, env))
}

/// `config`'s error as one line naming the key (and the variable that set it, if one did),
/// without the crate's "for key `…`" suffix.
fn describe(err: config::ConfigError, file: &Path, text: &str, env: &Env) -> ConfigError {
    use config::ConfigError as E;
    let (key, problem) = match err {
        E::FileParse { cause, .. } => {
            return ConfigError::File {
                path: file.to_owned(),
                problem: syntax_error(&*cause, text),
            };
        }
        E::At {
            error,
            key: Some(key),
            ..
        } => (Some(key), message(*error)),
        E::Type {
            unexpected,
            expected,
            key: Some(key),
            ..
        } => (
            Some(key),
            format!("invalid type: {unexpected}, expected {expected}"),
        ),
        other => (None, message(other)),
    };
    let problem = reword_invalid_type(&problem).unwrap_or(problem);
    if let Some((key, problem)) = unknown_key(key.as_deref(), &problem) {
        return match variable_for(env, &key) {
            Some(var) => ConfigError::Env {
                var: var.to_owned(),
                problem,
            },
            None => ConfigError::File {
                path: file.to_owned(),
                problem,
            },
        };
    }
    match key {
        Some(key) => blame_variable(ConfigError::invalid(key, problem), env),
        None => ConfigError::File {
            path: file.to_owned(),
            problem,
        },
    }
}

/// An invalid key set by a `CALLSYNC_*` variable is reported as that variable's: the file
/// may not even mention the key.
fn blame_variable(err: ConfigError, env: &Env) -> ConfigError {
    match err {
        ConfigError::Invalid { key, problem } => match variable_for(env, &key) {
            Some(var) => ConfigError::Env {
                var: var.to_owned(),
                problem: format!("{key}: {problem}"),
            },
            None => ConfigError::Invalid { key, problem },
        },
        other => other,
    }
}

/// The variable that sets `key` (`CALLSYNC_SYNC__PAGE_SIZE` for `sync.page_size`), read the
/// way `config::Environment` reads it: case-insensitive, `__` between levels.
fn variable_for<'e>(env: &'e Env, key: &str) -> Option<&'e str> {
    env.vars
        .keys()
        .find(|var| {
            var.get(..PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
                && var[PREFIX.len()..].to_lowercase().replace("__", ".") == key
        })
        .map(String::as_str)
}

/// Where the TOML is broken and how, without the parser's quote of the line: that line may
/// hold a secret (`access_token = "…` with its quote missing).
fn syntax_error(cause: &(dyn std::error::Error + 'static), text: &str) -> String {
    let Some(toml) = cause.downcast_ref::<toml::de::Error>() else {
        // `config`'s own checks on a number the parser accepted ("number too large…"), which
        // name no key: found again here.
        let cause = one_line(&cause.to_string());
        return match number_out_of_range(text) {
            Some((key, span, allowed)) => {
                format!("{}: {key}: {cause} ({allowed})", where_in(text, span.start))
            }
            None => format!("not valid TOML: {cause}"),
        };
    };
    let problem = one_line(toml.message());
    match toml.span() {
        Some(span) => format!("{}: {problem}", where_in(text, span.start)),
        None => format!("not valid TOML: {problem}"),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `not valid TOML at line L, column C` for the byte `at` of `text`.
fn where_in(text: &str, at: usize) -> String {
    match text.get(..at) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("not valid TOML at line {line}, column {column}")
        }
        None => "not valid TOML".to_owned(),
    }
}

/// A number `config` cannot hold: its key (`sync.page_size`, `sync.schedule[1].x`), where it
/// stands, and what is allowed.
type OutOfRange = (String, std::ops::Range<usize>, &'static str);

/// The first number `config` cannot hold: an integer beyond 64 bits, a float that overflows.
fn number_out_of_range(text: &str) -> Option<OutOfRange> {
    let table = toml::de::DeTable::parse(text).ok()?;
    out_of_range_in_table(table.get_ref(), "")
}

fn out_of_range_in_table(table: &toml::de::DeTable<'_>, prefix: &str) -> Option<OutOfRange> {
    table.iter().find_map(|(key, value)| {
        let key = match prefix {
            "" => key.get_ref().to_string(),
            _ => format!("{prefix}.{}", key.get_ref()),
        };
        out_of_range_in_value(value, key)
    })
}

fn out_of_range_in_value(
    value: &toml::Spanned<toml::de::DeValue<'_>>,
    key: String,
) -> Option<OutOfRange> {
    use toml::de::DeValue;
    let (fits, allowed) = match value.get_ref() {
        DeValue::Integer(n) => (
            i64::from_str_radix(n.as_str(), n.radix()).is_ok(),
            "integers go from -9223372036854775808 to 9223372036854775807",
        ),
        DeValue::Float(x) => (
            x.as_str()
                .parse::<f64>()
                .is_ok_and(|f| f.is_finite() || x.as_str().contains("inf")),
            "a float must be finite",
        ),
        DeValue::Table(table) => return out_of_range_in_table(table, &key),
        DeValue::Array(items) => {
            return items
                .iter()
                .enumerate()
                .find_map(|(i, item)| out_of_range_in_value(item, format!("{key}[{i}]")));
        }
        DeValue::String(_) | DeValue::Boolean(_) | DeValue::Datetime(_) => (true, ""),
    };
    (!fits).then(|| (key, value.span(), allowed))
}

fn message(err: config::ConfigError) -> String {
    match err {
        config::ConfigError::Message(text) => text,
        other => other.to_string(),
    }
}

/// serde's "invalid type: string \"…\", expected a table" as "expected a table, got a
/// string": the text given to a table's key may be a secret meant for one of its keys.
fn reword_invalid_type(problem: &str) -> Option<String> {
    let (got, expected) = problem
        .strip_prefix("invalid type: ")?
        .rsplit_once(", expected ")?;
    let got = if got.starts_with("string ") {
        "a string"
    } else {
        got
    };
    Some(format!("expected {expected}, got {got}"))
}

/// serde's "unknown field `x`, expected one of …" under `parent` as the full key and
/// "unknown key parent.x; expected one of …": the full key is what a reader searches for.
fn unknown_key(parent: Option<&str>, problem: &str) -> Option<(String, String)> {
    let (field, rest) = problem.strip_prefix("unknown field `")?.split_once('`')?;
    let key = match parent {
        Some(parent) => format!("{parent}.{field}"),
        None => field.to_owned(),
    };
    let rest = rest.strip_prefix(", ").unwrap_or(rest);
    let problem = format!("unknown key {key}; {rest}");
    Some((key, problem))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawConfig {
    #[serde(default)]
    api: RawApi,
    #[serde(default)]
    warehouse: RawWarehouse,
    #[serde(default)]
    sync: RawSync,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    metrics: RawMetrics,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawApi {
    base_url: Option<String>,
    access_token: Option<String>,
    access_token_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "strict")]
    request_timeout_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    connect_timeout_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    requests_per_second: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    detail_concurrency: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    max_response_mib: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    create_settle_secs: Option<i64>,
    #[serde(default)]
    retry: RawRetry,
    oauth: Option<RawOAuth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawRetry {
    #[serde(default, deserialize_with = "strict")]
    max_attempts: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    max_elapsed_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    initial_interval_ms: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    max_interval_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    multiplier: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawOAuth {
    token_url: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    client_secret_file: Option<PathBuf>,
    scope: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawWarehouse {
    path: Option<PathBuf>,
    /// A PostgreSQL URI: the warehouse on a server instead of a file.
    url: Option<String>,
    password_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "strict")]
    busy_timeout_secs: Option<i64>,
    keep_runs: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawSync {
    schedules: Option<StringList>,
    /// `[[sync.schedule]]`: schedules with a name.
    schedule: Option<Vec<RawSchedule>>,
    #[serde(default, deserialize_with = "strict")]
    lookback_secs: Option<i64>,
    cron: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    page_size: Option<i64>,
    details: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    concurrency: Option<i64>,
    reconcile_cron: Option<String>,
    reconcile_window: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    shutdown_timeout_secs: Option<i64>,
    behind_after: Option<String>,
    #[serde(default)]
    filter: RawFilter,
}

/// One `[[sync.schedule]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with uid and name")]
struct RawSchedule {
    uid: Option<String>,
    name: Option<String>,
}

/// A list key: a TOML array, or one comma-delimited string (as an environment variable is).
#[derive(Debug)]
enum StringList {
    Many(Vec<String>),
    One(String),
}

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StringListVisitor)
    }
}

struct StringListVisitor;

impl<'de> serde::de::Visitor<'de> for StringListVisitor {
    type Value = StringList;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of strings or one comma-separated string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<StringList, E> {
        Ok(StringList::One(text.to_owned()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<StringList, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<String>()? {
            items.push(item);
        }
        Ok(StringList::Many(items))
    }
}

impl StringList {
    fn into_vec(self) -> Vec<String> {
        let items = match self {
            StringList::Many(items) => items,
            StringList::One(text) => text.split(',').map(str::to_owned).collect(),
        };
        items
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawFilter {
    status: Option<StringList>,
    progress: Option<StringList>,
    source: Option<StringList>,
    attempt_status: Option<StringList>,
    outcome: Option<String>,
    external_id: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    is_test_call: Option<bool>,
    full_name: Option<String>,
    first_name: Option<String>,
    last_name: Option<String>,
    phonetic_full_name: Option<String>,
    phonetic_first_name: Option<String>,
    phonetic_last_name: Option<String>,
    email: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawLog {
    level: Option<String>,
    format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawMetrics {
    listen: Option<String>,
}

fn convert(raw: RawConfig, env: &Env) -> Result<Config, ConfigError> {
    Ok(Config {
        api: api(raw.api, env)?,
        warehouse: WarehouseConfig {
            postgres: postgres(&raw.warehouse, env)?,
            path: warehouse_path(raw.warehouse.path)?,
            busy_timeout: secs(
                "warehouse.busy_timeout_secs",
                raw.warehouse.busy_timeout_secs,
                30,
                1..=3600,
            )?,
            keep_runs: keep_runs(raw.warehouse.keep_runs.as_deref().unwrap_or("90d"))?,
        },
        sync: sync(raw.sync)?,
        log: log(raw.log)?,
        metrics: MetricsConfig {
            listen: raw
                .metrics
                .listen
                .map(|text| {
                    text.parse::<SocketAddr>().map_err(|_| {
                        ConfigError::invalid(
                            "metrics.listen",
                            format!("{text:?} is not a socket address such as \"127.0.0.1:29610\""),
                        )
                    })
                })
                .transpose()?,
        },
        source: None,
    })
}

/// `warehouse.url` (PostgreSQL) and its password's source: `warehouse.password_file`, else
/// the systemd credential `warehouse_password`, else none (libpq's password file, or a server
/// that asks for none). `url` and `path` together are refused, naming both.
fn postgres(raw: &RawWarehouse, env: &Env) -> Result<Option<PostgresConfig>, ConfigError> {
    let Some(url) = &raw.url else {
        if raw.password_file.is_some() {
            return Err(ConfigError::invalid(
                "warehouse.password_file",
                "is the password of a PostgreSQL warehouse: set warehouse.url too, or remove it",
            ));
        }
        return Ok(None);
    };
    if raw.path.is_some() {
        return Err(ConfigError::invalid(
            "warehouse",
            "set either warehouse.path (an SQLite file) or warehouse.url (PostgreSQL), not both",
        ));
    }
    if url.trim().is_empty() {
        return Err(ConfigError::invalid(
            "warehouse.url",
            "is empty; write postgresql://USER@HOST/DBNAME, or remove it to use an SQLite file",
        ));
    }
    let password = match &raw.password_file {
        Some(path) => Some(SecretSource::File {
            key: "warehouse.password_file".into(),
            path: path.clone(),
        }),
        None => credential(env, "warehouse_password", "warehouse.password_file"),
    };
    Ok(Some(PostgresConfig {
        url: url.trim().to_owned(),
        password,
    }))
}

/// `warehouse.path`, `callsync.db` when unset. An empty one is an error: SQLite would open a
/// private temporary database and every pass would vanish with the process.
fn warehouse_path(path: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    match path {
        None => Ok("callsync.db".into()),
        Some(path) if path.as_os_str().to_string_lossy().trim().is_empty() => {
            Err(ConfigError::invalid(
                "warehouse.path",
                "is empty; name the SQLite file, e.g. \"/var/lib/callsync/callsync.db\"",
            ))
        }
        Some(path) => Ok(path),
    }
}

fn api(raw: RawApi, env: &Env) -> Result<ApiConfig, ConfigError> {
    let base_url = url(
        "api.base_url",
        raw.base_url.as_deref().ok_or_else(|| {
            ConfigError::invalid(
                "api.base_url",
                "is required (the service's address, e.g. \"https://calls.example.com\")",
            )
        })?,
    )?;
    if base_url.path().trim_end_matches('/').ends_with("/api/v1") {
        return Err(ConfigError::invalid(
            "api.base_url",
            format!("{base_url} must not end with /api/v1 (callsync appends it)"),
        ));
    }
    let static_token = secret("api.access_token", raw.access_token, raw.access_token_file)?;
    let auth = match (raw.oauth, static_token) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                "api",
                "configure either api.access_token (or access_token_file) or [api.oauth], not both",
            ));
        }
        (Some(oauth), None) => Some(AuthConfig::OAuth(oauth_config(oauth, env)?)),
        (None, Some(token)) => Some(AuthConfig::Static(token)),
        (None, None) => credential(env, "access_token", "api.access_token").map(AuthConfig::Static),
    };
    let retry = raw.retry;
    let defaults = RetryConfig::default();
    let multiplier = retry.multiplier.unwrap_or(defaults.multiplier);
    if !(1.0..=10.0).contains(&multiplier) {
        return Err(ConfigError::invalid(
            "api.retry.multiplier",
            format!("{multiplier} is outside 1.0..=10.0"),
        ));
    }
    Ok(ApiConfig {
        base_url,
        auth,
        request_timeout: secs(
            "api.request_timeout_secs",
            raw.request_timeout_secs,
            30,
            1..=600,
        )?,
        connect_timeout: secs(
            "api.connect_timeout_secs",
            raw.connect_timeout_secs,
            10,
            1..=300,
        )?,
        requests_per_second: match bounded(
            "api.requests_per_second",
            raw.requests_per_second,
            0,
            0..=i64::from(u32::MAX),
        )? {
            0 => None,
            n => Some(n),
        },
        detail_concurrency: bounded("api.detail_concurrency", raw.detail_concurrency, 4, 1..=64)?,
        // A full page of 100 calls is a few hundred KiB: 32 MiB is a hundred times that, and
        // still a bound on what one request may take of memory and of the warehouse.
        max_response_bytes: bounded::<u64>(
            "api.max_response_mib",
            raw.max_response_mib,
            32,
            1..=4096,
        )? * 1024
            * 1024,
        create_settle: secs(
            "api.create_settle_secs",
            raw.create_settle_secs,
            60,
            1..=3600,
        )?,
        retry: RetryConfig {
            max_attempts: bounded("api.retry.max_attempts", retry.max_attempts, 10, 1..=100)?,
            max_elapsed: secs(
                "api.retry.max_elapsed_secs",
                retry.max_elapsed_secs,
                120,
                1..=3600,
            )?,
            initial_interval: Duration::from_millis(bounded(
                "api.retry.initial_interval_ms",
                retry.initial_interval_ms,
                500,
                1..=60_000,
            )?),
            max_interval: secs(
                "api.retry.max_interval_secs",
                retry.max_interval_secs,
                30,
                1..=600,
            )?,
            multiplier,
        },
    })
}

fn oauth_config(raw: RawOAuth, env: &Env) -> Result<OAuthConfig<SecretSource>, ConfigError> {
    let token_url = url(
        "api.oauth.token_url",
        raw.token_url
            .as_deref()
            .ok_or_else(|| ConfigError::invalid("api.oauth.token_url", "is required"))?,
    )?;
    let client_id = raw
        .client_id
        .filter(|id| !id.trim().is_empty())
        .ok_or_else(|| ConfigError::invalid("api.oauth.client_id", "is required"))?;
    let client_secret = match secret(
        "api.oauth.client_secret",
        raw.client_secret,
        raw.client_secret_file,
    )? {
        Some(secret) => secret,
        None => credential(env, "client_secret", "api.oauth.client_secret").ok_or_else(|| {
            ConfigError::invalid(
                "api.oauth.client_secret",
                "is required (inline, client_secret_file, or the systemd credential client_secret)",
            )
        })?,
    };
    Ok(OAuthConfig {
        token_url,
        client_id,
        client_secret,
        scope: raw.scope.filter(|s| !s.trim().is_empty()),
    })
}

/// `warehouse.keep_runs`: a duration, or `forever` (also `0`) for no limit.
fn keep_runs(text: &str) -> Result<Option<Duration>, ConfigError> {
    const KEY: &str = "warehouse.keep_runs";
    match text.trim() {
        "forever" | "0" => Ok(None),
        t => duration(KEY, t).map(Some).map_err(|_| {
            ConfigError::invalid(
                KEY,
                format!(
                    "{text:?} is neither a duration from 1s to 3650d (such as 90d or 12h) nor \"forever\" (or 0) to keep every run"
                ),
            )
        }),
    }
}

/// The schedules to sync, in order: `sync.schedules`, then `[[sync.schedule]]`; and the
/// names the latter give. A uid listed twice, in either place or in both, is an error.
fn schedules(
    listed: Option<StringList>,
    named: Option<Vec<RawSchedule>>,
) -> Result<(Vec<Uuid>, BTreeMap<Uuid, String>), ConfigError> {
    let mut schedules: Vec<Uuid> = Vec::new();
    for text in listed.map(StringList::into_vec).unwrap_or_default() {
        let uid = schedule_uid("sync.schedules", &text)?;
        if schedules.contains(&uid) {
            return Err(ConfigError::invalid(
                "sync.schedules",
                format!("{uid} is listed twice"),
            ));
        }
        schedules.push(uid);
    }
    let mut names = BTreeMap::new();
    for (i, entry) in named.unwrap_or_default().into_iter().enumerate() {
        let key = format!("sync.schedule[{i}]");
        let text = entry.uid.ok_or_else(|| {
            ConfigError::invalid(&key, "has no uid; give the schedule's uid and its name")
        })?;
        let uid = schedule_uid(&format!("{key}.uid"), &text)?;
        let name = entry
            .name
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ConfigError::invalid(
                    format!("{key}.name"),
                    format!("{uid} has no name; give it one, or list the uid in sync.schedules"),
                )
            })?;
        if names.contains_key(&uid) {
            return Err(ConfigError::invalid(
                format!("{key}.uid"),
                format!("{uid} is listed twice in [[sync.schedule]]; list each schedule once"),
            ));
        }
        if schedules.contains(&uid) {
            return Err(ConfigError::invalid(
                format!("{key}.uid"),
                format!(
                    "{uid} is also in sync.schedules; list each schedule once (here, to name it)"
                ),
            ));
        }
        schedules.push(uid);
        names.insert(uid, name);
    }
    Ok((schedules, names))
}

fn schedule_uid(key: &str, text: &str) -> Result<Uuid, ConfigError> {
    Uuid::parse_str(text.trim())
        .map_err(|_| ConfigError::invalid(key, format!("{text:?} is not a schedule uid (a UUID)")))
}

fn sync(raw: RawSync) -> Result<SyncConfig, ConfigError> {
    let (schedules, schedule_names) = schedules(raw.schedules, raw.schedule)?;
    let details = match raw.details.as_deref().unwrap_or("auto") {
        "auto" => DetailsMode::Auto,
        "always" => DetailsMode::Always,
        "never" => DetailsMode::Never,
        other => {
            return Err(ConfigError::invalid(
                "sync.details",
                format!("{other:?} is not one of \"auto\", \"always\", \"never\""),
            ));
        }
    };
    Ok(SyncConfig {
        schedules,
        schedule_names,
        lookback: secs("sync.lookback_secs", raw.lookback_secs, 5, 0..=86_400)?,
        cron: cron(
            "sync.cron",
            raw.cron.unwrap_or_else(|| "0 */5 * * * *".into()),
        )?,
        page_size: bounded("sync.page_size", raw.page_size, 100, 1..=100)?,
        details,
        concurrency: bounded("sync.concurrency", raw.concurrency, 4, 1..=64)?,
        filter: filter(raw.filter),
        reconcile_cron: raw
            .reconcile_cron
            .map(|c| cron("sync.reconcile_cron", c))
            .transpose()?,
        reconcile_window: duration(
            "sync.reconcile_window",
            raw.reconcile_window.as_deref().unwrap_or("7d"),
        )?,
        shutdown_timeout: secs(
            "sync.shutdown_timeout_secs",
            raw.shutdown_timeout_secs,
            30,
            1..=3600,
        )?,
        behind_after: duration(
            "sync.behind_after",
            raw.behind_after.as_deref().unwrap_or("2m"),
        )?,
    })
}

fn filter(raw: RawFilter) -> ListFilter {
    let list = |l: Option<StringList>| l.map(StringList::into_vec).unwrap_or_default();
    ListFilter {
        status: list(raw.status),
        progress: list(raw.progress),
        source: list(raw.source),
        attempt_status: list(raw.attempt_status),
        outcome: raw.outcome,
        external_id: raw.external_id,
        is_test_call: raw.is_test_call,
        full_name: raw.full_name,
        first_name: raw.first_name,
        last_name: raw.last_name,
        phonetic_full_name: raw.phonetic_full_name,
        phonetic_first_name: raw.phonetic_first_name,
        phonetic_last_name: raw.phonetic_last_name,
        email: raw.email,
    }
}

fn log(raw: RawLog) -> Result<LogConfig, ConfigError> {
    let level = raw.level.unwrap_or_else(|| "info".into());
    crate::telemetry::parse_filter(&level)
        .map_err(|problem| ConfigError::invalid("log.level", format!("{level:?} {problem}")))?;
    let format = match raw.format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(ConfigError::invalid(
                "log.format",
                format!("{other:?} is not one of \"text\", \"json\""),
            ));
        }
    };
    Ok(LogConfig { level, format })
}

fn url(key: &str, text: &str) -> Result<Url, ConfigError> {
    let url = Url::parse(text.trim())
        .map_err(|e| ConfigError::invalid(key, format!("{text:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ConfigError::invalid(
            key,
            format!("{text:?} must be an http:// or https:// URL with a host"),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(ConfigError::invalid(
            key,
            format!("{text:?} must not have a query or a fragment"),
        ));
    }
    Ok(url)
}

/// A 6-field cron expression (seconds first), checked with the scheduler's own parser, that
/// fires within a year from now.
fn cron(key: &str, expr: String) -> Result<String, ConfigError> {
    cron_at(key, expr, chrono::Utc::now())
}

/// The longest a valid cron may wait for its next firing: a year, leap day included.
const CRON_HORIZON_DAYS: i64 = 366;

/// [`cron`] as of `now`. A cron that parses but never fires soon (`0 0 0 30 2 *`, the 30th of
/// February) would leave the daemon running and syncing nothing after its first pass.
fn cron_at(key: &str, expr: String, now: DateTime<Utc>) -> Result<String, ConfigError> {
    let parser = CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Disallowed)
        .build();
    let schedule = parser.parse(&expr).map_err(|e| {
        ConfigError::invalid(
            key,
            format!("{expr:?} is not a 6-field cron expression with seconds first (e.g. \"0 */5 * * * *\"): {e}"),
        )
    })?;
    match schedule.find_next_occurrence(&now, false) {
        Ok(next) if next - now <= chrono::TimeDelta::days(CRON_HORIZON_DAYS) => Ok(expr),
        _ => Err(ConfigError::invalid(
            key,
            format!(
                "{expr:?} does not fire within a year of now ({} UTC); check its day and month fields",
                now.format("%Y-%m-%d %H:%M:%S")
            ),
        )),
    }
}

/// Ten years: any longer window is a mistake (and would overflow the arithmetic on instants).
const MAX_DURATION_SECS: u64 = 3650 * 86_400;

/// `90s`, `15m`, `12h`, `7d`.
fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let bad = || {
        ConfigError::invalid(
            key,
            format!("{text:?} is not a duration such as 90s, 15m, 12h or 7d"),
        )
    };
    let text = text.trim();
    let unit_at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(unit_at);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit_secs) {
        Some(0) => Err(bad()),
        Some(secs) if secs <= MAX_DURATION_SECS => Ok(Duration::from_secs(secs)),
        _ => Err(ConfigError::invalid(
            key,
            format!("{text:?} is longer than 3650d; to re-read more, use `callsync backfill`"),
        )),
    }
}

fn secs(
    key: &str,
    value: Option<i64>,
    default: i64,
    allowed: RangeInclusive<i64>,
) -> Result<Duration, ConfigError> {
    bounded(key, value, default, allowed).map(Duration::from_secs)
}

/// `value` (or `default`) checked against `allowed`, in the type the typed config holds.
fn bounded<T: TryFrom<i64>>(
    key: &str,
    value: Option<i64>,
    default: i64,
    allowed: RangeInclusive<i64>,
) -> Result<T, ConfigError> {
    let value = value.unwrap_or(default);
    let outside = || {
        ConfigError::invalid(
            key,
            format!("{value} is outside {}..={}", allowed.start(), allowed.end()),
        )
    };
    if !allowed.contains(&value) {
        return Err(outside());
    }
    // Every `allowed` fits its `T`; this only keeps a wrong range from panicking.
    T::try_from(value).map_err(|_| outside())
}

/// A secret given inline or as `<key>_file` (read when a command needs it); never both.
/// `None` when neither is set.
fn secret(
    key: &str,
    inline: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<SecretSource>, ConfigError> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            key,
            format!("set either {key} or {key}_file, not both"),
        )),
        (Some(value), None) if value.trim().is_empty() => {
            Err(ConfigError::invalid(key, "is empty"))
        }
        (Some(value), None) if is_placeholder(&value) => Err(ConfigError::invalid(
            key,
            format!(
                "is a placeholder, not a secret: set the real one, or delete {key} to use {key}_file or the systemd credential"
            ),
        )),
        (Some(value), None) => Ok(Some(Secret::new(value.trim().to_owned()).into())),
        (None, Some(path)) => Ok(Some(SecretSource::File {
            key: format!("{key}_file"),
            path,
        })),
        (None, None) => Ok(None),
    }
}

/// `$CREDENTIALS_DIRECTORY/<name>` when systemd passed that credential.
fn credential(env: &Env, name: &str, key: &str) -> Option<SecretSource> {
    let path = env.credentials_dir.as_ref()?.join(name);
    path.is_file().then(|| SecretSource::File {
        key: key.to_owned(),
        path,
    })
}

mod strict;
#[cfg(test)]
mod tests;
