//! The PostgreSQL warehouse: the SQLite warehouse's tables and views on a server, natively
//! typed, for several BI tools and several daemons (docs/postgres.md).
//!
//! A sibling of `sqlite/` under the one contract (`warehouse/destination.rs`;
//! `destination.rs` here is this back end's side of it): it shares the floor — the model →
//! row translation (`rows.rs`), the write rule (`write_plan.rs`), the records and the status
//! read side — and keeps its own SQL: the two dialects differ in every statement that matters
//! (`unnest` arrays, `ON CONFLICT` on native types, advisory locks). It imports nothing of
//! `sqlite/`.
//!
//! Synchronous, like the SQLite warehouse: the sync engine calls it on its writer thread.
//! tokio-postgres drives each connection on a small runtime of its own (`runtime()`), and the
//! calls wait for their answers with `futures::executor::block_on`, which works on any thread,
//! inside an async runtime or not (a nested tokio `block_on` would panic).
//!
//! - `backend.rs` and `destination.rs` — `Backend` and `Destination`: what the rest of callsync
//!   sees.
//! - `target.rs` — the libpq URI, sslmode, the password's sources, the display form.
//! - `tls.rs` — rustls with libpq's sslmode meanings.
//! - `schema.rs` — versioned migrations (`migrations-postgres/`) under an advisory lock.
//! - `write.rs` — a page and its checkpoint in one transaction, each table in one statement.
//! - `batch.rs` — what `write.rs` sends: each table's columns as arrays, its `unnest()` upsert.
//! - `pipeline.rs` — statements sent together, answered in one round trip.
//! - `runs.rs` — checkpoints, `sync_runs`, retention, status.
//! - `resources.rs` — `campaigns` and `schedules` as the write commands record them.
//! - `session.rs` — connecting, waiting for answers, errors with their context.
//! - `claim.rs` — one process per schedule: session-level advisory locks, and the fencing
//!   token each page checks in its own transaction.
//! - `timezone.rs` — `timezone_offsets`, the analyst's days, as the SQLite warehouse keeps them.

pub mod backend;
mod batch;
mod claim;
mod comments;
mod destination;
mod interrupted;
mod pipeline;
mod queries;
mod resources;
mod runs;
mod schema;
mod session;
mod target;
mod timezone;
mod tls;
mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_postgres::{Client, Statement};
use uuid::Uuid;

pub use claim::{LOCK_PATIENCE, LOCK_SESSION_NAME, PgClaim};
pub use comments::{LOCAL_DAY_FUNCTION, postgres_only};
pub use schema::latest_version;
pub use session::ping;
pub use target::{PgTarget, SslMode, TargetError};

use crate::warehouse::MigrationReport;
use crate::warehouse::error::WarehouseError;
use session::{connect, pg_error, wait};

/// A connection to the PostgreSQL warehouse, migrated to the version this callsync knows.
///
/// The connection is replaced when the server has closed it (a restart, a failover, an
/// administrator's `pg_terminate_backend`): each public method begins with
/// [`PgWarehouse::reconnect_if_closed`], and only there, so that no transaction ever goes on
/// over a new connection — one broken mid-way fails, and is rolled back by the server.
///
/// The writer's jobs run at once, each over a connection of its own: [`PgWarehouse::fork`]
/// makes another handle on the same warehouse, which connects at its first use and shares
/// this one's claims. The writer runs one handle a thread and adds one when more jobs are
/// outstanding than it has threads (`sync/writer.rs`), so the connections, a small pool held
/// one a thread, number the jobs in flight at their busiest: a few, as the passes' pages,
/// openings and ends go in groups.
pub struct PgWarehouse {
    /// `None` until a forked handle's first use.
    connection: Mutex<Option<Connection>>,
    target: PgTarget,
    locks: Arc<claim::LockSession>,
    /// Schedules whose pass opened with a checkpoint and whose pages have changed nothing so
    /// far, with that checkpoint's cursor: their next page is read first, outside a
    /// transaction (`write.rs`), as an idle pass's page changes nothing. Shared by the forks,
    /// since a pass's opening and its pages may go over different connections.
    quiet: Arc<Mutex<HashMap<Uuid, crate::service::Timestamp>>>,
}

struct Connection {
    client: Arc<Client>,
    /// Prepared statements of this connection, by their SQL.
    statements: HashMap<String, Statement>,
}

impl PgWarehouse {
    /// Connects, applies pending migrations (under the migration lock), and marks the passes
    /// whose process ended mid-pass interrupted (`interrupted.rs`).
    pub fn open(target: &PgTarget) -> Result<PgWarehouse, WarehouseError> {
        let client = connect(target)?;
        schema::migrate(&client, target)?;
        let warehouse = Self::with_client(client, target);
        warehouse.mark_interrupted_runs()?;
        Ok(warehouse)
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
            connection: Mutex::new(Some(Connection::new(client))),
            target: target.clone(),
            locks: Arc::new(claim::LockSession::new(target.clone())),
            quiet: Arc::default(),
        }
    }

    /// Another handle on this warehouse, for another thread to write at the same time: its
    /// own connection, opened at its first use (so forking waits for nothing), and this
    /// handle's claims, which its pages check as their own.
    pub fn fork(&self) -> PgWarehouse {
        PgWarehouse {
            connection: Mutex::new(None),
            target: self.target.clone(),
            locks: self.locks.clone(),
            quiet: self.quiet.clone(),
        }
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        // A panic while holding it leaves plain data behind, still consistent.
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This handle's connection (as it is: see [`PgWarehouse::reconnect_if_closed`], which
    /// every public method calls first, so that it exists).
    fn client(&self) -> Result<Arc<Client>, WarehouseError> {
        match self.connection().as_ref() {
            Some(connection) => Ok(connection.client.clone()),
            None => Err(self.unconnected()),
        }
    }

    /// The error of a handle used before it connected: a method that skipped
    /// [`PgWarehouse::reconnect_if_closed`], callsync's bug.
    fn unconnected(&self) -> WarehouseError {
        WarehouseError::Server {
            target: self.target.display().to_owned(),
            step: "using the warehouse connection",
            cause: "this handle has not connected yet (callsync's bug: please report it)".into(),
        }
    }

    /// Opens a connection when this handle has none yet or the server has closed it. Called
    /// at the start of each public method, never inside a transaction.
    fn reconnect_if_closed(&self) -> Result<(), WarehouseError> {
        let mut connection = self.connection();
        if connection.as_ref().is_some_and(|c| !c.client.is_closed()) {
            return Ok(());
        }
        let client = connect(&self.target)?;
        if connection.is_some() {
            tracing::info!(
                warehouse = self.target.display(),
                "the server closed the warehouse connection; connected again"
            );
        }
        *connection = Some(Connection::new(client));
        Ok(())
    }

    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// The statement for `sql`, prepared once per connection.
    fn statement(&self, sql: &str, step: &'static str) -> Result<Statement, WarehouseError> {
        let mut connection = self.connection();
        let Some(connection) = connection.as_mut() else {
            return Err(self.unconnected());
        };
        if let Some(statement) = connection.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement =
            wait(connection.client.prepare(sql)).map_err(|e| pg_error(&self.target, step, &e))?;
        connection
            .statements
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// `ask`, and once more when the server refused a statement prepared before a column's
    /// type changed ([`WarehouseError::PlanChanged`]), with this connection's
    /// statements forgotten, so prepared anew. Only for an `ask` that a refusal leaves
    /// undone: one statement (which the server undoes whole when it fails), or a transaction
    /// rolled back on its error.
    fn replanning<T>(
        &self,
        mut ask: impl FnMut() -> Result<T, WarehouseError>,
    ) -> Result<T, WarehouseError> {
        match ask() {
            Err(WarehouseError::PlanChanged { step, .. }) => {
                tracing::info!(
                    warehouse = self.target.display(),
                    step,
                    "a table changed under a prepared statement; preparing the statements again"
                );
                if let Some(connection) = self.connection().as_mut() {
                    connection.statements.clear();
                }
                ask()
            }
            answer => answer,
        }
    }
}

impl Connection {
    fn new(client: Client) -> Connection {
        Connection {
            client: Arc::new(client),
            statements: HashMap::new(),
        }
    }
}

impl PgWarehouse {
    /// Takes `schedule`'s lock without waiting; `None` when another session (another process,
    /// or this one) holds it.
    pub fn claim(&self, schedule: Uuid) -> Result<Option<PgClaim>, WarehouseError> {
        self.locks.claim(schedule)
    }

    /// [`Self::claim`] for each of `schedules`, in one statement where it can.
    pub fn claim_all(&self, schedules: &[Uuid]) -> Vec<Result<Option<PgClaim>, WarehouseError>> {
        self.locks.claim_all(schedules)
    }
}
