//! The typed configuration every other module receives: [`Config`] and its sections, built
//! once by `validate.rs` from the raw serde mirror.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tracing_subscriber::filter::LevelFilter;
use url::Url;
use uuid::Uuid;

use super::error::{ConfigError, ConfigErrorKind};
use super::log_filter::LogFilter;
use super::secret::{Secret, SecretSource};
use super::values::CronSchedule;
use crate::service::ListFilter;

/// Everything callsync needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub api: ApiConfig,
    pub warehouse: WarehouseConfig,
    pub sync: SyncConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    /// `[backup]`; `None` = the daemon makes no backups.
    pub backup: Option<BackupConfig>,
    /// The file the configuration was read from, if any.
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The service's `{base_url}`; `/api/v1/...` is appended.
    pub base_url: Url,
    /// `None` when none is configured. Secret files are not read yet: only the commands that
    /// talk to the service need them, and they ask [`ApiConfig::credentials`] first.
    pub auth: Option<AuthConfig<SecretSource>>,
    /// Whole-request timeout.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// The ceiling of the adaptive request rate shared by all schedules; `None` = none.
    pub requests_per_second: Option<u32>,
    /// Detail requests of one walk in flight at once (across its pages asked ahead), under
    /// the adaptive limit of requests in flight shared by all schedules.
    pub detail_concurrency: usize,
    /// A response body larger than this fails its request instead of filling memory.
    pub max_response_bytes: u64,
    /// How long a create whose answer was lost (a timeout, a dropped connection, a 5xx) may
    /// take to show in the service; see [`ApiConfig::create_settle_window`].
    pub create_settle: Duration,
    pub retry: RetryConfig,
}

impl ApiConfig {
    /// How long after sending a create whose fate is unknown its result is looked for before
    /// it counts as not done: `create_settle`, and never less than twice the request timeout,
    /// since the service may still be working on a request the client gave up on.
    pub fn create_settle_window(&self) -> Duration {
        self.create_settle.max(self.request_timeout * 2)
    }

    /// The credentials with their secret files read, or the configuration error a command
    /// that talks to the service stops with. `status`, `checkpoint` and `migrate` never call
    /// this: a BI-group user without the daemon's secret can run them.
    pub fn credentials(&self) -> Result<AuthConfig, ConfigError> {
        let auth = self.auth.as_ref().ok_or_else(|| {
            ConfigError::new(
                ConfigErrorKind::Missing,
                "api",
                "no credentials: set api.access_token, api.access_token_file, the systemd credential access_token, or an [api.oauth] table",
            )
        })?;
        Ok(match auth {
            AuthConfig::Static(token) => AuthConfig::Static(token.read()?),
            AuthConfig::OAuth(oauth) => AuthConfig::OAuth(OAuthConfig {
                token_url: oauth.token_url.clone(),
                client_id: oauth.client_id.clone(),
                client_secret: oauth.client_secret.read()?,
                scope: oauth.scope.clone(),
            }),
        })
    }
}

/// How to authenticate; `S` is a loaded [`Secret`], or in the configuration a
/// [`SecretSource`] not read yet.
#[derive(Debug, Clone)]
pub enum AuthConfig<S = Secret> {
    /// A static bearer token.
    Static(S),
    /// OAuth 2.0 client-credentials grant.
    OAuth(OAuthConfig<S>),
}

#[derive(Debug, Clone)]
pub struct OAuthConfig<S = Secret> {
    pub token_url: Url,
    pub client_id: String,
    pub client_secret: S,
    pub scope: Option<String>,
}

/// Loaded credentials as a configuration holds them (tests, benchmarks).
impl From<AuthConfig> for AuthConfig<SecretSource> {
    fn from(auth: AuthConfig) -> Self {
        match auth {
            AuthConfig::Static(token) => AuthConfig::Static(token.into()),
            AuthConfig::OAuth(oauth) => AuthConfig::OAuth(OAuthConfig {
                token_url: oauth.token_url,
                client_id: oauth.client_id,
                client_secret: oauth.client_secret.into(),
                scope: oauth.scope,
            }),
        }
    }
}

/// Request-level retry limits; every limit explicit (see `api::retry`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Give up retrying a request after this long.
    pub max_elapsed: Duration,
    pub initial_interval: Duration,
    pub max_interval: Duration,
    pub multiplier: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 10,
            max_elapsed: Duration::from_secs(120),
            initial_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(30),
            multiplier: 2.0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct WarehouseConfig {
    /// Where the warehouse is: `warehouse.path` or `warehouse.url`.
    pub destination: DestinationConfig,
    /// How long a write waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// The daemon forgets finished `sync_runs` rows older than this (never a schedule's
    /// latest pass, nor its latest successful one); `None` keeps them all.
    pub keep_runs: Option<Duration>,
    /// The zone of the days in views and canned queries (`timezone_offsets`); UTC by default.
    pub timezone: chrono_tz::Tz,
}

/// The configured destination: one variant a back end (`warehouse/open.rs` turns it into
/// one). The TOML keys stay those users write: `warehouse.path`, or `warehouse.url` (with
/// `warehouse.password_file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationConfig {
    /// `warehouse.path`: an SQLite file (`callsync.db` by default).
    Sqlite { path: PathBuf },
    /// `warehouse.url`: a PostgreSQL database.
    Postgres(PostgresConfig),
}

impl DestinationConfig {
    /// The SQLite file, when the warehouse is one (the daemon's metrics read its size; the
    /// demo and the tests name it).
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match self {
            DestinationConfig::Sqlite { path } => Some(path),
            DestinationConfig::Postgres(_) => None,
        }
    }
}

/// A PostgreSQL warehouse as configured: `warehouse.url` as written (a URI or a libpq
/// connection string; one holding a password is refused where it is used, and `Debug` shows
/// it redacted), where the password is, if anywhere (read when a command connects), and the
/// schema its tables live in (`warehouse.schema`).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pub url: String,
    pub password: Option<SecretSource>,
    /// A plain identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes, no `pg_` prefix): it needs
    /// no quoting anywhere it goes, and names the same schema in every tool.
    pub schema: String,
}

/// `warehouse.schema` when unset: PostgreSQL's own default schema.
pub const DEFAULT_SCHEMA: &str = "public";

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &super::pg_url::redacted(&self.url))
            .field("password", &self.password)
            .field("schema", &self.schema)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailsMode {
    /// Fetch a call's detail only when a list item lacks attempt children.
    Auto,
    /// Fetch every call's detail.
    Always,
    /// Never fetch details; attempt children missing from the list are left as they were.
    Never,
}

#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// Every schedule to sync: `sync.schedules`, then `[[sync.schedule]]`, each once.
    pub schedules: Vec<Uuid>,
    /// The names `[[sync.schedule]]` gives, for the warehouse's `schedules` table.
    pub schedule_names: BTreeMap<Uuid, String>,
    /// The campaigns `[[sync.schedule]] campaign` says schedules belong to, for the
    /// warehouse's `schedules.campaign_uid` (the service has no endpoint that says it).
    pub schedule_campaigns: BTreeMap<Uuid, Uuid>,
    /// Each pass starts this far before the checkpoint, to catch late commits.
    pub lookback: Duration,
    /// 6-field cron (seconds first), evaluated in UTC.
    pub cron: CronSchedule,
    /// Rows per list request, 1..=100.
    pub page_size: u32,
    pub details: DetailsMode,
    /// The most requests in flight at once, and passes running at once: the limit that
    /// adapts to the service's latency stays at or below it (`api/limiter/in_flight.rs`).
    pub concurrency: usize,
    pub filter: ListFilter,
    /// 6-field cron for reconciliation passes; `None` = off.
    pub reconcile_cron: Option<CronSchedule>,
    /// Trailing window a reconciliation pass re-reads.
    pub reconcile_window: Duration,
    /// How long a shutdown waits for the pages being written.
    pub shutdown_timeout: Duration,
    /// A pass that ends further than this behind the service's clock, with changes already
    /// waiting, ends `behind`.
    pub behind_after: Duration,
    /// A service's `Date` further than this from callsync's own clock is not trusted as the
    /// service's clock (`sync::service_clock`); calls stamped further than this after the
    /// clock a pass trusts stop it with an error.
    pub max_clock_skew: Duration,
    /// `status` exits 3 for a schedule whose warehouse copy is older than this past the
    /// `cron` tick due to bring it up to date.
    pub max_lag: Duration,
    /// The name `sync_runs`, `status` and the metrics give this process's passes (several
    /// daemons share the schedules); `None`: the host name.
    pub instance: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// The checked filter, such as `info` or `callsync=debug`.
    pub level: LogFilter,
    pub format: LogFormat,
}

impl Default for LogConfig {
    /// `info`, text: for commands that run without a configuration.
    fn default() -> Self {
        LogConfig {
            level: LogFilter::from(LevelFilter::INFO),
            format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct MetricsConfig {
    /// Prometheus metrics and `/healthz`; `None` = off.
    pub listen: Option<SocketAddr>,
}

/// `[backup]`: backups the daemon makes on a cron, checked, the newest `keep` kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupConfig {
    /// 6-field cron (seconds first), evaluated in UTC.
    pub cron: CronSchedule,
    /// Where the backups go (`callsync-YYYYMMDDTHHMMSSZ.db`).
    pub dir: PathBuf,
    /// How many of them to keep, at least 1.
    pub keep: usize,
}

/// `sync.concurrency` by default: an idle pass is one request a schedule, bound by the
/// service's latency, and the limit in flight stays below this unless latency holds; 256
/// lets 10,000 schedules' idle pass through in about 10,000 × latency ÷ 256 (BENCHMARKS.md,
/// "Far away"),
/// while a service that slows down or answers 429 or 5xx brings it down to what it answers.
pub const DEFAULT_CONCURRENCY: usize = 256;

/// The most `sync.concurrency` may be: beyond it, memory (a pass's pages each) and the
/// service's connections grow for no latency a service answers in.
pub const MAX_CONCURRENCY: usize = 1024;
