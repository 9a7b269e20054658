//! Schema 9: every WITHOUT ROWID table declares its key columns first, so each column's
//! declared place is its stored place. SQLite 3.40.0–3.40.1 (Debian 12's sqlite3) checked NOT
//! NULL at the declared place in `integrity_check` and reported every row of the schema-6 child
//! tables as holding NULLs; the bundled SQLite cannot show that bug, so the tests check the
//! condition it needed.

use super::*;

/// The WITHOUT ROWID tables of `conn`, each with the columns whose declared place is not the
/// place SQLite stores them at: the key columns first in key order, then the rest in order.
fn misplaced_columns(conn: &rusqlite::Connection) -> Vec<(String, Vec<String>)> {
    let mut tables = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%WITHOUT ROWID%'
             ORDER BY name",
        )
        .unwrap();
    let tables: Vec<String> = tables
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(tables.len() >= 4, "{tables:?}");
    tables
        .into_iter()
        .map(|table| {
            let mut stmt = conn
                .prepare("SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid")
                .unwrap();
            let declared: Vec<(String, i64)> = stmt
                .query_map([&table], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let mut stored: Vec<&(String, i64)> = declared.iter().filter(|c| c.1 > 0).collect();
            stored.sort_by_key(|c| c.1);
            stored.extend(declared.iter().filter(|c| c.1 == 0));
            let misplaced = declared
                .iter()
                .zip(stored)
                .filter(|(declared, stored)| declared.0 != stored.0)
                .map(|(declared, _)| declared.0.clone())
                .collect();
            (table, misplaced)
        })
        .collect()
}

#[test]
fn every_without_rowid_table_declares_its_key_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 8).unwrap();
    let before: Vec<String> = misplaced_columns(&conn)
        .into_iter()
        .filter(|(_, misplaced)| !misplaced.is_empty())
        .map(|(table, _)| table)
        .collect();
    assert_eq!(
        before,
        [
            "attempt_outcomes",
            "attempt_variables",
            "call_custom_parameters",
            "call_notifications"
        ],
        "schema 8 as it was"
    );
    drop(conn);

    let w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
    for (table, misplaced) in misplaced_columns(&w.conn) {
        assert_eq!(misplaced, Vec::<String>::new(), "{table}");
    }
}

#[test]
fn a_version_8_warehouse_keeps_every_row_value_and_view() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 8).unwrap();
    conn.execute_batch(
        "INSERT INTO calls (id, uid, schedule_uid, status, created_at, updated_at, content_hash,
           synced_at)
         VALUES (1, 'c1', 's1', 'completed', '2026-01-01T00:00:00.000000Z',
           '2026-01-01T00:00:01.000000Z', 7, '2026-01-01T00:00:02.000000Z'),
                (2, 'c2', 's1', 'completed', '2026-01-01T00:00:00.000000Z',
           '2026-01-01T00:00:01.000000Z', 8, '2026-01-01T00:00:02.000000Z');
         INSERT INTO call_attempts (id, uid, call_uid, call_id, position, status)
         VALUES (1, 'a1', 'c1', 1, 0, 'hangup'), (2, 'a2', 'c2', 2, 0, 'answered');
         INSERT INTO call_custom_parameters (call_uid, name, value, call_id)
         VALUES ('c2', 'plan', 'gold', 2), ('c1', 'plan', NULL, 1), ('c1', 'age', '42', 1);
         INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name, created_at, extra,
           attempt_id, call_id)
         VALUES ('o2', 'a2', 'c2', 'interested', '2026-01-01T00:00:02.000000Z', NULL, 2, 2),
                ('o1', 'a1', 'c1', 'voicemail', NULL, '{\"k\":1}', 1, 1);
         INSERT INTO attempt_variables (uid, attempt_uid, call_uid, name, value, status,
           created_at, extra, attempt_id, call_id)
         VALUES ('v1', 'a1', 'c1', 'plan', 'gold', 'ok', '2026-01-01T00:00:02.000000Z', NULL, 1, 1),
                ('v0', 'a2', 'c2', 'zip', NULL, NULL, NULL, '{}', 2, 2);
         INSERT INTO call_notifications (uid, call_uid, status, message_count, delivered_at,
           extra, call_id)
         VALUES ('n1', 'c1', 'delivered', 1, '2026-01-01T00:00:04.000000Z', NULL, 1);",
    )
    .unwrap();
    // Each table's rows as name=value text, in key order: what the migration must keep.
    let read = |conn: &rusqlite::Connection, table: &str, key: &str| -> Vec<String> {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {key}"))
            .unwrap();
        let names: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
        stmt.query_map([], |r| {
            let mut cells: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| Ok(format!("{n}={:?}", r.get::<_, rusqlite::types::Value>(i)?)))
                .collect::<Result<_, rusqlite::Error>>()?;
            cells.sort();
            Ok(cells.join(" "))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let tables = [
        ("call_custom_parameters", "call_id, name"),
        ("attempt_outcomes", "call_id, attempt_id, uid"),
        ("attempt_variables", "call_id, attempt_id, uid"),
        ("call_notifications", "call_id, uid"),
        ("outcome_results", "outcome_uid"),
        ("variable_results", "variable_uid"),
        ("notification_results", "notification_uid"),
    ];
    let before: Vec<Vec<String>> = tables.iter().map(|(t, k)| read(&conn, t, k)).collect();
    drop(conn);

    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (8, schema::latest_version()));
    let w = Warehouse::open_read_only(&path).unwrap();
    let after: Vec<Vec<String>> = tables.iter().map(|(t, k)| read(&w.conn, t, k)).collect();
    // The columns a later schema appends to a view (schema 12: outcome_results' is_test_call
    // and started_day) are not compared: every column there before keeps its value.
    let kept = |rows: &Vec<String>, like: &Vec<String>| -> Vec<String> {
        let names: Vec<&str> = like
            .first()
            .map(|row| row.split(' ').filter_map(|c| c.split('=').next()).collect())
            .unwrap_or_default();
        rows.iter()
            .map(|row| {
                row.split(' ')
                    .filter(|c| c.split('=').next().is_some_and(|n| names.contains(&n)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let after: Vec<Vec<String>> = after.iter().zip(&before).map(|(a, b)| kept(a, b)).collect();
    assert_eq!(after, before);
    assert_eq!(after[2].len(), 2, "{after:?}");
    let check: String = w
        .conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let index: String = w
        .conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'call_custom_parameters_by_name'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        index,
        "CREATE INDEX call_custom_parameters_by_name ON call_custom_parameters (name)"
    );
    let leftovers: i64 = w
        .conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%_v8'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leftovers, 0);
}
