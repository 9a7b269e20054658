//! Schema 5 for the analyst: attempt numbers, names next to uids, `sync_runs` retention, and
//! a version 4 warehouse migrated without losing a row.

use rusqlite::types::Value as Sql;

use super::*;
use crate::service::Schedule;

const OTHER: Uuid = Uuid::from_u128(0x07e4);

fn schedule_model(uid: Uuid, name: &str) -> Schedule {
    serde_json::from_value(json!({
        "uid": uid, "name": name, "starts_at": "2026-03-02T08:00:00Z",
        "ends_at": "2026-03-06T16:00:00Z", "retry_type": "consistent",
        "retry_intervals": [600, 3600], "is_enabled": false, "is_auto": false,
        "created_at": "2026-03-01T10:00:00Z", "updated_at": "2026-03-01T10:00:00Z"
    }))
    .unwrap()
}

/// `sql`'s rows, every column as SQLite gives it.
fn rows(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<Sql>> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| (0..n).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn text(s: &str) -> Sql {
    Sql::Text(s.to_owned())
}

/// The names and declared types of `view`'s columns, as `(name, type)` pairs of `&str`.
fn owned(columns: &[(&str, &str)]) -> Vec<(String, String)> {
    columns
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[test]
fn the_views_keep_every_column_in_place_and_append_the_new_ones_typed() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(&dir);
    // Schema 11: time columns declared TIMESTAMPTZ; the two columns the views compute (from
    // what were generated columns, which DuckDB's reader cannot see) declare no type.
    let mut call_results = CALL_RESULTS.to_vec();
    call_results.push(("schedule_name", ""));
    call_results.push(("call_id", "INTEGER"));
    // Schema 12: each view's local day, appended (computed: no declared type).
    call_results.push(("created_day", ""));
    assert_eq!(columns(&w.conn, "call_results"), owned(&call_results));
    assert_eq!(
        columns(&w.conn, "attempt_results"),
        owned(&[
            ("attempt_uid", "TEXT"),
            ("call_uid", "TEXT"),
            ("schedule_uid", "TEXT"),
            ("position", "INTEGER"),
            ("status", "TEXT"),
            ("started_at", "TIMESTAMPTZ"),
            ("answered_at", "TIMESTAMPTZ"),
            ("ended_at", "TIMESTAMPTZ"),
            ("duration", "INTEGER"),
            ("transfer_started_at", "TIMESTAMPTZ"),
            ("transfer_answered_at", "TIMESTAMPTZ"),
            ("transfer_destination", "TEXT"),
            ("is_test_call", "INTEGER"),
            ("attempt_number", ""),
            ("schedule_name", ""),
            ("attempt_id", "INTEGER"),
            ("call_id", "INTEGER"),
            ("started_day", ""),
        ])
    );
    assert_eq!(
        columns(&w.conn, "outcome_results"),
        owned(&[
            ("outcome_uid", "TEXT"),
            ("attempt_uid", "TEXT"),
            ("call_uid", "TEXT"),
            ("schedule_uid", "TEXT"),
            ("name", "TEXT"),
            ("created_at", "TIMESTAMPTZ"),
            ("schedule_name", ""),
            ("attempt_id", "INTEGER"),
            ("call_id", "INTEGER"),
            ("is_test_call", "INTEGER"),
            ("started_day", ""),
        ])
    );
}

#[test]
fn attempt_results_numbers_attempts_from_1_and_carries_the_calls_test_flag() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    let mut test_call = call_json(2, "2026-01-01T00:10:00Z", 1);
    test_call["is_test_call"] = json!(true);
    write(
        &mut w,
        &[
            call(call_json(1, "2026-01-01T00:10:00Z", 3)),
            call(test_call),
        ],
        None,
    );
    assert_eq!(
        rows(
            &w.conn,
            "SELECT call_uid, position, attempt_number, is_test_call FROM attempt_results
             ORDER BY call_uid, attempt_number"
        ),
        [(1, 0, 1, 0), (1, 1, 2, 0), (1, 2, 3, 0), (2, 0, 1, 1)].map(|(c, p, n, t)| vec![
            text(&uid(c)),
            Sql::Integer(p),
            Sql::Integer(n),
            Sql::Integer(t)
        ])
    );
}

#[test]
fn a_configured_name_wins_in_the_views_and_erases_nothing_the_write_commands_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    write(
        &mut w,
        &[call(call_json(1, "2026-01-01T00:10:00Z", 1))],
        None,
    );
    let names = |w: &Warehouse| {
        rows(
            &w.conn,
            "SELECT (SELECT schedule_name FROM call_results),
                    (SELECT schedule_name FROM attempt_results),
                    (SELECT schedule_name FROM outcome_results)",
        )
        .remove(0)
    };
    // Known by uid only: no name, and every call still shows (LEFT JOIN).
    assert_eq!(names(&w), [Sql::Null, Sql::Null, Sql::Null]);

    // Known only from the configuration: a row with the name and nothing else.
    w.name_schedules([(SCHEDULE, Some("Renewals")), (OTHER, None)])
        .unwrap();
    assert_eq!(
        names(&w),
        [text("Renewals"), text("Renewals"), text("Renewals")]
    );
    let row = "SELECT name, config_name, display_name, retry_intervals, recorded_at
               FROM schedules ORDER BY uid";
    assert_eq!(
        rows(&w.conn, row),
        [vec![
            Sql::Null,
            text("Renewals"),
            text("Renewals"),
            Sql::Null,
            Sql::Null
        ]],
        "a schedule listed without a name gets no row"
    );

    // A write command records the service's answer: the configured name stays, and wins.
    w.remember_schedule(&schedule_model(SCHEDULE, "Week 1"), None)
        .unwrap();
    let recorded = rows(&w.conn, row).remove(0);
    assert_eq!(
        recorded[..4],
        [
            text("Week 1"),
            text("Renewals"),
            text("Renewals"),
            text("[600,3600]")
        ]
    );
    assert_eq!(names(&w)[0], text("Renewals"));

    // Renamed in the configuration, then listed without a name: the service's name shows.
    w.name_schedules([(SCHEDULE, Some("Renewals, week 1"))])
        .unwrap();
    assert_eq!(names(&w)[0], text("Renewals, week 1"));
    w.name_schedules([(SCHEDULE, None)]).unwrap();
    assert_eq!(names(&w), [text("Week 1"), text("Week 1"), text("Week 1")]);
    let after = rows(&w.conn, row).remove(0);
    assert_eq!(after[0], text("Week 1"));
    assert_eq!(after[1], Sql::Null);
    assert_eq!(
        after[3..],
        recorded[3..],
        "the write command's columns stay"
    );
}

/// A finished pass of `schedule` with `outcome`, started and finished on `day` of Jan 2026.
fn finished_run(w: &mut Warehouse, schedule: Uuid, day: u32, outcome: RunOutcome) {
    let at = format!("2026-01-{day:02}T00:00:00Z");
    let run = w
        .start_run(schedule, RunKind::Incremental, ts(&at), &super::walker())
        .unwrap();
    let error = (outcome == RunOutcome::Failed).then_some("HTTP 500");
    w.finish_run(run, &record(outcome, RunStats::default(), &at, error))
        .unwrap();
}

#[test]
fn old_passes_are_forgotten_but_each_schedules_latest_and_latest_success() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    for day in 1..=5 {
        finished_run(&mut w, SCHEDULE, day, RunOutcome::Completed);
    }
    finished_run(&mut w, SCHEDULE, 6, RunOutcome::Failed);
    finished_run(&mut w, SCHEDULE, 20, RunOutcome::Completed);
    // OTHER has failed for weeks: its latest success, long ago, stays for `status`.
    finished_run(&mut w, OTHER, 2, RunOutcome::Behind);
    finished_run(&mut w, OTHER, 3, RunOutcome::Failed);
    finished_run(&mut w, OTHER, 4, RunOutcome::Failed);
    // A pass whose process died (never finished) is not forgotten, however old.
    w.start_run(
        OTHER,
        RunKind::Backfill,
        ts("2026-01-01T12:00:00Z"),
        &super::walker(),
    )
    .unwrap();
    let status_before = w.status_at(ts("2026-01-31T00:00:00Z")).unwrap();

    let forgotten = w.forget_runs_before(ts("2026-01-10T00:00:00Z")).unwrap();
    let left = rows(
        &w.conn,
        "SELECT schedule_uid, started_at, outcome FROM sync_runs ORDER BY id",
    );
    let run = |s: Uuid, at: &str, outcome: Option<&str>| {
        vec![
            text(&s.to_string()),
            text(at),
            outcome.map_or(Sql::Null, text),
        ]
    };
    assert_eq!(
        left,
        [
            run(SCHEDULE, "2026-01-20T00:00:00.000000Z", Some("completed")),
            run(OTHER, "2026-01-02T00:00:00.000000Z", Some("behind")),
            run(OTHER, "2026-01-01T12:00:00.000000Z", None),
        ]
    );
    assert_eq!(forgotten, 8);
    // What `status` says is unchanged (the running backfill is OTHER's latest pass).
    let status_after = w.status_at(ts("2026-01-31T00:00:00Z")).unwrap();
    assert_eq!(
        serde_json::to_value(&status_after).unwrap(),
        serde_json::to_value(&status_before).unwrap()
    );
    assert_eq!(w.forget_runs_before(ts("2026-01-10T00:00:00Z")).unwrap(), 0);
}

#[test]
fn a_version_4_warehouse_migrates_to_5_keeping_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    schema::migrate_to(&mut conn, 4).unwrap();
    let v4_calls = columns(&conn, "call_results");
    let v4_attempts = columns(&conn, "attempt_results");
    let v4_outcomes = columns(&conn, "outcome_results");
    let v4_schedules = columns(&conn, "schedules");
    conn.execute_batch(&format!(
        "INSERT INTO schedules VALUES ('{SCHEDULE}', 'camp', 'Week 1', '2026-03-02 08:00:00',
           '2026-03-06 16:00:00', 'consistent', '[600]', 1, '2026-03-01 10:00:00',
           '2026-03-01 11:00:00', '2026-03-01 11:00:01');
         INSERT INTO calls (uid, schedule_uid, status, is_test_call, created_at, updated_at,
           content_hash, synced_at)
         VALUES ('c1', '{SCHEDULE}', 'completed', 1, '2026-03-02 08:00:00',
           '2026-03-02 09:00:00', 7, '2026-03-02 09:00:01');
         INSERT INTO call_attempts (uid, call_uid, position, status, duration)
         VALUES ('a1', 'c1', 0, 'no_answer', NULL), ('a2', 'c1', 1, 'hangup', 42);
         INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name)
         VALUES ('o1', 'a2', 'c1', 'interested');"
    ))
    .unwrap();
    let schedule_before = rows(&conn, "SELECT * FROM schedules");
    drop(conn);

    let report = Warehouse::migrate(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((report.from, report.to), (4, schema::latest_version()));
    let w = Warehouse::open_read_only(&path).unwrap();
    // Schema 11 declares every time column TIMESTAMPTZ (schema 7 had made the schedules'
    // TIMESTAMP too: they held the same text as the others); the rest keeps its type.
    let typed = |columns: Vec<(String, String)>| -> Vec<(String, String)> {
        (columns.into_iter())
            .map(|(name, declared)| {
                let time = name.ends_with("_at") || declared == "TIMESTAMP";
                (name, if time { "TIMESTAMPTZ".into() } else { declared })
            })
            .collect()
    };
    for (view, before) in [
        ("call_results", typed(v4_calls)),
        ("attempt_results", typed(v4_attempts)),
        ("outcome_results", typed(v4_outcomes)),
        ("schedules", typed(v4_schedules.clone())),
    ] {
        let after = columns(&w.conn, view);
        assert_eq!(
            after[..before.len()],
            before[..],
            "{view}: every version 4 column keeps its name, type and place"
        );
    }
    let mut schedule_after = rows(&w.conn, "SELECT * FROM schedules");
    assert_eq!(
        schedule_after[0].split_off(v4_schedules.len()),
        [Sql::Null, text("Week 1")],
        "no configured name yet; the service's name shows"
    );
    // Every value kept; schema 7 rewrote the times in RFC 3339 (six fraction digits, `Z`).
    let in_rfc3339 = |value: &Sql| match value {
        Sql::Text(t) if t.starts_with("2026-") => {
            let utc = Timestamp::parse_warehouse_text(t).expect("a time");
            Sql::Text(utc.to_warehouse_text())
        }
        other => other.clone(),
    };
    let schedule_before: Vec<Vec<Sql>> = schedule_before
        .iter()
        .map(|row| row.iter().map(in_rfc3339).collect())
        .collect();
    assert_eq!(schedule_after, schedule_before);
    assert_eq!(schedule_after[0][3], text("2026-03-02T08:00:00.000000Z"));
    assert_eq!(
        rows(
            &w.conn,
            "SELECT attempt_uid, attempt_number, is_test_call, duration, schedule_name
             FROM attempt_results ORDER BY attempt_number"
        ),
        [
            vec![
                text("a1"),
                Sql::Integer(1),
                Sql::Integer(1),
                Sql::Null,
                text("Week 1")
            ],
            vec![
                text("a2"),
                Sql::Integer(2),
                Sql::Integer(1),
                Sql::Integer(42),
                text("Week 1")
            ],
        ]
    );
    assert_eq!(
        rows(&w.conn, "SELECT call_uid, schedule_name FROM call_results"),
        [vec![text("c1"), text("Week 1")]]
    );
    assert_eq!(
        rows(
            &w.conn,
            "SELECT outcome_uid, schedule_name FROM outcome_results"
        ),
        [vec![text("o1"), text("Week 1")]]
    );
}
