//! Schema 7: every time column holds RFC 3339 in UTC with six fraction digits and a `Z`,
//! declared `TIMESTAMP`; a version 6 warehouse is rewritten in place, an absent phonetic name
//! becomes NULL, and the analyst's views and the time-zone table are there.

use rusqlite::types::Value as Sql;

use super::*;

/// The time columns of every table, found by name: `*_at`, `cursor`, `horizon`,
/// `cooldown_until`, `event_date_time`.
fn time_columns(conn: &rusqlite::Connection) -> Vec<(String, String, String)> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut found = Vec::new();
    for table in tables {
        for (column, declared) in columns(conn, &table) {
            let is_time = column.ends_with("_at")
                || matches!(
                    column.as_str(),
                    "cursor" | "horizon" | "cooldown_until" | "event_date_time"
                );
            if is_time {
                found.push((table.clone(), column, declared));
            }
        }
    }
    found
}

/// Whether `text` is the warehouse's form: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn is_warehouse_form(text: &str) -> bool {
    let b = text.as_bytes();
    let digit = |i: usize| b[i].is_ascii_digit();
    b.len() == 27
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .iter()
            .all(|&i| digit(i))
        && (20..26).all(digit)
        && (b[4], b[7], b[10], b[13], b[16], b[19], b[26])
            == (b'-', b'-', b'T', b':', b':', b'.', b'Z')
}

#[test]
fn the_forms_tell_apart() {
    assert!(is_warehouse_form("2026-01-31T09:30:00.250000Z"));
    for other in [
        "2026-01-31 09:30:00.250",
        "2026-01-31T09:30:00.25Z",
        "2026-01-31T09:30:00Z",
        "2026-01-31T09:30:00.250000",
    ] {
        assert!(!is_warehouse_form(other), "{other}");
    }
}

#[test]
fn a_version_6_warehouse_gets_utc_instants_typed_timestamp_and_null_phonetics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 6).unwrap();
    // What a version 6 callsync wrote: SQLite's form, fractions of 0, 3, 6 and 9 digits.
    conn.execute_batch(
        "INSERT INTO calls (id, uid, schedule_uid, status, cooldown_until, created_at, updated_at,
           phonetic_full_name, phonetic_first_name, phonetic_last_name, full_name,
           event_date_time, last_attempt_started_at, last_attempt_answered_at,
           last_attempt_ended_at, content_hash, synced_at)
         VALUES (1, 'c1', 's1', 'completed', '2026-01-01 00:00:00.5', '2026-01-01 00:00:00',
           '2026-01-01 00:00:01.250', '', '', 'Lovelace', '', '2026-02-01 10:00:00',
           '2026-01-01 00:00:00.123456', '2026-01-01 00:00:00.123456789',
           '2026-01-01 00:00:02', 7, '2026-01-01 00:00:03.000001');
         INSERT INTO call_attempts (id, uid, call_uid, call_id, position, status, started_at,
           answered_at, ended_at, created_at, updated_at, transfer_started_at,
           transfer_answered_at)
         VALUES (1, 'a1', 'c1', 1, 0, 'hangup', '2026-01-01 00:00:00.123456',
           '2026-01-01 00:00:00.123456789', '2026-01-01 00:00:02', '2026-01-01 00:00:00',
           '2026-01-01 00:00:02', NULL, NULL);
         INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, attempt_id, call_id, name, created_at)
         VALUES ('o1', 'a1', 'c1', 1, 1, 'interested', '2026-01-01 00:00:02');
         INSERT INTO attempt_variables (uid, attempt_uid, call_uid, attempt_id, call_id, name, value, created_at)
         VALUES ('v1', 'a1', 'c1', 1, 1, 'plan', 'gold', '2026-01-01 00:00:02');
         INSERT INTO call_notifications (uid, call_uid, call_id, status, message_count, delivered_at)
         VALUES ('n1', 'c1', 1, 'delivered', 1, '2026-01-01 00:00:04');
         INSERT INTO sync_checkpoints VALUES ('s1', '2026-01-01 00:00:01.250', '2026-01-01 00:00:05');
         INSERT INTO sync_runs (schedule_uid, kind, started_at, finished_at, horizon, outcome)
         VALUES ('s1', 'incremental', '2026-01-01 00:00:05.987654321', '2026-01-01 00:00:06', '2026-01-01 00:00:05', 'completed');
         INSERT INTO campaigns VALUES ('k1', 'Spring', 'scheduled_call', 'outbound', 0,
           '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:00.5');
         INSERT INTO schedules (uid, campaign_uid, name, starts_at, ends_at, retry_type,
           retry_intervals, is_enabled, created_at, updated_at, recorded_at, config_name)
         VALUES ('s1', 'k1', 'Week 1', '2026-03-02 08:00:00', '2026-03-06 16:00:00', 'consistent',
           '[600]', 1, '2026-03-01 10:00:00', '2026-03-01 10:00:00', '2026-03-01 10:00:00.100',
           'Renewals');
         INSERT INTO upload_chunks VALUES ('s1', 'f', 2, 3, 2, 'created', '[\"c1\"]',
           '2026-01-01 00:00:00.000001', '2026-01-01 00:00:00.5');",
    )
    .unwrap();
    let text_typed: Vec<_> = time_columns(&conn)
        .into_iter()
        .filter(|(_, _, declared)| declared != "TIMESTAMP")
        .map(|(table, column, _)| format!("{table}.{column}"))
        .collect();
    assert_eq!(
        text_typed.len(),
        10,
        "version 6 declared these TEXT: {text_typed:?}"
    );
    drop(conn);

    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (6, schema::latest_version()));
    let w = Warehouse::open_read_only(&path).unwrap();

    // Every time column of every table is declared TIMESTAMPTZ (schema 11; local_days.switch_at
    // since 12; set_aside_calls.updated_at since 13) and holds the new form.
    let columns = time_columns(&w.conn);
    assert_eq!(columns.len(), 36, "{columns:?}");
    for (table, column, declared) in &columns {
        assert_eq!(declared, "TIMESTAMPTZ", "{table}.{column}");
        let values: Vec<Option<String>> = w
            .conn
            .prepare(&format!("SELECT {column} FROM {table}"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for value in values.iter().flatten() {
            assert!(is_warehouse_form(value), "{table}.{column} = {value:?}");
        }
    }
    // The instants are the ones written, to the microsecond (a finer fraction truncated).
    let get = |sql: &str| -> Vec<Sql> {
        let mut stmt = w.conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_row([], |r| (0..n).map(|i| r.get(i)).collect())
            .unwrap()
    };
    let t = |s: &str| Sql::Text(s.to_owned());
    assert_eq!(
        get(
            "SELECT cooldown_until, created_at, updated_at, last_attempt_started_at,
               last_attempt_answered_at, synced_at, event_date_time FROM calls"
        ),
        [
            t("2026-01-01T00:00:00.500000Z"),
            t("2026-01-01T00:00:00.000000Z"),
            t("2026-01-01T00:00:01.250000Z"),
            t("2026-01-01T00:00:00.123456Z"),
            t("2026-01-01T00:00:00.123456Z"),
            t("2026-01-01T00:00:03.000001Z"),
            t("2026-02-01T10:00:00.000000Z"),
        ]
    );
    assert_eq!(
        get("SELECT transfer_started_at, answered_at FROM call_attempts"),
        [Sql::Null, t("2026-01-01T00:00:00.123456Z")]
    );
    assert_eq!(
        get("SELECT started_at, finished_at FROM sync_runs"),
        [
            t("2026-01-01T00:00:05.987654Z"),
            t("2026-01-01T00:00:06.000000Z")
        ]
    );
    // Rebuilt tables keep every other value; the generated display name still works.
    assert_eq!(
        get("SELECT name, config_name, display_name, retry_intervals, is_enabled FROM schedules"),
        [
            t("Week 1"),
            t("Renewals"),
            t("Renewals"),
            t("[600]"),
            Sql::Integer(1)
        ]
    );
    assert_eq!(
        get("SELECT name, state, call_uids FROM campaigns JOIN upload_chunks")[..2],
        [t("Spring"), t("created")]
    );
    assert_eq!(
        get("SELECT cursor FROM sync_checkpoints"),
        [t("2026-01-01T00:00:01.250000Z")]
    );
    // Absent phonetic names are NULL; an empty name that is not phonetic stays as it was.
    assert_eq!(
        get(
            "SELECT phonetic_full_name, phonetic_first_name, phonetic_last_name, full_name
             FROM call_results"
        ),
        [Sql::Null, Sql::Null, t("Lovelace"), t("")]
    );
    // The views read the rewritten rows, the new ones included.
    assert_eq!(
        get("SELECT schedule_name, name, value, created_at FROM variable_results"),
        [
            t("Renewals"),
            t("plan"),
            t("gold"),
            t("2026-01-01T00:00:02.000000Z")
        ]
    );
    assert_eq!(
        get("SELECT schedule_name, status, message_count, delivered_at FROM notification_results"),
        [
            t("Renewals"),
            t("delivered"),
            Sql::Integer(1),
            t("2026-01-01T00:00:04.000000Z")
        ]
    );
    // Until a time zone is configured, days are UTC days.
    assert_eq!(
        get("SELECT starts_at, utc_offset_secs, zone FROM timezone_offsets"),
        [t("0001-01-01T00:00:00.000000Z"), Sql::Integer(0), t("UTC")]
    );
}

#[test]
fn sqlite_reads_the_stored_form_as_the_same_instant() {
    // SQLite's date functions (what BI tools and the canned queries use) read the new form.
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let t = Timestamp::parse("2026-11-25T23:30:00.123456Z").unwrap();
    let (datetime, unix, day): (String, f64, String) = conn
        .query_row(
            "SELECT datetime(?1), unixepoch(?1, 'subsec'), date(?1, '+3600 seconds')",
            [t.to_warehouse_text()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(datetime, "2026-11-25 23:30:00");
    assert!((unix - t.unix_nanos() as f64 / 1e9).abs() < 0.001, "{unix}");
    assert_eq!(day, "2026-11-26");
    // Text order is time order, and a prefix written by hand compares as a person expects.
    let ordered: bool = conn
        .query_row(
            "SELECT ?1 < ?2 AND ?2 < ?3 AND ?2 > '2026-11-25T23:30:00' AND ?2 < '2026-11-25T23:30:01'",
            [
                "2026-11-25T23:29:59.999999Z",
                &t.to_warehouse_text(),
                "2026-11-25T23:30:00.500000Z",
            ],
            |r| r.get(0),
        )
        .unwrap();
    assert!(ordered);
}

/// The day of each instant in the warehouse's zone, by the SQL docs/analyse.md and the canned
/// queries use.
fn local_days(w: &Warehouse, instants: &[&str]) -> Vec<String> {
    instants
        .iter()
        .map(|t| {
            w.conn
                .query_row(
                    "SELECT date(?1, (SELECT utc_offset_secs FROM timezone_offsets
                                      WHERE starts_at <= ?1 ORDER BY starts_at DESC LIMIT 1)
                                     || ' seconds')",
                    [t],
                    |r| r.get(0),
                )
                .unwrap()
        })
        .collect()
}

#[test]
fn the_configured_zone_gives_local_days_and_is_rewritten_only_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let instants = [
        "2026-03-28T23:30:00.000000Z", // 00:30 CET, the 29th
        "2026-03-29T22:30:00.000000Z", // 00:30 CEST, the 30th (summer time since 01:00 UTC)
        "2026-10-25T22:30:00.000000Z", // 23:30 CET, the 25th (winter time again)
        "2026-07-01T05:00:00.000000Z", // 01:00 EDT in New York: still the 1st
        "2026-07-01T03:00:00.000000Z", // 23:00 EDT: the 30th of June
    ];
    assert_eq!(
        local_days(&w, &instants),
        [
            "2026-03-28",
            "2026-03-29",
            "2026-10-25",
            "2026-07-01",
            "2026-07-01"
        ],
        "UTC days before a zone is set"
    );
    let berlin = chrono_tz::Europe::Berlin;
    assert!(w.set_timezone(berlin).unwrap());
    assert_eq!(
        local_days(&w, &instants)[..3],
        ["2026-03-29", "2026-03-30", "2026-10-25"]
    );
    assert!(
        !w.set_timezone(berlin).unwrap(),
        "the same zone again: nothing written"
    );
    assert!(w.set_timezone(chrono_tz::America::New_York).unwrap());
    assert_eq!(local_days(&w, &instants)[3..], ["2026-07-01", "2026-06-30"]);
    assert!(w.set_timezone(chrono_tz::UTC).unwrap());
    assert_eq!(
        local_days(&w, &instants),
        [
            "2026-03-28",
            "2026-03-29",
            "2026-10-25",
            "2026-07-01",
            "2026-07-01"
        ]
    );
}

/// The same calls as a version 5 callsync and a version 6 one wrote them (SQLite's time form,
/// fractions of 0, 3, 6 and 9 digits, `''` phonetic names, NULLs), ids as version 6 gives
/// them (a version 5 row's rowid is its id after the copy).
fn same_calls(conn: &rusqlite::Connection, version: usize) {
    let (id, call_id, attempt_id) = if version == 5 {
        ("rowid", "", "")
    } else {
        ("id", "call_id, ", "attempt_id, ")
    };
    let id_of = |n: i64| {
        if version == 5 {
            String::new()
        } else {
            format!("{n}, ")
        }
    };
    let calls = [
        (
            1,
            "c1",
            "'2026-01-01 00:00:00.5'",
            "'2026-01-01 00:00:00.123456789'",
            "''",
        ),
        (2, "c2", "NULL", "'2026-01-01T00:00:00.123456Z'", "'Ada'"),
    ];
    for (n, uid, cooldown, started, phonetic) in calls {
        conn.execute_batch(&format!(
            "INSERT INTO calls ({id}, uid, schedule_uid, status, cooldown_until, created_at,
               updated_at, phonetic_full_name, phonetic_first_name, phonetic_last_name,
               full_name, event_date_time, last_attempt_started_at, last_attempt_answered_at,
               last_attempt_ended_at, content_hash, synced_at)
             VALUES ({n}, '{uid}', 's1', 'completed', {cooldown}, '2026-01-01 00:00:00',
               '2026-01-01 00:00:01.250', {phonetic}, '', 'Lovelace', '', NULL, {started},
               '2026-01-01 00:00:00.123', '2026-01-01 00:00:02', 7, '2026-01-01 00:00:03.000001');
             INSERT INTO call_custom_parameters ({call_id}call_uid, name, value)
             VALUES ({c}'{uid}', 'plan', 'gold');
             INSERT INTO call_attempts ({id}, {call_id}uid, call_uid, position, status,
               started_at, answered_at, ended_at, created_at, updated_at, transfer_started_at,
               transfer_answered_at)
             VALUES ({n}, {c}'a{n}', '{uid}', 0, 'hangup', {started},
               '2026-01-01 00:00:00.123456789', '2026-01-01 00:00:02', '2026-01-01 00:00:00',
               '2026-01-01 00:00:02', NULL, '2026-01-01 00:00:03');
             INSERT INTO attempt_outcomes ({call_id}{attempt_id}uid, attempt_uid, call_uid,
               name, created_at)
             VALUES ({c}{a}'o{n}', 'a{n}', '{uid}', 'interested', '2026-01-01 00:00:02');
             INSERT INTO attempt_variables ({call_id}{attempt_id}uid, attempt_uid, call_uid,
               name, value, created_at)
             VALUES ({c}{a}'v{n}', 'a{n}', '{uid}', 'plan', 'gold', '2026-01-01 00:00:02.5');
             INSERT INTO call_notifications ({call_id}uid, call_uid, status, message_count,
               delivered_at)
             VALUES ({c}'n{n}', '{uid}', 'delivered', 1, '2026-01-01 00:00:04');",
            c = id_of(n),
            a = id_of(n),
        ))
        .unwrap();
    }
}

/// Every row of the call tables, in key order, each value as SQLite returns it.
fn call_rows(w: &Warehouse) -> Vec<Vec<Sql>> {
    let mut rows = Vec::new();
    for (table, key) in [
        ("calls", "id"),
        ("call_custom_parameters", "call_id, name"),
        ("call_attempts", "id"),
        ("attempt_outcomes", "call_id, attempt_id, uid"),
        ("attempt_variables", "call_id, attempt_id, uid"),
        ("call_notifications", "call_id, uid"),
    ] {
        let mut stmt = w
            .conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {key}"))
            .unwrap();
        let n = stmt.column_count();
        let found: Vec<Vec<Sql>> = stmt
            .query_map([], |r| (0..n).map(|i| r.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!found.is_empty(), "{table}");
        rows.extend(found);
    }
    rows
}

/// The schema of `conn` as SQLite keeps it: each object's type, names and SQL text.
fn schema_text(conn: &rusqlite::Connection) -> Vec<(String, String, String, Option<String>)> {
    conn.prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Every way to the latest schema ends with the same schema text, byte for byte, and the same
/// rows: a version 5 file (whose schema 6 copy creates the child tables in schema 9's form, so
/// schema 9 copies nothing), a version 6 and a version 8 file as older callsyncs left them
/// (schema 9 copies their child tables), and a new file.
#[test]
fn every_way_to_the_latest_schema_ends_with_the_same_schema_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut schemas = Vec::new();
    let mut rows = Vec::new();
    for (written_at, left_at) in [(5, 5), (6, 6), (6, 8)] {
        let path = dir
            .path()
            .join(format!("v{left_at}-written-at-{written_at}.db"));
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, written_at).unwrap();
        same_calls(&conn, written_at);
        schema::migrate_to(&mut conn, left_at).unwrap();
        drop(conn);
        let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(report.from, left_at);
        let w = Warehouse::open_read_only(&path).unwrap();
        schemas.push((format!("from {left_at}"), schema_text(&w.conn)));
        rows.push(call_rows(&w));
    }
    let new = dir.path().join("new.db");
    drop(Warehouse::open(&new, Duration::from_secs(5)).unwrap());
    let w = Warehouse::open_read_only(&new).unwrap();
    schemas.push(("new".to_owned(), schema_text(&w.conn)));
    let (_, reference) = &schemas[0];
    assert!(reference.len() > 20, "{reference:?}");
    for (path, schema) in &schemas[1..] {
        assert_eq!(schema, reference, "{path} against from 5");
    }
    assert_eq!(rows[1], rows[0], "from 6 against from 5");
    assert_eq!(rows[2], rows[0], "from 8 against from 5");
}

/// The schema 6 copy writes schema 7's forms at once (so schema 7's rewrite, in the same
/// transaction, finds nothing to change): a version 5 file ends with exactly the rows a
/// version 6 file of the same calls ends with, which went through schema 7's rewrite.
#[test]
fn a_version_5_warehouse_ends_with_the_rows_a_version_6_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut migrated = Vec::new();
    for version in [5, 6] {
        let path = dir.path().join(format!("v{version}.db"));
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        schema::migrate_to(&mut conn, version).unwrap();
        same_calls(&conn, version);
        drop(conn);
        let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(report.from, version);
        migrated.push(call_rows(&Warehouse::open_read_only(&path).unwrap()));
    }
    assert_eq!(migrated[0], migrated[1]);
    // And they are schema 7's forms: instants to the microsecond, '' phonetic names as NULL.
    let w = Warehouse::open_read_only(&dir.path().join("v5.db")).unwrap();
    let first: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) = w
        .conn
        .query_row(
            "SELECT cooldown_until, last_attempt_started_at, phonetic_full_name,
               phonetic_first_name FROM calls WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        first,
        (
            Some("2026-01-01T00:00:00.500000Z".into()),
            Some("2026-01-01T00:00:00.123456Z".into()),
            None,
            None
        )
    );
}
