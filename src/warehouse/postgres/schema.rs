//! Versioned migrations of the PostgreSQL warehouse (`migrations-postgres/NNNN-*.sql`),
//! applied in order, each in its own transaction, under a session-level advisory lock: two
//! daemons starting at once never both migrate — the second waits, then finds nothing to do.
//! The version is the one row of `callsync_schema`; a database without it but with tables
//! (or a `calls` table on the search path) is another program's, and is refused.
//!
//! Everything lives in `warehouse.schema` (`public` unless set), every session's only
//! `search_path` (`session.rs`): the migrations create that schema first when it is missing,
//! then the tables, views, functions and `callsync_schema` in it, unqualified. The migration
//! lock stays one per database, whatever the schema: the first migration creates the role
//! `callsync_reader`, which belongs to the whole server, and two schemas' first migrations at
//! once would both try.

use include_dir::{Dir, include_dir};
use tokio_postgres::Client;

use super::session::{PgContext, RowColumn, problem, wait};
use super::target::PgTarget;
use crate::warehouse::MigrationReport;
use crate::warehouse::error::WarehouseError;

static MIGRATIONS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/migrations-postgres");

/// The advisory lock key every migrating callsync takes ("callsync" in ASCII).
const MIGRATION_LOCK: i64 = 0x6361_6c6c_7379_6e63;

/// The migrations' SQL, in version order (version = position + 1).
fn migrations() -> Vec<&'static str> {
    let mut files: Vec<_> = MIGRATIONS
        .files()
        .filter(|f| f.path().extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort_by_key(|f| f.path());
    files.iter().filter_map(|f| f.contents_utf8()).collect()
}

/// The latest schema version this callsync knows.
pub fn latest_version() -> usize {
    migrations().len()
}

/// The version found: `None` for a database without callsync's tables. A database without
/// callsync's version table but with tables where callsync would create its own (the first
/// schema of the search path), or with a `calls` table it would read, is another program's.
fn found_version(client: &Client, target: &PgTarget) -> Result<Option<usize>, WarehouseError> {
    const STEP: &str = "identifying the warehouse";
    let row = wait(client.query_one(
        "SELECT to_regclass('callsync_schema') IS NOT NULL, to_regclass('calls') IS NOT NULL,
                coalesce(current_schema(), ''),
                array(SELECT relname::text FROM pg_class
                      WHERE relnamespace = current_schema()::regnamespace
                        AND relkind IN ('r', 'p', 'v', 'm', 'f')
                      ORDER BY relname LIMIT 6)",
        &[],
    ))
    .pg(target, STEP)?;
    let ours: bool = row.column(0, target, STEP)?;
    let calls: bool = row.column(1, target, STEP)?;
    let schema: String = row.column(2, target, STEP)?;
    let mut tables: Vec<String> = row.column(3, target, STEP)?;
    if !ours {
        if !calls && tables.is_empty() {
            return Ok(None);
        }
        if tables.is_empty() {
            tables.push("calls".to_owned());
        }
        return Err(WarehouseError::ForeignSchema {
            kind: "PostgreSQL",
            target: target.display().to_owned(),
            schema: crate::untrusted::untrusted_text(&schema, 63),
            tables: crate::untrusted::untrusted_text(&tables.join(", "), 400),
            advice: "point warehouse.url at a database of callsync's own (createdb callsync) or at a callsync warehouse, or give callsync a schema of its own in this one (warehouse.schema = \"callsync\")",
        });
    }
    let version: i32 = wait(client.query_one("SELECT version FROM callsync_schema", &[]))
        .pg(target, "reading the schema version")?
        .column(0, target, "reading the schema version")?;
    Ok(Some(usize::try_from(version).unwrap_or_default()))
}

fn refuse_newer(target: &PgTarget, found: usize) -> Result<(), WarehouseError> {
    if found > latest_version() {
        return Err(WarehouseError::TooNew {
            path: target.display().into(),
            found,
            supported: latest_version(),
        });
    }
    Ok(())
}

/// Applies pending migrations under the migration lock.
pub(super) fn migrate(
    client: &Client,
    target: &PgTarget,
) -> Result<MigrationReport, WarehouseError> {
    wait(client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]))
        .pg(target, "waiting for another callsync's migration")?;
    let result = create_schema(client, target)
        .and_then(|()| migrate_locked(client, target))
        .inspect(|_| describe(client, target));
    let unlocked = wait(client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]))
        .pg(target, "releasing the migration lock");
    let report = result?;
    unlocked?;
    Ok(report)
}

/// Creates `warehouse.schema` when it does not exist yet. Asked first, as `CREATE SCHEMA IF
/// NOT EXISTS` needs the database's `CREATE` privilege even when the schema is there: a role
/// given a schema of its own (or `public`) needs no more.
fn create_schema(client: &Client, target: &PgTarget) -> Result<(), WarehouseError> {
    const STEP: &str = "creating the warehouse's schema";
    let schema = target.schema();
    let exists: bool = wait(client.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
        &[&schema],
    ))
    .pg(target, STEP)?
    .column(0, target, STEP)?;
    if exists {
        return Ok(());
    }
    // A plain identifier (`config/validate.rs`); quoted all the same, for a keyword.
    let created = wait(client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")));
    created.map_err(|err| WarehouseError::Server {
        target: target.display().to_owned(),
        step: STEP,
        cause: format!(
            "{}; have the database's owner run CREATE SCHEMA {schema} AUTHORIZATION {}, or GRANT CREATE ON DATABASE {} to it",
            problem(&err),
            target.config.get_user().unwrap_or("ROLE"),
            target.dbname(),
        ),
    })?;
    tracing::info!(schema, warehouse = target.display(), "schema created");
    Ok(())
}

/// The comments from the one source of descriptions: a role that may not write them (not
/// the tables' owner) is told so, and the warehouse works without them.
fn describe(client: &Client, target: &PgTarget) {
    match super::comments::describe(client, target) {
        Ok(0) => {}
        Ok(written) => tracing::info!(written, warehouse = target.display(), "tables described"),
        Err(err) => tracing::warn!(
            warehouse = target.display(),
            "the tables' descriptions (COMMENT ON) were not written: {}; connect once as the \
             tables' owner to write them (BI tools then show what each column means)",
            crate::error_chain(&err)
        ),
    }
}

fn migrate_locked(client: &Client, target: &PgTarget) -> Result<MigrationReport, WarehouseError> {
    let from = found_version(client, target)?.unwrap_or(0);
    refuse_newer(target, from)?;
    for (index, sql) in migrations().into_iter().enumerate().skip(from) {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        let applied = wait(client.batch_execute(&format!(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS callsync_schema (version integer NOT NULL);
             {sql}
             ;
             DELETE FROM callsync_schema;
             INSERT INTO callsync_schema (version) VALUES ({version});
             COMMIT;"
        )));
        if let Err(err) = applied {
            let _ = wait(client.batch_execute("ROLLBACK"));
            return Err(WarehouseError::Server {
                target: target.display().to_owned(),
                step: "migrating",
                cause: format!("version {version}: {}", problem(&err)),
            });
        }
        tracing::info!(version, warehouse = target.display(), "warehouse migrated");
    }
    Ok(MigrationReport {
        from,
        to: latest_version(),
    })
}

/// Fails unless the warehouse is at this callsync's version.
pub(super) fn require_current(client: &Client, target: &PgTarget) -> Result<(), WarehouseError> {
    match found_version(client, target)? {
        None => Err(WarehouseError::Missing {
            path: target.display().into(),
        }),
        Some(found) if found < latest_version() => Err(WarehouseError::TooOld {
            path: target.display().into(),
            found,
            supported: latest_version(),
        }),
        Some(found) => refuse_newer(target, found),
    }
}

/// `callsync check`: the version (known to this callsync), and that this role may write.
pub(super) fn check(client: &Client, target: &PgTarget) -> Result<Option<usize>, WarehouseError> {
    let found = found_version(client, target)?;
    if let Some(found) = found {
        refuse_newer(target, found)?;
    }
    let sql = match found {
        Some(_) => {
            // The claims' fencing tokens (version 4) are bumped by every claim; a warehouse
            // of an earlier version gets the table from this role's own migration.
            "SELECT has_table_privilege('calls', 'INSERT, UPDATE, DELETE')
                AND has_table_privilege('sync_checkpoints', 'INSERT, UPDATE, DELETE')
                AND has_table_privilege('sync_runs', 'INSERT, UPDATE, DELETE')
                AND CASE WHEN to_regclass('schedule_claims') IS NULL THEN true
                    ELSE has_table_privilege('schedule_claims', 'SELECT, INSERT, UPDATE') END"
        }
        // The migration creates a missing schema first, which needs the database's CREATE.
        None => {
            "SELECT CASE WHEN current_schema() IS NULL
                    THEN has_database_privilege(current_database(), 'CREATE')
                    ELSE has_schema_privilege(current_schema(), 'CREATE') END"
        }
    };
    let may_write: Option<bool> = wait(client.query_one(sql, &[]))
        .pg(target, "checking this role's privileges")?
        .column(0, target, "checking this role's privileges")?;
    if may_write != Some(true) {
        let user = target.config.get_user().unwrap_or("this role").to_owned();
        return Err(WarehouseError::Server {
            target: target.display().to_owned(),
            step: "checking this role's privileges",
            cause: match found {
                Some(_) => format!(
                    "{user} may not write callsync's tables; connect as the role that owns them, or GRANT INSERT, UPDATE, DELETE on them"
                ),
                None => format!(
                    "{user} may not create tables in the schema {schema} (or, as it does not exist yet, create it in the database); GRANT CREATE ON SCHEMA {schema} to it, or create the schema for it (CREATE SCHEMA {schema} AUTHORIZATION {user}), or connect as its owner",
                    schema = target.schema()
                ),
            },
        });
    }
    Ok(found)
}
