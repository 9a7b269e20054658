//! The warehouse on real files: idempotency, mirroring, checkpoints, transactions, WAL.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::service::{OutboundCall, Timestamp};
use crate::warehouse::destination::Destination;

const SCHEDULE: Uuid = Uuid::from_u128(0x5c4e_d01e);

fn open(dir: &tempfile::TempDir) -> Warehouse {
    Warehouse::open(&dir.path().join("w.db"), Duration::from_secs(5)).unwrap()
}

/// The walker the tests record their passes as.
fn walker() -> ProcessIdentity {
    ProcessIdentity {
        host: "db-host".into(),
        instance: "blue".into(),
        pid: 4242,
    }
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

fn uid(n: u128) -> String {
    Uuid::from_u128(n).to_string()
}

/// A call with `attempts` attempts, each with one outcome and one variable.
fn call_json(n: u128, updated: &str, attempts: usize) -> Value {
    let attempts: Vec<Value> = (0..attempts)
        .map(|i| {
            let a = n * 100 + i as u128;
            json!({
                "uid": uid(a), "status": "hangup",
                "started_at": format!("2026-01-01T00:0{i}:00Z"),
                "answered_at": if i == 0 { Value::Null } else { json!(format!("2026-01-01T00:0{i}:05Z")) },
                "ended_at": format!("2026-01-01T00:0{i}:30Z"), "duration": 25 + i,
                "transfer_started_at": null, "transfer_answered_at": null, "transfer_destination": null,
                "error_details": null,
                "call_outcomes": [{"uid": uid(a * 10 + 1), "name": format!("outcome-{i}"), "created_at": "2026-01-01T00:00:30Z"}],
                "call_attempts_variables": [{"uid": uid(a * 10 + 2), "name": "v", "value": "x", "status": "confirmed"}]
            })
        })
        .collect();
    json!({
        "uid": uid(n), "status": "pending", "progress": "in_queue", "is_test_call": false,
        "retry_intervals": [60], "attempts_remaining": 2,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": updated,
        "outbound_call_info": {"phone_number": "15550100", "full_name": "Ada", "custom_parameters": {"plan": "gold"}},
        "outbound_call_attempts": attempts,
        "call_notifications": [{"uid": uid(n * 7), "status": "delivered", "message_count": 1, "delivered_at": "2026-01-01T00:05:00Z"}]
    })
}

fn call(v: Value) -> OutboundCall {
    serde_json::from_value(v).unwrap()
}

fn write(w: &mut Warehouse, calls: &[OutboundCall], checkpoint: Option<&str>) -> PageWrite {
    w.write_page(SCHEDULE, calls, checkpoint.map(ts), Timestamp::now())
        .unwrap()
}

#[test]
fn the_same_page_twice_writes_nothing_the_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let page = vec![
        call(call_json(1, "2026-01-01T00:10:00Z", 2)),
        call(call_json(2, "2026-01-01T00:11:00Z", 0)),
    ];
    assert_eq!(write(&mut w, &page, None).calls_written, 2);
    let before = w.snapshot(None).unwrap();
    let again = write(&mut w, &page, None);
    assert_eq!((again.calls_written, again.calls_unchanged), (0, 2));
    assert_eq!(w.snapshot(None).unwrap(), before);
}

#[test]
fn a_change_within_the_same_second_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let mut v = call_json(1, "2026-01-01T00:10:00Z", 1);
    write(&mut w, &[call(v.clone())], None);
    v["progress"] = json!("answered");
    assert_eq!(write(&mut w, &[call(v)], None).calls_written, 1);
    let snap = w.snapshot(None).unwrap();
    assert_eq!(snap.calls[0]["progress"], "answered".to_owned().into());
}

#[test]
fn children_mirror_the_service_and_missing_keys_keep_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 3))],
        None,
    );
    let s = w.snapshot(None).unwrap();
    assert_eq!(
        (
            s.call_attempts.len(),
            s.attempt_outcomes.len(),
            s.attempt_variables.len()
        ),
        (3, 3, 3)
    );
    assert_eq!(s.calls[0]["attempt_count"], 3i64.into());
    assert_eq!(
        s.calls[0]["outcome_names"],
        "outcome-0, outcome-1, outcome-2".to_owned().into()
    );
    assert_eq!(s.calls[0]["last_attempt_duration"], 27i64.into());
    assert_eq!(s.calls[0]["answered"], 1i64.into());
    assert_eq!(s.calls[0]["notification_count"], 1i64.into());

    // The service drops the last attempt, and the first attempt's outcome: so do we.
    let mut v = call_json(1, "2026-01-01T00:11:00Z", 2);
    v["outbound_call_attempts"][0]["call_outcomes"] = json!([]);
    v["call_notifications"] = json!([]);
    write(&mut w, &[call(v.clone())], None);
    let s = w.snapshot(None).unwrap();
    assert_eq!(
        (
            s.call_attempts.len(),
            s.attempt_outcomes.len(),
            s.attempt_variables.len(),
            s.call_notifications.len()
        ),
        (2, 1, 2, 0)
    );
    assert_eq!(s.calls[0]["outcome_names"], "outcome-1".to_owned().into());
    assert_eq!(s.calls[0]["last_attempt_duration"], 26i64.into());

    // A summary list item (no children keys) changes the call but keeps the children.
    let mut summary = v.clone();
    summary["updated_at"] = json!("2026-01-01T00:12:00Z");
    for a in summary["outbound_call_attempts"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        a.remove("call_outcomes");
        a.remove("call_attempts_variables");
    }
    summary
        .as_object_mut()
        .unwrap()
        .remove("call_notifications");
    write(&mut w, &[call(summary.clone())], None);
    let s2 = w.snapshot(None).unwrap();
    assert_eq!(s2.attempt_outcomes, s.attempt_outcomes);
    assert_eq!(s2.attempt_variables, s.attempt_variables);
    summary
        .as_object_mut()
        .unwrap()
        .remove("outbound_call_attempts");
    write(&mut w, &[call(summary)], None);
    assert_eq!(w.snapshot(None).unwrap().call_attempts, s.call_attempts);
}

#[test]
fn the_checkpoint_moves_with_the_page_and_never_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    assert_eq!(w.checkpoint(SCHEDULE).unwrap(), None);
    write(&mut w, &[], Some("2026-01-01T00:10:00.000000Z"));
    write(&mut w, &[], Some("2026-01-01T00:09:59.999999Z"));
    let c = w.checkpoint(SCHEDULE).unwrap().unwrap();
    assert_eq!(c.cursor, ts("2026-01-01T00:10:00Z"));
    // `…10:00Z` sorts after `…10:00.5Z`-style text the wrong way; instants decide.
    write(&mut w, &[], Some("2026-01-01T00:10:00.5Z"));
    assert_eq!(
        w.checkpoint(SCHEDULE).unwrap().unwrap().cursor,
        ts("2026-01-01T00:10:00.5Z")
    );
    // The operator tool may move it back, and says what was there.
    let before = w
        .replace_checkpoint(SCHEDULE, Some(ts("2025-01-01T00:00:00Z")))
        .unwrap();
    assert_eq!(before.unwrap().cursor, ts("2026-01-01T00:10:00.5Z"));
    assert_eq!(
        w.checkpoint(SCHEDULE).unwrap().unwrap().cursor,
        ts("2025-01-01T00:00:00Z")
    );
    w.replace_checkpoint(SCHEDULE, None).unwrap();
    assert_eq!(w.checkpoint(SCHEDULE).unwrap(), None);
}

#[test]
fn a_failed_page_leaves_neither_rows_nor_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    // Make writing the second call fail inside the transaction.
    w.conn
        .execute_batch(
            "CREATE TRIGGER fail_on_2 BEFORE INSERT ON calls WHEN NEW.external_id = 'boom'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();
    let mut bad = call_json(2, "2026-01-01T00:11:00Z", 1);
    bad["external_id"] = json!("boom");
    let page = [call(call_json(1, "2026-01-01T00:10:00Z", 1)), call(bad)];
    let err = w
        .write_page(
            SCHEDULE,
            &page,
            Some(ts("2026-01-01T00:11:00Z")),
            Timestamp::now(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(w.snapshot(None).unwrap(), Snapshot::default());
    assert_eq!(w.checkpoint(SCHEDULE).unwrap(), None);
}

#[test]
fn a_reader_never_sees_half_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let reader = rusqlite::Connection::open(dir.path().join("w.db")).unwrap();
    let tx = w.conn.transaction().unwrap();
    tx.execute_batch(
        "INSERT INTO calls (uid, schedule_uid, status, created_at, updated_at, content_hash, synced_at)
         VALUES ('a', 's', 'pending', '2026-01-01 00:00:00', '2026-01-01 00:00:00', 0, '2026-01-01 00:00:00')",
    )
    .unwrap();
    let seen: i64 = reader
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seen, 0, "uncommitted rows are invisible to readers");
    tx.commit().unwrap();
    let seen: i64 = reader
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seen, 1);
}

#[test]
fn wal_persists_so_read_only_users_can_open_after_the_writer_stops() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    {
        let mut w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        write(
            &mut w,
            &[call(call_json(1, "2026-01-01T00:10:00Z", 1))],
            None,
        );
        let mode: String = w
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    assert!(dir.path().join("w.db-wal").exists(), "the WAL is kept");
    assert!(dir.path().join("w.db-shm").exists());
    for f in ["w.db", "w.db-wal", "w.db-shm"] {
        std::fs::set_permissions(dir.path().join(f), std::fs::Permissions::from_mode(0o444))
            .unwrap();
    }
    let r = Warehouse::open_read_only(&path).unwrap();
    assert_eq!(r.snapshot(None).unwrap().calls.len(), 1);
    assert_eq!(r.status().unwrap()[0].calls, 1);
}

fn calls_in(path: &std::path::Path) -> Vec<String> {
    let r = Warehouse::open_read_only(path).unwrap();
    let check: String = r
        .conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut stmt = r
        .conn
        .prepare("SELECT uid FROM calls ORDER BY uid")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_clean_close_empties_the_wal_so_a_file_copied_back_is_not_undone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let wal = dir.path().join("w.db-wal");
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 2))],
        None,
    );
    drop(w);
    assert_eq!(
        std::fs::metadata(&wal).unwrap().len(),
        0,
        "the WAL is kept, empty"
    );
    std::fs::copy(&path, dir.path().join("old.db")).unwrap();
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:20:00Z", 3))],
        None,
    );
    write(
        &mut w,
        &[call(call_json(2, "2026-01-01T00:20:00Z", 3))],
        None,
    );
    drop(w);
    // What an operator does with a copy: put it back while callsync is stopped.
    std::fs::copy(dir.path().join("old.db"), &path).unwrap();
    drop(open(&dir));
    assert_eq!(calls_in(&path), vec![uid(1)]);
    let attempts: i64 = open(&dir)
        .conn
        .query_row("SELECT count(*) FROM call_attempts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(attempts, 2, "the copy's rows, not the later ones");
}

#[test]
fn a_backup_restored_replaces_the_warehouse_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let copy = dir.path().join("copy.db");
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 1))],
        Some("2026-01-01T00:10:00.000000Z"),
    );
    let report = w.backup_to(&copy, false).unwrap();
    assert_eq!(
        report.contents,
        Contents {
            schema_version: schema::latest_version(),
            schedules: 1,
            calls: 1
        }
    );
    assert_eq!(report.bytes, std::fs::metadata(&copy).unwrap().len());
    assert!(
        !dir.path().join("copy.db-wal").exists(),
        "a backup is one file"
    );
    let again = w.backup_to(&copy, false).unwrap_err();
    assert_eq!(
        again.to_string(),
        format!(
            "{} already exists; choose another path, or pass --force to overwrite it",
            copy.display()
        )
    );
    w.backup_to(&copy, true).unwrap();
    let over_itself = w.backup_to(&path, true).unwrap_err();
    assert!(
        matches!(over_itself, WarehouseError::BackupOverWarehouse { .. }),
        "{over_itself}"
    );
    write(
        &mut w,
        &[call(call_json(2, "2026-01-01T00:20:00Z", 1))],
        Some("2026-01-01T00:20:00Z"),
    );
    // A writer has the warehouse open: the restore waits for it to be gone.
    let busy = restore(&copy, &path, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(busy, WarehouseError::InUse { .. }), "{busy}");
    drop(w);
    let report = restore(&copy, &path, Duration::from_secs(5)).unwrap();
    assert_eq!(report.contents.calls, 1);
    assert_eq!(
        report.removed,
        vec![dir.path().join("w.db-wal"), dir.path().join("w.db-shm")]
    );
    assert_eq!(calls_in(&path), vec![uid(1)]);
    let w = open(&dir);
    assert_eq!(
        w.checkpoint(SCHEDULE).unwrap().unwrap().cursor,
        ts("2026-01-01T00:10:00Z")
    );
}

/// Without its `-wal`/`-shm`, a read-only warehouse is read as the file alone (creating them
/// would leave files the warehouse's owner may not write); a writer that starts meanwhile
/// changes the file under that reader, so a backup read that way is discarded, not kept.
#[test]
fn a_reader_without_wal_files_creates_none_and_a_backup_it_makes_notices_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 1))],
        Some("2026-01-01T00:10:00.000000Z"),
    );
    drop(w);
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(access::beside(&path, suffix)).unwrap();
    }
    let reader = Warehouse::open_read_only(&path).unwrap();
    assert!(matches!(reader.reading, schema::Reading::Alone(_)));
    assert_eq!(reader.status().unwrap()[0].calls, 1);
    let copy = dir.path().join("copy.db");
    reader.backup_to(&copy, false).unwrap();
    assert!(!access::beside(&path, "-wal").exists());
    assert!(!access::beside(&path, "-shm").exists());

    let mut writer = open(&dir);
    write(
        &mut writer,
        &[call(call_json(2, "2026-01-01T00:20:00Z", 1))],
        None,
    );
    let err = reader
        .backup_to(&dir.path().join("late.db"), false)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the warehouse {} changed while it was copied (a writer opened it meanwhile), so the copy was discarded; run `callsync backup` again",
            path.display()
        )
    );
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["copy.db", "w.db", "w.db-shm", "w.db-wal"]);
    // With the writer's files there, readers share them and see its pages.
    let shared = Warehouse::open_read_only(&path).unwrap();
    assert_eq!(shared.reading, schema::Reading::Shared);
    assert_eq!(shared.status().unwrap()[0].calls, 2);
    shared
        .backup_to(&dir.path().join("late.db"), false)
        .unwrap();
}

/// `check`'s view of the warehouse is `run`'s: nothing yet (it will be created), an older
/// schema (it will be migrated), or refused as `run` refuses it; it changes nothing.
#[test]
fn check_before_writing_identifies_the_warehouse_as_a_writer_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    assert_eq!(check_before_writing(&path).unwrap(), None);
    assert!(!path.exists());
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 4).unwrap();
    drop(conn);
    assert_eq!(check_before_writing(&path).unwrap(), Some(4));
    let migrated = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((migrated.from, migrated.to), (4, schema::latest_version()));
    assert_eq!(
        check_before_writing(&path).unwrap(),
        Some(schema::latest_version())
    );

    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let refused = check_before_writing(&other).unwrap_err();
    let by_a_writer = Warehouse::open(&other, Duration::from_secs(5))
        .err()
        .unwrap();
    assert!(
        matches!(refused, WarehouseError::NotAWarehouse { .. }),
        "{refused}"
    );
    assert_eq!(refused.to_string(), by_a_writer.to_string());
}

#[test]
fn no_writer_opens_the_warehouse_while_a_restore_holds_it() {
    use file_lock::{FileLock, LockByte, LockMode};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(open(&dir));
    let restoring = FileLock::try_lock(&path, LockByte::Warehouse, LockMode::Exclusive).unwrap();
    let err = Warehouse::open(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "the warehouse {} is being restored by `callsync restore`; run this again when it has finished",
            path.display()
        )
    );
    // Readers are not held back.
    Warehouse::open_read_only(&path).unwrap();
    drop(restoring);
    drop(open(&dir));
}

#[test]
fn a_restore_refuses_what_is_not_an_intact_callsync_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(open(&dir));
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "not a database at all, just some text that is long enough",
    )
    .unwrap();
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    for (backup, problem) in [
        (&text, "file is not a database"),
        (&other, "it is not a callsync warehouse"),
        (&dir.path().join("missing.db"), "no such file"),
    ] {
        let err = restore(backup, &path, Duration::from_secs(5)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot restore {}: {problem}; choose an intact callsync backup",
                backup.display()
            )
        );
    }
    assert_eq!(
        calls_in(&path),
        Vec::<String>::new(),
        "the warehouse is untouched"
    );
}

#[test]
fn a_warehouse_from_a_newer_callsync_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(Warehouse::open(&path, Duration::from_secs(5)).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = Warehouse::open(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            WarehouseError::TooNew {
                found: 99,
                supported,
                ..
            } if supported == schema::latest_version()
        ),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade callsync"), "{err}");
    assert!(Warehouse::open_read_only(&path).is_err());
    let as_it_was = FileState::of(&path);
    let err = Warehouse::migrate(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert!(matches!(err, WarehouseError::TooNew { .. }), "{err}");
    assert_eq!(
        FileState::of(&path),
        as_it_was,
        "a newer callsync's warehouse is refused as it was found, its -wal and -shm kept"
    );

    // The same file in rollback-journal mode (a copy made by another tool) stays in it.
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "journal_mode", "DELETE")
        .unwrap();
    let as_it_was = FileState::of(&path);
    assert_eq!(
        (
            as_it_was.journal_mode.as_str(),
            as_it_was.wal,
            as_it_was.shm
        ),
        ("rollback", false, false)
    );
    let err = Warehouse::migrate(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert!(matches!(err, WarehouseError::TooNew { .. }), "{err}");
    assert_eq!(FileState::of(&path), as_it_was);
}

/// A database file as another program would find it: its bytes (a digest, to keep a
/// failure's message short), its journal mode, and which of the files SQLite puts beside it
/// exist.
#[derive(Debug, PartialEq)]
struct FileState {
    len: usize,
    digest: u64,
    journal_mode: String,
    wal: bool,
    shm: bool,
}

impl FileState {
    fn of(path: &std::path::Path) -> FileState {
        let beside = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name).exists()
        };
        let (wal, shm) = (beside("-wal"), beside("-shm"));
        let bytes = std::fs::read(path).unwrap();
        // Bytes 18 and 19 of the header are 2 in WAL mode, 1 in rollback-journal mode.
        let journal_mode = match bytes[18..20] {
            [2, 2] => "wal",
            [1, 1] => "rollback",
            _ => "other",
        }
        .to_owned();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&bytes, &mut hasher);
        FileState {
            len: bytes.len(),
            digest: std::hash::Hasher::finish(&hasher),
            journal_mode,
            wal,
            shm,
        }
    }
}

#[test]
fn another_programs_database_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crm.db");
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('Ada');")
        .unwrap();
    drop(other);
    let expected = format!(
        "{} is an SQLite database of another program, not a callsync warehouse (it holds tables, not callsync's); point warehouse.path at a new file or at a callsync warehouse",
        path.display()
    );
    let as_it_was = FileState::of(&path);
    assert_eq!(
        (
            as_it_was.journal_mode.as_str(),
            as_it_was.wal,
            as_it_was.shm
        ),
        ("rollback", false, false)
    );
    let err = Warehouse::open(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert!(matches!(err, WarehouseError::NotAWarehouse { .. }), "{err}");
    assert_eq!(err.to_string(), expected);
    assert_eq!(FileState::of(&path), as_it_was, "refused by open");
    let err = Warehouse::migrate(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert_eq!(err.to_string(), expected);
    assert_eq!(FileState::of(&path), as_it_was, "refused by migrate");
    let err = Warehouse::open_read_only(&path).err().unwrap();
    assert_eq!(err.to_string(), expected);
    assert_eq!(FileState::of(&path), as_it_was, "refused by a reader");
    let tables: Vec<String> = rusqlite::Connection::open(&path)
        .unwrap()
        .prepare("SELECT name FROM sqlite_schema")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, vec!["contacts"], "none of our tables were added");
    // Whatever its user_version says.
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 2)
        .unwrap();
    let as_it_was = FileState::of(&path);
    let err = Warehouse::open(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert_eq!(err.to_string(), expected);
    assert_eq!(FileState::of(&path), as_it_was);

    // An empty file is a new database, not someone else's.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    assert!(Warehouse::open(&empty, Duration::from_secs(5)).is_ok());
}

#[test]
fn a_full_disk_or_a_read_only_file_during_a_write_names_the_warehouse_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let path = w.path().to_owned();
    let page: Vec<OutboundCall> = (1..=200)
        .map(|n| call(call_json(n, "2026-01-01T00:10:00Z", 3)))
        .collect();

    // The file may not grow: SQLite says the disk is full.
    let pages: i64 = w
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    w.conn.pragma_update(None, "max_page_count", pages).unwrap();
    let err = w
        .write_page(
            SCHEDULE,
            &page,
            Some(ts("2026-01-01T00:10:00Z")),
            Timestamp::now(),
        )
        .err()
        .unwrap();
    assert!(
        matches!(&err, WarehouseError::Sql { path: p, .. } if *p == path),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("warehouse {}: ", path.display())),
        "{message}"
    );
    assert!(
        message.ends_with(
            ": database or disk is full; free space on its filesystem, then run callsync again"
        ),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert!(std::error::Error::source(&err).is_none());
    assert_eq!(w.checkpoint(SCHEDULE).unwrap(), None, "nothing was written");

    // The connection may not write: SQLite says the database is read-only.
    w.conn
        .pragma_update(None, "max_page_count", 1_000_000)
        .unwrap();
    w.conn.pragma_update(None, "query_only", true).unwrap();
    let err = w
        .write_page(SCHEDULE, &page[..1], None, Timestamp::now())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "warehouse {}: starting a page transaction: attempt to write a readonly database; make the file, its -wal and -shm files and its directory writable by this user",
            path.display()
        )
    );
}

#[test]
fn a_failed_migration_and_a_damaged_file_are_one_line_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 2).unwrap();
    // Migration 3 adds this column: it fails, quoting its whole SQL in rusqlite_migration's
    // own message.
    conn.execute_batch("ALTER TABLE sync_runs ADD COLUMN outcome TEXT")
        .unwrap();
    drop(conn);
    let err = Warehouse::migrate(&path, Duration::from_secs(5))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        format!(
            "cannot migrate the warehouse {}: duplicate column name: outcome",
            path.display()
        )
    );

    // Not a database at all: it cannot be read, never "migrate" — a writer too reads the
    // file before writing anything.
    std::fs::write(&path, vec![7u8; 8192]).unwrap();
    let advice = "file is not a database; the file is damaged or not a database: restore it from a backup, or move it away to start a new warehouse";
    assert_eq!(
        Warehouse::open_read_only(&path).err().unwrap().to_string(),
        format!("cannot read the warehouse {}: {advice}", path.display())
    );
    let err = Warehouse::open(&path, Duration::from_secs(5))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!("cannot read the warehouse {}: {advice}", path.display())
    );
    assert!(
        std::error::Error::source(&err).is_none(),
        "the cause is in the message, not also a source"
    );
}

#[test]
fn reading_a_warehouse_that_does_not_exist_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let Err(err) = Warehouse::open_read_only(&path) else {
        panic!("a missing warehouse opened");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "there is no warehouse at {} yet: run `callsync sync` or start the daemon to create it (or check warehouse.path)",
            path.display()
        )
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn migrate_reports_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let first = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    let latest = schema::latest_version();
    assert_eq!((first.from, first.to), (0, latest));
    let again = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((again.from, again.to), (latest, latest));
}

#[test]
fn writers_opening_a_new_warehouse_at_once_all_migrate_it() {
    // Daemons sharing the schedules start together: each opens (and migrates) the file.
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let start = std::sync::Arc::new(std::sync::Barrier::new(6));
        let writers: Vec<_> = (0..6)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    Warehouse::open(&path, Duration::from_secs(30)).map(drop)
                })
            })
            .collect();
        for writer in writers {
            writer
                .join()
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
        }
        let w = Warehouse::open_read_only(&path).unwrap();
        assert!(w.status().unwrap().is_empty());
    }
}

#[test]
fn status_reports_runs_checkpoints_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let run = w
        .start_run(
            SCHEDULE,
            RunKind::Incremental,
            ts("2026-01-01T01:00:00Z"),
            &walker(),
        )
        .unwrap();
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 2))],
        Some("2026-01-01T00:10:00.000000Z"),
    );
    let stats = RunStats {
        pages: 1,
        calls_seen: 1,
        calls_written: 1,
        requests: 3,
        retries: 1,
        ..RunStats::default()
    };
    w.finish_run(
        run,
        &record(RunOutcome::Completed, stats, "2026-01-01T01:00:05Z", None),
    )
    .unwrap();
    let failed = w
        .start_run(
            SCHEDULE,
            RunKind::Backfill,
            ts("2026-01-01T02:00:00Z"),
            &walker(),
        )
        .unwrap();
    w.finish_run(
        failed,
        &record(
            RunOutcome::Failed,
            RunStats::default(),
            "2026-01-01T02:00:01Z",
            Some("HTTP 503"),
        ),
    )
    .unwrap();
    let status = w.status_at(ts("2026-01-01T02:00:10.5Z")).unwrap();
    assert_eq!(status.len(), 1);
    let s = &status[0];
    assert_eq!(
        s.cursor.map(Timestamp::to_warehouse_text).as_deref(),
        Some("2026-01-01T00:10:00.000000Z")
    );
    assert_eq!(s.lag_secs, Some(6610.5));
    assert_eq!(s.last_result, Some(Some(RunOutcome::Failed)));
    assert_eq!(
        s.last_success_at
            .map(Timestamp::to_warehouse_text)
            .as_deref(),
        Some("2026-01-01T01:00:05.000000Z")
    );
    let last = s.last_run.as_ref().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.error.as_deref()),
        ("backfill", Some("HTTP 503"))
    );
    assert_eq!(
        (
            s.calls,
            s.attempts,
            s.outcomes,
            s.variables,
            s.notifications
        ),
        (1, 2, 2, 2, 1)
    );
    assert_eq!(last.outcome, Some(RunOutcome::Failed));
    let json = serde_json::to_value(&status[0]).unwrap();
    assert_eq!(json["lag_secs"], json!(6610.5));
    assert_eq!(json["last_result"], json!("failed"));
    assert_eq!(json["last_run"]["error"], json!("HTTP 503"));
    // Who walked the pass (the text `status` prints is tested in cli/status/render.rs).
    assert_eq!(
        last.walked_by().as_deref(),
        Some("blue on db-host pid 4242")
    );
    assert_eq!(
        (
            &json["last_run"]["host"],
            &json["last_run"]["instance"],
            &json["last_run"]["pid"]
        ),
        (&json!("db-host"), &json!("blue"), &json!(4242))
    );
}

#[test]
fn walked_since_names_the_walker_of_a_finished_pass_begun_since_then() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let tick = ts("2026-01-01T01:00:00Z");
    let walked = |w: &Warehouse, kind, since| w.walked_since(SCHEDULE, kind, since).unwrap();
    assert_eq!(walked(&w, RunKind::Incremental, tick), None, "no pass yet");
    // A pass begun before the tick is the previous tick's.
    let before = w
        .start_run(
            SCHEDULE,
            RunKind::Incremental,
            ts("2026-01-01T00:59:59.999Z"),
            &walker(),
        )
        .unwrap();
    w.finish_run(
        before,
        &record(
            RunOutcome::Completed,
            RunStats::default(),
            "2026-01-01T01:00:01Z",
            None,
        ),
    )
    .unwrap();
    assert_eq!(walked(&w, RunKind::Incremental, tick), None);
    // Begun at the tick or after: walked, by whom it says; whatever its outcome.
    let other = ProcessIdentity {
        host: "other-host".into(),
        instance: "other-host".into(),
        pid: 7,
    };
    let run = w
        .start_run(SCHEDULE, RunKind::Incremental, tick, &other)
        .unwrap();
    // Not finished while the caller holds the claim: its process died; walk it again.
    assert_eq!(walked(&w, RunKind::Incremental, tick), None);
    w.finish_run(
        run,
        &record(
            RunOutcome::Failed,
            RunStats::default(),
            "2026-01-01T01:00:02Z",
            Some("HTTP 503"),
        ),
    )
    .unwrap();
    assert_eq!(walked(&w, RunKind::Incremental, tick), Some(other.clone()));
    assert_eq!(other.to_string(), "other-host pid 7");
    // Another kind is another question; a later tick too.
    assert_eq!(walked(&w, RunKind::Reconcile, tick), None);
    assert_eq!(
        walked(&w, RunKind::Incremental, ts("2026-01-01T01:00:00.001Z")),
        None
    );
    // A newer pass of the kind that died decides: the schedule is walked again.
    w.start_run(
        SCHEDULE,
        RunKind::Incremental,
        ts("2026-01-01T01:00:03Z"),
        &walker(),
    )
    .unwrap();
    assert_eq!(walked(&w, RunKind::Incremental, tick), None);
}

fn record(
    outcome: RunOutcome,
    stats: RunStats,
    finished_at: &str,
    error: Option<&str>,
) -> RunRecord {
    RunRecord {
        outcome,
        stats,
        finished_at: ts(finished_at),
        horizon: None,
        lag_secs: None,
        error: error.map(str::to_owned),
        error_kind: (outcome == RunOutcome::Failed).then_some(crate::ErrorKind::Service),
    }
}

#[test]
fn status_says_when_no_pass_has_been_recorded_for_several_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let run = w
        .start_run(
            SCHEDULE,
            RunKind::Incremental,
            ts("2026-01-01T02:00:00Z"),
            &walker(),
        )
        .unwrap();
    let finished = record(
        RunOutcome::Completed,
        RunStats::default(),
        "2026-01-01T02:00:01Z",
        None,
    );
    w.finish_run(run, &finished).unwrap();
    let now = ts("2026-01-01T03:00:00Z");
    let mut status = w.status_at(now).unwrap().remove(0);
    // Nothing counted (a schedule `status` was not given the cron of): nothing said.
    assert_eq!(
        (status.ticks_since_last_pass, status.no_recent_pass),
        (None, false)
    );
    assert_eq!(status.last_recorded_at(), Some(ts("2026-01-01T02:00:01Z")));

    status.set_ticks_since_last_pass(2);
    assert!(!status.no_recent_pass);

    status.set_ticks_since_last_pass(3);
    assert!(status.no_recent_pass);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["ticks_since_last_pass"], json!(3));
    assert_eq!(json["no_recent_pass"], json!(true));

    status.set_ticks_since_last_pass(TICKS_COUNTED);
    assert_eq!(status.ticks_since_last_pass, Some(TICKS_COUNTED));

    // A pass that has not ended counts from its start.
    w.start_run(
        SCHEDULE,
        RunKind::Reconcile,
        ts("2026-01-01T02:30:00Z"),
        &walker(),
    )
    .unwrap();
    let status = w.status_at(now).unwrap().remove(0);
    assert_eq!(status.last_recorded_at(), Some(ts("2026-01-01T02:30:00Z")));
}

#[test]
fn status_says_a_schedule_falls_behind_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let pass = |w: &mut Warehouse, outcome: RunOutcome, stats: RunStats| {
        let run = w
            .start_run(
                SCHEDULE,
                RunKind::Incremental,
                ts("2026-01-01T01:00:00Z"),
                &walker(),
            )
            .unwrap();
        let mut rec = record(outcome, stats, "2026-01-01T01:00:10Z", None);
        rec.horizon = Some(ts("2026-01-01T00:59:59Z"));
        rec.lag_secs = Some(-3.5);
        w.finish_run(run, &rec).unwrap();
    };
    let slow = RunStats {
        pages: 4,
        requests: 404,
        detail_requests: 400,
        rate_limited: 2,
        throttled_ms: 6_000,
        ..RunStats::default()
    };
    pass(&mut w, RunOutcome::Completed, RunStats::default());
    pass(&mut w, RunOutcome::Behind, slow.clone());
    let one = &w.status_at(ts("2026-01-01T02:00:00Z")).unwrap()[0];
    // One pass behind may be a burst: not yet falling behind.
    assert_eq!((one.behind_passes, one.falling_behind), (1, false));
    assert_eq!(one.last_result, Some(Some(RunOutcome::Behind)));
    pass(&mut w, RunOutcome::Behind, slow);
    let two = &w.status_at(ts("2026-01-01T02:00:00Z")).unwrap()[0];
    assert_eq!((two.behind_passes, two.falling_behind), (2, true));
    assert_eq!(two.slowed_by, ["rate limit", "detail fetches"]);
    // A behind pass still read everything up to its horizon.
    assert_eq!(
        two.last_success_at
            .map(Timestamp::to_warehouse_text)
            .as_deref(),
        Some("2026-01-01T01:00:10.000000Z")
    );
    let json = serde_json::to_value(two).unwrap();
    assert_eq!(json["falling_behind"], json!(true));
    assert_eq!(json["last_run"]["lag_secs"], json!(-3.5));
    assert_eq!(
        json["last_run"]["horizon"],
        json!("2026-01-01T00:59:59.000000Z")
    );
    assert_eq!(json["last_run"]["throttled_secs"], json!(6.0));
    pass(&mut w, RunOutcome::Completed, RunStats::default());
    let caught_up = &w.status_at(ts("2026-01-01T02:00:00Z")).unwrap()[0];
    assert_eq!(
        (caught_up.behind_passes, caught_up.falling_behind),
        (0, false)
    );
}

#[test]
fn a_lag_is_shown_as_it_is_negative_included() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    w.replace_checkpoint(SCHEDULE, Some(ts("2026-01-01T00:01:00Z")))
        .unwrap();
    let status = &w.status_at(ts("2026-01-01T00:00:30Z")).unwrap()[0];
    assert_eq!(status.lag_secs, Some(-30.0));
}

#[test]
fn last_result_says_how_the_latest_pass_ended() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let at = ts("2026-01-01T01:00:00Z");
    let result = |w: &Warehouse| {
        let status = w.status_at(at).unwrap();
        let json = serde_json::to_value(&status[0]).unwrap();
        // No checkpoint written: no lag either.
        assert_eq!(json["lag_secs"], Value::Null);
        json["last_result"].clone()
    };
    let cases = [
        (RunOutcome::Completed, None, json!("completed")),
        (RunOutcome::Behind, None, json!("behind")),
        (
            RunOutcome::Interrupted,
            Some(INTERRUPTED),
            json!("interrupted"),
        ),
        (
            RunOutcome::Failed,
            Some("GET /x: HTTP 500"),
            json!("failed"),
        ),
    ];
    for (outcome, error, expected) in cases {
        let run = w
            .start_run(SCHEDULE, RunKind::Incremental, at, &walker())
            .unwrap();
        let rec = record(outcome, RunStats::default(), "2026-01-01T01:00:00Z", error);
        w.finish_run(run, &rec).unwrap();
        assert_eq!(result(&w), expected, "{error:?}");
    }
    w.start_run(SCHEDULE, RunKind::Incremental, at, &walker())
        .unwrap();
    assert_eq!(result(&w), json!("running"));
}

#[test]
fn the_writer_enforces_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(&dir);
    let on: i64 = w
        .conn
        .pragma_query_value(None, "foreign_keys", |r| r.get(0))
        .unwrap();
    assert_eq!(on, 1);
    // An attempt of a call that does not exist is refused, not stored.
    let err = w
        .conn
        .execute(
            "INSERT INTO call_attempts (uid, call_uid, call_id, position, status) VALUES ('a', 'nope', 12345, 0, 'hangup')",
            [],
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("FOREIGN KEY constraint failed"),
        "{err}"
    );
}

/// `(name, declared type)` of every column of `table`, in order.
fn columns(conn: &rusqlite::Connection, table: &str) -> Vec<(String, String)> {
    let mut stmt = conn
        .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")
        .unwrap();
    stmt.query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The columns of `call_results` (schema version 2), in order, with their declared types.
const CALL_RESULTS: [(&str, &str); 30] = [
    ("call_uid", "TEXT"),
    ("schedule_uid", "TEXT"),
    ("external_id", "TEXT"),
    ("status", "TEXT"),
    ("progress", "TEXT"),
    ("is_test_call", "INTEGER"),
    ("phone_number", "TEXT"),
    ("phone_e164", "TEXT"),
    ("full_name", "TEXT"),
    ("first_name", "TEXT"),
    ("last_name", "TEXT"),
    ("email", "TEXT"),
    ("attempt_count", "INTEGER"),
    ("attempts_remaining", "INTEGER"),
    ("last_attempt_status", "TEXT"),
    ("last_attempt_started_at", "TIMESTAMPTZ"),
    ("last_attempt_answered_at", "TIMESTAMPTZ"),
    ("last_attempt_ended_at", "TIMESTAMPTZ"),
    ("last_attempt_duration", "INTEGER"),
    ("outcome_names", "TEXT"),
    ("answered", "INTEGER"),
    ("transferred", "INTEGER"),
    ("notification_count", "INTEGER"),
    ("cooldown_until", "TIMESTAMPTZ"),
    ("created_at", "TIMESTAMPTZ"),
    ("updated_at", "TIMESTAMPTZ"),
    ("phonetic_full_name", "TEXT"),
    ("phonetic_first_name", "TEXT"),
    ("phonetic_last_name", "TEXT"),
    ("event_date_time", "TIMESTAMPTZ"),
];

#[test]
fn call_results_has_plain_declared_types_and_its_version_2_columns_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(&dir);
    let expected: Vec<(String, String)> = CALL_RESULTS
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    // BI tools read a view's declared types: an expression would have none. Later versions
    // append columns (`analyst.rs` checks them).
    assert_eq!(
        columns(&w.conn, "call_results")[..CALL_RESULTS.len()],
        expected
    );
}

#[test]
fn version_2_passes_get_their_outcome_from_what_they_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 2).unwrap();
    conn.execute_batch(&format!(
        "INSERT INTO sync_runs (schedule_uid, kind, started_at, finished_at, error) VALUES
           ('{SCHEDULE}', 'incremental', '2026-01-01 00:00:00', '2026-01-01 00:00:01', NULL),
           ('{SCHEDULE}', 'incremental', '2026-01-01 00:01:00', '2026-01-01 00:01:01', '{INTERRUPTED}'),
           ('{SCHEDULE}', 'incremental', '2026-01-01 00:02:00', '2026-01-01 00:02:01', 'HTTP 500'),
           ('{SCHEDULE}', 'incremental', '2026-01-01 00:03:00', NULL, NULL);"
    ))
    .unwrap();
    drop(conn);
    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (2, schema::latest_version()));
    let w = Warehouse::open_read_only(&path).unwrap();
    let outcomes: Vec<Option<String>> = w
        .conn
        .prepare("SELECT outcome FROM sync_runs ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        outcomes,
        [Some("completed"), Some("interrupted"), Some("failed"), None]
            .map(|o| o.map(str::to_owned))
    );
    let status = &w.status().unwrap()[0];
    assert_eq!(status.last_result, Some(None), "not ended");
    assert_eq!(
        status
            .last_success_at
            .map(Timestamp::to_warehouse_text)
            .as_deref(),
        Some("2026-01-01T00:00:01.000000Z")
    );
}

#[test]
fn version_1_warehouses_migrate_to_2_keeping_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 1).unwrap();
    let v1 = columns(&conn, "call_results");
    assert_eq!(v1.len(), 26);
    conn.execute(
        "INSERT INTO calls (uid, schedule_uid, status, created_at, updated_at, phonetic_full_name,
           event_date_time, content_hash, synced_at)
         VALUES ('c1', 's1', 'pending', '2026-01-01 00:00:00', '2026-01-01 00:00:00', 'AY-da',
           '2026-02-01 10:00:00', 7, '2026-01-01 00:00:01')",
        [],
    )
    .unwrap();
    drop(conn);

    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (1, schema::latest_version()));
    let w = Warehouse::open_read_only(&path).unwrap();
    let v2 = columns(&w.conn, "call_results");
    // Schema 11 declares the time columns TIMESTAMPTZ: the same values, affinity and place.
    let v1: Vec<(String, String)> = (v1.into_iter())
        .map(|(name, declared)| match declared.as_str() {
            "TIMESTAMP" => (name, "TIMESTAMPTZ".to_owned()),
            _ => (name, declared),
        })
        .collect();
    assert_eq!(
        v2[..26],
        v1[..],
        "every version 1 column keeps its name, type and place"
    );
    let row: (String, Option<String>, Option<String>, String) = w
        .conn
        .query_row(
            "SELECT call_uid, phonetic_full_name, phonetic_first_name, event_date_time FROM call_results",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "c1".into(),
            Some("AY-da".into()),
            None,
            // Rewritten by schema 7 in RFC 3339 with six fraction digits.
            "2026-02-01T10:00:00.000000Z".into()
        )
    );
}

#[test]
fn snapshot_diff_names_table_key_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 0))],
        None,
    );
    let a = w.snapshot(None).unwrap();
    let mut v = call_json(1, "2026-01-01T00:10:00Z", 0);
    v["status"] = json!("completed");
    write(&mut w, &[call(v)], None);
    let b = w.snapshot(None).unwrap();
    let diff = a.diff(&b);
    assert_eq!(diff.len(), 2, "{diff:?}"); // status and content_hash
    assert!(
        diff.iter()
            .any(|d| d.starts_with("calls") && d.contains("status")),
        "{diff:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Writing a page twice equals writing it once, whatever the page.
    #[test]
    fn writing_twice_equals_writing_once(
        shape in prop::collection::vec((1u128..20, 0usize..4, 0u8..60), 0..12)
    ) {
        // A page lists each call once.
        let mut seen = std::collections::HashSet::new();
        let page: Vec<OutboundCall> = shape
            .iter()
            .filter(|(n, _, _)| seen.insert(*n))
            .map(|(n, attempts, sec)| call(call_json(*n, &format!("2026-01-01T00:00:{sec:02}Z"), *attempts)))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let mut once = Warehouse::open(&dir.path().join("a.db"), Duration::from_secs(5)).unwrap();
        let mut twice = Warehouse::open(&dir.path().join("b.db"), Duration::from_secs(5)).unwrap();
        write(&mut once, &page, None);
        write(&mut twice, &page, None);
        let second = write(&mut twice, &page, None);
        prop_assert_eq!(second.calls_written, 0);
        prop_assert_eq!(once.snapshot(None).unwrap(), twice.snapshot(None).unwrap());
    }
}

/// A timestamp from a small range, or null (0): ties and NULLs are where orderings differ.
fn stamp(k: u8) -> Value {
    match k {
        0 => Value::Null,
        k => json!(format!("2026-01-01T00:00:0{k}Z")),
    }
}

/// `(started, created, answered, transferred, outcomes as (name, created), outcomes sent)`.
type AttemptShape = (u8, u8, bool, bool, Vec<(u8, u8)>, bool);

/// Call `n` with attempts of `shape`; `None` keys are not sent. `repeat`: the last attempt
/// repeats the first one's uid.
fn shaped_call(
    n: u128,
    attempts: Option<&[AttemptShape]>,
    notifications: Option<u8>,
    repeat: bool,
) -> OutboundCall {
    let mut v = call_json(n, "2026-01-01T00:10:00Z", 0);
    let object = v.as_object_mut().unwrap();
    match attempts {
        None => {
            object.remove("outbound_call_attempts");
        }
        Some(shape) => {
            let count = shape.len();
            let attempts: Vec<Value> = shape
                .iter()
                .enumerate()
                .map(|(i, (started, created, answered, transferred, outcomes, sent))| {
                    let a = if repeat && i + 1 == count { n * 100 } else { n * 100 + i as u128 };
                    let mut attempt = json!({
                        "uid": uid(a), "status": format!("s{i}"),
                        "started_at": stamp(*started), "created_at": stamp(*created),
                        "answered_at": if *answered { stamp(3) } else { Value::Null },
                        "transfer_started_at": if *transferred { stamp(4) } else { Value::Null },
                        "ended_at": stamp(5), "duration": i,
                        "call_attempts_variables": [{"uid": uid(a * 10 + 9), "name": "v", "value": "x"}]
                    });
                    if *sent {
                        attempt["call_outcomes"] = outcomes
                            .iter()
                            .enumerate()
                            .map(|(j, (name, created))| {
                                json!({"uid": uid(a * 10 + j as u128), "name": format!("o{name}"), "created_at": stamp(*created)})
                            })
                            .collect();
                    }
                    attempt
                })
                .collect();
            object.insert("outbound_call_attempts".into(), attempts.into());
        }
    }
    match notifications {
        None => {
            object.remove("call_notifications");
        }
        Some(k) => {
            let list: Vec<Value> = (0..u128::from(k))
                .map(|i| json!({"uid": uid(n * 1000 + i), "status": "delivered"}))
                .collect();
            object.insert("call_notifications".into(), list.into());
        }
    }
    call(v)
}

fn attempt_shape() -> impl Strategy<Value = AttemptShape> {
    (
        0u8..3,
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec((0u8..3, 0u8..3), 0..3),
        prop::bool::weighted(0.9),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The summary columns a page write computes from the children it writes equal what SQL
    /// computes from the child tables, after every write: new calls, changed calls, children
    /// dropped, keys not sent, uids repeated.
    #[test]
    fn summary_columns_equal_what_sql_computes_from_the_children(
        writes in prop::collection::vec(
            (
                0u128..3,
                prop::option::weighted(0.85, prop::collection::vec(attempt_shape(), 0..4)),
                prop::option::weighted(0.85, 0u8..3),
                prop::bool::weighted(0.1),
            ),
            1..8,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut w = open(&dir);
        for (n, attempts, notifications, repeat) in &writes {
            let c = shaped_call(n + 1, attempts.as_deref(), *notifications, *repeat);
            write(&mut w, &[c], None);
            let written = w.snapshot(None).unwrap();
            let tx = w.conn.transaction().unwrap();
            for row in &written.calls {
                let Some(rusqlite::types::Value::Text(call_uid)) = row.get("uid") else {
                    panic!("a call without a uid: {row:?}");
                };
                let call_id: i64 = tx
                    .query_row("SELECT id FROM calls WHERE uid = ?1", [call_uid], |r| r.get(0))
                    .unwrap();
                upsert::summarize(&tx, &w.path, call_id).unwrap();
            }
            tx.commit().unwrap();
            let recomputed = w.snapshot(None).unwrap();
            prop_assert_eq!(written.diff(&recomputed), Vec::<String>::new());
        }
    }
}

mod analyst;
mod instants;
mod layout;
mod readers;
mod stored_order;
