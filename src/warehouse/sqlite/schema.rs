//! Opening the file: pragmas, persistent WAL, and the migrations in `migrations/`.

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use include_dir::{Dir, include_dir};
use rusqlite::{Connection, OpenFlags};
use rusqlite_migration::{M, Migrations, SchemaVersion};

use super::error::{SqlContext, WarehouseError, migrate_error, open_error, unreadable_error};
use super::keys_first::ChildTables;

static MIGRATION_DIR: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/migrations");

static MIGRATIONS: LazyLock<Migrations<'static>> =
    LazyLock::new(|| migrations(ChildTables::KeyFirst));

/// The migrations in `migrations/`, schema 6's copy creating the child tables in `children`'s
/// form.
pub(super) fn migrations(children: ChildTables) -> Migrations<'static> {
    let mut dirs: Vec<_> = MIGRATION_DIR.dirs().collect();
    dirs.sort_by_key(|d| d.path());
    dirs.iter()
        .map(|dir| {
            let up = dir
                .get_file(dir.path().join("up.sql"))
                .and_then(|f| f.contents_utf8())
                .expect("migrations/ is embedded at build time and checked by a unit test");
            // Schema 6 copies every row with progress shown (`layout_v6`); schema 9 rebuilds
            // the child tables schema 6 did not create key first (`keys_first`).
            if up == super::layout_v6::UP {
                M::up_with_hook(up, move |tx: &rusqlite::Transaction<'_>| {
                    super::layout_v6::copy_rows(tx, children)
                })
            } else if up == super::keys_first::UP {
                M::up_with_hook(up, super::keys_first::rebuild_where_needed)
            } else {
                M::up(up)
            }
        })
        .collect()
}

/// The schema version this build writes.
pub fn latest_version() -> usize {
    MIGRATION_DIR.dirs().count()
}

/// Page cache of the writer connection, in KiB (SQLite's negative `cache_size` form).
/// Public for the benchmarks' reference, which runs SQLite with the writer's settings.
pub const WRITER_CACHE_KIB: i64 = -16 * 1024;

/// The migration's page cache, in KiB (SQLite's negative `cache_size` form). Each copy reads
/// its version 5 table once, in the order it is stored, and writes the new one in the order
/// of its key; what is read at random are the two uid indexes every child row is looked up
/// in (`calls_v5.uid`, about 60 MB at a million calls, and `call_attempts_v5.uid`, about
/// 120 MB), which then stay cached. SQLite's sorter uses as much again before it spills to
/// temporary files. The writer's cache is set back afterwards. Schema 7 rewrites every
/// timestamp of every row in the same transaction, a scan of each table: under a rollback
/// journal each time the cache fills with changed pages it spills them (a journal sync each).
pub(super) const MIGRATION_CACHE_KIB: i64 = -256 * 1024;

/// WAL pages after which a commit copies the WAL into the file (SQLite's default: 1,000).
pub const WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// Opens (creating) `path` for writing and applies pending migrations; returns the
/// connection and the schema version found before migrating.
pub fn open_for_writing(
    path: &Path,
    busy_timeout: Duration,
) -> Result<(Connection, usize), WarehouseError> {
    let open_err = |cause| open_error(path, &cause);
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
    let before = identify(&conn, path)?;
    // WAL: readers never block the writer and never see half a transaction. A migration of a
    // file with rows runs under a rollback journal first (see `rollback_journal`).
    let migrating = before > 0 && before < latest_version();
    let under_wal = !migrating || !rollback_journal(&conn, path).map_err(open_err)?;
    if under_wal {
        set_wal(&conn, busy_timeout).map_err(open_err)?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    // The writer looks up every call and child of a page by key: with SQLite's 2 MiB default
    // cache those lookups become a pread each once the file outgrows it. A migration gets a
    // larger one until it has committed.
    let cache = if migrating {
        MIGRATION_CACHE_KIB
    } else {
        WRITER_CACHE_KIB
    };
    conn.pragma_update(None, "cache_size", cache)
        .map_err(open_err)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)
        .map_err(open_err)?;
    // Every statement of a page write stays prepared (rusqlite keeps 16 by default, about as
    // many as a page write uses).
    conn.set_prepared_statement_cache_capacity(64);
    persist_wal(&conn).map_err(open_err)?;
    migrate_to_latest(&mut conn, path)?;
    if migrating {
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
            .map_err(open_err)?;
    }
    if !under_wal {
        set_wal(&conn, busy_timeout).map_err(open_err)?;
    }
    Ok((conn, before))
}

/// Puts the file in WAL mode, waiting up to `busy_timeout` for other connections.
///
/// Why a loop of its own: switching a new file to WAL needs it exclusively, and when two
/// connections both hold a shared lock and both want it (daemons starting together on a new
/// warehouse), SQLite refuses one at once instead of calling its busy handler, since waiting
/// could deadlock. The refused one lets go of its lock and asks again; by then the other has
/// usually switched the file, which makes the switch a no-op.
fn set_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + busy_timeout;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(WAL_SWITCH_RETRY);
            }
            done => return done,
        }
    }
}

/// The pause before asking again for WAL mode after SQLite refused it to avoid a deadlock.
const WAL_SWITCH_RETRY: Duration = Duration::from_millis(5);

/// Puts the warehouse under a rollback journal for the migrations about to run; false when
/// another connection has it open (after the busy timeout), which keeps it in WAL mode (the
/// migration is then only slower).
///
/// Why: a migration rewrites most of the file in one transaction (schema 6 copies every row).
/// Under WAL that transaction (gigabytes at a million calls) sits in the `-wal` until it
/// commits, every page read searches the WAL's index first (BENCHMARKS.md, "Migration from
/// schema 5") and every new page is written twice. Under a rollback journal, pages appended past
/// the file's old end are written once and not journaled at all; a kill still leaves the file
/// as it was (the hot journal is rolled back by the next connection that opens it). WAL mode
/// is set again as soon as the migrations have committed.
fn rollback_journal(conn: &Connection, path: &Path) -> rusqlite::Result<bool> {
    let switched = match conn.pragma_update_and_check(None, "journal_mode", "DELETE", |row| {
        row.get::<_, String>(0)
    }) {
        Ok(mode) => mode.eq_ignore_ascii_case("delete"),
        // Leaving WAL mode needs the file to itself: a reader's open connection refuses
        // it once the busy timeout has passed.
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            false
        }
        Err(e) => return Err(e),
    };
    if !switched {
        tracing::info!(
            path = %path.display(),
            "another program has the warehouse open: the migration runs under the WAL, slower \
             on a large warehouse (stop the readers to migrate faster)"
        );
    }
    Ok(switched)
}

/// Applies the pending migrations, as another process may be doing at the same instant
/// (daemons sharing the schedules start together): rusqlite_migration reads the version
/// before its transaction begins, so the second of two processes runs a migration the first
/// has just committed, and fails (`table … already exists`). Its transaction is rolled back;
/// when the version has moved meanwhile, the migrations go on from the new one.
fn migrate_to_latest(conn: &mut Connection, path: &Path) -> Result<(), WarehouseError> {
    let migrate_err = |cause| migrate_error(path, &cause);
    loop {
        let before = MIGRATIONS.current_version(conn).map_err(migrate_err)?;
        match MIGRATIONS.to_latest(conn) {
            Ok(()) => return Ok(()),
            Err(cause) => {
                let now = MIGRATIONS.current_version(conn).map_err(migrate_err)?;
                if now == before {
                    return Err(migrate_err(cause));
                }
            }
        }
    }
}

/// A private in-memory warehouse with the current schema (a dry run without a file).
pub fn open_in_memory() -> Result<Connection, WarehouseError> {
    let path = Path::new(":memory:");
    let mut conn = Connection::open_in_memory().map_err(|cause| open_error(path, &cause))?;
    MIGRATIONS
        .to_latest(&mut conn)
        .map_err(|cause| migrate_error(path, &cause))?;
    Ok(conn)
}

/// Opens an existing warehouse read-only (a BI group member may have no write permission),
/// the schema current. Creates no file beside it and changes none: see [`open_reading`].
pub fn open_read_only(path: &Path) -> Result<(Connection, Reading), WarehouseError> {
    let (conn, reading) = open_reading(path)?;
    let found = identify(&conn, path)?;
    let supported = latest_version();
    if found < supported {
        return Err(WarehouseError::TooOld {
            path: path.to_owned(),
            found,
            supported,
        });
    }
    Ok((conn, reading))
}

/// How a read-only connection reads the warehouse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// Through the `-wal` and `-shm` as every SQLite reader does: consistent while writers
    /// write.
    Shared,
    /// The file alone (`immutable=1`), because SQLite would otherwise create the `-wal` or
    /// `-shm`, or give an empty one the database's mode: files of the warehouse's owner, which
    /// a read-only command must not make or change (a `-wal` made `0444` by `status` on a
    /// `0444` file keeps `run` out once the file is writable again). No writer has the
    /// warehouse open then (a writer keeps both files, with the file's mode); the state of
    /// the files at the opening tells whether one started since ([`Reading::unchanged`]).
    Alone(FilesState),
}

impl Reading {
    /// Whether nothing wrote the warehouse since it was opened: always for a shared reader,
    /// whose snapshot SQLite keeps.
    pub fn unchanged(&self, path: &Path) -> bool {
        match self {
            Reading::Shared => true,
            Reading::Alone(then) => FilesState::of(path) == *then,
        }
    }
}

/// The database file, its `-wal` and its `-shm` as `stat` sees them: any write changes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesState([Option<FileState>; 3]);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileState {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FilesState {
    fn of(path: &Path) -> FilesState {
        use std::os::unix::fs::MetadataExt;
        let state = |file: &Path| {
            std::fs::symlink_metadata(file).ok().map(|m| FileState {
                ino: m.ino(),
                len: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            })
        };
        FilesState([
            state(path),
            state(&super::access::beside(path, "-wal")),
            state(&super::access::beside(path, "-shm")),
        ])
    }
}

/// Opens the file at `path` read-only without creating or changing any file beside it. A WAL
/// database is read through its `-wal` and `-shm` when both are there and SQLite would not
/// change their mode; else (no writer has it open) as the file alone.
pub(super) fn open_reading(path: &Path) -> Result<(Connection, Reading), WarehouseError> {
    // SQLite's "unable to open database file" would not say that the file is simply not
    // there yet; a path that cannot even be checked is left to SQLite's own error.
    if let Ok(false) = path.try_exists() {
        return Err(WarehouseError::Missing {
            path: path.to_owned(),
        });
    }
    let open_err = |cause| open_error(path, &cause);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let state = FilesState::of(path);
    let (conn, reading) = if sqlite_would_touch_wal_files(path) {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
            .map_err(open_err)?;
        (conn, Reading::Alone(state))
    } else {
        (
            Connection::open_with_flags(path, flags).map_err(open_err)?,
            Reading::Shared,
        )
    };
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(open_err)?;
    Ok((conn, reading))
}

/// A WAL database (header bytes 18 and 19 are 2) whose `-wal` or `-shm` is missing — a
/// reader creates it, even read-only, when it may write the directory — or empty with another
/// mode than the database's and this user's to change: SQLite's `robust_open` sets an empty
/// `-wal`/`-shm` to the database's mode when it opens one.
fn sqlite_would_touch_wal_files(path: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut header = [0u8; 20];
    let wal_mode = std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut header))
        .is_ok_and(|()| header.starts_with(b"SQLite format 3\0") && header[18..20] == [2, 2]);
    if !wal_mode {
        return false;
    }
    let Ok(db) = std::fs::metadata(path) else {
        return false;
    };
    let me = rustix::process::geteuid().as_raw();
    ["-wal", "-shm"].iter().any(|suffix| {
        match std::fs::metadata(super::access::beside(path, suffix)) {
            Err(_) => true,
            Ok(file) => {
                file.len() == 0
                    && file.mode() & 0o777 != db.mode() & 0o777
                    && (me == 0 || me == file.uid())
            }
        }
    })
}

/// `path` for an SQLite `file:` URI: every byte but unreserved ones and `/` percent-encoded.
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// What `run` asks of the database at `path` before it changes anything: a callsync
/// warehouse (or a new, empty database) of a schema version this callsync knows; returns the
/// version (0 for a new one). The one identification: writers, read-only commands, `check`
/// and `restore` all use it.
pub(super) fn identify(conn: &Connection, path: &Path) -> Result<usize, WarehouseError> {
    let found = version(conn, path)?;
    if found > latest_version() {
        return Err(WarehouseError::TooNew {
            path: path.to_owned(),
            found,
            supported: latest_version(),
        });
    }
    Ok(found)
}

/// The schema version of the database at `path`, 0 for a new one. A database that holds
/// tables but not callsync's is another program's (whatever its `user_version`): it is
/// refused, not given our tables.
pub(super) fn version(conn: &Connection, path: &Path) -> Result<usize, WarehouseError> {
    let found = MIGRATIONS
        .current_version(conn)
        .map_err(|cause| unreadable_error(path, &cause))?;
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
/// left it (schema 6's child tables in their own form below schema 9), for migration tests.
#[cfg(test)]
pub fn migrate_to(conn: &mut Connection, version: usize) -> rusqlite_migration::Result<()> {
    let children = if version < latest_version() {
        ChildTables::AsSchema6
    } else {
        ChildTables::KeyFirst
    };
    migrations(children).to_version(conn, version)
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
        assert_eq!(latest_version(), 13);
    }

    /// A file migrated under the rollback journal is back in WAL mode, and its `main` database
    /// can be checkpointed at once. (That closing says nothing — no WARN — is asserted through
    /// the binary in `tests/it/migrate.rs`.)
    #[test]
    fn a_migrated_file_is_back_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let mut conn = Connection::open(&path).unwrap();
        migrate_to(&mut conn, 5).unwrap();
        drop(conn);
        let (conn, before) = open_for_writing(&path, Duration::from_secs(1)).unwrap();
        assert_eq!(before, 5);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let busy: i64 = conn
            .query_row("PRAGMA main.wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 0);
    }
}
