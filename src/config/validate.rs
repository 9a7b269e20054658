//! The raw mirror converted into the typed [`Config`], one function per section, each
//! check naming its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

use super::env::Env;
use super::error::ConfigError;
use super::error::ConfigErrorKind as Kind;
use super::log_filter::LogFilter;
use super::raw::{
    RawApi, RawBackup, RawConfig, RawFilter, RawLog, RawOAuth, RawSchedule, RawSync, RawWarehouse,
    StringList,
};
use super::secret::{SecretSource, credential, secret};
use super::types::{
    ApiConfig, AuthConfig, BackupConfig, Config, DEFAULT_CONCURRENCY, DEFAULT_SCHEMA,
    DestinationConfig, DetailsMode, LogConfig, LogFormat, MAX_CONCURRENCY, MetricsConfig,
    OAuthConfig, PostgresConfig, RetryConfig, SyncConfig, WarehouseConfig,
};
use super::values::{bounded, cron, duration, secs, url};

use crate::service::{ListFilter, MAX_PAGE_SIZE};

pub(super) fn convert(raw: RawConfig, env: &Env) -> Result<Config, ConfigError> {
    Ok(Config {
        api: api(raw.api, env)?,
        warehouse: WarehouseConfig {
            destination: destination(&raw.warehouse, env)?,
            busy_timeout: secs(
                "warehouse.busy_timeout_secs",
                raw.warehouse.busy_timeout_secs,
                30,
                1..=3600,
            )?,
            keep_runs: keep_runs(raw.warehouse.keep_runs.as_deref().unwrap_or("90d"))?,
            timezone: timezone(raw.warehouse.timezone.as_deref().unwrap_or("UTC"))?,
        },
        sync: sync(raw.sync)?,
        log: log(raw.log)?,
        metrics: MetricsConfig {
            listen: raw
                .metrics
                .listen
                .map(|text| {
                    text.parse::<SocketAddr>().map_err(|_| {
                        ConfigError::new(
                            Kind::NotASocketAddress,
                            "metrics.listen",
                            format!("{text:?} is not a socket address such as \"127.0.0.1:29610\""),
                        )
                    })
                })
                .transpose()?,
        },
        backup: backup(raw.backup)?,
        source: None,
    })
}

/// `[backup]`: off unless `cron` is set, which then needs `dir`; `keep` 7 by default.
fn backup(raw: RawBackup) -> Result<Option<BackupConfig>, ConfigError> {
    let keep = bounded("backup.keep", raw.keep, 7, 1..=10_000)?;
    match (raw.cron, raw.dir) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::new(
            Kind::Missing,
            "backup.cron",
            "is required with backup.dir (when to back up, e.g. \"0 15 2 * * *\" for 02:15 UTC daily)",
        )),
        (Some(_), None) => Err(ConfigError::new(
            Kind::Missing,
            "backup.dir",
            "is required with backup.cron (the directory the backups go into)",
        )),
        (Some(_), Some(dir)) if dir.as_os_str().is_empty() => Err(ConfigError::new(
            Kind::Empty,
            "backup.dir",
            "is empty; name the directory the backups go into",
        )),
        (Some(expr), Some(dir)) => Ok(Some(BackupConfig {
            cron: cron("backup.cron", expr)?,
            dir,
            keep,
        })),
    }
}

/// `warehouse.url` when set (PostgreSQL), else `warehouse.path` (SQLite).
fn destination(raw: &RawWarehouse, env: &Env) -> Result<DestinationConfig, ConfigError> {
    Ok(match postgres(raw, env)? {
        Some(postgres) => DestinationConfig::Postgres(postgres),
        None => DestinationConfig::Sqlite {
            path: warehouse_path(raw.path.clone())?,
        },
    })
}

/// `warehouse.url` (PostgreSQL), its password's source (`warehouse.password_file`, else
/// the systemd credential `warehouse_password`, else none: `$PGPASSWORD`, libpq's password
/// file, or a server that asks for none) and its schema (`warehouse.schema`, `public` by
/// default). `url` and `path` together are refused, naming both; so are the password file and
/// the schema without `url`.
fn postgres(raw: &RawWarehouse, env: &Env) -> Result<Option<PostgresConfig>, ConfigError> {
    let Some(url) = &raw.url else {
        for (set, key, what) in [
            (
                raw.password_file.is_some(),
                "warehouse.password_file",
                "the password",
            ),
            (raw.schema.is_some(), "warehouse.schema", "the schema"),
        ] {
            if set {
                return Err(ConfigError::new(
                    Kind::Conflict,
                    key,
                    format!(
                        "is {what} of a PostgreSQL warehouse: set warehouse.url too, or remove it"
                    ),
                ));
            }
        }
        return Ok(None);
    };
    if raw.path.is_some() {
        return Err(ConfigError::new(
            Kind::Conflict,
            "warehouse",
            "set either warehouse.path (an SQLite file) or warehouse.url (PostgreSQL), not both",
        ));
    }
    if url.trim().is_empty() {
        return Err(ConfigError::new(
            Kind::Empty,
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
        schema: schema(raw.schema.as_deref().unwrap_or(DEFAULT_SCHEMA))?,
    }))
}

/// The longest name PostgreSQL keeps whole (`NAMEDATALEN` - 1); a longer one it cuts short.
const MAX_SCHEMA_BYTES: usize = 63;

/// `warehouse.schema`: a plain identifier, lower case (an unquoted name PostgreSQL folds to
/// lower case, so `Sales` in a BI tool and in callsync would be two schemas), at most 63
/// bytes, and not `pg_…`, which PostgreSQL keeps for itself.
fn schema(name: &str) -> Result<String, ConfigError> {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if name.is_empty() {
        return Err(ConfigError::new(
            Kind::Empty,
            "warehouse.schema",
            "is empty; name the schema callsync's tables go into, or remove it for public",
        ));
    }
    let problem = if !plain || name.len() > MAX_SCHEMA_BYTES {
        "must be a plain identifier: a lower-case letter or _ first, then lower-case letters, digits or _, at most 63 bytes (e.g. \"callsync\" or \"call_results\")"
    } else if name.starts_with("pg_") {
        "may not begin with pg_, which PostgreSQL reserves for its own schemas; choose another name"
    } else {
        return Ok(name.to_owned());
    };
    Err(ConfigError::new(
        Kind::BadName,
        "warehouse.schema",
        format!(
            "{} {problem}",
            crate::untrusted::untrusted_text(&format!("{name:?}"), 80)
        ),
    ))
}

/// `warehouse.path`, `callsync.db` when unset. An empty one is an error: SQLite would open a
/// private temporary database and every pass would vanish with the process.
pub(super) fn warehouse_path(path: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    match path {
        None => Ok("callsync.db".into()),
        Some(path) if path.as_os_str().to_string_lossy().trim().is_empty() => {
            Err(ConfigError::new(
                Kind::Empty,
                "warehouse.path",
                "is empty; name the SQLite file, e.g. \"/var/lib/callsync/callsync.db\"",
            ))
        }
        Some(path) => Ok(path),
    }
}

/// `api.base_url`: required, a URL, and the service's root (callsync appends `/api/v1`).
fn base_url(text: Option<&str>) -> Result<url::Url, ConfigError> {
    let base_url = url(
        "api.base_url",
        text.ok_or_else(|| {
            ConfigError::new(
                Kind::Missing,
                "api.base_url",
                "is required (the service's address, e.g. \"https://calls.example.com\")",
            )
        })?,
    )?;
    if base_url.path().trim_end_matches('/').ends_with("/api/v1") {
        return Err(ConfigError::new(
            Kind::BadUrl,
            "api.base_url",
            format!("{base_url} must not end with /api/v1 (callsync appends it)"),
        ));
    }
    Ok(base_url)
}

/// How the client authenticates: a static token or `[api.oauth]`, never both; else the
/// credential `access_token` in the credentials directory, if any.
fn api_auth(
    oauth: Option<RawOAuth>,
    static_token: Option<SecretSource>,
    env: &Env,
) -> Result<Option<AuthConfig<SecretSource>>, ConfigError> {
    Ok(match (oauth, static_token) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                Kind::Conflict,
                "api",
                "configure either api.access_token (or access_token_file) or [api.oauth], not both",
            ));
        }
        (Some(oauth), None) => Some(AuthConfig::OAuth(oauth_config(oauth, env)?)),
        (None, Some(token)) => Some(AuthConfig::Static(token)),
        (None, None) => credential(env, "access_token", "api.access_token").map(AuthConfig::Static),
    })
}

pub(super) fn api(raw: RawApi, env: &Env) -> Result<ApiConfig, ConfigError> {
    let base_url = base_url(raw.base_url.as_deref())?;
    let static_token = secret("api.access_token", raw.access_token, raw.access_token_file)?;
    let auth = api_auth(raw.oauth, static_token, env)?;
    let retry = raw.retry;
    let defaults = RetryConfig::default();
    let multiplier = retry.multiplier.unwrap_or(defaults.multiplier);
    if !(1.0..=10.0).contains(&multiplier) {
        return Err(ConfigError::new(
            Kind::OutOfRange,
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
        detail_concurrency: bounded(
            "api.detail_concurrency",
            raw.detail_concurrency,
            64,
            1..=1024,
        )?,
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

pub(super) fn oauth_config(
    raw: RawOAuth,
    env: &Env,
) -> Result<OAuthConfig<SecretSource>, ConfigError> {
    let token_url = url(
        "api.oauth.token_url",
        raw.token_url
            .as_deref()
            .ok_or_else(|| ConfigError::new(Kind::Missing, "api.oauth.token_url", "is required"))?,
    )?;
    let client_id = raw
        .client_id
        .filter(|id| !id.trim().is_empty())
        .ok_or_else(|| ConfigError::new(Kind::Missing, "api.oauth.client_id", "is required"))?;
    let client_secret = match secret(
        "api.oauth.client_secret",
        raw.client_secret,
        raw.client_secret_file,
    )? {
        Some(secret) => secret,
        None => credential(env, "client_secret", "api.oauth.client_secret").ok_or_else(|| {
            ConfigError::new(
                Kind::Missing,
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

/// `warehouse.timezone`: an IANA name, spelled as the database does (`Europe/Berlin`).
fn timezone(text: &str) -> Result<chrono_tz::Tz, ConfigError> {
    text.trim().parse().map_err(|_| {
        ConfigError::new(
            Kind::NotATimeZone,
            "warehouse.timezone",
            format!(
                "{text:?} is not an IANA time zone name (such as \"Europe/Berlin\" or \"UTC\"; `timedatectl list-timezones` lists them, spelled with their capitals)"
            ),
        )
    })
}

/// `warehouse.keep_runs`: a duration, or `forever` (also `0`) for no limit.
pub(super) fn keep_runs(text: &str) -> Result<Option<Duration>, ConfigError> {
    const KEY: &str = "warehouse.keep_runs";
    match text.trim() {
        "forever" | "0" => Ok(None),
        t => duration(KEY, t).map(Some).map_err(|_| {
            ConfigError::new(
                Kind::NotADuration,
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
/// `sync.schedules` and `[[sync.schedule]]`: every schedule once, the names, the campaigns.
type Schedules = (Vec<Uuid>, BTreeMap<Uuid, String>, BTreeMap<Uuid, Uuid>);

pub(super) fn schedules(
    listed: Option<StringList>,
    named: Option<Vec<RawSchedule>>,
) -> Result<Schedules, ConfigError> {
    let mut schedules: Vec<Uuid> = Vec::new();
    for text in listed.map(StringList::into_vec).unwrap_or_default() {
        let uid = schedule_uid("sync.schedules", &text)?;
        if schedules.contains(&uid) {
            return Err(ConfigError::new(
                Kind::Duplicate,
                "sync.schedules",
                format!("{uid} is listed twice"),
            ));
        }
        schedules.push(uid);
    }
    let mut names = BTreeMap::new();
    let mut campaigns = BTreeMap::new();
    for (i, entry) in named.unwrap_or_default().into_iter().enumerate() {
        let key = format!("sync.schedule[{i}]");
        let text = entry.uid.ok_or_else(|| {
            ConfigError::new(
                Kind::Missing,
                &key,
                "has no uid; give the schedule's uid and its name",
            )
        })?;
        let uid = schedule_uid(&format!("{key}.uid"), &text)?;
        let name = entry
            .name
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ConfigError::new(
                    Kind::Missing,
                    format!("{key}.name"),
                    format!("{uid} has no name; give it one, or list the uid in sync.schedules"),
                )
            })?;
        if names.contains_key(&uid) {
            return Err(ConfigError::new(
                Kind::Duplicate,
                format!("{key}.uid"),
                format!("{uid} is listed twice in [[sync.schedule]]; list each schedule once"),
            ));
        }
        if schedules.contains(&uid) {
            return Err(ConfigError::new(
                Kind::Duplicate,
                format!("{key}.uid"),
                format!(
                    "{uid} is also in sync.schedules; list each schedule once (here, to name it)"
                ),
            ));
        }
        if let Some(campaign) = entry.campaign {
            let key = format!("{key}.campaign");
            let campaign = Uuid::parse_str(campaign.trim()).map_err(|_| {
                ConfigError::new(
                    Kind::NotAUuid,
                    &key,
                    format!("{campaign:?} is not a campaign uid (a UUID)"),
                )
            })?;
            campaigns.insert(uid, campaign);
        }
        schedules.push(uid);
        names.insert(uid, name);
    }
    Ok((schedules, names, campaigns))
}

pub(super) fn schedule_uid(key: &str, text: &str) -> Result<Uuid, ConfigError> {
    Uuid::parse_str(text.trim()).map_err(|_| {
        ConfigError::new(
            Kind::NotAUuid,
            key,
            format!("{text:?} is not a schedule uid (a UUID)"),
        )
    })
}

pub(super) fn sync(raw: RawSync) -> Result<SyncConfig, ConfigError> {
    let (schedules, schedule_names, schedule_campaigns) = schedules(raw.schedules, raw.schedule)?;
    let details = match raw.details.as_deref().unwrap_or("auto") {
        "auto" => DetailsMode::Auto,
        "always" => DetailsMode::Always,
        "never" => DetailsMode::Never,
        other => {
            return Err(ConfigError::new(
                Kind::NotOneOf,
                "sync.details",
                format!("{other:?} is not one of \"auto\", \"always\", \"never\""),
            ));
        }
    };
    Ok(SyncConfig {
        schedules,
        schedule_names,
        schedule_campaigns,
        lookback: secs("sync.lookback_secs", raw.lookback_secs, 5, 0..=86_400)?,
        cron: cron(
            "sync.cron",
            raw.cron.unwrap_or_else(|| "0 */5 * * * *".into()),
        )?,
        page_size: bounded(
            "sync.page_size",
            raw.page_size,
            i64::from(MAX_PAGE_SIZE),
            1..=i64::from(MAX_PAGE_SIZE),
        )?,
        details,
        concurrency: bounded(
            "sync.concurrency",
            raw.concurrency,
            DEFAULT_CONCURRENCY as i64,
            1..=MAX_CONCURRENCY as i64,
        )?,
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
        // 300 s, as Kerberos allows between clocks that are meant to agree: NTP keeps them
        // within milliseconds, a `Date` has whole seconds and a response takes a few; a clock
        // minutes off is broken, not drifting. 5 s at least, for the `Date`'s truncation and
        // the response's way.
        max_clock_skew: secs(
            "sync.max_clock_skew_secs",
            raw.max_clock_skew_secs,
            300,
            5..=86_400,
        )?,
        // An hour past the tick due to catch up: a dozen missed ticks of the default cron,
        // while a burst that one or two passes absorb stays quiet.
        max_lag: secs("sync.max_lag_secs", raw.max_lag_secs, 3600, 60..=31_536_000)?,
        instance: raw.instance.map(instance).transpose()?,
    })
}

/// `sync.instance`: a name shown in logs, `status` and metrics labels — printable, short.
fn instance(name: String) -> Result<String, ConfigError> {
    let name = name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(ConfigError::new(
            Kind::BadName,
            "sync.instance",
            "must be 1 to 64 printable characters".to_owned(),
        ));
    }
    Ok(name)
}

pub(super) fn filter(raw: RawFilter) -> ListFilter {
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

pub(super) fn log(raw: RawLog) -> Result<LogConfig, ConfigError> {
    let text = raw.level.unwrap_or_else(|| "info".into());
    let level = LogFilter::parse(&text).map_err(|problem| {
        ConfigError::new(
            Kind::BadLogFilter,
            "log.level",
            format!("{text:?} {problem}"),
        )
    })?;
    let format = match raw.format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(ConfigError::new(
                Kind::NotOneOf,
                "log.format",
                format!("{other:?} is not one of \"text\", \"json\""),
            ));
        }
    };
    Ok(LogConfig { level, format })
}
