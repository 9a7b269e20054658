//! `callsync check`: is this configuration ready to run? For systemd's `ExecStartPre=` and for
//! an operator after editing the configuration. The configuration has loaded by the time this
//! runs (a configuration error exits 2 before it); then, each on its own line and every one
//! of them even after a failure: the credentials (a token fetched for OAuth, then one list
//! request that the service must accept), each configured schedule (one list request of one
//! call), and whether `run` could open the warehouse (one name, writable by this user, a
//! callsync warehouse it can migrate). Nothing is created or migrated. A credential that would
//! cross the network unencrypted is warned of on stderr, and fails nothing.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use uuid::Uuid;

use super::output::print_out;
use super::usage::UsageError;
use crate::api::{ApiClient, ApiError, Counters, ListQuery};
use crate::config::{AuthConfig, Config};
use crate::service::ListFilter;

/// The longest the check retries one request: long enough to ride out a network or service
/// that is briefly away, short enough to print its verdict well within systemd's start
/// timeout (90 s by default); after that systemd's `Restart=` tries again.
const RETRY_BUDGET: Duration = Duration::from_secs(30);

/// One check's verdict: a line on stdout, or with `--json` an object of these three fields.
#[derive(Debug, Serialize)]
struct Verdict {
    check: String,
    ok: bool,
    detail: String,
}

impl Verdict {
    fn ok(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Verdict {
            check: check.into(),
            ok: true,
            detail: detail.into(),
        }
    }

    fn failed(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Verdict {
            check: check.into(),
            ok: false,
            detail: detail.into(),
        }
    }

    /// An `ok` line on stdout; a `FAILED` line on stderr, where a person and systemd look for
    /// problems, prefixed with the error priority (`<3>`) when stderr is the journal, so that
    /// `journalctl -u callsync -p err` shows it. `--json` puts every verdict on stdout.
    fn print(&self, json: bool) -> Result<()> {
        if json {
            return print_out(format_args!("{}\n", serde_json::to_string(self)?));
        }
        if self.ok {
            return print_out(format_args!("ok   {}: {}\n", self.check, self.detail));
        }
        let priority = if crate::telemetry::stderr_is_the_journal() {
            "<3>"
        } else {
            ""
        };
        // A closed stderr must not turn a verdict into a panic; the exit code still says it.
        let _ = writeln!(
            std::io::stderr(),
            "{priority}FAILED {}: {}",
            self.check,
            self.detail
        );
        Ok(())
    }
}

pub async fn run(config: &Config, json: bool) -> Result<ExitCode> {
    let Some(first) = config.sync.schedules.first().copied() else {
        // As `run` would: the daemon refuses to start without schedules (exit 2).
        return Err(UsageError("no schedules to check: list them in sync.schedules".into()).into());
    };
    let mut all_ok = true;
    let mut report = |verdict: Verdict| -> Result<()> {
        all_ok &= verdict.ok;
        verdict.print(json)
    };
    report(Verdict::ok("config", describe_source(config)))?;
    // Not a failure: over a private network, or to a sidecar that adds TLS, it may be meant.
    super::config::warn_in_clear(config);

    let client = client(config)?;
    let filter = ListFilter::default();
    let (credentials, first_listed) = check_credentials(config, &client, first, &filter).await;
    let credentials_ok = credentials.ok;
    report(credentials)?;

    let listed: Vec<Result<(), ApiError>> = match first_listed {
        Some(first_listed) if credentials_ok => {
            let rest = config.sync.schedules[1..]
                .iter()
                .map(|&schedule| list_one(&client, schedule, &filter));
            std::iter::once(first_listed)
                .chain(futures::future::join_all(rest).await)
                .collect()
        }
        _ => Vec::new(),
    };
    for (index, &schedule) in config.sync.schedules.iter().enumerate() {
        report(match listed.get(index) {
            Some(result) => schedule_verdict(schedule, result),
            None => Verdict::failed(
                schedule_check(schedule),
                "not checked: the credentials check failed",
            ),
        })?;
    }

    report(match super::destination::backend(config) {
        Ok(backend) => warehouse_verdict(backend.as_ref()),
        Err(err) => Verdict::failed("warehouse", format!("{err:#}")),
    })?;
    if let Some(backup) = &config.backup {
        report(backup_verdict(&backup.dir))?;
    }
    if let Some(listen) = config.metrics.listen {
        report(metrics_verdict(listen))?;
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Whether the daemon could make its scheduled backups in `dir`: tried as it would, leaving
/// nothing behind.
fn backup_verdict(dir: &Path) -> Verdict {
    const CHECK: &str = "backup.dir";
    match crate::daemon::check_backup_dir(dir) {
        Ok(()) => Verdict::ok(
            CHECK,
            format!(
                "{} is writable (or creatable): scheduled backups can be made there",
                dir.display()
            ),
        ),
        Err(err) => Verdict::failed(CHECK, crate::error_chain(&err)),
    }
}

/// Whether `run` could serve `/metrics` on `listen`: bound and let go at once.
fn metrics_verdict(listen: std::net::SocketAddr) -> Verdict {
    const CHECK: &str = "metrics";
    match std::net::TcpListener::bind(listen) {
        Ok(_) => Verdict::ok(CHECK, format!("{listen} can be listened on")),
        Err(err) => Verdict::failed(
            CHECK,
            format!(
                "cannot listen on {listen} (metrics.listen): {err}; another process holds it (the daemon itself, if it runs: `ss -ltnp | grep {}`), or the address is not this machine's",
                listen.port()
            ),
        ),
    }
}

fn describe_source(config: &Config) -> String {
    match &config.source {
        Some(path) => path.display().to_string(),
        None => "the CALLSYNC_* environment (no file)".to_owned(),
    }
}

/// The client `run` would use, with a retry budget that fits a start-up check.
fn client(config: &Config) -> Result<ApiClient> {
    let mut api = config.api.clone();
    api.retry.max_elapsed = api.retry.max_elapsed.min(RETRY_BUDGET);
    let credentials = api.credentials()?;
    ApiClient::new(&api, &credentials).context("cannot set up the service's client")
}

/// The credentials' verdict and, when the list request was sent, its result: it is also the
/// first schedule's check. A 404 proves the token was accepted (the service looked for the
/// schedule); the schedule's own line says it is missing.
async fn check_credentials(
    config: &Config,
    client: &ApiClient,
    first: Uuid,
    filter: &ListFilter,
) -> (Verdict, Option<Result<(), ApiError>>) {
    const CHECK: &str = "credentials";
    let oauth = matches!(config.api.credentials(), Ok(AuthConfig::OAuth(_)));
    if let Err(err) = client.authenticate(&Counters::default()).await {
        let detail = if err.is_unauthorized() {
            "the token endpoint (api.oauth.token_url) refused the client credentials (HTTP 401); check api.oauth.client_id and the client secret".to_owned()
        } else {
            format!("cannot fetch a token: {}", crate::error_chain(&err))
        };
        return (Verdict::failed(CHECK, detail), None);
    }
    let listed = list_one(client, first, filter).await;
    let verdict = match &listed {
        Ok(()) => Verdict::ok(CHECK, accepted(oauth)),
        Err(err) if err.is_not_found() => Verdict::ok(CHECK, accepted(oauth)),
        Err(err) if err.is_unauthorized() => Verdict::failed(CHECK, refused(oauth)),
        Err(err) => Verdict::failed(
            CHECK,
            format!("cannot be checked: {}", crate::error_chain(err)),
        ),
    };
    (verdict, Some(listed))
}

fn refused(oauth: bool) -> &'static str {
    if oauth {
        "the service refused the token just issued by api.oauth.token_url (HTTP 401); check api.oauth.scope and that this client may read the schedules"
    } else {
        "the service refused the token (HTTP 401); check api.access_token (or its file or systemd credential): is it expired or revoked?"
    }
}

fn accepted(oauth: bool) -> &'static str {
    if oauth {
        "a token was issued by api.oauth.token_url and accepted by the service"
    } else {
        "the service accepted the access token"
    }
}

/// One list request of one call of `schedule`: does the service know it?
async fn list_one(client: &ApiClient, schedule: Uuid, filter: &ListFilter) -> Result<(), ApiError> {
    let query = ListQuery {
        updated_after: None,
        page: 1,
        page_size: 1,
        filter,
    };
    client
        .list_calls(schedule, &query, &Counters::default())
        .await
        .map(drop)
}

fn schedule_check(schedule: Uuid) -> String {
    format!("schedule {schedule}")
}

fn schedule_verdict(schedule: Uuid, listed: &Result<(), ApiError>) -> Verdict {
    let check = schedule_check(schedule);
    match listed {
        Ok(()) => Verdict::ok(check, "exists on the service"),
        Err(err) if err.is_not_found() => Verdict::failed(
            check,
            format!(
                "the service has no schedule {schedule} (HTTP 404); remove it from sync.schedules or correct it, and check api.base_url (it must not include /api/v1)"
            ),
        ),
        Err(err) => Verdict::failed(check, crate::error_chain(err)),
    }
}

/// What `run` needs of the warehouse, creating and migrating nothing: the SQLite file's one
/// name, writability and schema; a PostgreSQL server that answers and lets this role write
/// (each back end says what it found, `Backend::check`).
fn warehouse_verdict(backend: &dyn crate::warehouse::Backend) -> Verdict {
    const CHECK: &str = "warehouse";
    match backend.check() {
        Ok(found) => Verdict::ok(CHECK, found),
        Err(err) => Verdict::failed(CHECK, crate::error_chain(&err)),
    }
}
