//! The PostgreSQL warehouse: the SQLite warehouse's tables and views on a server, natively
//! typed, for several BI tools and several daemons (README, "When one file is not enough").
//!
//! It lives in `warehouse/` because only the warehouse speaks SQL; it shares the SQLite
//! warehouse's model → row translation (`rows.rs`) and its status types, and keeps its own SQL:
//! the two dialects differ in every statement that matters (`unnest` arrays, `ON CONFLICT`
//! on native types, advisory locks).
//!
//! Synchronous, like the SQLite warehouse: the sync engine calls it on its writer thread.
//! tokio-postgres drives each connection on a small runtime of its own (`runtime()`), and the
//! calls wait for their answers with `futures::executor::block_on`, which works on any thread,
//! inside an async runtime or not (a nested tokio `block_on` would panic).
//!
//! - `target.rs` — the libpq URI, sslmode, the password's sources, the display form.
//! - `tls.rs` — rustls with libpq's sslmode meanings.
//! - `schema.rs` — versioned migrations (`migrations-postgres/`) under an advisory lock.
//! - `write.rs` — a page and its checkpoint in one transaction, each table in one statement.
//! - `runs.rs` — checkpoints, `sync_runs`, retention, status.
//! - `claim.rs` — one process per schedule: session-level advisory locks.

mod claim;
mod runs;
mod schema;
mod target;
mod tls;
mod write;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_postgres::{Client, Statement};

pub use claim::PgClaim;
pub use schema::latest_version;
pub use target::{PgTarget, SslMode, TargetError};

use super::MigrationReport;
use super::error::WarehouseError;

/// A connection to the PostgreSQL warehouse, migrated to the version this callsync knows.
pub struct PgWarehouse {
    client: Client,
    target: PgTarget,
    /// Prepared statements of this connection, by their SQL.
    statements: HashMap<String, Statement>,
    locks: Arc<claim::LockSession>,
}

/// How long connecting may take when the URI sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

impl PgWarehouse {
    /// Connects and applies pending migrations (under the migration lock).
    pub fn open(target: &PgTarget) -> Result<PgWarehouse, WarehouseError> {
        let client = connect(target)?;
        schema::migrate(&client, target)?;
        Ok(Self::with_client(client, target))
    }

    /// Connects to a warehouse that must already be at this callsync's version (a read-only
    /// command never migrates).
    pub fn open_existing(target: &PgTarget) -> Result<PgWarehouse, WarehouseError> {
        let client = connect(target)?;
        schema::require_current(&client, target)?;
        Ok(Self::with_client(client, target))
    }

    /// Applies pending migrations and says from which version to which.
    pub fn migrate(target: &PgTarget) -> Result<MigrationReport, WarehouseError> {
        let client = connect(target)?;
        schema::migrate(&client, target)
    }

    /// What `run` needs of the server, creating and migrating nothing: it answers, this role
    /// may write (or, on an empty database, create the tables), and the schema version is one
    /// this callsync knows. Returns the version found (`None`: an empty database).
    pub fn check(target: &PgTarget) -> Result<Option<usize>, WarehouseError> {
        let client = connect(target)?;
        schema::check(&client, target)
    }

    fn with_client(client: Client, target: &PgTarget) -> PgWarehouse {
        PgWarehouse {
            client,
            target: target.clone(),
            statements: HashMap::new(),
            locks: Arc::new(claim::LockSession::new(target.clone())),
        }
    }

    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// The statement for `sql`, prepared once per connection.
    fn statement(&mut self, sql: &str, step: &'static str) -> Result<Statement, WarehouseError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement =
            wait(self.client.prepare(sql)).map_err(|e| pg_error(&self.target, step, &e))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// The runtime that drives every PostgreSQL connection of the process (its I/O only: the
/// callers wait on their own threads).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("callsync-postgres")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Waits for `future` on this thread (a tokio-postgres request: its connection is driven by
/// [`runtime`]).
fn wait<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// Opens a connection to `target`, driven on [`runtime`] until the client is dropped.
fn connect(target: &PgTarget) -> Result<Client, WarehouseError> {
    let connection_error = |cause: String| WarehouseError::PostgresConnect {
        target: target.display().to_owned(),
        cause,
    };
    let tls = tls::connector(target).map_err(connection_error)?;
    let mut config = target.config.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let runtime =
        runtime().map_err(|e| connection_error(format!("cannot start its runtime: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        match config.connect(tls).await {
            Ok((client, connection)) => {
                let _ = tx.send(Ok(client));
                if let Err(err) = connection.await {
                    tracing::debug!(error = %err, "a PostgreSQL connection ended");
                }
            }
            Err(err) => {
                let _ = tx.send(Err(err));
            }
        }
    });
    match rx.recv() {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(connection_error(problem(&err))),
        Err(_) => Err(connection_error("the connection task stopped".into())),
    }
}

/// tokio-postgres's error on one line: the server's message, detail and hint for a database
/// error (its `Display` says only "db error"), else the error and its causes.
pub(crate) fn problem(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        let mut text = format!("{} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return crate::untrusted::untrusted_text(&text, 1000);
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    crate::untrusted::untrusted_text(&text, 1000)
}

fn pg_error(target: &PgTarget, step: &'static str, err: &tokio_postgres::Error) -> WarehouseError {
    WarehouseError::Postgres {
        target: target.display().to_owned(),
        step,
        cause: problem(err),
    }
}

/// `.pg(target, "step")?` on a tokio-postgres result, as `.sql(path, "step")` on rusqlite's.
trait PgContext<T> {
    fn pg(self, target: &PgTarget, step: &'static str) -> Result<T, WarehouseError>;
}

impl<T> PgContext<T> for Result<T, tokio_postgres::Error> {
    fn pg(self, target: &PgTarget, step: &'static str) -> Result<T, WarehouseError> {
        self.map_err(|e| pg_error(target, step, &e))
    }
}

/// A timestamp for PostgreSQL: `timestamptz` holds microseconds, so finer instants are
/// truncated towards the past (a checkpoint stored so reads again, never skips).
fn micros(t: crate::service::Timestamp) -> time::OffsetDateTime {
    t.truncated(1_000).as_offset_date_time()
}

fn instant(
    target: &PgTarget,
    value: time::OffsetDateTime,
    what: &'static str,
) -> Result<crate::service::Timestamp, WarehouseError> {
    crate::service::Timestamp::try_from(value).map_err(|_| WarehouseError::BadTimestamp {
        path: target.display().into(),
        what,
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn instants_are_truncated_to_microseconds_towards_the_past() {
        for (text, want) in [
            (
                "2026-01-31T09:30:00.123456789Z",
                "2026-01-31T09:30:00.123456Z",
            ),
            (
                "1969-12-31T23:59:59.999999999Z",
                "1969-12-31T23:59:59.999999Z",
            ),
            ("2026-01-31T09:30:00Z", "2026-01-31T09:30:00Z"),
        ] {
            let t = crate::service::Timestamp::parse(text).unwrap();
            let got = crate::service::Timestamp::try_from(super::micros(t)).unwrap();
            assert_eq!(got.to_rfc3339(), want);
            assert!(got <= t);
        }
    }
}
