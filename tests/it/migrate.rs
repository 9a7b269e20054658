//! `callsync migrate` from schema 5 to 6 killed with SIGKILL at seeded points of the copy
//! (decided on its log events, never on time): every kill leaves the schema 5 file whole, or
//! (killed after its commit) the finished schema 6 one; the next run migrates again, to the
//! same rows as a migration never interrupted.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Calls in the version 5 warehouse (with 7 child rows each): enough for each table's copy to
/// take a while.
const CALLS: i64 = 60_000;

/// A version 5 warehouse as callsync 5 wrote it (its migrations, then rows): each call with a
/// custom parameter, 2 attempts each with an outcome and a variable, and a notification; uids
/// random, so their order is not the insertion order.
fn version_5_warehouse(path: &Path) {
    let conn = rusqlite::Connection::open(path).expect("open");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for version in 1..=5 {
        let dir = std::fs::read_dir(&root)
            .expect("migrations/")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{version:04}-")))
            })
            .expect("a migration directory");
        let sql = std::fs::read_to_string(dir.join("up.sql")).expect("up.sql");
        conn.execute_batch(&format!("BEGIN; {sql}; COMMIT;"))
            .expect("a migration applies");
    }
    conn.execute_batch(&format!(
        "PRAGMA user_version = 5;
         PRAGMA journal_mode = WAL;
         BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {CALLS})
         INSERT INTO calls (uid, schedule_uid, status, created_at, updated_at, content_hash,
           synced_at, attempt_count, last_attempt_uid)
         SELECT lower(hex(randomblob(16))), 'schedule', 'completed', '2026-01-01 00:00:00',
           printf('2026-01-01 00:%02d:%02d', i / 60 % 60, i % 60), i, '2026-01-01 00:00:00', 2,
           NULL
         FROM n;
         INSERT INTO call_custom_parameters (call_uid, name, value)
           SELECT uid, 'plan', 'gold' FROM calls;
         INSERT INTO call_attempts (uid, call_uid, position, status, duration)
           SELECT lower(hex(randomblob(16))), uid, k, 'hangup', 20 + k
           FROM calls, (SELECT 0 AS k UNION ALL SELECT 1);
         INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name)
           SELECT lower(hex(randomblob(16))), uid, call_uid, 'interested' FROM call_attempts;
         INSERT INTO attempt_variables (uid, attempt_uid, call_uid, name, value)
           SELECT lower(hex(randomblob(16))), uid, call_uid, 'consent', 'yes' FROM call_attempts;
         INSERT INTO call_notifications (uid, call_uid, status, message_count)
           SELECT lower(hex(randomblob(16))), uid, 'delivered', 1 FROM calls;
         COMMIT;"
    ))
    .expect("rows written");
}

const TABLES: [(&str, &str); 6] = [
    ("calls", "id"),
    ("call_custom_parameters", "call_id, name"),
    ("call_attempts", "id"),
    ("attempt_outcomes", "call_id, attempt_id, uid"),
    ("attempt_variables", "call_id, attempt_id, uid"),
    ("call_notifications", "call_id, uid"),
];

/// The schema version and, at version 6 or later, a fingerprint of every row of the call tables (ids
/// included); at version 5, the number of calls and whether the file is intact.
fn state(path: &Path) -> (i64, u64) {
    let conn = rusqlite::Connection::open(path).expect("open");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .expect("quick_check");
    assert_eq!(check, "ok", "the file is intact");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    if version == 5 {
        let calls: i64 = conn
            .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
            .expect("calls");
        let leftovers: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%_v5'",
                [],
                |r| r.get(0),
            )
            .expect("schema");
        assert_eq!((calls, leftovers), (CALLS, 0), "schema 5 as it was");
        return (version, 0);
    }
    for (table, key) in TABLES {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {key}"))
            .expect("prepare");
        let n = stmt.column_count();
        let mut rows = stmt.query([]).expect("rows");
        while let Some(row) = rows.next().expect("a row") {
            for i in 0..n {
                format!("{:?}", row.get_ref(i).expect("a value")).hash(&mut hasher);
            }
        }
    }
    (version, hasher.finish())
}

fn config(dir: &Path, warehouse: &Path) -> PathBuf {
    config_in(dir, "callsync", warehouse)
}

/// `NAME.toml` in `dir`, for the warehouse at `warehouse` (a busy timeout of 1 s: a reader
/// holding the file makes the migration wait that long before it keeps the WAL).
fn config_in(dir: &Path, name: &str, warehouse: &Path) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:9/\"\naccess_token = \"t\"\n\n\
             [warehouse]\npath = \"{}\"\nbusy_timeout_secs = 1\n\n[sync]\nschedules = []\n",
            warehouse.display()
        ),
    )
    .expect("config written");
    path
}

async fn migrate(config: &Path) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(config)
        .arg("migrate")
        .output()
        .await
        .expect("callsync runs")
}

/// Runs `callsync migrate` and kills it (SIGKILL) once it has logged `kill_after` lines
/// containing `event`; returns whether it was still running to be killed.
async fn migrate_killed_after(config: &Path, event: &str, kill_after: usize) -> bool {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(config)
        .arg("migrate")
        .env("RUST_LOG", "callsync=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("callsync starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = 0;
    let patience = Duration::from_secs(60);
    loop {
        match tokio::time::timeout(patience, lines.next_line()).await {
            Ok(Ok(Some(line))) if line.contains(event) => {
                seen += 1;
                if seen == kill_after {
                    child.start_kill().expect("SIGKILL");
                    let status = child.wait().await.expect("exit status");
                    return status.code().is_none();
                }
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => {
                let status = child.wait().await.expect("exit status");
                panic!("callsync migrate ended before the event {event:?} #{kill_after}: {status}");
            }
            Ok(Err(err)) => panic!("reading stderr: {err}"),
            Err(_) => panic!("no event {event:?} #{kill_after} within {patience:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_killed_at_any_point_leaves_schema_5_and_the_next_run_migrates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = dir.path().join("callsync.db");
    version_5_warehouse(&warehouse);
    // The reference: a copy migrated without interruption.
    let clean_dir = tempfile::tempdir().expect("temp dir");
    let clean = clean_dir.path().join("callsync.db");
    std::fs::copy(&warehouse, &clean).expect("copy");
    let wal = |p: &Path| PathBuf::from(format!("{}-wal", p.display()));
    if wal(&warehouse).exists() {
        std::fs::copy(wal(&warehouse), wal(&clean)).expect("copy the WAL");
    }
    let out = migrate(&config(clean_dir.path(), &clean)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = state(&clean);
    // Schema 6 and every later migration, in one transaction.
    let latest = callsync::warehouse::sqlite::latest_version() as i64;
    assert_eq!(expected.0, latest);

    // Killed at the start of the copy, after each of the 6 tables is copied, and once the
    // old tables are being dropped, in a seeded order.
    let config = config(dir.path(), &warehouse);
    let mut points: Vec<(&str, usize)> = vec![
        ("migrating the warehouse to schema 6", 1),
        ("dropping the version 5 tables", 1),
    ];
    points.extend((1..=6).map(|n| ("a table copied", n)));
    points.shuffle(&mut rand::rngs::StdRng::seed_from_u64(19));
    let mut left_at_5 = 0;
    for (event, n) in points {
        if state(&warehouse).0 == latest {
            break; // an earlier kill came after the commit
        }
        let killed = migrate_killed_after(&config, event, n).await;
        let after = state(&warehouse);
        assert!(
            after == (5, 0) || after == expected,
            "killed after {event:?} #{n}: neither schema 5 as it was nor the finished migration"
        );
        if killed && after.0 == 5 {
            left_at_5 += 1;
        }
    }
    assert!(left_at_5 >= 1, "no kill came before the commit");
    let out = migrate(&config).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        state(&warehouse),
        expected,
        "the same rows as a migration never killed"
    );
    assert_eq!(
        journal_mode(&warehouse),
        "wal",
        "WAL mode again once migrated"
    );
}

/// The journal mode the file is in.
fn journal_mode(path: &Path) -> String {
    rusqlite::Connection::open(path)
        .expect("open")
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode")
}

/// A migration runs under a rollback journal when it has the file to itself, and under the
/// WAL when a reader keeps the file open (leaving WAL mode needs the file alone): the same
/// rows either way, and the file in WAL mode afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_with_a_reader_open_runs_under_the_wal_to_the_same_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let alone = dir.path().join("alone.db");
    version_5_warehouse(&alone);
    let read = dir.path().join("read.db");
    std::fs::copy(&alone, &read).expect("copy");

    let out = migrate(&config_in(dir.path(), "alone", &alone)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.contains("runs under the WAL"), "{log}");
    assert!(!log.contains(" WARN "), "nothing to warn of: {log}");
    assert!(
        log.contains(&format!(
            "migrating the warehouse to schema 6 (insertion-ordered): copying every row, in one transaction calls={CALLS}"
        )),
        "a file with rows says what the copy will take: {log}"
    );

    let reader = rusqlite::Connection::open(&read).expect("a reader");
    let calls: i64 = reader
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .expect("the reader reads");
    assert_eq!(calls, CALLS);
    let out = migrate(&config_in(dir.path(), "read", &read)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("runs under the WAL"), "{log}");
    assert!(!log.contains(" WARN "), "nothing to warn of: {log}");
    drop(reader);

    assert_eq!(state(&read), state(&alone), "the same rows either way");
    assert_eq!(journal_mode(&alone), "wal");
    assert_eq!(journal_mode(&read), "wal");
}

/// A new warehouse runs every migration from 0, schema 6's copy included, with nothing to
/// copy: it says nothing of a copy (nor anything else at INFO); the command's own line says
/// what was done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_warehouse_is_created_without_a_word_of_a_copy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = dir.path().join("callsync.db");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(config(dir.path(), &warehouse))
        .arg("migrate")
        .env("RUST_LOG", "callsync=info")
        .output()
        .await
        .expect("callsync runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "warehouse {}: schema version 0 -> {}\n",
            warehouse.display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no log line");
}
