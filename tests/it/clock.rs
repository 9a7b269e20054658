//! Clocks that disagree: a service's `Date` far from ours (a front with a wrong clock), calls
//! stamped far past the service's clock, and `status`'s bound on a schedule's lag.

use std::time::Duration;

use callsync::ErrorKind;
use callsync::service::Timestamp;
use callsync::simulator::{FaultPlan, ManualClock, SimulatorOptions};
use callsync::sync::{ClockTaken, PassResult};
use serde_json::Value;
use uuid::Uuid;

use crate::cli::{callsync_with_env, stderr};
use crate::harness::TestEnv;

const YEAR_SECS: i64 = 365 * 86_400;

/// The simulator's precision: a stamp of the service's has at most microseconds.
fn micros(at: Timestamp) -> Timestamp {
    at.truncated(1_000)
}

/// `callsync sync --json` with JSON logs at WARN: the one pass line, and the log events.
async fn sync_json(env: &TestEnv) -> (Value, Vec<Value>) {
    let config = env.write_config("");
    let out = callsync_with_env(
        &["--config", config.to_str().unwrap(), "sync", "--json"],
        &[("CALLSYNC_LOG__FORMAT", "json")],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line: Value = serde_json::from_slice(&out.stdout).expect("one pass line");
    let events = stderr(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (line, events)
}

/// The log events saying a `Date` is not trusted.
fn distrust_warnings(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Date is further from this machine's clock"))
        })
        .collect()
}

/// With the `Date` 55 years behind (1971) or 73 ahead (2099) of the clock that stamps the
/// calls (and ours), every pass reads everything: ours stands in for the service's, and the
/// pass says so once. Before, a `Date` in 1971 held every pass to its first page (100 of 350
/// calls), exit 0; one in 2099 capped nothing, so a call stamped by a node an hour ahead
/// carried the checkpoint past the calls changed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_date_far_from_ours_either_way_is_not_trusted_and_no_call_is_lost() {
    for skew in [-55 * YEAR_SECS, 73 * YEAR_SECS] {
        let env = TestEnv::start(SimulatorOptions {
            calls_per_schedule: 350,
            seed: 31,
            faults: FaultPlan {
                date_skew_secs: skew,
                ..FaultPlan::default()
            },
            ..SimulatorOptions::default()
        })
        .await;
        let schedule = env.schedules()[0];
        let uids: Vec<Uuid> = env.sim.truth(schedule).iter().map(|c| c.uid).collect();

        let (line, events) = sync_json(&env).await;
        assert_eq!(
            (&line["outcome"], &line["calls_written"], &line["clock"]),
            (
                &Value::from("completed"),
                &Value::from(350),
                &Value::from("local")
            ),
            "{skew}: {line}"
        );
        let said = line["date_skew_secs"]
            .as_f64()
            .expect("the skew is reported");
        assert!((said - skew as f64).abs() < 60.0, "{skew}: {said}");
        let warnings = distrust_warnings(&events);
        assert_eq!(warnings.len(), 1, "{skew}: said once: {events:?}");
        let fields = &warnings[0]["fields"];
        assert_eq!(warnings[0]["level"], "WARN", "{skew}");
        for clock in ["service_date", "local_clock", "skew_secs"] {
            assert!(
                fields[clock].is_string() || fields[clock].is_number(),
                "{fields}"
            );
        }
        env.assert_matches_truth(&[schedule]);

        // A node an hour ahead stamps a call: the checkpoint stays at the clock taken, so the
        // calls changed after it (stamped by the service's clock) are read.
        let ahead = micros(Timestamp::now().saturating_add(Duration::from_secs(3600)));
        env.sim.stamp_call(uids[0], ahead);
        let (line, _) = sync_json(&env).await;
        assert_eq!(line["future_rows"], 1, "{skew}: {line}");
        env.sim.touch_calls(&uids[1..21]);
        let (line, events) = sync_json(&env).await;
        assert_eq!(line["calls_written"], 20, "{skew}: {line}");
        assert_eq!(distrust_warnings(&events).len(), 1, "{skew}: once a pass");
        env.assert_matches_truth(&[schedule]);
    }
}

/// A service whose whole clock is elsewhere — its `Date` and its calls' stamps agree, far
/// from ours — is taken at its `Date`: the calls show ours is the clock that is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_date_and_calls_agree_far_from_ours_keeps_its_clock() {
    let at = |text: &str| Timestamp::parse(text).unwrap();
    let clock = ManualClock::new(at("2099-06-01T08:00:00.250Z"));
    let env = TestEnv::start(SimulatorOptions {
        calls_per_schedule: 250,
        seed: 32,
        clock: clock.clone().into(),
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    let report = env.pass_ok(&[schedule]).await.remove(0);
    assert_eq!(report.clock, Some(ClockTaken::Date));
    assert!(
        report
            .date_skew_secs
            .is_some_and(|s| s > 70.0 * YEAR_SECS as f64)
    );
    assert_eq!(report.horizon, Some(at("2099-06-01T08:00:01Z")));
    assert_eq!(report.stats.calls_written, 250);
    env.assert_matches_truth(&[schedule]);

    clock.advance(Duration::from_secs(60));
    let uids: Vec<Uuid> = env.sim.truth(schedule).iter().map(|c| c.uid).collect();
    env.sim.touch_calls(&uids[..5]);
    let next = env.pass_ok(&[schedule]).await.remove(0);
    assert_eq!(next.stats.calls_written, 5);
    env.assert_matches_truth(&[schedule]);
}

/// Calls stamped a day past both clocks, more than a page of them: the checkpoint cannot pass
/// them, so each pass would read their first page and stop. The pass fails saying so, with
/// every call before them written; before, it completed, exit 0, pass after pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_stamped_far_past_the_clock_fail_the_pass_instead_of_stalling_it() {
    let env = TestEnv::start(SimulatorOptions {
        calls_per_schedule: 300,
        seed: 33,
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    let truth = env.sim.truth(schedule);
    let tomorrow = micros(Timestamp::now().saturating_add(Duration::from_secs(86_400)));
    for (i, call) in truth[..150].iter().enumerate() {
        env.sim.stamp_call(
            call.uid,
            tomorrow.saturating_add(Duration::from_millis(i as u64)),
        );
    }
    let report = env.pass(&[schedule]).await.remove(0);
    let PassResult::Failed { kind, error } = &report.result else {
        panic!("the pass must fail: {report:?}");
    };
    assert_eq!(*kind, ErrorKind::Clock, "{error}");
    assert!(
        error.contains(&format!("schedule {schedule}"))
            && error.contains("further than sync.max_clock_skew_secs"),
        "{error}"
    );
    // Everything stamped before the clock was read and written, and a part of what after.
    let db = rusqlite::Connection::open(env.warehouse_path()).expect("the warehouse");
    let mut held = db.prepare("SELECT uid FROM calls").expect("a query");
    let held: Vec<String> = held
        .query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .expect("the calls");
    let (read, unread): (Vec<_>, Vec<_>) = env
        .sim
        .truth(schedule)
        .into_iter()
        .partition(|c| c.updated_at < tomorrow || held.contains(&c.uid.to_string()));
    assert!(
        read.len() > 150 && !unread.is_empty(),
        "{} read, {} not",
        read.len(),
        unread.len()
    );
    assert!(unread.iter().all(|c| c.updated_at >= tomorrow));
    env.assert_holds(schedule, &read);
}

/// `status` exits 3 once a schedule's lag — since the warehouse last held every change of it
/// — runs more than `sync.max_lag_secs` past the cron tick due to catch up, naming the
/// schedule and the lag; below the bound, 0. A pass that took two hours to complete leaves
/// two hours of changes unread (made while it ran); its start is moved back to make one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_3_when_a_schedules_lag_passes_the_bound() {
    let env = TestEnv::start(SimulatorOptions {
        calls_per_schedule: 20,
        seed: 34,
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let out = callsync_with_env(&["--config", c, "sync"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status = |vars: &'static [(&'static str, &'static str)]| async move {
        let out = callsync_with_env(&["--config", c, "status", "--json"], vars).await;
        let rows: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        (out.status.code(), stderr(&out), rows[0].clone())
    };
    let (code, err, row) = status(&[]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(row["over_max_lag"], false, "{row}");
    let fresh = row["stale_secs"].as_f64().expect("a lag");
    assert!((0.0..60.0).contains(&fresh), "{row}");

    let two_hours_ago = Timestamp::now().saturating_sub(Duration::from_secs(7200));
    rusqlite::Connection::open(env.warehouse_path())
        .expect("the warehouse")
        .execute(
            "UPDATE sync_runs SET started_at = ?1",
            [two_hours_ago.to_warehouse_text()],
        )
        .expect("the pass's start moved back");
    let (code, err, row) = status(&[]).await;
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(row["over_max_lag"], true, "{row}");
    let lag = row["stale_secs"].as_f64().expect("a lag");
    assert!((7200.0..7260.0).contains(&lag), "{row}");
    assert_eq!(
        err,
        format!(
            "attention: schedule {schedule}: lag {lag:.0}s, more than sync.max_lag_secs past the sync.cron tick due to catch up (exit code 3)\n"
        )
    );
    let out = callsync_with_env(&["--config", c, "status"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  LAGGING: the warehouse last held every change of this schedule "),
        "{text}"
    );

    // Three hours allowed: 0 again.
    let (code, err, row) = status(&[("CALLSYNC_SYNC__MAX_LAG_SECS", "10800")]).await;
    assert_eq!(
        (code, row["over_max_lag"].clone()),
        (Some(0), Value::from(false)),
        "{err}"
    );
}
