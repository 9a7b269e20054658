//! Opening the file: pragmas, persistent WAL, and the migrations in `migrations/`.

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use include_dir::{Dir, include_dir};
use rusqlite::{Connection, OpenFlags};
use rusqlite_migration::{M, Migrations, SchemaVersion};

use super::error::{SqlContext, WarehouseError};

static MIGRATION_DIR: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/migrations");

static MIGRATIONS: LazyLock<Migrations<'static>> = LazyLock::new(|| {
    let mut dirs: Vec<_> = MIGRATION_DIR.dirs().collect();
    dirs.sort_by_key(|d| d.path());
    dirs.iter()
        .map(|dir| {
            let up = dir
                .get_file(dir.path().join("up.sql"))
                .and_then(|f| f.contents_utf8())
                .expect("migrations/ is embedded at build time and checked by a unit test");
            // Schema 6 copies every row with progress shown (`layout_v6`).
            if up == super::layout_v6::UP {
                M::up_with_hook(up, super::layout_v6::copy_rows)
            } else {
                M::up(up)
            }
        })
        .collect()
});

/// The schema version this build writes.
pub fn latest_version() -> usize {
    MIGRATION_DIR.dirs().count()
}

/// Page cache of the writer connection, in KiB (SQLite's negative `cache_size` form).
/// Public for the benchmarks' reference, which runs SQLite with the writer's settings.
pub const WRITER_CACHE_KIB: i64 = -16 * 1024;

/// WAL pages after which a commit copies the WAL into the file (SQLite's default: 1,000).
pub const WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// Opens (creating) `path` for writing and applies pending migrations; returns the
/// connection and the schema version found before migrating.
pub fn open_for_writing(
    path: &Path,
    busy_timeout: Duration,
) -> Result<(Connection, usize), WarehouseError> {
    let open_err = |cause| WarehouseError::Open {
        path: path.to_owned(),
        cause,
    };
    // A WAL database's -wal and -shm are kept when this connection closes only if they were
    // there before: reading a refused file leaves the files beside it as it found them.
    let had_wal = super::access::beside(path, "-wal").exists();
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(busy_timeout).map_err(open_err)?;
    if had_wal {
        persist_wal(&conn).map_err(open_err)?;
    }
    // Identified before any pragma that writes (journal_mode rewrites the header): another
    // program's database or a newer callsync's is refused as it was found.
    let before = version(&conn, path)?;
    if before > latest_version() {
        return Err(WarehouseError::TooNew {
            path: path.to_owned(),
            found: before,
            supported: latest_version(),
        });
    }
    // WAL: readers never block the writer and never see half a transaction.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    // The writer looks up every call and child of a page by key: with SQLite's 2 MiB default
    // cache those lookups become a pread each once the file outgrows it.
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
        .map_err(open_err)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
        .map_err(open_err)?;
    // Every statement of a page write stays prepared (rusqlite keeps 16 by default, about as
    // many as a page write uses).
    conn.set_prepared_statement_cache_capacity(64);
    persist_wal(&conn).map_err(open_err)?;
    MIGRATIONS
        .to_latest(&mut conn)
        .map_err(|cause| WarehouseError::Migrate {
            path: path.to_owned(),
            cause,
        })?;
    Ok((conn, before))
}

/// A private in-memory warehouse with the current schema (a dry run without a file).
pub fn open_in_memory() -> Result<Connection, WarehouseError> {
    let path = Path::new(":memory:");
    let mut conn = Connection::open_in_memory().map_err(|cause| WarehouseError::Open {
        path: path.to_owned(),
        cause,
    })?;
    MIGRATIONS
        .to_latest(&mut conn)
        .map_err(|cause| WarehouseError::Migrate {
            path: path.to_owned(),
            cause,
        })?;
    Ok(conn)
}

/// Opens an existing warehouse read-only (a BI group member may have no write permission).
pub fn open_read_only(path: &Path) -> Result<Connection, WarehouseError> {
    // SQLite's "unable to open database file" would not say that the file is simply not
    // there yet; a path that cannot even be checked is left to SQLite's own error.
    if let Ok(false) = path.try_exists() {
        return Err(WarehouseError::Missing {
            path: path.to_owned(),
        });
    }
    let open_err = |cause| WarehouseError::Open {
        path: path.to_owned(),
        cause,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(open_err)?;
    let found = version(&conn, path)?;
    let supported = latest_version();
    let path = path.to_owned();
    match found.cmp(&supported) {
        std::cmp::Ordering::Equal => Ok(conn),
        std::cmp::Ordering::Greater => Err(WarehouseError::TooNew {
            path,
            found,
            supported,
        }),
        std::cmp::Ordering::Less => Err(WarehouseError::TooOld {
            path,
            found,
            supported,
        }),
    }
}

/// The schema version of the database at `path`, 0 for a new one. A database that holds
/// tables but not callsync's is another program's (whatever its `user_version`): it is
/// refused, not given our tables.
pub(super) fn version(conn: &Connection, path: &Path) -> Result<usize, WarehouseError> {
    let found = MIGRATIONS
        .current_version(conn)
        .map_err(|cause| WarehouseError::Unreadable {
            path: path.to_owned(),
            cause,
        })?;
    let version = match found {
        SchemaVersion::NoneSet => 0,
        SchemaVersion::Inside(v) | SchemaVersion::Outside(v) => v.get(),
    };
    if is_foreign(conn).sql(path, "reading the schema")? {
        return Err(WarehouseError::NotAWarehouse {
            path: path.to_owned(),
        });
    }
    Ok(version)
}

/// Objects in the schema, none of them `sync_checkpoints`, which every callsync schema
/// version has (migration 1 creates it in the same transaction as the version).
fn is_foreign(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema)
            AND NOT EXISTS (SELECT 1 FROM sqlite_schema
                            WHERE type = 'table' AND name = 'sync_checkpoints')",
        [],
        |r| r.get(0),
    )
}

/// Applies the migrations up to schema `version` only: a warehouse as an older callsync
/// left it, for migration tests.
#[cfg(test)]
pub fn migrate_to(conn: &mut Connection, version: usize) -> rusqlite_migration::Result<()> {
    MIGRATIONS.to_version(conn, version)
}

/// Keeps the `-wal` and `-shm` files when the last connection closes, so a reader with
/// read-only permissions can still open the warehouse after the daemon stops.
fn persist_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: `conn.handle()` is a valid open database handle for the duration of the call;
    // SQLITE_FCNTL_PERSIST_WAL reads and writes one c_int through the pointer, which points
    // at a live local.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            Some("cannot keep the WAL persistent".into()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_migrations_are_valid() {
        MIGRATIONS.validate().unwrap();
        assert_eq!(latest_version(), 6);
    }
}
