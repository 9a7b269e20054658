//! What the warehouse must hold for a schedule, computed from the service's JSON by a mapping
//! written here — independently of `warehouse::rows` and the summary SQL — and the warehouse
//! as it is, read with plain SQL. A mapping bug (a wrong column, a wrong summary) shows up as
//! a difference instead of being made identically on both sides.
//!
//! The mapping is the table contract of docs/warehouse.md: timestamps as SQLite UTC text
//! `YYYY-MM-DD HH:MM:SS[.fraction]`, booleans as 0/1, JSON of unknown shape as JSON text, the
//! per-call summary columns derived from the children.

use std::collections::BTreeMap;
use std::path::Path;

use callsync::service::OutboundCall;
use rusqlite::types::Value as Sql;
use serde_json::{Map, Value as Json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

/// One row: column → value.
type Row = BTreeMap<&'static str, Sql>;
/// One table: key → row.
type Table = BTreeMap<String, Row>;

/// A table of the contract: its columns (those compared), its key, and how its rows hang
/// off a schedule.
struct Spec {
    name: &'static str,
    columns: &'static [&'static str],
    key: &'static [&'static str],
    /// The column naming the call (`uid` for `calls` itself).
    call_column: &'static str,
}

/// Columns holding JSON text: compared as JSON, since key order is not part of the contract.
const JSON_COLUMNS: [&str; 5] = [
    "delay",
    "priority",
    "retry_intervals",
    "error_details",
    "extra",
];

const CALLS: Spec = Spec {
    name: "calls",
    columns: &[
        "uid",
        "schedule_uid",
        "external_id",
        "status",
        "progress",
        "is_test_call",
        "cooldown_until",
        "delay",
        "priority",
        "attempts_remaining",
        "retry_intervals",
        "created_at",
        "updated_at",
        "phone_number",
        "phone_e164",
        "full_name",
        "first_name",
        "last_name",
        "phonetic_full_name",
        "phonetic_first_name",
        "phonetic_last_name",
        "email",
        "event_date_time",
        "extra",
        "attempt_count",
        "last_attempt_uid",
        "last_attempt_status",
        "last_attempt_started_at",
        "last_attempt_answered_at",
        "last_attempt_ended_at",
        "last_attempt_duration",
        "outcome_names",
        "answered",
        "transferred",
        "notification_count",
    ],
    key: &["uid"],
    call_column: "uid",
};

const CUSTOM_PARAMETERS: Spec = Spec {
    name: "call_custom_parameters",
    columns: &["call_uid", "name", "value"],
    key: &["call_uid", "name"],
    call_column: "call_uid",
};

const ATTEMPTS: Spec = Spec {
    name: "call_attempts",
    columns: &[
        "uid",
        "call_uid",
        "position",
        "status",
        "started_at",
        "answered_at",
        "ended_at",
        "duration",
        "created_at",
        "updated_at",
        "error_details",
        "transfer_started_at",
        "transfer_answered_at",
        "transfer_destination",
        "extra",
        "attempt_number",
    ],
    key: &["uid"],
    call_column: "call_uid",
};

const OUTCOMES: Spec = Spec {
    name: "attempt_outcomes",
    columns: &[
        "uid",
        "attempt_uid",
        "call_uid",
        "name",
        "created_at",
        "extra",
    ],
    key: &["uid"],
    call_column: "call_uid",
};

const VARIABLES: Spec = Spec {
    name: "attempt_variables",
    columns: &[
        "uid",
        "attempt_uid",
        "call_uid",
        "name",
        "value",
        "status",
        "created_at",
        "extra",
    ],
    key: &["uid"],
    call_column: "call_uid",
};

const NOTIFICATIONS: Spec = Spec {
    name: "call_notifications",
    columns: &[
        "uid",
        "call_uid",
        "status",
        "message_count",
        "delivered_at",
        "extra",
    ],
    key: &["uid"],
    call_column: "call_uid",
};

const TABLES: [&Spec; 6] = [
    &CALLS,
    &CUSTOM_PARAMETERS,
    &ATTEMPTS,
    &OUTCOMES,
    &VARIABLES,
    &NOTIFICATIONS,
];

/// Fields the contract maps to columns; anything else goes to `extra`.
const CALL_FIELDS: &[&str] = &[
    "uid",
    "external_id",
    "status",
    "progress",
    "is_test_call",
    "cooldown_until",
    "delay",
    "priority",
    "retry_intervals",
    "attempts_remaining",
    "created_at",
    "updated_at",
    "outbound_call_info",
    "outbound_call_attempts",
    "call_notifications",
    "outbound_calls_notifications",
];
const INFO_FIELDS: &[&str] = &[
    "phone_number",
    "full_name",
    "first_name",
    "last_name",
    "phonetic_full_name",
    "phonetic_first_name",
    "phonetic_last_name",
    "email",
    "event_date_time",
    "external_id",
    "custom_parameters",
];
const ATTEMPT_FIELDS: &[&str] = &[
    "uid",
    "status",
    "started_at",
    "answered_at",
    "ended_at",
    "duration",
    "created_at",
    "updated_at",
    "error_details",
    "transfer_started_at",
    "transfer_answered_at",
    "transfer_destination",
    "call_outcomes",
    "call_attempts_variables",
];
const OUTCOME_FIELDS: &[&str] = &["uid", "name", "created_at"];
const VARIABLE_FIELDS: &[&str] = &["uid", "name", "value", "status", "created_at"];
const NOTIFICATION_FIELDS: &[&str] = &["uid", "status", "message_count", "delivered_at"];

/// Differences between the warehouse at `path` and what `calls` of `schedule` (the
/// service's truth) make, as readable lines: `table key: column: warehouse …, service …`.
pub fn differences(path: &Path, schedule: Uuid, calls: &[OutboundCall]) -> Vec<String> {
    let expected = expected_tables(schedule, calls);
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the warehouse opens read-only");
    let mut out = Vec::new();
    for (spec, want) in TABLES.iter().zip(expected) {
        let have = read_table(&conn, spec, schedule);
        diff_table(spec.name, &have, &want, &mut out);
    }
    out
}

/// The six tables as the contract makes them from `calls`, in the order of [`TABLES`].
fn expected_tables(schedule: Uuid, calls: &[OutboundCall]) -> Vec<Table> {
    let mut tables: Vec<Table> = TABLES.iter().map(|_| Table::new()).collect();
    for call in calls {
        // The call as the detail endpoint sends it.
        let c = serde_json::to_value(call).expect("a call serialises");
        let call_uid = c["uid"].as_str().expect("uid").to_owned();
        let info = &c["outbound_call_info"];
        let attempts: Vec<&Json> = c["outbound_call_attempts"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let notifications: Vec<&Json> = c
            .get("call_notifications")
            .or_else(|| c.get("outbound_calls_notifications"))
            .and_then(Json::as_array)
            .map(|n| n.iter().collect())
            .unwrap_or_default();

        let mut row = Row::new();
        row.insert("uid", text(&c["uid"]));
        row.insert("schedule_uid", Sql::Text(schedule.to_string()));
        for field in ["external_id", "status", "progress"] {
            row.insert(field, text(&c[field]));
        }
        row.insert("is_test_call", flag(&c["is_test_call"]));
        row.insert("cooldown_until", timestamp(&c["cooldown_until"]));
        row.insert("delay", json_text(&c["delay"]));
        row.insert("priority", json_text(&c["priority"]));
        row.insert("attempts_remaining", integer(&c["attempts_remaining"]));
        row.insert("retry_intervals", json_text(&c["retry_intervals"]));
        row.insert("created_at", timestamp(&c["created_at"]));
        row.insert("updated_at", timestamp(&c["updated_at"]));
        for (column, field) in [
            ("phone_number", "phone_number"),
            ("full_name", "full_name"),
            ("first_name", "first_name"),
            ("last_name", "last_name"),
            ("phonetic_full_name", "phonetic_full_name"),
            ("phonetic_first_name", "phonetic_first_name"),
            ("phonetic_last_name", "phonetic_last_name"),
            ("email", "email"),
        ] {
            row.insert(column, text(&info[field]));
        }
        // An empty phonetic name is absent: NULL, as every absent value.
        for column in [
            "phonetic_full_name",
            "phonetic_first_name",
            "phonetic_last_name",
        ] {
            if row.get(column) == Some(&Sql::Text(String::new())) {
                row.insert(column, Sql::Null);
            }
        }
        row.insert("phone_e164", e164(&info["phone_number"]));
        row.insert("event_date_time", timestamp(&info["event_date_time"]));
        let mut extra = unknown(&c, CALL_FIELDS);
        let info_extra = unknown(info, INFO_FIELDS);
        if !info_extra.is_empty() {
            extra.insert("outbound_call_info".into(), Json::Object(info_extra));
        }
        row.insert("extra", extra_text(extra));
        summarise(&mut row, &attempts, notifications.len());
        insert(&mut tables[0], &CALLS, row);

        if let Some(parameters) = info["custom_parameters"].as_object() {
            for (name, value) in parameters {
                let row = Row::from([
                    ("call_uid", Sql::Text(call_uid.clone())),
                    ("name", Sql::Text(name.clone())),
                    ("value", scalar(value)),
                ]);
                insert(&mut tables[1], &CUSTOM_PARAMETERS, row);
            }
        }
        for (position, a) in attempts.iter().enumerate() {
            let mut row = Row::from([
                ("uid", text(&a["uid"])),
                ("call_uid", Sql::Text(call_uid.clone())),
                ("position", Sql::Integer(position as i64)),
                ("attempt_number", Sql::Integer(position as i64 + 1)),
                ("status", text(&a["status"])),
                ("duration", integer(&a["duration"])),
                ("error_details", json_text(&a["error_details"])),
                ("transfer_destination", text(&a["transfer_destination"])),
                ("extra", extra_text(unknown(a, ATTEMPT_FIELDS))),
            ]);
            for field in [
                "started_at",
                "answered_at",
                "ended_at",
                "created_at",
                "updated_at",
                "transfer_started_at",
                "transfer_answered_at",
            ] {
                row.insert(field, timestamp(&a[field]));
            }
            insert(&mut tables[2], &ATTEMPTS, row);
            for o in a["call_outcomes"].as_array().into_iter().flatten() {
                let row = Row::from([
                    ("uid", text(&o["uid"])),
                    ("attempt_uid", text(&a["uid"])),
                    ("call_uid", Sql::Text(call_uid.clone())),
                    ("name", text(&o["name"])),
                    ("created_at", timestamp(&o["created_at"])),
                    ("extra", extra_text(unknown(o, OUTCOME_FIELDS))),
                ]);
                insert(&mut tables[3], &OUTCOMES, row);
            }
            for v in a["call_attempts_variables"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let row = Row::from([
                    ("uid", text(&v["uid"])),
                    ("attempt_uid", text(&a["uid"])),
                    ("call_uid", Sql::Text(call_uid.clone())),
                    ("name", text(&v["name"])),
                    ("value", scalar(&v["value"])),
                    ("status", text(&v["status"])),
                    ("created_at", timestamp(&v["created_at"])),
                    ("extra", extra_text(unknown(v, VARIABLE_FIELDS))),
                ]);
                insert(&mut tables[4], &VARIABLES, row);
            }
        }
        for n in &notifications {
            let row = Row::from([
                ("uid", text(&n["uid"])),
                ("call_uid", Sql::Text(call_uid.clone())),
                ("status", text(&n["status"])),
                ("message_count", integer(&n["message_count"])),
                ("delivered_at", timestamp(&n["delivered_at"])),
                ("extra", extra_text(unknown(n, NOTIFICATION_FIELDS))),
            ]);
            insert(&mut tables[5], &NOTIFICATIONS, row);
        }
    }
    tables
}

/// The summary columns, as docs/warehouse.md defines them: the last attempt is the one that
/// started last (by `started_at`, else `created_at`, then list position); outcome names are
/// distinct, in attempt order.
fn summarise(row: &mut Row, attempts: &[&Json], notifications: usize) {
    row.insert("attempt_count", Sql::Integer(attempts.len() as i64));
    let last = attempts.iter().enumerate().max_by_key(|(position, a)| {
        let started = instant(&a["started_at"]).or_else(|| instant(&a["created_at"]));
        (started, *position)
    });
    let field = |name: &str, to: fn(&Json) -> Sql| last.map_or(Sql::Null, |(_, a)| to(&a[name]));
    row.insert("last_attempt_uid", field("uid", text));
    row.insert("last_attempt_status", field("status", text));
    row.insert("last_attempt_started_at", field("started_at", timestamp));
    row.insert("last_attempt_answered_at", field("answered_at", timestamp));
    row.insert("last_attempt_ended_at", field("ended_at", timestamp));
    row.insert("last_attempt_duration", field("duration", integer));
    let any = |name: &str| attempts.iter().any(|a| !a[name].is_null());
    row.insert("answered", Sql::Integer(i64::from(any("answered_at"))));
    row.insert(
        "transferred",
        Sql::Integer(i64::from(any("transfer_started_at"))),
    );
    row.insert("notification_count", Sql::Integer(notifications as i64));
    // name → (first attempt position with it, its earliest created_at)
    let mut names: BTreeMap<String, (usize, Option<i128>)> = BTreeMap::new();
    for (position, a) in attempts.iter().enumerate() {
        for o in a["call_outcomes"].as_array().into_iter().flatten() {
            let name = o["name"].as_str().expect("an outcome name").to_owned();
            let at = instant(&o["created_at"]);
            let entry = names.entry(name).or_insert((position, at));
            entry.0 = entry.0.min(position);
            entry.1 = match (entry.1, at) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
        }
    }
    let mut ordered: Vec<(usize, Option<i128>, String)> =
        names.into_iter().map(|(n, (p, at))| (p, at, n)).collect();
    ordered.sort();
    row.insert(
        "outcome_names",
        if ordered.is_empty() {
            Sql::Null
        } else {
            let names: Vec<String> = ordered.into_iter().map(|(_, _, n)| n).collect();
            Sql::Text(names.join(", "))
        },
    );
}

fn insert(table: &mut Table, spec: &Spec, row: Row) {
    let mut columns: Vec<&str> = row.keys().copied().collect();
    let mut wanted: Vec<&str> = spec.columns.to_vec();
    columns.sort_unstable();
    wanted.sort_unstable();
    assert_eq!(
        columns, wanted,
        "the test's mapping of {} is incomplete",
        spec.name
    );
    table.insert(key(spec, &row), row);
}

fn key(spec: &Spec, row: &Row) -> String {
    let parts: Vec<String> = spec.key.iter().map(|k| show(&row[k])).collect();
    parts.join("/")
}

/// A table's rows for the calls of `schedule`, by plain SQL.
fn read_table(conn: &rusqlite::Connection, spec: &Spec, schedule: Uuid) -> Table {
    let sql = format!(
        "SELECT {} FROM {} WHERE {} IN (SELECT uid FROM calls WHERE schedule_uid = ?1)",
        spec.columns.join(", "),
        spec.name,
        spec.call_column
    );
    let mut stmt = conn.prepare(&sql).expect("the contract's columns exist");
    let rows = stmt
        .query_map([schedule.to_string()], |r| {
            let mut row = Row::new();
            for (i, column) in spec.columns.iter().enumerate() {
                let mut value: Sql = r.get(i)?;
                if JSON_COLUMNS.contains(column)
                    && let Sql::Text(text) = &value
                {
                    value = Sql::Text(match serde_json::from_str::<Json>(text) {
                        Ok(json) => canonical(&json),
                        Err(_) => format!("(not JSON) {text}"),
                    });
                }
                row.insert(*column, value);
            }
            Ok(row)
        })
        .expect("the table reads")
        .collect::<Result<Vec<Row>, _>>()
        .expect("the rows read");
    rows.into_iter().map(|row| (key(spec, &row), row)).collect()
}

fn diff_table(name: &str, have: &Table, want: &Table, out: &mut Vec<String>) {
    for (key, want_row) in want {
        match have.get(key) {
            None => out.push(format!("{name} {key}: missing from the warehouse")),
            Some(have_row) => {
                for (column, want_value) in want_row {
                    let have_value = &have_row[column];
                    if have_value != want_value {
                        out.push(format!(
                            "{name} {key}: {column}: warehouse {}, service {}",
                            show(have_value),
                            show(want_value)
                        ));
                    }
                }
            }
        }
    }
    for key in have.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!(
            "{name} {key}: in the warehouse, not in the service"
        ));
    }
}

fn show(value: &Sql) -> String {
    match value {
        Sql::Null => "NULL".into(),
        Sql::Integer(i) => i.to_string(),
        Sql::Real(r) => format!("{r} (real)"),
        Sql::Text(t) => format!("'{t}'"),
        Sql::Blob(b) => format!("({} bytes of blob)", b.len()),
    }
}

fn text(value: &Json) -> Sql {
    match value {
        Json::Null => Sql::Null,
        Json::String(s) => Sql::Text(s.clone()),
        other => panic!("expected a string, the service sent {other}"),
    }
}

fn integer(value: &Json) -> Sql {
    match value {
        Json::Null => Sql::Null,
        other => Sql::Integer(other.as_i64().expect("an integer")),
    }
}

fn flag(value: &Json) -> Sql {
    match value {
        Json::Null => Sql::Null,
        other => Sql::Integer(i64::from(other.as_bool().expect("a boolean"))),
    }
}

/// An RFC 3339 instant as the warehouse's UTC text, six fraction digits and a `Z`:
/// `2026-01-31T09:30:00.25Z` → `2026-01-31T09:30:00.250000Z`. The service's (and the
/// simulator's) form is already UTC with a `Z` and at most six fraction digits.
fn timestamp(value: &Json) -> Sql {
    match value {
        Json::Null => Sql::Null,
        other => {
            let text = other.as_str().expect("a timestamp string");
            let utc = text
                .strip_suffix('Z')
                .unwrap_or_else(|| panic!("{text}: the test's mapping expects UTC with a Z"));
            let (seconds, fraction) = utc.split_once('.').unwrap_or((utc, ""));
            assert!(
                fraction.len() <= 6,
                "{text}: the test's mapping expects at most microseconds"
            );
            Sql::Text(format!("{seconds}.{fraction:0<6}Z"))
        }
    }
}

/// Nanoseconds since the epoch, for ordering attempts and outcomes.
fn instant(value: &Json) -> Option<i128> {
    let text = value.as_str()?;
    let t = OffsetDateTime::parse(text, &Rfc3339).expect("an RFC 3339 timestamp");
    Some(t.unix_timestamp_nanos())
}

fn e164(value: &Json) -> Sql {
    let digits: String = value
        .as_str()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    if digits.is_empty() {
        Sql::Null
    } else {
        Sql::Text(format!("+{digits}"))
    }
}

/// JSON of unknown shape: NULL for null, else its JSON text.
fn json_text(value: &Json) -> Sql {
    match value {
        Json::Null => Sql::Null,
        other => Sql::Text(canonical(other)),
    }
}

/// A value stored as text: a string as itself, null as NULL, anything else as JSON.
fn scalar(value: &Json) -> Sql {
    match value {
        Json::String(s) => Sql::Text(s.clone()),
        other => json_text(other),
    }
}

fn unknown(object: &Json, known: &[&str]) -> Map<String, Json> {
    object
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !known.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn extra_text(extra: Map<String, Json>) -> Sql {
    if extra.is_empty() {
        Sql::Null
    } else {
        json_text(&Json::Object(extra))
    }
}

/// JSON text with object keys sorted, so that equal JSON compares equal as text.
fn canonical(value: &Json) -> String {
    fn sorted(value: &Json) -> Json {
        match value {
            Json::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                Json::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&o[k])))
                        .collect(),
                )
            }
            Json::Array(a) => Json::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// [`differences`] for the warehouse in the PostgreSQL database `db`: its native types read
/// back into the contract's forms (instants as SQLite's UTC text, flags as 0/1, JSON as
/// text), so the same independent mapping decides.
pub fn pg_differences(
    db: &crate::pg::Database,
    schedule: Uuid,
    calls: &[OutboundCall],
) -> Vec<String> {
    let expected = expected_tables(schedule, calls);
    let mut out = Vec::new();
    for (spec, want) in TABLES.iter().zip(expected) {
        let have: Table = pg_rows(db, spec.name, spec.columns, spec.call_column, schedule)
            .into_iter()
            .map(|row| {
                let row: Row = spec
                    .columns
                    .iter()
                    .map(|c| (*c, row.get(*c).cloned().unwrap_or(Sql::Null)))
                    .collect();
                (key(spec, &row), row)
            })
            .collect();
        diff_table(spec.name, &have, &want, &mut out);
    }
    out
}

/// The contract tables' rows of `schedule` in the PostgreSQL database `db`, as
/// `Warehouse::snapshot` gives them for SQLite (every column but ids and `synced_at`).
pub fn pg_snapshot(
    db: &crate::pg::Database,
    schedule: Uuid,
) -> callsync::warehouse::sqlite::Snapshot {
    let table = |spec: &Spec| -> Vec<callsync::warehouse::sqlite::Row> {
        let columns: Vec<String> = crate::pg::query(
            db,
            &format!(
                "SELECT column_name FROM information_schema.columns
                 WHERE table_name = '{}' AND table_schema = current_schema()
                   AND column_name NOT IN ('id', 'call_id', 'attempt_id', 'synced_at')
                 ORDER BY ordinal_position",
                spec.name
            ),
        )
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
        let columns: Vec<&'static str> = columns
            .into_iter()
            .map(|c| &*Box::leak(c.into_boxed_str()))
            .collect();
        let mut rows: Vec<callsync::warehouse::sqlite::Row> =
            pg_rows(db, spec.name, &columns, spec.call_column, schedule)
                .into_iter()
                .map(|row| row.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                .collect();
        rows.sort_by_key(|r| format!("{:?}", (r.get("uid"), r.get("call_uid"), r.get("name"))));
        rows
    };
    callsync::warehouse::sqlite::Snapshot {
        calls: table(&CALLS),
        call_custom_parameters: table(&CUSTOM_PARAMETERS),
        call_attempts: table(&ATTEMPTS),
        attempt_outcomes: table(&OUTCOMES),
        attempt_variables: table(&VARIABLES),
        call_notifications: table(&NOTIFICATIONS),
    }
}

/// `columns` of `table`'s rows of the calls of `schedule`, each read back in the contract's
/// form by its PostgreSQL type.
fn pg_rows(
    db: &crate::pg::Database,
    table: &str,
    columns: &[&'static str],
    call_column: &str,
    schedule: Uuid,
) -> Vec<Row> {
    let types: BTreeMap<String, String> = crate::pg::query(
        db,
        &format!(
            "SELECT column_name, data_type FROM information_schema.columns
             WHERE table_name = '{table}' AND table_schema = current_schema()"
        ),
    )
    .into_iter()
    .map(|r| {
        (
            r[0].clone().unwrap_or_default(),
            r[1].clone().unwrap_or_default(),
        )
    })
    .collect();
    let exprs: Vec<String> = columns
        .iter()
        .map(|c| match types.get(*c).map(String::as_str) {
            Some("timestamp with time zone") => {
                format!("to_char(\"{c}\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            }
            Some("boolean") => format!("CASE WHEN \"{c}\" THEN '1' WHEN NOT \"{c}\" THEN '0' END"),
            Some(_) => format!("\"{c}\"::text"),
            None => panic!("{table}.{c}: no such column in PostgreSQL"),
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {table} WHERE {call_column} IN
           (SELECT uid FROM calls WHERE schedule_uid = '{schedule}')",
        exprs.join(", ")
    );
    crate::pg::query(db, &sql)
        .into_iter()
        .map(|values| {
            columns
                .iter()
                .zip(values)
                .map(|(c, v)| {
                    let value = match (types[*c].as_str(), v) {
                        (_, None) => Sql::Null,
                        ("integer" | "bigint" | "boolean", Some(v)) => {
                            Sql::Integer(v.parse().expect("an integer"))
                        }
                        ("double precision", Some(v)) => Sql::Real(v.parse().expect("a number")),
                        ("timestamp with time zone", Some(v)) => Sql::Text(v),
                        ("jsonb", Some(v)) => Sql::Text(match serde_json::from_str::<Json>(&v) {
                            Ok(json) => canonical(&json),
                            Err(_) => format!("(not JSON) {v}"),
                        }),
                        (_, Some(v)) => Sql::Text(v),
                    };
                    (*c, value)
                })
                .collect()
        })
        .collect()
}
