//! Configuration: the validated, typed settings every other module receives.
//!
//! `load` reads a TOML file (`--config PATH`, else `$CALLSYNC_CONFIG`, else
//! `./config/callsync.toml`, else `/etc/callsync/callsync.toml`; with none, the variables
//! alone) and `CALLSYNC_<SECTION>__<KEY>` environment overrides into a raw serde mirror
//! (`raw.rs`), then converts it once into [`Config`] with real types (`validate.rs`); each
//! failure is one [`ConfigError`] naming the key, with its [`ConfigErrorKind`]. Secrets
//! (`secret.rs`) are never printed; where each comes from is decided here, and a secret file
//! is read only when a command asks for the credentials (`ApiConfig::credentials`). A
//! service URL with a user name or password in it is refused, never repeated, and
//! `ApiConfig::credentials_in_clear` names the credentials bound for plain `http://` to
//! another machine (`url_credentials.rs`). Other modules never see the raw form.

pub mod effective;
mod env;
mod error;
mod load;
mod log_filter;
mod messages;
pub mod pg_url;
mod raw;
mod secret;
#[cfg(test)]
mod tests;
mod types;
mod url_credentials;
mod validate;
mod values;

use std::path::Path;

pub use env::Env;
pub use error::{ConfigError, ConfigErrorKind};
pub use load::{DEFAULT_PATHS, load_from};
pub use log_filter::{FilterError, LogFilter};
pub use secret::{Secret, SecretSource};
pub use types::{
    ApiConfig, AuthConfig, BackupConfig, Config, DEFAULT_CONCURRENCY, DEFAULT_SCHEMA,
    DestinationConfig, DetailsMode, LogConfig, LogFormat, MetricsConfig, OAuthConfig,
    PostgresConfig, RetryConfig, SyncConfig, WarehouseConfig,
};
pub use url_credentials::InClear;
pub use values::CronSchedule;

/// Loads and validates the configuration from `path` (or the default search path) and the
/// `CALLSYNC_` environment.
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    load::load(path)
}
