//! The analyst's kit: the canned queries of the shipped Datasette metadata
//! (`contrib/datasette/metadata.json`), run on a warehouse synced from the simulator, give the
//! numbers computed here, in Rust, from the simulator's truth; and the metadata describes
//! every table, view and column of the warehouse, so the two cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use callsync::service::{OutboundCall, Schedule};
use callsync::simulator::{Precision, SimulatorOptions};
use callsync::warehouse::Warehouse;
use rusqlite::types::Value as Sql;
use serde_json::{Value as Json, json};
use uuid::Uuid;

use crate::harness::TestEnv;

const METADATA: &str = include_str!("../../contrib/datasette/metadata.json");

/// The custom parameter the test asks `calls_per_custom_parameter_value` about.
const PARAMETER: &str = "plan";

/// The metadata of the database Datasette names `callsync` (after `callsync.db`).
fn database() -> Json {
    let metadata: Json = serde_json::from_str(METADATA).expect("metadata.json is JSON");
    metadata["databases"]["callsync"].clone()
}

/// `(name, SQL)` of every canned query.
fn canned_queries() -> Vec<(String, String)> {
    let queries = database()["queries"]
        .as_object()
        .expect("the metadata has canned queries")
        .clone();
    queries
        .into_iter()
        .map(|(name, query)| {
            for key in ["title", "description"] {
                assert!(
                    query[key].as_str().is_some_and(|t| !t.trim().is_empty()),
                    "canned query {name} has no {key}"
                );
            }
            let sql = query["sql"].as_str().expect("a query's sql").to_owned();
            (name, sql)
        })
        .collect()
}

/// One expected cell.
#[derive(Debug, Clone)]
enum Cell {
    Text(Option<String>),
    Int(i64),
    /// A number the query rounds (or computes in floating point): equal within `tolerance`.
    Real(Option<f64>, f64),
}

/// Rates are rounded to 4 places.
const RATE: f64 = 1e-4;
/// Seconds to the millisecond (SQLite's date functions keep milliseconds), rounded to 3 places.
const SECS: f64 = 2e-3;

type Row = Vec<(&'static str, Cell)>;

/// What the service's truth says, by schedule, with the names the warehouse should show.
struct Truth {
    calls: Vec<(Uuid, OutboundCall)>,
    names: BTreeMap<Uuid, Option<String>>,
}

impl Truth {
    /// Calls that are not test calls (a call the service does not mark counts), schedules
    /// in the order their uids sort as text.
    fn real_calls(&self) -> impl Iterator<Item = (Uuid, &OutboundCall)> {
        self.calls
            .iter()
            .filter(|(_, c)| c.is_test_call != Some(true))
            .map(|(s, c)| (*s, c))
    }

    fn name(&self, schedule: Uuid) -> Cell {
        Cell::Text(self.names[&schedule].clone())
    }
}

fn schedule_key(schedule: Uuid) -> String {
    schedule.to_string()
}

fn rate(part: usize, whole: usize) -> Cell {
    Cell::Real((whole > 0).then(|| part as f64 / whole as f64), RATE)
}

fn secs(value: f64) -> Cell {
    Cell::Real(Some(value), SECS)
}

fn count(n: usize) -> Cell {
    Cell::Int(n as i64)
}

fn answer_rate_per_schedule_per_day(truth: &Truth) -> Vec<Row> {
    // (schedule, day) → (attempts, answered, calls)
    let mut days: BTreeMap<(String, String), (usize, usize, BTreeSet<Uuid>)> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        for attempt in call.outbound_call_attempts.iter().flatten() {
            let Some(started) = attempt.started_at else {
                continue;
            };
            let day = started.to_rfc3339()[..10].to_owned();
            let entry = days.entry((schedule_key(schedule), day)).or_default();
            entry.0 += 1;
            entry.1 += usize::from(attempt.answered_at.is_some());
            entry.2.insert(call.uid);
        }
    }
    days.into_iter()
        .map(|((schedule, day), (attempts, answered, calls))| {
            let uid = Uuid::parse_str(&schedule).expect("uid");
            vec![
                ("schedule_uid", Cell::Text(Some(schedule))),
                ("schedule_name", truth.name(uid)),
                ("day", Cell::Text(Some(day))),
                ("attempts", count(attempts)),
                ("answered_attempts", count(answered)),
                ("answer_rate", rate(answered, attempts)),
                ("calls", count(calls.len())),
            ]
        })
        .collect()
}

fn outcomes_by_attempt_number(truth: &Truth) -> Vec<Row> {
    let mut attempts: BTreeMap<(String, usize), usize> = BTreeMap::new();
    let mut outcomes: BTreeMap<(String, usize, String), usize> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        for (index, attempt) in call.outbound_call_attempts.iter().flatten().enumerate() {
            let number = index + 1;
            *attempts
                .entry((schedule_key(schedule), number))
                .or_default() += 1;
            for outcome in attempt.call_outcomes.iter().flatten() {
                *outcomes
                    .entry((schedule_key(schedule), number, outcome.name.clone()))
                    .or_default() += 1;
            }
        }
    }
    let mut rows: Vec<_> = outcomes.into_iter().collect();
    // Schedule, attempt number, most outcomes first, then by name.
    rows.sort_by(|((s1, n1, o1), c1), ((s2, n2, o2), c2)| {
        (s1, n1, std::cmp::Reverse(c1), o1).cmp(&(s2, n2, std::cmp::Reverse(c2), o2))
    });
    rows.into_iter()
        .map(|((schedule, number, outcome), n)| {
            let made = attempts[&(schedule.clone(), number)];
            let uid = Uuid::parse_str(&schedule).expect("uid");
            vec![
                ("schedule_uid", Cell::Text(Some(schedule))),
                ("schedule_name", truth.name(uid)),
                ("attempt_number", count(number)),
                ("outcome", Cell::Text(Some(outcome))),
                ("outcomes", count(n)),
                ("attempts", count(made)),
                ("share_of_attempts", rate(n, made)),
            ]
        })
        .collect()
}

fn calls_per_custom_parameter_value(truth: &Truth) -> Vec<Row> {
    // value → (calls, dialled, answered)
    let mut values: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (_, call) in truth.real_calls() {
        let Some(value) = call.outbound_call_info.custom_parameters.get(PARAMETER) else {
            continue;
        };
        let value = match value {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        };
        let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
        let entry = values.entry(value).or_default();
        entry.0 += 1;
        entry.1 += usize::from(!attempts.is_empty());
        entry.2 += usize::from(attempts.iter().any(|a| a.answered_at.is_some()));
    }
    let mut rows: Vec<_> = values.into_iter().collect();
    rows.sort_by(|(v1, (c1, ..)), (v2, (c2, ..))| c2.cmp(c1).then(v1.cmp(v2)));
    rows.into_iter()
        .map(|(value, (calls, dialled, answered))| {
            vec![
                ("value", Cell::Text(Some(value))),
                ("calls", count(calls)),
                ("dialled", count(dialled)),
                ("answered", count(answered)),
                ("answer_rate", rate(answered, dialled)),
            ]
        })
        .collect()
}

fn time_to_first_answer(truth: &Truth) -> Vec<Row> {
    let mut waits: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        let first = call
            .outbound_call_attempts
            .iter()
            .flatten()
            .filter_map(|a| a.answered_at)
            .min();
        if let Some(first) = first {
            let nanos = first.unix_nanos() - call.created_at.unix_nanos();
            waits
                .entry(schedule_key(schedule))
                .or_default()
                .push(nanos as f64 / 1e9);
        }
    }
    waits
        .into_iter()
        .map(|(schedule, mut w)| {
            w.sort_by(f64::total_cmp);
            let n = w.len();
            let median = if n % 2 == 1 {
                w[n / 2]
            } else {
                (w[n / 2 - 1] + w[n / 2]) / 2.0
            };
            // Nearest rank: the ceil(p·n)-th smallest value.
            let nearest_rank = |percent: usize| w[(percent * n).div_ceil(100) - 1];
            let uid = Uuid::parse_str(&schedule).expect("uid");
            vec![
                ("schedule_uid", Cell::Text(Some(schedule))),
                ("schedule_name", truth.name(uid)),
                ("answered_calls", count(n)),
                ("mean_secs", secs(w.iter().sum::<f64>() / n as f64)),
                ("median_secs", secs(median)),
                ("p90_secs", secs(nearest_rank(90))),
                ("p95_secs", secs(nearest_rank(95))),
                ("min_secs", secs(w[0])),
                ("max_secs", secs(w[n - 1])),
            ]
        })
        .collect()
}

/// Computes a canned query's answer from the truth.
type Answer = fn(&Truth) -> Vec<Row>;

/// Every canned query, and the function that computes its answer from the truth.
const EXPECTED: [(&str, Answer); 4] = [
    (
        "answer_rate_per_schedule_per_day",
        answer_rate_per_schedule_per_day,
    ),
    ("outcomes_by_attempt_number", outcomes_by_attempt_number),
    (
        "calls_per_custom_parameter_value",
        calls_per_custom_parameter_value,
    ),
    ("time_to_first_answer", time_to_first_answer),
];

/// A schedule as `callsync schedule create` records the service's answer.
fn schedule_model(uid: Uuid, name: &str) -> Schedule {
    serde_json::from_value(json!({
        "uid": uid, "name": name, "starts_at": "2026-03-02T08:00:00Z",
        "ends_at": "2026-04-02T08:00:00Z", "retry_type": "consistent",
        "retry_intervals": [300, 900, 3600], "is_enabled": true,
        "created_at": "2026-03-01T10:00:00Z", "updated_at": "2026-03-01T10:00:00Z"
    }))
    .expect("a schedule")
}

/// A warehouse synced from a seeded simulator (a week of attempt histories, answered and
/// not, test calls, five outcomes, custom parameters), at millisecond precision, with
/// schedule names from every source: the configuration and the service (the configuration
/// wins), the service only, none.
async fn synced() -> (TestEnv, Truth) {
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 3,
        calls_per_schedule: 400,
        seed: 12,
        precision: Precision::Millis,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    env.config.sync.schedule_names = BTreeMap::from([(s[0], "Renewals".to_owned())]);
    env.create_warehouse();
    {
        let mut w = Warehouse::open(&env.warehouse_path(), Duration::from_secs(5))
            .expect("warehouse opens");
        w.remember_schedule(&schedule_model(s[0], "Schedule 1"), None)
            .expect("recorded");
        w.remember_schedule(&schedule_model(s[1], "Schedule 2"), None)
            .expect("recorded");
    }
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
    let mut calls: Vec<(Uuid, OutboundCall)> = s
        .iter()
        .flat_map(|schedule| env.sim.truth(*schedule).into_iter().map(|c| (*schedule, c)))
        .collect();
    calls.sort_by_key(|(schedule, _)| schedule.to_string());
    let names = BTreeMap::from([
        (s[0], Some("Renewals".to_owned())),
        (s[1], Some("Schedule 2".to_owned())),
        (s[2], None),
    ]);
    let truth = Truth { calls, names };
    assert_data_set_tells(&truth);
    (env, truth)
}

/// The data set can tell a right query from a wrong one: test calls that were dialled and
/// answered (so leaving them out changes the numbers), several outcomes, attempt numbers,
/// days and parameter values.
fn assert_data_set_tells(truth: &Truth) {
    let attempts = |c: &OutboundCall| c.outbound_call_attempts.clone().unwrap_or_default();
    let answered_test_calls = truth
        .calls
        .iter()
        .filter(|(_, c)| c.is_test_call == Some(true))
        .filter(|(_, c)| attempts(c).iter().any(|a| a.answered_at.is_some()))
        .count();
    assert!(
        answered_test_calls >= 2,
        "{answered_test_calls} answered test calls"
    );
    let most_attempts = truth.calls.iter().map(|(_, c)| attempts(c).len()).max();
    assert!(
        most_attempts >= Some(3),
        "{most_attempts:?} attempts at most"
    );
    let outcomes: BTreeSet<String> = truth
        .calls
        .iter()
        .flat_map(|(_, c)| attempts(c))
        .flat_map(|a| a.call_outcomes.unwrap_or_default())
        .map(|o| o.name)
        .collect();
    assert!(outcomes.len() >= 4, "outcomes {outcomes:?}");
    assert!(answer_rate_per_schedule_per_day(truth).len() >= 3 * 5);
    assert!(calls_per_custom_parameter_value(truth).len() >= 3);
}

/// `sql`'s columns and rows, `:parameter` bound to [`PARAMETER`].
fn run(conn: &rusqlite::Connection, name: &str, sql: &str) -> (Vec<String>, Vec<Vec<Sql>>) {
    let mut stmt = conn
        .prepare(sql)
        .unwrap_or_else(|e| panic!("canned query {name} does not prepare: {e}"));
    for i in 1..=stmt.parameter_count() {
        let parameter = stmt.parameter_name(i).unwrap_or("?");
        assert_eq!(
            parameter, ":parameter",
            "canned query {name}: give its parameter a value in this test"
        );
        stmt.raw_bind_parameter(i, PARAMETER).expect("bound");
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let n = columns.len();
    let mut rows = Vec::new();
    let mut raw = stmt.raw_query();
    while let Some(row) = raw.next().unwrap_or_else(|e| panic!("{name}: {e}")) {
        rows.push((0..n).map(|i| row.get(i).expect("a value")).collect());
    }
    (columns, rows)
}

fn matches(have: &Sql, want: &Cell) -> bool {
    match (want, have) {
        (Cell::Text(None) | Cell::Real(None, _), Sql::Null) => true,
        (Cell::Text(Some(w)), Sql::Text(h)) => w == h,
        (Cell::Int(w), Sql::Integer(h)) => w == h,
        (Cell::Real(Some(w), tolerance), Sql::Real(h)) => (w - h).abs() <= *tolerance,
        (Cell::Real(Some(w), tolerance), Sql::Integer(h)) => (w - *h as f64).abs() <= *tolerance,
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_canned_query_answers_what_the_simulators_truth_says() {
    let (env, truth) = synced().await;
    let conn = rusqlite::Connection::open_with_flags(
        env.warehouse_path(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("the warehouse opens read-only");
    let queries = canned_queries();
    let checked: BTreeSet<&str> = EXPECTED.iter().map(|(name, _)| *name).collect();
    let shipped: BTreeSet<&str> = queries.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        shipped, checked,
        "every canned query needs its answer computed in this test"
    );
    for (name, sql) in &queries {
        let expected = EXPECTED
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f(&truth))
            .expect("checked above");
        let (columns, rows) = run(&conn, name, sql);
        let want_columns: Vec<&str> = expected
            .first()
            .map(|row| row.iter().map(|(c, _)| *c).collect())
            .unwrap_or_default();
        assert_eq!(columns, want_columns, "{name}: columns");
        assert_eq!(rows.len(), expected.len(), "{name}: rows");
        for (i, (have, want)) in rows.iter().zip(&expected).enumerate() {
            for (value, (column, cell)) in have.iter().zip(want) {
                assert!(
                    matches(value, cell),
                    "{name}, row {i}, {column}: the warehouse says {value:?}, the truth {cell:?}\nrow: {have:?}"
                );
            }
        }
    }
}

#[test]
fn the_metadata_describes_every_table_view_and_column_and_nothing_else() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("callsync.db");
    Warehouse::migrate(&path, Duration::from_secs(5)).expect("a new warehouse");
    let conn = rusqlite::Connection::open(&path).expect("opens");
    let objects = strings(
        &conn,
        "SELECT name FROM sqlite_schema
         WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite%' ORDER BY name",
        [],
    );
    let database = database();
    let tables = database["tables"].as_object().expect("tables");
    let described: BTreeSet<&String> = tables.keys().collect();
    assert_eq!(
        described,
        objects.iter().collect(),
        "the metadata's tables are the warehouse's tables and views"
    );
    let text = |v: &Json| v.as_str().is_some_and(|t| !t.trim().is_empty());
    for object in &objects {
        let table = &tables[object];
        assert!(text(&table["description"]), "{object} has no description");
        // Hidden (generated) columns included.
        let columns = strings(
            &conn,
            "SELECT name FROM pragma_table_xinfo(?1) ORDER BY cid",
            [object],
        );
        let documented = table["columns"].as_object().expect("columns");
        for column in &columns {
            assert!(
                documented.get(column).is_some_and(text),
                "{object}.{column} has no description in contrib/datasette/metadata.json"
            );
        }
        for column in documented.keys() {
            assert!(
                columns.contains(column),
                "the metadata describes {object}.{column}, which does not exist"
            );
        }
        for column in table["units"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(c, _)| c)
        {
            assert!(
                columns.contains(column),
                "a unit for {object}.{column}, which does not exist"
            );
        }
    }
}

/// The first column of `sql`'s rows.
fn strings(conn: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    let mut stmt = conn.prepare(sql).expect("prepares");
    stmt.query_map(params, |r| r.get(0))
        .expect("runs")
        .collect::<Result<_, _>>()
        .expect("reads")
}
