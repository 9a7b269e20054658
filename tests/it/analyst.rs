//! The analyst's kit: the canned queries of the shipped Datasette metadata
//! (`contrib/datasette/metadata.json`), run on a warehouse synced from the simulator, give the
//! numbers computed here, in Rust, from the simulator's truth; and the metadata describes
//! every table, view and column of the warehouse, so the two cannot drift apart. Days are the
//! warehouse's time zone's (Europe/Berlin here), and each query is asked again for a range of
//! days.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use callsync::service::{OutboundCall, Schedule, Timestamp};
use callsync::simulator::{Precision, SimulatorOptions};
use callsync::warehouse::Destination;
use callsync::warehouse::sqlite::Warehouse;
use rusqlite::types::Value as Sql;
use serde_json::{Value as Json, json};
use uuid::Uuid;

use crate::harness::TestEnv;

const METADATA: &str = include_str!("../../contrib/datasette/metadata.json");

/// The custom parameter the test asks `calls_per_custom_parameter_value` about.
const PARAMETER: &str = "plan";
/// The second and third parameters `calls_with_custom_parameters` shows: one every call
/// has, one none has.
const PARAMETER_2: &str = "region";
const PARAMETER_3: &str = "no-such-parameter";

/// The outcomes `outcomes_per_schedule` pivots: two the simulator records, one it never does.
const OUTCOMES: [&str; 3] = ["interested", "voicemail", "no-such-outcome"];

/// The warehouse's time zone in this test: days are Berlin's, not UTC's.
const ZONE: chrono_tz::Tz = chrono_tz::Europe::Berlin;

/// The day of `t` in [`ZONE`], `YYYY-MM-DD`.
fn day(t: Timestamp) -> String {
    use chrono::TimeZone;
    let utc = chrono::DateTime::from_timestamp_nanos(
        i64::try_from(t.unix_nanos()).expect("an instant of this century"),
    );
    ZONE.from_utc_datetime(&utc.naive_utc())
        .format("%Y-%m-%d")
        .to_string()
}

/// The days a query is asked about (`from`, `to`: both included), or all.
#[derive(Debug, Clone, Default)]
struct Days {
    from: Option<String>,
    to: Option<String>,
}

impl Days {
    /// Whether a row of `day` is counted: a row without a day only when no range is given
    /// (SQL compares NULL with nothing).
    fn hold(&self, day: Option<&str>) -> bool {
        match day {
            None => self.from.is_none() && self.to.is_none(),
            Some(d) => {
                self.from.as_deref().is_none_or(|f| d >= f)
                    && self.to.as_deref().is_none_or(|t| d <= t)
            }
        }
    }
}

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
    /// The calls' uids in the order the warehouse stored them (`calls.id`).
    stored: Vec<Uuid>,
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

fn answer_rate_per_schedule_per_day(truth: &Truth, days: &Days) -> Vec<Row> {
    // (schedule, day) → (attempts, answered, calls)
    let mut rows: BTreeMap<(String, String), (usize, usize, BTreeSet<Uuid>)> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        for attempt in call.outbound_call_attempts.iter().flatten() {
            let Some(started) = attempt.started_at else {
                continue;
            };
            let day = day(started);
            if !days.hold(Some(&day)) {
                continue;
            }
            let entry = rows.entry((schedule_key(schedule), day)).or_default();
            entry.0 += 1;
            entry.1 += usize::from(attempt.answered_at.is_some());
            entry.2.insert(call.uid);
        }
    }
    rows.into_iter()
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

fn outcomes_by_attempt_number(truth: &Truth, days: &Days) -> Vec<Row> {
    let mut attempts: BTreeMap<(String, usize), usize> = BTreeMap::new();
    let mut outcomes: BTreeMap<(String, usize, String), usize> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        for (index, attempt) in call.outbound_call_attempts.iter().flatten().enumerate() {
            let number = index + 1;
            if !days.hold(attempt.started_at.map(day).as_deref()) {
                continue;
            }
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

fn outcomes_per_schedule(truth: &Truth, days: &Days) -> Vec<Row> {
    // schedule → (outcomes, calls with one, per named outcome, others)
    let mut schedules: BTreeMap<String, (usize, BTreeSet<Uuid>, [usize; 3], usize)> =
        BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        for attempt in call.outbound_call_attempts.iter().flatten() {
            if !days.hold(attempt.started_at.map(day).as_deref()) {
                continue;
            }
            for outcome in attempt.call_outcomes.iter().flatten() {
                let entry = schedules.entry(schedule_key(schedule)).or_default();
                entry.0 += 1;
                entry.1.insert(call.uid);
                match OUTCOMES.iter().position(|o| *o == outcome.name) {
                    Some(i) => entry.2[i] += 1,
                    None => entry.3 += 1,
                }
            }
        }
    }
    schedules
        .into_iter()
        .map(|(schedule, (outcomes, calls, named, other))| {
            let uid = Uuid::parse_str(&schedule).expect("uid");
            vec![
                ("schedule_uid", Cell::Text(Some(schedule))),
                ("schedule_name", truth.name(uid)),
                ("outcomes", count(outcomes)),
                ("calls", count(calls.len())),
                ("outcome_1", count(named[0])),
                ("outcome_2", count(named[1])),
                ("outcome_3", count(named[2])),
                ("other_outcomes", count(other)),
            ]
        })
        .collect()
}

fn calls_per_custom_parameter_value(truth: &Truth, days: &Days) -> Vec<Row> {
    // value → (calls, dialled, answered)
    let mut values: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (_, call) in truth.real_calls() {
        if !days.hold(Some(&day(call.created_at))) {
            continue;
        }
        let Some(value) = parameter(call, PARAMETER) else {
            continue;
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

/// Every custom-parameter name of the real calls created in `days`: calls with it, distinct
/// values, the smallest value (as text, as SQLite orders it).
fn custom_parameter_names(truth: &Truth, days: &Days) -> Vec<Row> {
    let mut names: BTreeMap<String, (usize, BTreeSet<String>)> = BTreeMap::new();
    for (_, call) in truth.real_calls() {
        if !days.hold(Some(&day(call.created_at))) {
            continue;
        }
        for name in call.outbound_call_info.custom_parameters.keys() {
            let value = parameter(call, name).expect("the parameter is there");
            let entry = names.entry(name.clone()).or_default();
            entry.0 += 1;
            entry.1.insert(value);
        }
    }
    let mut rows: Vec<_> = names.into_iter().collect();
    rows.sort_by(|(n1, (c1, _)), (n2, (c2, _))| c2.cmp(c1).then(n1.cmp(n2)));
    rows.into_iter()
        .map(|(name, (calls, values))| {
            vec![
                ("parameter", Cell::Text(Some(name))),
                ("calls", count(calls)),
                ("distinct_values", count(values.len())),
                ("example", Cell::Text(values.first().cloned())),
            ]
        })
        .collect()
}

/// The value of `call`'s parameter `name`, as the warehouse stores it.
fn parameter(call: &OutboundCall, name: &str) -> Option<String> {
    call.outbound_call_info
        .custom_parameters
        .get(name)
        .map(|value| match value {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        })
}

fn time_to_first_answer(truth: &Truth, days: &Days) -> Vec<Row> {
    let mut waits: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (schedule, call) in truth.real_calls() {
        if !days.hold(Some(&day(call.created_at))) {
            continue;
        }
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

/// One row per call, in the order the warehouse first stored them (its ids: the order of
/// the first pass's pages, `created_at` then uid within each schedule, schedules in the
/// order they were synced).
fn calls_with_custom_parameters(truth: &Truth, days: &Days) -> Vec<Row> {
    truth
        .stored
        .iter()
        .filter_map(|uid| truth.calls.iter().find(|(_, c)| c.uid == *uid))
        .filter(|(_, c)| c.is_test_call != Some(true))
        .filter(|(_, c)| days.hold(Some(&day(c.created_at))))
        .map(|(schedule, call)| {
            let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
            vec![
                ("call_uid", Cell::Text(Some(call.uid.to_string()))),
                ("schedule_uid", Cell::Text(Some(schedule_key(*schedule)))),
                ("schedule_name", truth.name(*schedule)),
                ("external_id", Cell::Text(call.external_id.clone())),
                ("status", Cell::Text(Some(call.status.clone()))),
                ("attempt_count", count(attempts.len())),
                (
                    "answered",
                    count(usize::from(
                        attempts.iter().any(|a| a.answered_at.is_some()),
                    )),
                ),
                ("created_day", Cell::Text(Some(day(call.created_at)))),
                ("parameter_1", Cell::Text(parameter(call, PARAMETER))),
                ("parameter_2", Cell::Text(parameter(call, PARAMETER_2))),
                ("parameter_3", Cell::Text(parameter(call, PARAMETER_3))),
            ]
        })
        .collect()
}

/// Computes a canned query's answer from the truth, for the days asked.
type Answer = fn(&Truth, &Days) -> Vec<Row>;

/// Every canned query, and the function that computes its answer from the truth.
const EXPECTED: [(&str, Answer); 7] = [
    (
        "answer_rate_per_schedule_per_day",
        answer_rate_per_schedule_per_day,
    ),
    ("outcomes_by_attempt_number", outcomes_by_attempt_number),
    ("outcomes_per_schedule", outcomes_per_schedule),
    (
        "calls_per_custom_parameter_value",
        calls_per_custom_parameter_value,
    ),
    ("custom_parameter_names", custom_parameter_names),
    ("time_to_first_answer", time_to_first_answer),
    ("calls_with_custom_parameters", calls_with_custom_parameters),
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
    // The engine records the zone's offsets when it starts, before its first pass.
    env.config.warehouse.timezone = ZONE;
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
    let stored = {
        let conn = rusqlite::Connection::open(env.warehouse_path()).expect("opens");
        strings(&conn, "SELECT uid FROM calls ORDER BY id", [])
            .iter()
            .map(|u| Uuid::parse_str(u).expect("a uid"))
            .collect()
    };
    let truth = Truth {
        calls,
        names,
        stored,
    };
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
    let all = Days::default();
    assert!(answer_rate_per_schedule_per_day(truth, &all).len() >= 3 * 5);
    assert!(calls_per_custom_parameter_value(truth, &all).len() >= 3);
    // Berlin's days are not UTC's: some attempts start on another day there.
    let moved = truth
        .calls
        .iter()
        .flat_map(|(_, c)| attempts(c))
        .filter_map(|a| a.started_at)
        .filter(|t| day(*t) != t.to_rfc3339()[..10])
        .count();
    assert!(
        moved >= 10,
        "{moved} attempts on another day in Berlin than in UTC"
    );
}

/// A range of days inside those the data set spans, leaving days out at both ends.
fn some_days(truth: &Truth) -> Days {
    let days: BTreeSet<String> = truth
        .calls
        .iter()
        .flat_map(|(_, c)| c.outbound_call_attempts.iter().flatten())
        .filter_map(|a| a.started_at)
        .map(day)
        .collect();
    let days: Vec<String> = days.into_iter().collect();
    assert!(days.len() >= 5, "{days:?}");
    Days {
        from: Some(days[1].clone()),
        to: Some(days[days.len() - 2].clone()),
    }
}

/// `sql`'s columns and rows, its parameters bound as Datasette binds a form's fields: the
/// custom parameters' names, and `days` (an empty field for no limit).
fn run(
    conn: &rusqlite::Connection,
    name: &str,
    sql: &str,
    days: &Days,
) -> (Vec<String>, Vec<Vec<Sql>>) {
    let mut stmt = conn
        .prepare(sql)
        .unwrap_or_else(|e| panic!("canned query {name} does not prepare: {e}"));
    for i in 1..=stmt.parameter_count() {
        let value = match stmt.parameter_name(i).unwrap_or("?") {
            ":parameter" => PARAMETER,
            ":parameter_2" => PARAMETER_2,
            ":parameter_3" => PARAMETER_3,
            ":outcome" => OUTCOMES[0],
            ":outcome_2" => OUTCOMES[1],
            ":outcome_3" => OUTCOMES[2],
            ":from" => days.from.as_deref().unwrap_or(""),
            ":to" => days.to.as_deref().unwrap_or(""),
            other => panic!("canned query {name}: give {other} a value in this test"),
        };
        stmt.raw_bind_parameter(i, value).expect("bound");
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
    let ranges = [Days::default(), some_days(&truth)];
    for ((name, sql), days) in queries
        .iter()
        .flat_map(|q| ranges.iter().map(move |d| (q, d)))
    {
        let expected = EXPECTED
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f(&truth, days))
            .expect("checked above");
        if days.from.is_some() {
            // The range leaves rows out, and keeps some.
            let all = EXPECTED
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, f)| f(&truth, &Days::default()));
            let all = all.map_or(0, |rows| rows.len());
            let kept = expected.len();
            // Per-schedule figures keep their rows; their numbers change (checked below).
            if !matches!(
                name.as_str(),
                "time_to_first_answer"
                    | "outcomes_by_attempt_number"
                    | "calls_per_custom_parameter_value"
                    | "custom_parameter_names"
                    | "outcomes_per_schedule"
            ) {
                assert!(
                    kept > 0 && kept < all,
                    "{name}: {kept} of {all} rows in {days:?}"
                );
            }
        }
        let (columns, rows) = run(&conn, name, sql, days);
        let want_columns: Vec<&str> = expected
            .first()
            .map(|row| row.iter().map(|(c, _)| *c).collect())
            .unwrap_or_default();
        assert_eq!(columns, want_columns, "{name}: columns");
        assert_eq!(rows.len(), expected.len(), "{name} {days:?}: rows");
        for (i, (have, want)) in rows.iter().zip(&expected).enumerate() {
            for (value, (column, cell)) in have.iter().zip(want) {
                assert!(
                    matches(value, cell),
                    "{name} {days:?}, row {i}, {column}: the warehouse says {value:?}, the truth {cell:?}\nrow: {have:?}"
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

conformance!(
    a_schedules_campaign_comes_from_the_configuration,
    a_schedules_campaign_comes_from_the_configuration
);

/// The service has no endpoint that says which campaign a schedule belongs to: a
/// `[[sync.schedule]] campaign` is stored in `schedules.campaign_uid`, so "per campaign"
/// questions can be answered for schedules callsync did not create.
async fn a_schedules_campaign_comes_from_the_configuration(dest: crate::harness::Dest) {
    let mut env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 5,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let campaign = Uuid::from_u128(0xca);
    env.config.sync.schedule_names = BTreeMap::from([(s[0], "Renewals".to_owned())]);
    env.config.sync.schedule_campaigns = BTreeMap::from([(s[0], campaign)]);
    env.pass_ok(&s).await;
    let sql = "SELECT uid, campaign_uid, config_name FROM schedules ORDER BY uid";
    let rows: Vec<Vec<Option<String>>> = match &env.pg {
        None => {
            let conn = rusqlite::Connection::open(env.warehouse_path()).unwrap();
            let mut stmt = conn.prepare(sql).unwrap();
            stmt.query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?, r.get(2)?]))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        }
        Some(db) => crate::pg::admin(
            crate::pg::server(),
            &db.name,
            &format!("SELECT uid::text, campaign_uid::text, config_name FROM ({sql}) AS s"),
        )
        .unwrap(),
    };
    assert_eq!(
        rows,
        [vec![
            Some(s[0].to_string()),
            Some(campaign.to_string()),
            Some("Renewals".to_owned())
        ]]
    );
}
