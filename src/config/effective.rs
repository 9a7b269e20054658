//! The effective configuration for `callsync config`: every key with the value callsync runs
//! with and where that value came from — the file (which one), a `CALLSYNC_*` variable (which
//! one), a systemd credential, or the default. Secrets show their source, never their value;
//! URLs show no user info (`warehouse.url` its user name, the PostgreSQL role, but no password).
//!
//! It reads a validated [`Config`] (so what it shows is what the commands use, defaults
//! included) and finds each key's source the way `load` resolves it: a variable wins over the
//! file, the file over the default. Its text and JSON are written in `cli/config.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::env::{Env, variable_for};
use super::error::ConfigErrorKind;
use super::url_credentials::shown;
use super::values::CronSchedule;
use super::{
    AuthConfig, Config, ConfigError, DestinationConfig, DetailsMode, LogFormat, SecretSource,
};

/// Where a key's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The configuration file, this one.
    File(PathBuf),
    /// This `CALLSYNC_*` variable.
    Environment(String),
    /// A systemd credential, this file in `$CREDENTIALS_DIRECTORY`.
    Credential(PathBuf),
    /// Not set anywhere: callsync's default.
    Default,
}

impl Source {
    /// `file`, `environment`, `credential` or `default`: the JSON output's `source`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::File(_) => "file",
            Source::Environment(_) => "environment",
            Source::Credential(_) => "credential",
            Source::Default => "default",
        }
    }

    /// The file or variable it names, if any: the JSON output's `origin`.
    pub fn origin(&self) -> Option<String> {
        match self {
            Source::File(path) | Source::Credential(path) => Some(path.display().to_string()),
            Source::Environment(var) => Some(var.clone()),
            Source::Default => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Environment(var) => write!(f, "environment {var}"),
            Source::Credential(path) => write!(f, "systemd credential {}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// One key's effective value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key as a file writes it under its table (`sync.filter.status`).
    pub key: String,
    /// The value as JSON; `Null` when the key is not set and has no default. A secret's is
    /// always `Null`: see `redacted`.
    pub value: Value,
    /// A secret set here (inline, by a variable, by a credential): its value is never shown.
    pub redacted: bool,
    pub source: Source,
}

/// The configuration as `callsync config` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The file read, if any (a configuration of `CALLSYNC_*` variables alone has none).
    pub file: Option<PathBuf>,
    pub entries: Vec<Entry>,
}

impl Effective {
    /// The entry of `key`, if shown.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

/// `config` (loaded with `env`) with each key's source. The file is read again to see which
/// keys it sets; it was read a moment ago by the loader, so failing now is an I/O error.
pub fn effective(config: &Config, env: &Env) -> Result<Effective, ConfigError> {
    let in_file = match &config.source {
        Some(path) => keys_in_file(path)?,
        None => BTreeSet::new(),
    };
    let mut entries = Entries {
        file: config.source.as_deref(),
        in_file,
        env,
        list: Vec::new(),
    };
    api(&mut entries, config);
    warehouse(&mut entries, config);
    sync(&mut entries, config);
    entries.add("log.level", json!(config.log.level.as_str()));
    entries.add(
        "log.format",
        json!(match config.log.format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }),
    );
    entries.add(
        "metrics.listen",
        json!(config.metrics.listen.map(|a| a.to_string())),
    );
    match &config.backup {
        Some(backup) => {
            entries.add("backup.cron", json!(backup.cron.as_str()));
            entries.add("backup.dir", json!(backup.dir.display().to_string()));
            entries.add("backup.keep", json!(backup.keep));
        }
        None => entries.add("backup.cron", Value::Null),
    }
    Ok(Effective {
        file: config.source.clone(),
        entries: entries.list,
    })
}

/// What is being built, and what tells each key's source.
struct Entries<'a> {
    file: Option<&'a Path>,
    /// Every key the file sets, dotted (`api.retry.max_attempts`, `sync.schedule`).
    in_file: BTreeSet<String>,
    env: &'a Env,
    list: Vec<Entry>,
}

impl Entries<'_> {
    /// Where `key` was set: a variable wins over the file (as `load` merges them).
    fn source_of(&self, key: &str) -> Source {
        if let Some(var) = variable_for(self.env, key) {
            return Source::Environment(var.to_owned());
        }
        match self.file {
            Some(file) if self.in_file.contains(key) => Source::File(file.to_owned()),
            _ => Source::Default,
        }
    }

    fn add(&mut self, key: &str, value: Value) {
        let source = self.source_of(key);
        self.list.push(Entry {
            key: key.to_owned(),
            value,
            redacted: false,
            source,
        });
    }

    /// A secret key (`api.access_token`) and its `_file` key: the file's path is shown, an
    /// inline or credential value is not. `None`: neither is set.
    fn secret(&mut self, key: &str, secret: Option<&SecretSource>) {
        let file_key = format!("{key}_file");
        match secret {
            Some(SecretSource::Value(_)) => {
                let source = self.source_of(key);
                self.list.push(Entry {
                    key: key.to_owned(),
                    value: Value::Null,
                    redacted: true,
                    source,
                });
            }
            Some(SecretSource::File { path, .. }) => match self.source_of(&file_key) {
                // Set nowhere, so systemd's credential (`secret::credential`).
                Source::Default => self.list.push(Entry {
                    key: key.to_owned(),
                    value: Value::Null,
                    redacted: true,
                    source: Source::Credential(path.clone()),
                }),
                _ => self.add(&file_key, json!(path.display().to_string())),
            },
            None => self.add(key, Value::Null),
        }
    }
}

fn api(entries: &mut Entries<'_>, config: &Config) {
    let api = &config.api;
    // Refused with user info, so none to hide; hidden all the same should that ever change.
    entries.add("api.base_url", json!(shown(&api.base_url)));
    match &api.auth {
        Some(AuthConfig::OAuth(oauth)) => {
            entries.add("api.oauth.token_url", json!(shown(&oauth.token_url)));
            entries.add("api.oauth.client_id", json!(oauth.client_id));
            entries.secret("api.oauth.client_secret", Some(&oauth.client_secret));
            entries.add("api.oauth.scope", json!(oauth.scope));
        }
        Some(AuthConfig::Static(token)) => entries.secret("api.access_token", Some(token)),
        None => entries.secret("api.access_token", None),
    }
    entries.add("api.request_timeout_secs", secs(api.request_timeout));
    entries.add("api.connect_timeout_secs", secs(api.connect_timeout));
    entries.add(
        "api.requests_per_second",
        json!(api.requests_per_second.unwrap_or(0)),
    );
    entries.add("api.detail_concurrency", json!(api.detail_concurrency));
    entries.add(
        "api.max_response_mib",
        json!(api.max_response_bytes / (1024 * 1024)),
    );
    entries.add("api.create_settle_secs", secs(api.create_settle));
    let retry = &api.retry;
    entries.add("api.retry.max_attempts", json!(retry.max_attempts));
    entries.add("api.retry.max_elapsed_secs", secs(retry.max_elapsed));
    entries.add(
        "api.retry.initial_interval_ms",
        json!(retry.initial_interval.as_millis() as u64),
    );
    entries.add("api.retry.max_interval_secs", secs(retry.max_interval));
    entries.add("api.retry.multiplier", json!(retry.multiplier));
}

fn warehouse(entries: &mut Entries<'_>, config: &Config) {
    let warehouse = &config.warehouse;
    match &warehouse.destination {
        DestinationConfig::Postgres(postgres) => {
            // A password in it is refused where it is used; here it is hidden whatever else
            // is wrong with the URL.
            entries.add(
                "warehouse.url",
                json!(super::pg_url::redacted(&postgres.url)),
            );
            entries.add("warehouse.schema", json!(postgres.schema));
            // The password itself is never configured inline: `warehouse.password_file`,
            // the credential `warehouse_password`, or libpq's password file.
            match &postgres.password {
                Some(SecretSource::File { path, .. })
                    if entries.source_of("warehouse.password_file") == Source::Default =>
                {
                    entries.list.push(Entry {
                        key: "warehouse.password".to_owned(),
                        value: Value::Null,
                        redacted: true,
                        source: Source::Credential(path.clone()),
                    });
                }
                Some(SecretSource::File { path, .. }) => {
                    entries.add("warehouse.password_file", json!(path.display().to_string()));
                }
                Some(SecretSource::Value(_)) | None => {
                    entries.add("warehouse.password_file", Value::Null);
                }
            }
        }
        DestinationConfig::Sqlite { path } => {
            entries.add("warehouse.path", json!(path.display().to_string()))
        }
    }
    entries.add("warehouse.busy_timeout_secs", secs(warehouse.busy_timeout));
    entries.add(
        "warehouse.keep_runs",
        json!(warehouse.keep_runs.map_or("forever".to_owned(), duration)),
    );
    entries.add("warehouse.timezone", json!(warehouse.timezone.name()));
}

fn sync(entries: &mut Entries<'_>, config: &Config) {
    let sync = &config.sync;
    // Each schedule once: a named one under `sync.schedule`, the others here.
    let unnamed: Vec<String> = sync
        .schedules
        .iter()
        .filter(|uid| !sync.schedule_names.contains_key(uid))
        .map(ToString::to_string)
        .collect();
    entries.add("sync.schedules", json!(unnamed));
    let named: Vec<Value> = sync
        .schedules
        .iter()
        .filter_map(|uid| {
            let name = sync.schedule_names.get(uid)?;
            Some(match sync.schedule_campaigns.get(uid) {
                Some(campaign) => {
                    json!({ "uid": uid.to_string(), "name": name, "campaign": campaign.to_string() })
                }
                None => json!({ "uid": uid.to_string(), "name": name }),
            })
        })
        .collect();
    entries.add("sync.schedule", Value::Array(named));
    entries.add("sync.lookback_secs", secs(sync.lookback));
    entries.add("sync.cron", json!(sync.cron.as_str()));
    entries.add("sync.page_size", json!(sync.page_size));
    entries.add(
        "sync.details",
        json!(match sync.details {
            DetailsMode::Auto => "auto",
            DetailsMode::Always => "always",
            DetailsMode::Never => "never",
        }),
    );
    entries.add("sync.concurrency", json!(sync.concurrency));
    entries.add(
        "sync.reconcile_cron",
        json!(sync.reconcile_cron.as_ref().map(CronSchedule::as_str)),
    );
    entries.add(
        "sync.reconcile_window",
        json!(duration(sync.reconcile_window)),
    );
    entries.add("sync.shutdown_timeout_secs", secs(sync.shutdown_timeout));
    entries.add("sync.behind_after", json!(duration(sync.behind_after)));
    entries.add("sync.max_clock_skew_secs", secs(sync.max_clock_skew));
    entries.add("sync.max_lag_secs", secs(sync.max_lag));
    entries.add("sync.instance", json!(sync.instance));
    let filter = &sync.filter;
    let lists = [
        ("status", &filter.status),
        ("progress", &filter.progress),
        ("source", &filter.source),
        ("attempt_status", &filter.attempt_status),
    ];
    for (name, list) in lists {
        entries.add(&format!("sync.filter.{name}"), json!(list));
    }
    entries.add("sync.filter.is_test_call", json!(filter.is_test_call));
    let texts = [
        ("outcome", &filter.outcome),
        ("external_id", &filter.external_id),
        ("full_name", &filter.full_name),
        ("first_name", &filter.first_name),
        ("last_name", &filter.last_name),
        ("phonetic_full_name", &filter.phonetic_full_name),
        ("phonetic_first_name", &filter.phonetic_first_name),
        ("phonetic_last_name", &filter.phonetic_last_name),
        ("email", &filter.email),
    ];
    for (name, text) in texts {
        entries.add(&format!("sync.filter.{name}"), json!(text));
    }
}

fn secs(d: Duration) -> Value {
    json!(d.as_secs())
}

/// A duration in the largest unit `values::duration` reads that divides it (`90d`, `2m`).
fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    let unit = [(86_400, "d"), (3600, "h"), (60, "m")]
        .into_iter()
        .find(|(unit, _)| secs > 0 && secs.is_multiple_of(*unit));
    match unit {
        Some((size, name)) => format!("{}{name}", secs / size),
        None => format!("{secs}s"),
    }
}

/// Every dotted key `path` sets: tables are walked, arrays and values are keys
/// (`sync.schedule` for `[[sync.schedule]]`).
fn keys_in_file(path: &Path) -> Result<BTreeSet<String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.to_owned(),
        cause,
    })?;
    let table = toml::de::DeTable::parse(&text).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        key: None,
        kind: ConfigErrorKind::Syntax,
        problem: format!("changed while it was read: {}", e.message()),
    })?;
    let mut keys = BTreeSet::new();
    collect_keys(table.get_ref(), "", &mut keys);
    Ok(keys)
}

fn collect_keys(table: &toml::de::DeTable<'_>, prefix: &str, keys: &mut BTreeSet<String>) {
    for (key, value) in table {
        let key = match prefix {
            "" => key.get_ref().to_string(),
            _ => format!("{prefix}.{}", key.get_ref()),
        };
        if let toml::de::DeValue::Table(inner) = value.get_ref() {
            collect_keys(inner, &key, keys);
        }
        keys.insert(key);
    }
}

/// The effective configuration of a file holding `text`, loaded with `env` (for tests here
/// and in `cli/config.rs`); the temp dir holds the file.
#[cfg(test)]
pub(crate) fn of_text(text: &str, env: &Env) -> (Effective, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("callsync.toml");
    std::fs::write(&path, text).expect("the config file written");
    let config = super::load_from(Some(&path), env).expect("the config loads");
    (
        effective(&config, env).expect("its effective form"),
        path,
        dir,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[api]
base_url = "http://127.0.0.1:9"
access_token = "tok-in-the-file-1"
[api.retry]
max_attempts = 3
[sync]
schedules = ["00000000-0000-4000-8000-000000000001"]
cron = "0 */2 * * * *"
[[sync.schedule]]
uid = "00000000-0000-4000-8000-000000000002"
name = "Reminders"
[sync.filter]
status = ["completed"]
"#;

    fn source_and_value(effective: &Effective, key: &str) -> (Source, Value) {
        let entry = effective.get(key).unwrap_or_else(|| panic!("{key} shown"));
        (entry.source.clone(), entry.value.clone())
    }

    #[test]
    fn file_environment_and_default_each_named_for_nested_keys_and_lists() {
        let env = Env::with_vars(&[
            ("CALLSYNC_SYNC__PAGE_SIZE", "50"),
            ("CALLSYNC_API__RETRY__MULTIPLIER", "3"),
            ("CALLSYNC_SYNC__FILTER__PROGRESS", "done,retrying"),
        ]);
        let (shown, path, _dir) = of_text(FILE, &env);
        let file = Source::File(path.clone());
        let var = |v: &str| Source::Environment(v.to_owned());
        assert_eq!(shown.file, Some(path));
        assert_eq!(
            source_and_value(&shown, "api.retry.max_attempts"),
            (file.clone(), json!(3))
        );
        assert_eq!(
            source_and_value(&shown, "api.retry.multiplier"),
            (var("CALLSYNC_API__RETRY__MULTIPLIER"), json!(3.0))
        );
        assert_eq!(
            source_and_value(&shown, "api.retry.max_interval_secs"),
            (Source::Default, json!(30))
        );
        assert_eq!(
            source_and_value(&shown, "sync.page_size"),
            (var("CALLSYNC_SYNC__PAGE_SIZE"), json!(50))
        );
        assert_eq!(
            source_and_value(&shown, "sync.schedules"),
            (
                file.clone(),
                json!(["00000000-0000-4000-8000-000000000001"])
            )
        );
        assert_eq!(
            source_and_value(&shown, "sync.schedule"),
            (
                file.clone(),
                json!([{"uid": "00000000-0000-4000-8000-000000000002", "name": "Reminders"}])
            )
        );
        assert_eq!(
            source_and_value(&shown, "sync.filter.status"),
            (file.clone(), json!(["completed"]))
        );
        assert_eq!(
            source_and_value(&shown, "sync.filter.progress"),
            (
                var("CALLSYNC_SYNC__FILTER__PROGRESS"),
                json!(["done", "retrying"])
            )
        );
        assert_eq!(
            source_and_value(&shown, "sync.reconcile_window"),
            (Source::Default, json!("7d"))
        );
        assert_eq!(
            source_and_value(&shown, "sync.reconcile_cron"),
            (Source::Default, Value::Null)
        );
        assert_eq!(
            source_and_value(&shown, "warehouse.keep_runs"),
            (Source::Default, json!("90d"))
        );
    }

    #[test]
    fn a_variable_wins_over_the_file_and_a_list_from_a_variable_is_split() {
        let env = Env::with_vars(&[(
            "CALLSYNC_SYNC__SCHEDULES",
            "00000000-0000-4000-8000-00000000000a, 00000000-0000-4000-8000-00000000000b",
        )]);
        let (shown, _path, _dir) = of_text(FILE, &env);
        assert_eq!(
            source_and_value(&shown, "sync.schedules"),
            (
                Source::Environment("CALLSYNC_SYNC__SCHEDULES".into()),
                json!([
                    "00000000-0000-4000-8000-00000000000a",
                    "00000000-0000-4000-8000-00000000000b"
                ])
            )
        );
    }

    #[test]
    fn secrets_show_where_they_come_from_never_their_value() {
        let (shown, path, _dir) = of_text(FILE, &Env::default());
        let token = shown.get("api.access_token").unwrap();
        assert_eq!(
            (token.redacted, &token.value, &token.source),
            (true, &Value::Null, &Source::File(path))
        );
        let env = Env::with_vars(&[("CALLSYNC_API__ACCESS_TOKEN", "tok-in-a-variable-2")]);
        let (shown, _path, _dir) = of_text(FILE, &env);
        let token = shown.get("api.access_token").unwrap();
        assert_eq!(
            token.source,
            Source::Environment("CALLSYNC_API__ACCESS_TOKEN".into())
        );
        let everything = format!("{shown:?}");
        assert!(!everything.contains("tok-in"), "{everything}");

        // From a file: its path, which is no secret; from a systemd credential: redacted.
        let secrets = tempfile::tempdir().unwrap();
        let secret_file = secrets.path().join("client_secret");
        std::fs::write(&secret_file, "cs-in-a-file-3\n").unwrap();
        let oauth = format!(
            "[api]\nbase_url = \"http://127.0.0.1:9\"\n[api.oauth]\ntoken_url = \"http://127.0.0.1:9/token\"\nclient_id = \"callsync\"\nclient_secret_file = {:?}\n",
            secret_file.display().to_string()
        );
        let (shown, path, _dir) = of_text(&oauth, &Env::default());
        assert_eq!(
            source_and_value(&shown, "api.oauth.client_secret_file"),
            (Source::File(path), json!(secret_file.display().to_string()))
        );
        let credentials = tempfile::tempdir().unwrap();
        std::fs::write(credentials.path().join("access_token"), "tok-credential-4").unwrap();
        let env = Env {
            credentials_dir: Some(credentials.path().to_owned()),
            ..Env::default()
        };
        let (shown, _path, _dir) = of_text("[api]\nbase_url = \"http://127.0.0.1:9\"\n", &env);
        let token = shown.get("api.access_token").unwrap();
        assert_eq!(
            (token.redacted, &token.source),
            (
                true,
                &Source::Credential(credentials.path().join("access_token"))
            )
        );
        assert!(!format!("{shown:?}").contains("tok-credential"));
    }

    #[test]
    fn durations_print_in_the_largest_unit_the_loader_reads() {
        let d = |secs| duration(Duration::from_secs(secs));
        assert_eq!(
            [d(7 * 86_400), d(7200), d(120), d(90), d(1)],
            ["7d", "2h", "2m", "90s", "1s"]
        );
    }
}
