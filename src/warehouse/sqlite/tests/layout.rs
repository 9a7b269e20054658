//! Schema 6, insertion-ordered: a version 5 warehouse migrated keeps every row and value, its
//! calls keep their insertion order as ids, writes go on after it, and a call's rows are
//! found through indexes (query plans), never by scanning a child table.

use super::*;

/// Writes `calls` into a version 5 warehouse at `path` with SQL, in the given order: the rows
/// a version 5 callsync would have written (the values of `snapshot`, ids aside).
fn version_5_warehouse(path: &std::path::Path, snapshot: &Snapshot, order: &[String]) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    schema::migrate_to(&mut conn, 5).unwrap();
    let tx = conn.transaction().unwrap();
    let insert = |table: &str, row: &Row| {
        let columns: Vec<&String> = row.keys().filter(|c| *c != "attempt_number").collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            columns
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            vec!["?"; columns.len()].join(", ")
        );
        let values: Vec<&rusqlite::types::Value> = columns.iter().map(|c| &row[*c]).collect();
        tx.execute(&sql, rusqlite::params_from_iter(values))
            .unwrap();
    };
    let of = |rows: &[Row], call: &str| -> Vec<Row> {
        rows.iter()
            .filter(|r| r.get("call_uid") == Some(&rusqlite::types::Value::Text(call.into())))
            .cloned()
            .collect()
    };
    for uid in order {
        let call = snapshot
            .calls
            .iter()
            .find(|r| r["uid"] == rusqlite::types::Value::Text(uid.clone()))
            .unwrap();
        let mut call = call.clone();
        call.insert(
            "synced_at".into(),
            rusqlite::types::Value::Text("2026-01-01 00:00:00".into()),
        );
        insert("calls", &call);
        for (table, rows) in [
            ("call_custom_parameters", &snapshot.call_custom_parameters),
            ("call_attempts", &snapshot.call_attempts),
            ("attempt_outcomes", &snapshot.attempt_outcomes),
            ("attempt_variables", &snapshot.attempt_variables),
            ("call_notifications", &snapshot.call_notifications),
        ] {
            for row in of(rows, uid) {
                insert(table, &row);
            }
        }
    }
    tx.commit().unwrap();
}

/// Calls of every shape: no attempts, several, a notification, one with an outcome whose
/// list was not sent later.
fn calls() -> Vec<OutboundCall> {
    (1..=12)
        .map(|n| call(call_json(n, "2026-01-01T00:10:00Z", (n % 4) as usize)))
        .collect()
}

#[test]
fn a_version_5_warehouse_migrates_to_6_keeping_every_row_in_insertion_order() {
    let dir = tempfile::tempdir().unwrap();
    // The truth: the same calls written by this callsync.
    let mut truth = Warehouse::open(&dir.path().join("truth.db"), Duration::from_secs(5)).unwrap();
    write(&mut truth, &calls(), None);
    let expected = truth.snapshot(None).unwrap();
    // Inserted in an order unlike the uids' (last first).
    let order: Vec<String> = (1..=12).rev().map(uid).collect();
    let path = dir.path().join("v5.db");
    version_5_warehouse(&path, &expected, &order);

    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (5, schema::latest_version()));
    let mut w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
    assert_eq!(
        w.snapshot(None).unwrap().diff(&expected),
        Vec::<String>::new()
    );
    // Ids are the insertion order of version 5 (its rowids); children point at them.
    let by_id: Vec<String> = w
        .conn
        .prepare("SELECT uid FROM calls ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(by_id, order);
    let mismatched: i64 = w
        .conn
        .query_row(
            "SELECT (SELECT count(*) FROM call_attempts AS a JOIN calls AS c ON c.id = a.call_id
                     WHERE c.uid <> a.call_uid)
                  + (SELECT count(*) FROM attempt_outcomes AS o
                     JOIN call_attempts AS a ON a.id = o.attempt_id
                     WHERE a.uid <> o.attempt_uid OR a.call_id <> o.call_id)
                  + (SELECT count(*) FROM attempt_variables AS v
                     JOIN call_attempts AS a ON a.id = v.attempt_id
                     WHERE a.uid <> v.attempt_uid OR a.call_id <> v.call_id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mismatched, 0);
    // No version 5 table is left behind.
    let left: i64 = w
        .conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%_v5'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);

    // Writing goes on: a changed call (one attempt fewer, new outcomes) is mirrored as in
    // a warehouse that was always version 6.
    let changed = vec![call(call_json(3, "2026-01-01T00:20:00Z", 2))];
    write(&mut truth, &changed, None);
    write(&mut w, &changed, None);
    assert_eq!(
        w.snapshot(None)
            .unwrap()
            .diff(&truth.snapshot(None).unwrap()),
        Vec::<String>::new()
    );
}

/// The query plan's lines of `sql`.
fn plan(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn one_calls_rows_are_found_without_scanning_a_child_table() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(&dir);
    let one_call = [
        // The writer's own reads and deletes.
        "SELECT id, uid FROM call_attempts WHERE call_id = 1",
        "DELETE FROM attempt_outcomes WHERE call_id = 1 AND attempt_id = 2",
        "DELETE FROM attempt_variables WHERE call_id = 1 AND attempt_id = 2",
        "DELETE FROM call_notifications WHERE call_id = 1",
        "DELETE FROM call_custom_parameters WHERE call_id = 1",
        "SELECT uid, content_hash FROM calls WHERE uid IN ('a', 'b')",
        // The views, for one call by id and by uid.
        "SELECT * FROM attempt_results WHERE call_id = 1",
        "SELECT * FROM attempt_results WHERE call_uid = 'x'",
        "SELECT * FROM outcome_results WHERE call_id = 1",
        "SELECT * FROM outcome_results WHERE call_uid = 'x'",
        "SELECT * FROM call_results WHERE call_uid = 'x'",
        "SELECT * FROM call_results WHERE call_id = 1",
        // Joins by id, as docs/warehouse.md shows them.
        "SELECT * FROM call_results AS r JOIN call_custom_parameters AS p USING (call_id)
         WHERE r.call_uid = 'x'",
        "SELECT * FROM attempt_outcomes AS o JOIN call_attempts AS a ON a.id = o.attempt_id
         WHERE o.call_id = 1",
        // `callsync status`'s counts of a schedule's children.
        "SELECT count(*) FROM call_attempts WHERE call_id IN
           (SELECT id FROM calls WHERE schedule_uid = 's')",
        "SELECT count(*) FROM attempt_variables WHERE call_id IN
           (SELECT id FROM calls WHERE schedule_uid = 's')",
    ];
    let children = [
        "call_custom_parameters",
        "call_attempts",
        "attempt_outcomes",
        "attempt_variables",
        "call_notifications",
        "calls",
    ];
    for sql in one_call {
        let plan = plan(&w.conn, sql);
        for line in &plan {
            for table in children {
                assert!(
                    !(line.starts_with(&format!("SCAN {table}"))
                        || line.starts_with("SCAN a")
                        || line.starts_with("SCAN o")
                        || line.starts_with("SCAN c ")
                        || line == "SCAN c"
                        || line.starts_with("SCAN p")),
                    "{sql}: {plan:?}"
                );
            }
        }
    }
}
